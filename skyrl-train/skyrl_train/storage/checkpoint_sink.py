"""`S3CheckpointSink`: upload each committed checkpoint to S3 in the background, rotate, and resume from S3.

Layout: ``s3://{bucket}/{run_prefix}/global_step_N/...`` plus ``.../global_step_N/MANIFEST.json``, uploaded
last; a step is complete in S3 iff its manifest exists (and, on download, every object matches it).

- After a save the step folder is queued on the shared `BackgroundUploader`; when its upload is verified,
  rotation may delete the local copy. A failed upload (after retries) is logged with its reason and the local
  copy is kept; `failed` holds the reasons and `close()` repeats them.
- Rotation (`plan_rotation`) runs before each save (to free disk) and after each upload.
- Resume: a checkpoint newer than the local one (or the only one) is downloaded from this run's prefix; with
  no checkpoint of this run anywhere, from `resume_prefixes` (another run's, via `trainer.resume_run_name`).
  Another run's checkpoints are only a starting point: once this run has one, they are never looked at.
- Steps committed locally but not complete in S3 when a run continues (an upload killed with the process)
  are uploaded again.
- Files that fsdp2 ranks on other nodes uploaded themselves (listed in a role folder's ``UPLOADED_BY_RANKS.json``,
  see ``rank_uploads``) join the step's manifest unchanged, after a size check; a step counts as uploading from
  ``before_save`` on, so rotation never takes those files for an abandoned partial upload.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from skyrl_train.checkpoints.manager import CheckpointError, CheckpointManager, parse_step, step_dir_name
from skyrl_train.checkpoints.sink import CheckpointSink
from skyrl_train.storage.checkpoint_rotation import CheckpointState, RotationPlan, plan_rotation
from skyrl_train.storage.manifest import ManifestError
from skyrl_train.storage.rank_uploads import already_uploaded
from skyrl_train.storage.s3 import IntegrityError, S3StorageError, S3Store, join_key
from skyrl_train.storage.settings import S3Settings
from skyrl_train.storage.uploader import BackgroundUploader

logger = logging.getLogger(__name__)


class S3CheckpointSink(CheckpointSink):
    def __init__(
        self,
        store: S3Store,
        run_prefix: str,
        uploader: BackgroundUploader,
        keep_local: int = 1,
        keep_remote: int = 3,
        resume_prefixes: Sequence[str] = (),
    ):
        self.store = store
        self.run_prefix = run_prefix
        self.uploader = uploader
        self.keep_local = keep_local
        self.keep_remote = keep_remote
        self.resume_prefixes = list(resume_prefixes)
        self.failed: dict[int, str] = {}
        self._uploading: set[int] = set()
        self._lock = threading.RLock()

    @classmethod
    def from_settings(cls, settings: S3Settings, uploader: BackgroundUploader) -> S3CheckpointSink:
        """The sink for a run's resolved `S3Settings` (this run's prefix; `resume_run_name`'s as a starting point)."""
        other = settings.resume_run_name
        resume = [settings.run_prefix(other)] if other and other != settings.run_name else []
        return cls(settings.store(), settings.run_prefix(), uploader, settings.keep_local, settings.keep_remote, resume)

    def url(self, global_step: int | None = None, prefix: str | None = None) -> str:
        step = None if global_step is None else step_dir_name(global_step)
        return self.store.url(join_key(prefix or self.run_prefix, step or "")) + "/"

    # -------------------------------------------------------------------------------------- hooks

    def before_save(self, manager: CheckpointManager, global_step: int) -> None:
        with self._lock:  # from now on: fsdp2 ranks on other nodes may upload the step's files before its commit,
            self._uploading.add(global_step)  # and rotation must not delete them as an abandoned partial upload
        self.rotate(manager)

    def after_save(self, manager: CheckpointManager, global_step: int, path: Path) -> None:
        self._queue_upload(manager, global_step, path)

    def fetch_newest(self, manager: CheckpointManager, newer_than: int | None) -> int | None:
        prefixes = [self.run_prefix] + (self.resume_prefixes if newer_than is None else [])
        for prefix in prefixes:
            complete, _ = self._remote_steps(prefix)
            if complete:  # the first lineage with checkpoints decides; never fall through to another run's
                newest = max(complete)
                if newer_than is not None and newest <= newer_than:
                    return None
                self._download(manager, prefix, newest)
                return newest
        return None

    def begin(self, manager: CheckpointManager, resumed_step: int | None, continuing: bool) -> None:
        complete, _ = self._remote_steps(self.run_prefix)
        ahead = sorted(step for step in complete if step > (resumed_step or 0))
        if ahead and not continuing:
            start = "a fresh start" if resumed_step is None else f"step {resumed_step}"
            raise CheckpointError(
                f"{self.url()} already holds checkpoints {', '.join(step_dir_name(s) for s in ahead)} past this "
                f"run's start ({start}); they would be overwritten and rotated away. Resume from them with "
                f"trainer.resume_mode=latest, or use another trainer.run_name or trainer.s3.prefix"
            )
        if continuing:
            for step in manager.committed_steps():
                if step not in complete:
                    logger.info("checkpoint step %d is not complete in %s: uploading it again", step, self.url())
                    self._queue_upload(manager, step, manager.root / step_dir_name(step))

    def close(self) -> None:
        for step, reason in sorted(self.failed.items()):
            logger.error(
                "checkpoint step %d is NOT in S3 (upload failed: %s); only its local copy exists", step, reason
            )

    # ----------------------------------------------------------------------------------- rotation

    def rotate(self, manager: CheckpointManager) -> RotationPlan:
        """Delete what `plan_rotation` says; an S3 or disk error skips this round (logged), never raises."""
        with self._lock:
            try:
                complete, partial_steps = self._remote_steps(self.run_prefix)
                state = CheckpointState(
                    local=frozenset(manager.committed_steps()),
                    remote=frozenset(complete),
                    remote_partial=frozenset(partial_steps),
                    uploading=frozenset(self._uploading),
                    latest=manager.latest_step(),
                )
                plan = plan_rotation(state, self.keep_local, self.keep_remote)
                for step in plan.delete_remote + plan.delete_remote_partial:
                    self.store.delete_folder(join_key(self.run_prefix, step_dir_name(step)))
                for step in plan.delete_local:
                    manager.delete_step(step)
            except (S3StorageError, CheckpointError, OSError) as exc:
                logger.warning("checkpoint rotation skipped this time: %s", exc)
                return RotationPlan()
        if plan:
            logger.info(
                "checkpoint rotation: deleted local steps %s, S3 steps %s, incomplete S3 steps %s",
                list(plan.delete_local),
                list(plan.delete_remote),
                list(plan.delete_remote_partial),
            )
        return plan

    # ------------------------------------------------------------------------------------ helpers

    def _queue_upload(self, manager: CheckpointManager, global_step: int, path: Path) -> None:
        with self._lock:
            self._uploading.add(global_step)
            self.failed.pop(global_step, None)
        self.uploader.submit(f"checkpoint {path}", partial(self._upload, manager, global_step, path))

    def _upload(self, manager: CheckpointManager, global_step: int, path: Path) -> None:
        prefix = join_key(self.run_prefix, step_dir_name(global_step))
        try:
            uploaded = already_uploaded(path, self.store.bucket, prefix)
            report = self.store.upload_folder(path, prefix, uploaded=uploaded)
        except (S3StorageError, ManifestError, OSError) as exc:
            logger.error("checkpoint %s NOT uploaded to %s: %s; local copy kept", path, self.url(global_step), exc)
            with self._lock:
                self.failed[global_step] = str(exc)
        else:
            logger.info(
                "uploaded checkpoint %s to %s: %d files, %d bytes, %.1f s",
                path.name,
                report.url,
                report.files,
                report.bytes,
                report.seconds,
            )
        finally:
            with self._lock:
                self._uploading.discard(global_step)
        self.rotate(manager)

    def _download(self, manager: CheckpointManager, prefix: str, global_step: int) -> None:
        """Install `prefix/global_step_N` into the local folder, every file checked against the manifest."""
        url = self.url(global_step, prefix)
        logger.info("downloading checkpoint %s", url)
        try:
            manager.install(
                global_step, partial(self.store.download_folder, join_key(prefix, step_dir_name(global_step)))
            )
        except IntegrityError as exc:
            raise CheckpointError(
                f"S3 checkpoint {url} is damaged ({exc}); delete its MANIFEST.json to resume from an older one"
            ) from exc
        except S3StorageError as exc:
            raise CheckpointError(f"could not download checkpoint {url}: {exc}") from exc
        logger.info("downloaded checkpoint %s from %s", step_dir_name(global_step), url)

    def _remote_steps(self, prefix: str) -> tuple[set[int], set[int]]:
        """(steps with a manifest, steps without) under `prefix`."""
        try:
            folders = self.store.list_folders(prefix)
        except S3StorageError as exc:
            raise CheckpointError(f"could not list S3 checkpoints: {exc}") from exc
        complete, incomplete = set(), set()
        for name, has_manifest in folders.items():
            step = parse_step(Path(name))
            if step is not None:
                (complete if has_manifest else incomplete).add(step)
        return complete, incomplete
