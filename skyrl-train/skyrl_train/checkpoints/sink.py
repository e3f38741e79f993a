"""`CheckpointSink`: the hook through which `CheckpointManager` hands committed checkpoints on and gets them back.

The manager owns the local folder and its atomicity; a sink decides what else happens around it:

- `before_save` runs before a checkpoint is written (free disk: rotate old copies away);
- `after_save` runs once the new folder is committed (rotate; or queue an upload and rotate when it is done);
- `fetch_newest` brings a checkpoint newer than the local one (or the only one) back into the folder on resume,
  through `CheckpointManager.install`;
- `begin` runs once the resume point is known (check the sink's own state against it);
- `close` flushes whatever is still pending.

The base class is the local-only sink: it rotates by `max_ckpts_to_keep` and has nothing to fetch.
`skyrl_train.storage.checkpoint_sink.S3CheckpointSink` uploads to S3.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skyrl_train.checkpoints.manager import CheckpointManager


class CheckpointSink:
    """Local only: rotation by `CheckpointManager.max_ckpts_to_keep`, nothing remote."""

    def before_save(self, manager: CheckpointManager, global_step: int) -> None:
        """Called before checkpoint `global_step` is written."""

    def after_save(self, manager: CheckpointManager, global_step: int, path: Path) -> None:
        """Called after checkpoint `global_step` is committed at `path`."""
        manager.rotate()

    def fetch_newest(self, manager: CheckpointManager, newer_than: int | None) -> int | None:
        """Install the newest checkpoint newer than `newer_than` (None: any) held elsewhere; its step, or None."""
        return None

    def begin(self, manager: CheckpointManager, resumed_step: int | None, continuing: bool) -> None:
        """Called once the run's start is known: `resumed_step` (None = fresh), `continuing` for resume_mode=latest."""

    def close(self) -> None:
        """Finish pending work (bounded); called when training ends, however it ends."""
