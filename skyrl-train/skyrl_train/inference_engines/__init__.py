"""Inference engines: one token-in/token-out interface, several backends (hf, vllm, remote)."""

from skyrl_train.inference_engines.base import (
    InferenceEngineInput,
    InferenceEngineInterface,
    InferenceEngineOutput,
    SamplingParams,
)

# The transformers backend is imported on first use, so that importing the contract stays light.
_LAZY = {
    "EngineStats": "skyrl_train.inference_engines.batcher",
    "HFInferenceEngine": "skyrl_train.inference_engines.hf_engine",
    "WeightVersion": "skyrl_train.inference_engines.weight_version",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EngineStats",
    "HFInferenceEngine",
    "InferenceEngineInput",
    "InferenceEngineInterface",
    "InferenceEngineOutput",
    "SamplingParams",
    "WeightVersion",
]
