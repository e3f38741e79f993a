"""Crash-safe folder operations for checkpoints: a reader sees either the old or the new folder, never a partial one.
Single-file writes (`atomic_write_text`, `fsync_dir`) are in `skyrl_gym.common.fs`."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from skyrl_gym.common.fs import fsync_dir


def fsync_tree(root: Path) -> None:
    """fsync every file and directory below `root`, so a rename of `root` publishes durable content."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(dirpath))


def remove_tree(path: Path) -> None:
    """Delete a directory tree; a tree that is already gone is fine."""
    if path.exists():
        shutil.rmtree(path)


def replace_dir(new: Path, target: Path) -> None:
    """Move the complete folder `new` to `target`, replacing an existing `target` only after `new` is in place.

    An existing target is first renamed aside (a sibling `.<name>.retired-<pid>-<id>`), so at every instant the
    path holds either the old or the new complete folder, then removed.
    """
    if not target.exists():
        os.replace(new, target)
    else:
        retired = target.with_name(f".{target.name}.retired-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.replace(target, retired)
        os.replace(new, target)
        remove_tree(retired)
    fsync_dir(target.parent)
