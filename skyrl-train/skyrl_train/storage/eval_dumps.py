"""Queue the upload of eval dump folders (written by `skyrl_train.evaluate.dump_eval_results`)."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

from skyrl_train.storage.manifest import ManifestError
from skyrl_train.storage.s3 import S3StorageError, S3Store
from skyrl_train.storage.settings import S3Settings
from skyrl_train.storage.uploader import BackgroundUploader
from skyrl_train.utils.redact import scrub_secret_values, secret_values

logger = logging.getLogger(__name__)


def queue_eval_dump_upload(uploader: BackgroundUploader, store: S3Store, folder: Path, prefix: str) -> None:
    """Upload every file of `folder` to `prefix/` in the background, with secret env values scrubbed.

    The secrets are read from the environment now, so a later change of the environment does not matter.
    A failed upload is logged with its reason; the local dump is never deleted.
    """
    scrub = partial(scrub_secret_values, secrets=secret_values())

    def upload() -> None:
        try:
            report = store.upload_folder(folder, prefix, transform=scrub)
        except (S3StorageError, ManifestError, OSError) as exc:
            logger.error("eval dump %s NOT uploaded to %s: %s (local copy kept)", folder, store.url(prefix), exc)
            return
        logger.info(
            "uploaded eval dump %s to %s: %d files, %d bytes, %.1f s",
            folder.name,
            report.url,
            report.files,
            report.bytes,
            report.seconds,
        )

    uploader.submit(f"eval dump {folder}", upload)


class EvalDumpUploader:
    """Uploads each eval step's dump folder to `s3://{eval_bucket}/evals/{run_name}/global_step_N/`."""

    def __init__(self, settings: S3Settings, uploader: BackgroundUploader):
        self.settings = settings
        self.uploader = uploader
        self.store = settings.store(settings.eval_bucket)

    def upload(self, folder: Path, global_step: int | None) -> None:
        """Queue `folder`'s upload under `global_step_N/` (`eval_only/` for None: an eval outside training)."""
        queue_eval_dump_upload(self.uploader, self.store, folder, self.settings.eval_prefix(global_step))
