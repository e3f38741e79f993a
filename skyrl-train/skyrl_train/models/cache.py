"""Build a cache folder once, atomically, even when several processes race for it.

A folder is *complete* when it holds the marker file ``.skyrl-complete.json`` whose ``manifest`` equals the one
the caller expects. The marker is written last, inside a temp folder that sits next to the target, and the temp
folder is then renamed onto the target; so the target path only ever shows a complete folder, and a process killed
mid-build leaves nothing but a ``.<name>.tmp-*`` folder that the next builder removes. Builders serialise on an
``fcntl.flock`` of ``.<name>.lock`` in the same parent (released by the kernel if the holder dies); readers of a
complete folder take no lock at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from skyrl_train.utils.fs import fsync_tree, replace_dir

logger = logging.getLogger(__name__)

MARKER_NAME = ".skyrl-complete.json"


def cache_root() -> Path:
    """The models cache: ``$SKYRL_CACHE_DIR/models`` if that variable is set, else ``~/.cache/skyrl/models``."""
    base = os.environ.get("SKYRL_CACHE_DIR")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "skyrl"
    return root / "models"


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest recorded in ``folder``'s marker, or None when the folder is not a complete build."""
    try:
        return json.loads((folder / MARKER_NAME).read_text())["manifest"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_complete(folder: Path, manifest: dict[str, Any]) -> bool:
    """True when ``folder`` was fully built for exactly this ``manifest``."""
    return read_manifest(folder) == _normalise(manifest)


def build_once(target: Path, build: Callable[[Path], None], manifest: dict[str, Any]) -> bool:
    """Make ``target`` a complete build for ``manifest``, calling ``build(tmp_dir)`` only if it is not one yet.

    ``build`` fills the empty folder it is given; it must not depend on the folder's name. Returns True when this
    call built the folder, False when a complete one was already there (or another process finished it while this
    one waited for the lock). A complete folder for a *different* manifest is replaced; a folder with no marker at
    all was not made here and is never touched (the call raises instead).
    """
    manifest = _normalise(manifest)
    if is_complete(target, manifest):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / f".{target.name}.lock"):
        if is_complete(target, manifest):
            return False
        _remove_leftovers(target)
        if target.exists() and read_manifest(target) is None:
            raise FileExistsError(
                f"{target} exists but is not a complete skyrl cache folder (no {MARKER_NAME}); "
                "it was not written by skyrl_train.models, so it is left alone: remove it and retry."
            )
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        tmp.chmod(0o755)  # mkdtemp makes it 0700; a cache folder is as readable as its parent
        try:
            build(tmp)
            fsync_tree(tmp)  # so that after a power loss the marker never survives without the files it vouches for
            _write_marker(tmp, manifest)
            replace_dir(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return True


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    # The lock file is never deleted: unlinking it would let a later process lock a different inode.
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _normalise(manifest: dict[str, Any]) -> dict[str, Any]:
    # What a manifest compares equal to after a JSON round trip (tuples become lists, keys become strings).
    return json.loads(json.dumps(manifest, sort_keys=True))


def _remove_leftovers(target: Path) -> None:
    # Called with the lock held, so every temp or retired folder of this target belongs to a dead builder.
    for pattern in (f".{target.name}.tmp-*", f".{target.name}.retired-*"):
        for stale in target.parent.glob(pattern):
            logger.info("removing leftover %s of an interrupted build", stale)
            shutil.rmtree(stale, ignore_errors=True)


def _write_marker(folder: Path, manifest: dict[str, Any]) -> None:
    path = folder / MARKER_NAME
    with open(path, "w") as handle:
        json.dump({"manifest": manifest}, handle, indent=2, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
