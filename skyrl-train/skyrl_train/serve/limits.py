"""`ServeLimits`: how much one request may ask of the server, and how many may wait for it.

Every limit refuses early with a status that says so: a body over `max_body_bytes` gets 413 before the rest of it is
read (`access.AccessGuard`); `n`, the number of prompts and `max_tokens` over their limits get 400 naming the field
and the `python -m skyrl_train.serve` flag that raises it (`serving.OpenAIServing`); a request that would wait at a
closed gate (sleep, weight update, the trainer's update phase) beside `max_waiting` others gets 429 with
`Retry-After` (`gate.ServingGate`).
"""

from __future__ import annotations

import dataclasses

__all__ = ["ServeLimits"]


@dataclasses.dataclass(frozen=True)
class ServeLimits:
    max_n: int = 128
    """Most choices (`n`) one request may ask for (OpenAI's own limit)."""
    max_prompts: int = 4096
    """Most prompts one `/v1/completions` request may carry (a trainer's remote engine sends a whole batch in one
    request when `generator.batched=true`)."""
    max_tokens: int | None = None
    """Most tokens one choice may generate; None: the model's context length less the prompt (always a bound)."""
    max_body_bytes: int = 32 * 2**20
    """Largest request body in bytes."""
    max_waiting: int = 512
    """Most requests waiting at a closed gate; one more is refused (429)."""

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None and value < 1:
                raise ValueError(f"{field.name} must be at least 1, got {value}")
