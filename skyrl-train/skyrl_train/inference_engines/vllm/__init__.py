"""The vLLM backend (``generator.backend=vllm``): vLLM's async engine in Ray actors, token ids in and out.

- translate.py: our sampling params -> vLLM's; vLLM's outputs -> ours (logprob semantics documented there);
- engine_config.py: ``generator.*`` -> engine arguments, sleep level, placement of each engine;
- engine.py: `VLLMEngine`, one ``AsyncLLM`` (the Ray actor class), with the engine side of weight updates;
- ray_engine.py: `RayVLLMEngine` (one actor behind the `InferenceEngineInterface`) and `create_vllm_engines`;
  several go behind `InferenceEngineClient`;
- worker_extension.py: the vLLM workers' side of weight updates (`skyrl_train.weight_sync` requests).

Only translate.py and engine_config.py import without vLLM installed; see ``docs/vllm.md`` for installation.
"""
