"""Which checkpoints to delete, locally and in S3: a pure function of what exists and what is uploading.

Invariants (checked by a property-based test over save / upload ok / upload failed / crash sequences):

- the newest complete checkpoint (local or remote) keeps at least one copy, and its remote copy is never deleted;
- the step `latest_ckpt_global_step.txt` names keeps a local or a verified remote copy;
- a step whose upload is queued or running is never deleted, locally or remotely;
- a local copy is deleted only if its S3 copy is verified (has a manifest); both go only when the step rotates out
  on both sides;
- beyond those protected steps, at most `keep_local` local and `keep_remote` remote checkpoints remain;
- remote folders without a manifest that are not uploading (left by a killed upload) are deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CheckpointState:
    """A snapshot: committed local steps, remote steps with / without a manifest, uploads in flight, the pointer."""

    local: frozenset[int] = field(default_factory=frozenset)
    remote: frozenset[int] = field(default_factory=frozenset)
    remote_partial: frozenset[int] = field(default_factory=frozenset)
    uploading: frozenset[int] = field(default_factory=frozenset)
    latest: int | None = None

    @property
    def newest_complete(self) -> int | None:
        return max(self.local | self.remote, default=None)


@dataclass(frozen=True)
class RotationPlan:
    delete_local: tuple[int, ...] = ()
    delete_remote: tuple[int, ...] = ()
    delete_remote_partial: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.delete_local or self.delete_remote or self.delete_remote_partial)


def _newest(steps: frozenset[int], keep: int) -> set[int]:
    ordered = sorted(steps, reverse=True)
    return set(ordered if keep < 0 else ordered[:keep])


def plan_rotation(state: CheckpointState, keep_local: int, keep_remote: int) -> RotationPlan:
    """What to delete so at most `keep_local` / `keep_remote` (-1 = all) unprotected checkpoints remain."""
    protected = {step for step in (state.latest, state.newest_complete) if step is not None} | state.uploading
    delete_remote = state.remote - _newest(state.remote, keep_remote) - protected
    delete_local = (state.local - _newest(state.local, keep_local) - state.uploading) & state.remote
    partial = state.remote_partial - state.remote - state.uploading
    return RotationPlan(tuple(sorted(delete_local)), tuple(sorted(delete_remote)), tuple(sorted(partial)))
