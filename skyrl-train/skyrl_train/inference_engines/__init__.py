"""Inference engines: one token-in/token-out interface (`base`), three backends: `hf/` (transformers, in-process),
`vllm/` (vLLM, local or on Ray) and `remote` (any OpenAI-compatible or vLLM server); `client` spreads requests over
several engines.
"""

from skyrl_train.inference_engines.base import (
    InferenceEngineInput,
    InferenceEngineInterface,
    InferenceEngineOutput,
    SamplingParams,
)

# The transformers backend is imported on first use, so that importing the contract stays light.
_LAZY = {
    "EngineStats": "skyrl_train.inference_engines.hf",
    "HFInferenceEngine": "skyrl_train.inference_engines.hf",
    "WeightVersion": "skyrl_train.types.weight_version",
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
