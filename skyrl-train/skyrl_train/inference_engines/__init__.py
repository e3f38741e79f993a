"""Inference engines: one token-in/token-out interface, several backends (hf, vllm, remote)."""

from skyrl_train.inference_engines.base import (
    InferenceEngineInput,
    InferenceEngineInterface,
    InferenceEngineOutput,
    SamplingParams,
    StopReason,
)

__all__ = ["InferenceEngineInput", "InferenceEngineInterface", "InferenceEngineOutput", "SamplingParams", "StopReason"]
