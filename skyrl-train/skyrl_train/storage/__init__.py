"""S3 storage shared by checkpoints and eval dumps.

- `make_s3_client` / `S3Store`: folder upload with a manifest written last, verify, download, list, delete,
  with retries and backoff (`RetryPolicy`).
- `BackgroundUploader`: one queue of upload jobs, flushed (bounded) on exit, SIGTERM and SIGINT.
- `S3Settings`: bucket / prefix / endpoint resolved from `trainer.s3.*` and env fallbacks.
- `queue_eval_dump_upload`: eval dumps to ``evals/{run_name}/global_step_N/`` with secret values scrubbed
  (`skyrl_train.utils.redact`).
- `S3CheckpointSink` (checkpoint_sink.py): checkpoints uploaded in the background, rotated across local and S3
  (`checkpoint_rotation.plan_rotation`) and resumed from S3, on top of the local folders of `skyrl_train.checkpoints`;
  rank_uploads.py: the files fsdp2 ranks on other nodes upload themselves (``UPLOADED_BY_RANKS.json``).
"""

from skyrl_train.storage.checkpoint_sink import S3CheckpointSink
from skyrl_train.storage.eval_dumps import EvalDumpUploader, queue_eval_dump_upload
from skyrl_train.storage.manifest import MANIFEST_FILE, Manifest, ManifestEntry, ManifestError
from skyrl_train.storage.retry import RetryPolicy, call_with_retries, is_transient
from skyrl_train.storage.s3 import IntegrityError, S3StorageError, S3Store, UploadReport, join_key, make_s3_client
from skyrl_train.storage.settings import S3Settings
from skyrl_train.storage.uploader import BackgroundUploader

__all__ = [
    "MANIFEST_FILE",
    "BackgroundUploader",
    "IntegrityError",
    "Manifest",
    "ManifestEntry",
    "ManifestError",
    "RetryPolicy",
    "S3CheckpointSink",
    "S3Settings",
    "S3StorageError",
    "S3Store",
    "UploadReport",
    "call_with_retries",
    "is_transient",
    "join_key",
    "make_s3_client",
    "queue_eval_dump_upload",
    "EvalDumpUploader",
]
