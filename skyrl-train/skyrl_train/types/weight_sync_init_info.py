"""`WeightSyncInitInfo`: where and how the weight-update group of the trainer and the engines forms."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

__all__ = ["WeightSyncInitInfo"]

GROUP_NAME = "skyrl"


@dataclasses.dataclass(frozen=True)
class WeightSyncInitInfo:
    """The weight-update group: the trainer is rank 0 (and its TCP store's host); engine `i` with `n` workers (its
    tensor x pipeline x data parallel ranks) holds ranks `rank_offset .. rank_offset + n - 1`.

    The trainer builds one info for the whole group (`rank_offset` 0) and hands each engine `for_engine(i, n)`.
    """

    master_addr: str
    master_port: int
    world_size: int
    """1 (the trainer) + every engine worker."""
    rank_offset: int = 0
    group_name: str = GROUP_NAME
    backend: Literal["gloo", "nccl"] = "gloo"
    override_existing: bool = False
    """An engine that is already in a weight-update group leaves it and joins this one (else it refuses)."""
    timeout_s: float = 600.0
    """How long a member waits for the others (to join, or at a broadcast) before failing."""

    def __post_init__(self):
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"weight sync backend must be 'gloo' or 'nccl', got {self.backend!r}")
        if self.world_size < 2:
            raise ValueError(
                f"a weight-update group needs the trainer and at least one engine: world_size={self.world_size}"
            )
        if not 0 <= self.rank_offset < self.world_size:
            raise ValueError(f"rank_offset {self.rank_offset} is outside the group of {self.world_size}")

    @classmethod
    def for_engines(cls, master_addr: str, master_port: int, engine_ranks: int, **kwargs: Any) -> WeightSyncInitInfo:
        """The trainer's info for a group over `engine_ranks` engine workers in all."""
        return cls(master_addr, master_port, 1 + engine_ranks, **kwargs)

    def for_engine(self, index: int, ranks_per_engine: int) -> WeightSyncInitInfo:
        """The info engine `index` (0-based) joins with: its first worker is rank `1 + index * ranks_per_engine`."""
        offset = 1 + index * ranks_per_engine
        if offset + ranks_per_engine > self.world_size:
            raise ValueError(
                f"engine {index} with {ranks_per_engine} ranks does not fit in the group of {self.world_size}"
            )
        return dataclasses.replace(self, rank_offset=offset)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> WeightSyncInitInfo:
        """The info `to_json` produced, with every field's JSON type checked (safe on untrusted input).

        Raises:
            ValueError: not an object, an unknown field, a field of the wrong type, or values `__post_init__`
                refuses.
        """
        if not isinstance(data, dict):
            raise ValueError(f"weight-sync init info is a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown field(s) {unknown} in weight-sync init info")
        for name, value in data.items():
            kinds = _JSON_TYPES[name]
            if not isinstance(value, kinds) or isinstance(value, bool) != (kinds is bool):
                raise ValueError(f"{name} of weight-sync init info must be of JSON type {_json_name(kinds)}")
        return cls(**data)


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "master_addr": str,
    "master_port": int,
    "world_size": int,
    "rank_offset": int,
    "group_name": str,
    "backend": str,
    "override_existing": bool,
    "timeout_s": (int, float),
}


def _json_name(kinds: type | tuple[type, ...]) -> str:
    return {str: "string", int: "integer", bool: "boolean"}.get(kinds, "number")
