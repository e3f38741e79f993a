"""`generator.*` -> vLLM engine arguments, sleep level and placement (no vLLM, no Ray)."""

from __future__ import annotations

import pytest

from skyrl_train.config import load_config
from skyrl_train.inference_engines.vllm.engine_config import (
    WORKER_EXTENSION,
    EngineBundle,
    engine_bundles,
    engine_kwargs,
    sleep_level,
)


def generator(*overrides: str):
    return load_config(["generator.backend=vllm", *overrides], validate=False).generator


def test_generator_keys_map_onto_engine_arguments():
    g = generator(
        "generator.model_dtype=float32",
        "generator.inference_engine_tensor_parallel_size=1",
        "generator.gpu_memory_utilization=0.5",
        "generator.max_num_seqs=32",
        "generator.max_num_batched_tokens=2048",
        "generator.enable_prefix_caching=false",
        "generator.enable_chunked_prefill=false",
        "generator.enforce_eager=true",
    )
    assert engine_kwargs(g, "/models/m", lora_rank=0, sleep=False, seed=7) == {
        "model": "/models/m",
        "tokenizer": "/models/m",
        "dtype": "float32",
        "seed": 7,
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.5,
        "max_num_seqs": 32,
        "max_num_batched_tokens": 2048,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": False,
        "enforce_eager": True,
        "enable_sleep_mode": False,
        "logprobs_mode": "processed_logprobs",
        "worker_extension_cls": WORKER_EXTENSION,
    }


def test_lora_adds_upstreams_engine_kwargs_and_leaves_eager_mode():
    g = generator("generator.fully_sharded_loras=true", "generator.enforce_eager=true")
    kwargs = engine_kwargs(g, "m", lora_rank=32, sleep=True, seed=0)
    assert {k: kwargs[k] for k in ("enable_lora", "max_lora_rank", "max_loras", "fully_sharded_loras")} == {
        "enable_lora": True,
        "max_lora_rank": 32,
        "max_loras": 1,
        "fully_sharded_loras": True,
    }
    assert kwargs["enforce_eager"] is False and kwargs["enable_sleep_mode"] is True


def test_tensor_parallel_engines_use_the_multiprocessing_executor():
    kwargs = engine_kwargs(
        generator("generator.inference_engine_tensor_parallel_size=2"), "m", lora_rank=0, sleep=False, seed=0
    )
    assert (kwargs["tensor_parallel_size"], kwargs["distributed_executor_backend"]) == (2, "mp")


def test_engine_init_kwargs_are_applied_last():
    g = generator("+generator.engine_init_kwargs.max_model_len=512", "+generator.engine_init_kwargs.dtype=bfloat16")
    kwargs = engine_kwargs(g, "m", lora_rank=0, sleep=False, seed=0)
    assert (kwargs["max_model_len"], kwargs["dtype"]) == (512, "bfloat16")


def test_sleep_level_keeps_base_weights_only_with_lora():
    assert (sleep_level(0), sleep_level(16)) == (2, 1)


def test_colocated_engines_take_a_fifth_of_one_device_each():
    assert engine_bundles(2, 1, colocated=True, use_gpu=True) == [EngineBundle({"GPU": 1.0, "CPU": 1.0}, 0.2, 0.2)] * 2


def test_engines_on_their_own_devices_get_one_bundle_of_tp_devices_each():
    assert engine_bundles(2, 4, colocated=False, use_gpu=True) == [EngineBundle({"GPU": 4.0, "CPU": 4.0}, 4.0, 4.0)] * 2
    assert engine_bundles(1, 1, colocated=False, use_gpu=False) == [EngineBundle({"CPU": 1.0}, 0.0, 1.0)]


def test_colocated_tensor_parallel_engines_are_refused():
    with pytest.raises(ValueError, match="tensor_parallel_size > 1"):
        engine_bundles(1, 2, colocated=True, use_gpu=True)
