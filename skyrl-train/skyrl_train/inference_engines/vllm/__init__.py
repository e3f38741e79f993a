"""The vLLM backend (``generator.backend=vllm``): vLLM's async engine in Ray actors, token ids in and out.

- translate.py: our sampling params -> vLLM's; vLLM's outputs -> ours (logprob semantics documented there);
- engine_config.py: ``generator.*`` -> engine arguments, sleep level, placement of each engine;
- engine.py: `VLLMEngine`, one ``AsyncLLM`` (the Ray actor class);
- engine_group.py: `VLLMEngineGroup` (the `InferenceEngineInterface` over N engines) and `create_vllm_engines`;
- weight_sync.py / worker_extension.py: the trainer's side and the vLLM workers' side of weight updates.

Only translate.py and engine_config.py import without vLLM installed; see ``docs/vllm.md`` for installation.
"""
