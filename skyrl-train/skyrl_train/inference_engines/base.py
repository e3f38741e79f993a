"""The inference-engine contract shared by every backend.

Token ids in; token ids, text, stop reason and per-token logprobs out. Sampling parameters travel as
one `SamplingParams` object from the config to the engine untouched; each backend translates it at
its own edge (the way transformers passes a `GenerationConfig` through `generate`).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, TypedDict


class StopReason:
    """Why a generation (or a whole trajectory) ended. Engines produce the first three."""

    STOP = "stop"
    """EOS or a stop string was produced."""
    LENGTH = "length"
    """`max_tokens` was reached, or (generator) the running context exceeded `max_input_length`."""
    ABORT = "abort"
    """The request was aborted (e.g. paused for a weight update); the tokens so far are returned."""


@dataclasses.dataclass
class SamplingParams:
    """Sampling parameters of one generation call (field names follow `generator.sampling_params`)."""

    max_generate_length: int = 1024
    """Maximum new tokens of ONE engine call (not of a whole multi-turn trajectory)."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    top_k: int = -1
    """-1 disables top-k."""
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    stop: list[str] | None = None
    """Stop strings; the generated text includes the stop string that ended it."""
    logprobs: int | None = 0
    """0 returns the logprob of each sampled token; None returns none."""
    seed: int | None = None
    """Per-request seed for reproducible sampling; None draws from the engine's generator."""
    additional_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Backend-specific extras, passed through to the backend that understands them."""

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
    def from_mapping(cls, values: Mapping[str, Any]) -> SamplingParams:
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

    def replace(self, **changes) -> SamplingParams:
        return dataclasses.replace(self, **changes)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class InferenceEngineInput(TypedDict, total=False):
    prompt_token_ids: list[list[int]]
    """Token ids of each prompt (token-in). Exactly one of `prompt_token_ids` / `prompts` is set."""
    prompts: list[list[dict[str, str]]]
    """Chat conversations; the engine applies the chat template with a generation prompt."""
    sampling_params: SamplingParams | None
    session_ids: list[str] | None
    """Sticky-routing keys (one per prompt), e.g. the trajectory id, for prefix-cache reuse."""


class InferenceEngineOutput(TypedDict):
    responses: list[str]
    """Decoded text of each response (special tokens skipped)."""
    response_ids: list[list[int]]
    """Exactly the sampled token ids (token-out); never re-encoded from text."""
    stop_reasons: list[str]
    response_logprobs: list[list[float]] | None
    """Per sampled token: log_softmax(logits / temperature) at that token (temperature 0 counts as 1), i.e.
    exactly what the trainer recomputes; top-k/top-p/min-p truncation is not applied. None if not requested."""


class InferenceEngineInterface(ABC):
    """An inference engine. Backends implement `generate`; the rest defaults to no-ops where meaningful."""

    @abstractmethod
    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        """Generate one response per prompt, in input order."""

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Re-acquire memory released by `sleep` (weights and/or KV cache)."""
        return None

    async def sleep(self) -> None:
        """Release accelerator memory while the trainer runs (colocated mode)."""
        return None

    async def reset_prefix_cache(self) -> None:
        """Drop cached prefixes, e.g. after a weight update."""
        return None

    async def teardown(self) -> None:
        """Stop background work and free resources."""
        return None

    def tp_size(self) -> int:
        return 1

    def pp_size(self) -> int:
        return 1

    def dp_size(self) -> int:
        return 1
