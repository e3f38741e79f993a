"""Command-line entrypoints, the top layer:

- main_base: training (`python -m skyrl_train.entrypoints.main_base key=value ...`);
- main_generate: one eval of a model, no training;
- main_sft: supervised fine-tuning on chat conversations (`skyrl_train.sft`);
- validate: a run's setup checked without training (config, model files, datasets, each env on a few rows);
- export_hf: a checkpoint's policy as a transformers model folder;
- ray_task: upstream's `initialize_ray(cfg)`, for scripts that run `BasePPOExp` in a Ray task.

`python -m skyrl_train.serve` (serve/__main__.py) is one more: the OpenAI-compatible server over a model.
"""
