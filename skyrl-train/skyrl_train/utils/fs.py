"""Crash-safe filesystem primitives: a reader sees either the old or the new content, never a partial one."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Persist a directory entry change (a rename or a new file) on POSIX filesystems."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory below `root`, so a rename of `root` publishes durable content."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(dirpath))


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory and an atomic rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


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
