"""Sampling parameters: one object from the config to the engine, translated by each backend at its own edge.

`SamplingParams` is also the schema of the config blocks `generator.sampling_params` and
`generator.eval_sampling_params` (the way transformers passes a `GenerationConfig` through `generate`). Keys a block
holds beyond the declared ones go to the engine unchanged; `ENGINE_EXTRA_SAMPLING_KEYS` says which each backend reads.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = ["ENGINE_EXTRA_SAMPLING_KEYS", "VLLM_EXTRA_SAMPLING_KEYS", "SamplingParams"]

VLLM_EXTRA_SAMPLING_KEYS = ("ignore_eos", "frequency_penalty", "presence_penalty", "min_tokens", "stop_token_ids")
"""Undeclared sampling keys passed to `vllm.SamplingParams` unchanged (vLLM field names). The penalties and
``min_tokens`` change the distribution, so the reported logprobs then follow vLLM's processed distribution."""

ENGINE_EXTRA_SAMPLING_KEYS: dict[str, tuple[str, ...]] = {"hf": ("ignore_eos",), "vllm": VLLM_EXTRA_SAMPLING_KEYS}
"""Undeclared sampling keys each backend reads (`HFInferenceEngine`; `inference_engines.vllm.translate`); the config
refuses any other one, which would be ignored."""


def _knob(default: Any, help: str) -> Any:
    if isinstance(default, dict):
        return dataclasses.field(default_factory=dict, metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class SamplingParams:
    """Sampling parameters of one generation call. This class is also the schema of the config blocks
    `generator.sampling_params` and `generator.eval_sampling_params` (one definition per key)."""

    _extra_keys_field: ClassVar[str] = "additional_kwargs"

    max_generate_length: int = _knob(1024, "Max new tokens of ONE generation call (one turn, not a trajectory).")
    repetition_penalty: float = _knob(1.0, "Repetition penalty; 1.0 = off.")
    temperature: float = _knob(1.0, "Sampling temperature; 0 = greedy.")
    top_p: float = _knob(1.0, "Nucleus sampling threshold; 1.0 = off.")
    min_p: float = _knob(0.0, "Min-p sampling threshold; 0 = off.")
    top_k: int = _knob(-1, "Top-k sampling; -1 = off.")
    logprobs: int | None = _knob(0, "0 = return each sampled token's logprob; null = none; >0 is not supported.")
    stop: list[str] | None = _knob(None, "Stop strings (kept in the output text); null = none.")
    seed: int | None = _knob(
        None,
        "Sampling seed given to every request as is (identical prompts then sample identical tokens); null = each "
        "request gets its own seed derived from trainer.seed and its identity (phase, step, prompt uid, sample, turn), "
        "so rollouts do not depend on how the engine batches requests.",
    )
    additional_kwargs: dict[str, Any] = _knob({}, "Any other key in this block is passed to the engine unchanged.")

    def __post_init__(self):
        problems = []
        if self.max_generate_length < 1:
            problems.append(f"max_generate_length must be >= 1, got {self.max_generate_length}")
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            problems.append(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if not 0 <= self.min_p < 1:
            problems.append(f"min_p must be in [0, 1), got {self.min_p}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.logprobs not in (None, 0):
            problems.append(f"logprobs must be 0 (sampled-token logprob) or None, got {self.logprobs}")
        if problems:
            raise ValueError("invalid sampling params: " + "; ".join(problems))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "SamplingParams":
        """Build from a config block (dict / DictConfig); unknown keys go to `additional_kwargs`."""
        known = {f.name for f in dataclasses.fields(cls)} - {"additional_kwargs"}
        values = dict(values)
        extra = dict(values.pop("additional_kwargs", None) or {})
        extra.update({k: v for k, v in values.items() if k not in known})
        stop = values.get("stop")
        kwargs = {k: v for k, v in values.items() if k in known}
        if stop is not None:
            kwargs["stop"] = [stop] if isinstance(stop, str) else list(stop)
        return cls(**kwargs, additional_kwargs=extra)

    def replace(self, **changes) -> "SamplingParams":
        return dataclasses.replace(self, **changes)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
