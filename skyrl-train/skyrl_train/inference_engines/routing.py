"""Which of N engines serves each prompt of a batch (upstream SkyRL's ``route_prompts_to_engines`` semantics).

- with session ids: prompt i goes to engine ``sha256(session_ids[i]) mod N``, so every turn of an episode reaches
  the engine whose prefix cache holds its earlier turns;
- without: the batch is split into N contiguous, near-even chunks (a single prompt goes to the engine after the one
  the previous single prompt went to, so unrelated single calls spread over the engines).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence

__all__ = ["EngineRouter", "engine_for_session"]


def engine_for_session(session_id: str, num_engines: int) -> int:
    """``sha256(session_id) mod num_engines``: stable across processes and runs (unlike ``hash``)."""
    digest = hashlib.sha256(str(session_id).encode()).digest()
    return int.from_bytes(digest[:8], "big") % num_engines


class EngineRouter:
    """Routes the prompts of each call over ``num_engines`` engines (see the module docstring)."""

    def __init__(self, num_engines: int):
        if num_engines < 1:
            raise ValueError(f"num_engines must be >= 1, got {num_engines}")
        self.num_engines = num_engines
        self._next_single = itertools.cycle(range(num_engines))

    def route(self, num_prompts: int, session_ids: Sequence[str] | None = None) -> list[list[int]]:
        """For each engine, the indices of the prompts it serves (ascending).

        Raises:
            ValueError: ``session_ids`` is given with a length other than ``num_prompts``.
        """
        n = self.num_engines
        per_engine: list[list[int]] = [[] for _ in range(n)]
        if session_ids is not None:
            if len(session_ids) != num_prompts:
                raise ValueError(f"{len(session_ids)} session ids for {num_prompts} prompts")
            for index, session_id in enumerate(session_ids):
                per_engine[engine_for_session(session_id, n)].append(index)
            return per_engine
        if num_prompts == 1:
            per_engine[next(self._next_single)].append(0)
            return per_engine
        base, extra = divmod(num_prompts, n)
        start = 0
        for engine in range(n):
            size = base + (1 if engine < extra else 0)
            per_engine[engine] = list(range(start, start + size))
            start += size
        return per_engine
