"""Checkpoint folders in upstream's layout, committed atomically.

Layout under `trainer.ckpt_path`::

    global_step_N/                 one complete checkpoint (policy/, critic/, data.pt, trainer_state.pt)
    latest_ckpt_global_step.txt    the integer N of the newest complete checkpoint, written LAST

A save fills a hidden staging folder `.global_step_N.partial-<pid>`, fsyncs it, renames it to
`global_step_N` and only then rewrites the pointer file (itself through a temp file and a rename). A
process killed at any point therefore leaves either the previous checkpoint as `latest`, or the new
one complete; staging folders of dead processes are ignored and cleaned on the next save. A failed
write (e.g. a full disk) raises `CheckpointError`, removes the staging folder and leaves the previous
checkpoint untouched.

Because the pointer is the commit marker, a `global_step_M` folder with M beyond the pointer was never
committed. Within one `ckpt_interval` of the pointer it is a save interrupted between the folder rename
and the pointer write, and resuming removes it (the run re-creates it). Further ahead it belongs to
another run sharing the folder, and resuming refuses rather than deleting someone else's checkpoints.
Rotation only ever counts committed folders.
"""

from __future__ import annotations

import enum
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

from skyrl_train.utils.fs import atomic_write_text, fsync_tree, remove_tree, replace_dir

logger = logging.getLogger(__name__)

LATEST_CKPT_FILE = "latest_ckpt_global_step.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_WORK_DIR = re.compile(r"^\.global_step_\d+\.(partial|retired)-(\d+)(-[0-9a-f]+)?$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or resolved; the message says which path and why."""


class ResumeMode(enum.StrEnum):
    NONE = "none"
    LATEST = "latest"
    FROM_PATH = "from_path"

    @classmethod
    def parse(cls, value: str | None) -> ResumeMode:
        if value is None or str(value).lower() in ("none", "null"):
            return cls.NONE
        try:
            return cls(str(value).lower())
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise CheckpointError(f"trainer.resume_mode={value!r} is not one of: {valid}") from None


def step_dir_name(global_step: int) -> str:
    return f"global_step_{global_step}"


def parse_step(path: Path) -> int | None:
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match else None


class CheckpointManager:
    """Saves, lists, rotates and resolves checkpoints under one root folder."""

    def __init__(self, ckpt_path: str | os.PathLike, max_ckpts_to_keep: int = -1, ckpt_interval: int = 1):
        if max_ckpts_to_keep == 0:
            raise CheckpointError("trainer.max_ckpts_to_keep=0 would delete every checkpoint; use -1 to keep all")
        self.root = Path(ckpt_path).expanduser()
        self.max_ckpts_to_keep = max_ckpts_to_keep
        self.ckpt_interval = max(ckpt_interval, 1)

    @property
    def pointer_file(self) -> Path:
        return self.root / LATEST_CKPT_FILE

    def step_dirs(self) -> dict[int, Path]:
        """Complete checkpoint folders by step (staging folders are never listed)."""
        if not self.root.is_dir():
            return {}
        found = {}
        for child in self.root.iterdir():
            step = parse_step(child)
            if step is not None and child.is_dir():
                found[step] = child
        return dict(sorted(found.items()))

    def latest_step(self) -> int | None:
        """The step named by the pointer file, or None when there is no pointer."""
        if not self.pointer_file.exists():
            return None
        text = self.pointer_file.read_text().strip()
        if not text.isdigit():
            raise CheckpointError(f"{self.pointer_file} holds {text!r}, not a step number")
        return int(text)

    def save(self, global_step: int, write_contents: Callable[[Path], None]) -> Path:
        """Write checkpoint `global_step`: `write_contents(folder)` fills a staging folder, then it is committed."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_dead_staging_dirs()
        staging = self.root / f".{step_dir_name(global_step)}.partial-{os.getpid()}"
        final = self.root / step_dir_name(global_step)
        remove_tree(staging)
        staging.mkdir()
        try:
            write_contents(staging)
            fsync_tree(staging)
        except BaseException as exc:
            remove_tree(staging)
            if isinstance(exc, OSError):
                raise CheckpointError(
                    f"could not write checkpoint {final} ({exc.strerror or exc}); the previous checkpoint "
                    f"(step {self.latest_step()}) is intact"
                ) from exc
            raise
        replace_dir(staging, final)  # re-saving an existing step (e.g. from an older resume point) replaces it
        atomic_write_text(self.pointer_file, f"{global_step}\n")
        self.rotate()
        return final

    def rotate(self) -> list[int]:
        """Delete the oldest complete checkpoints beyond `max_ckpts_to_keep`, never the one `latest` names."""
        latest = self.latest_step()
        if self.max_ckpts_to_keep < 0 or latest is None:
            return []
        committed = [step for step in self.step_dirs() if step <= latest]
        removed = committed[: -self.max_ckpts_to_keep]
        for step in removed:
            remove_tree(self.root / step_dir_name(step))
        return removed

    def resolve_resume(self, resume_mode: str | ResumeMode | None, resume_path: str | None = None) -> Path | None:
        """The checkpoint folder to resume from, or None to start fresh."""
        mode = resume_mode if isinstance(resume_mode, ResumeMode) else ResumeMode.parse(resume_mode)
        if mode is ResumeMode.NONE:
            return None
        if mode is ResumeMode.FROM_PATH:
            if not resume_path:
                raise CheckpointError("trainer.resume_mode=from_path needs trainer.resume_path")
            path = Path(resume_path).expanduser()
            if parse_step(path) is None or not path.is_dir():
                raise CheckpointError(f"trainer.resume_path={resume_path!r} is not an existing global_step_N folder")
            return path
        latest = self.latest_step()
        if latest is None:
            if self.step_dirs():
                logger.warning("%s has checkpoint folders but no %s: starting fresh", self.root, LATEST_CKPT_FILE)
            return None
        path = self.root / step_dir_name(latest)
        if not path.is_dir():
            raise CheckpointError(
                f"{self.pointer_file} names step {latest} but {path} does not exist; "
                f"the checkpoint folder was removed or moved"
            )
        self._drop_uncommitted_after(latest)
        return path

    def _drop_uncommitted_after(self, latest: int) -> None:
        ahead = {step: path for step, path in self.step_dirs().items() if step > latest}
        foreign = sorted(step for step in ahead if step > latest + self.ckpt_interval)
        if foreign:
            raise CheckpointError(
                f"inconsistent checkpoint folder {self.root}: {', '.join(step_dir_name(s) for s in foreign)} "
                f"are newer than the committed step {latest} by more than ckpt_interval={self.ckpt_interval}, so "
                f"they belong to another run; move them away, or resume from one with resume_mode=from_path"
            )
        for path in ahead.values():
            logger.warning("removing %s: its save was interrupted before it was committed", path)
            remove_tree(path)

    def _remove_dead_staging_dirs(self) -> None:
        for child in self.root.iterdir():
            match = _WORK_DIR.match(child.name)
            if match:
                pid = int(match.group(2))
                if pid == os.getpid() or not _process_alive(pid):
                    logger.info("removing incomplete checkpoint folder %s left by process %d", child, pid)
                    remove_tree(child)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
