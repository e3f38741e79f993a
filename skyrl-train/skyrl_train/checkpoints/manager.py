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
Rotation only ever counts committed folders, and deletes a folder by first renaming it aside, so a
half-deleted folder never looks like a checkpoint.

A `CheckpointSink` (see `sink.py`) is called around every save and on resume; the default one only
rotates locally, `S3CheckpointSink` uploads. With a sink that removes local copies, the pointer can name a
step whose folder is gone: `resume_mode=latest` then fetches that step (or a newer one) from the sink, and
if no copy exists anywhere it warns and falls back to the newest local folder, or a fresh start.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path

from skyrl_gym.common.fs import atomic_write_text, fsync_dir
from skyrl_train.checkpoints.sink import CheckpointSink
from skyrl_train.utils.fs import fsync_tree, remove_tree, replace_dir

logger = logging.getLogger(__name__)

LATEST_CKPT_FILE = "latest_ckpt_global_step.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_WORK_DIR = re.compile(r"^\.global_step_\d+\.(partial|retired)-(\d+)(-[0-9a-f]+)?$")
_STAGING_DIR = re.compile(r"^\.global_step_(\d+)\.partial-\d+$")


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


def written_step(path: Path) -> int | None:
    """The step of a checkpoint folder, or of the staging folder a save is filling (`.global_step_N.partial-<pid>`):
    for code that writes into the folder it is given (e.g. ranks naming their uploads by step)."""
    match = _STEP_DIR.match(path.name) or _STAGING_DIR.match(path.name)
    return int(match.group(1)) if match else None


class CheckpointManager:
    """Saves, lists, rotates and resolves checkpoints under one root folder; `sink` is called around saves."""

    def __init__(
        self,
        ckpt_path: str | os.PathLike,
        max_ckpts_to_keep: int = -1,
        ckpt_interval: int = 1,
        sink: CheckpointSink | None = None,
    ):
        if max_ckpts_to_keep == 0:
            raise CheckpointError("trainer.max_ckpts_to_keep=0 would delete every checkpoint; use -1 to keep all")
        self.root = Path(ckpt_path).expanduser()
        self.max_ckpts_to_keep = max_ckpts_to_keep
        self.ckpt_interval = max(ckpt_interval, 1)
        self.sink = sink if sink is not None else CheckpointSink()

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

    def committed_steps(self) -> list[int]:
        """Steps of the complete folders at or below the pointer (folders ahead of it were never committed)."""
        latest = self.latest_step()
        return [] if latest is None else [step for step in self.step_dirs() if step <= latest]

    def latest_step(self) -> int | None:
        """The step named by the pointer file, or None when there is no pointer."""
        if not self.pointer_file.exists():
            return None
        text = self.pointer_file.read_text().strip()
        if not text.isdigit():
            raise CheckpointError(f"{self.pointer_file} holds {text!r}, not a step number")
        return int(text)

    def save(self, global_step: int, write_contents: Callable[[Path], None]) -> Path:
        """Write checkpoint `global_step`: `write_contents(folder)` fills a staging folder, then it is committed
        and handed to the sink."""
        self.sink.before_save(self, global_step)
        try:
            final = self.install(global_step, write_contents)
        except CheckpointError:
            raise
        except Exception as exc:  # what libraries raise for an OSError of their own (tokenizers: a plain Exception)
            raise self._write_error(global_step, exc) from exc
        self.sink.after_save(self, global_step, final)
        return final

    def _write_error(self, global_step: int, why: object) -> CheckpointError:
        return CheckpointError(
            f"could not write checkpoint {self.root / step_dir_name(global_step)} ({why}); the previous checkpoint "
            f"(step {self.latest_step()}) is intact"
        )

    def install(self, global_step: int, write_contents: Callable[[Path], None]) -> Path:
        """Commit checkpoint `global_step` filled by `write_contents(folder)` without calling the sink (a sink uses
        this to put a fetched checkpoint in place)."""
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
                raise self._write_error(global_step, exc.strerror or exc) from exc
            raise
        replace_dir(staging, final)  # re-saving an existing step (e.g. from an older resume point) replaces it
        atomic_write_text(self.pointer_file, f"{global_step}\n")
        return final

    def delete_step(self, global_step: int) -> None:
        """Remove a checkpoint folder: renamed aside first (one atomic step), then deleted."""
        path = self.root / step_dir_name(global_step)
        if not path.is_dir():
            return
        retired = self.root / f".{path.name}.retired-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.replace(path, retired)
        fsync_dir(self.root)
        remove_tree(retired)

    def rotate(self) -> list[int]:
        """Delete the oldest complete checkpoints beyond `max_ckpts_to_keep`, never the one `latest` names."""
        if self.max_ckpts_to_keep < 0:
            return []
        removed = self.committed_steps()[: -self.max_ckpts_to_keep]
        for step in removed:
            self.delete_step(step)
        return removed

    def resolve_resume(self, resume_mode: str | ResumeMode | None, resume_path: str | None = None) -> Path | None:
        """The checkpoint folder to resume from, or None to start fresh; the sink's `begin` is told which."""
        mode = resume_mode if isinstance(resume_mode, ResumeMode) else ResumeMode.parse(resume_mode)
        if mode is ResumeMode.NONE:
            self.sink.begin(self, None, continuing=False)
            return None
        if mode is ResumeMode.FROM_PATH:
            if not resume_path:
                raise CheckpointError("trainer.resume_mode=from_path needs trainer.resume_path")
            path = Path(resume_path).expanduser()
            if parse_step(path) is None or not path.is_dir():
                raise CheckpointError(f"trainer.resume_path={resume_path!r} is not an existing global_step_N folder")
            self.sink.begin(self, parse_step(path), continuing=False)
            return path
        path = self._resolve_latest()
        self.sink.begin(self, None if path is None else parse_step(path), continuing=True)
        return path

    def _resolve_latest(self) -> Path | None:
        """The newest checkpoint, local or fetched by the sink; repairs a pointer to a missing folder."""
        pointer = self.latest_step()
        local = pointer
        if pointer is not None and not (self.root / step_dir_name(pointer)).is_dir():
            local = max((step for step in self.step_dirs() if step < pointer), default=None)
            logger.warning(
                "%s names step %d but %s does not exist (removed after its upload, or lost): looking for a copy",
                self.pointer_file,
                pointer,
                self.root / step_dir_name(pointer),
            )
        fetched = self.sink.fetch_newest(self, newer_than=local)
        step = fetched if fetched is not None else local
        if step is None:
            if pointer is not None:
                logger.warning("no copy of checkpoint step %d exists anywhere: starting fresh", pointer)
                self.pointer_file.unlink()
            elif self.step_dirs():
                logger.warning("%s has checkpoint folders but no %s: starting fresh", self.root, LATEST_CKPT_FILE)
            return None
        if step != pointer and fetched is None:
            logger.warning("falling back to the newest local checkpoint, step %d", step)
            atomic_write_text(self.pointer_file, f"{step}\n")
        self._drop_uncommitted_after(step, max(step, pointer or 0))
        return self.root / step_dir_name(step)

    def _drop_uncommitted_after(self, latest: int, last_pointer: int) -> None:
        """Remove folders newer than `latest`; refuse if any is beyond what the run (whose last commit was
        `last_pointer`) can have written."""
        ahead = {step: path for step, path in self.step_dirs().items() if step > latest}
        foreign = sorted(step for step in ahead if step > last_pointer + self.ckpt_interval)
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
        """Remove staging / retired folders of dead processes, and this process's own stale staging folders.

        This process's retired folders are left alone: a sink may be deleting one from another thread right now.
        """
        for child in self.root.iterdir():
            match = _WORK_DIR.match(child.name)
            if match:
                pid = int(match.group(2))
                own_stale_staging = pid == os.getpid() and match.group(1) == "partial"
                if own_stale_staging or not _process_alive(pid):
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
