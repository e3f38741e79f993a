"""`UPLOADED_BY_RANKS.json`: the files of a checkpoint folder that training ranks uploaded to S3 from their own nodes.

With ``trainer.strategy=fsdp2`` on nodes that do not share ``trainer.ckpt_path`` (see
``skyrl_train.distributed.checkpoint_storage``), the ranks' files of a role folder (``global_step_N/policy/``: the
DCP shards, ``extra_state.pt``, ``huggingface/``) never reach the driver's machine. One rank per node uploads them to
``s3://{bucket}/{prefix}/`` and the driver writes this listing in their place: the bucket, the key prefix, and each
file's path (relative to the role folder), size and sha256.

- The S3 sink lists those files in the step's ``MANIFEST.json`` without uploading them again, after checking that
  each is in S3 with its size (``already_uploaded``), so a step is complete in S3 only with every node's files.
- A resume downloads them onto every node from where the listing says (a step fetched from another run's prefix
  keeps pointing at that run's objects).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from skyrl_train.storage.manifest import Manifest, ManifestEntry, ManifestError
from skyrl_train.storage.s3 import join_key

__all__ = ["RANK_UPLOADS_FILE", "RankUploads", "already_uploaded"]

RANK_UPLOADS_FILE = "UPLOADED_BY_RANKS.json"


@dataclass(frozen=True)
class RankUploads:
    """Files the ranks uploaded to ``s3://{bucket}/{prefix}/{path}`` (paths relative to the role folder)."""

    bucket: str
    prefix: str
    files: tuple[ManifestEntry, ...]

    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}/"

    def write(self, folder: Path) -> None:
        manifest = json.loads(Manifest(self.files).to_json())
        text = json.dumps({"bucket": self.bucket, "prefix": self.prefix, "manifest": manifest}, indent=1)
        (folder / RANK_UPLOADS_FILE).write_text(text)

    @classmethod
    def read(cls, folder: Path) -> RankUploads | None:
        """The listing in ``folder``, or None when it has none (its files are all in the folder).

        Raises:
            ManifestError: the listing is malformed (names the file).
        """
        path = folder / RANK_UPLOADS_FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            bucket, prefix = str(data["bucket"]), str(data["prefix"])
            manifest = Manifest.from_json(json.dumps(data["manifest"]), str(path))
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"{path} is not a valid {RANK_UPLOADS_FILE}: {exc}") from exc
        return cls(bucket, prefix, manifest.files)


def already_uploaded(step_folder: Path, bucket: str, step_prefix: str) -> list[ManifestEntry]:
    """The files that the listings below ``step_folder`` put at ``s3://{bucket}/{step_prefix}/...`` (paths relative to
    the step folder): what ``S3Store.upload_folder(uploaded=...)`` lists without uploading.

    A listing that points elsewhere (a step fetched from another run's prefix) contributes nothing: its files were
    downloaded with the step and are uploaded like any other local file.
    """
    entries = []
    for listing_file in sorted(step_folder.rglob(RANK_UPLOADS_FILE)):
        role_dir = listing_file.parent.relative_to(step_folder).as_posix()
        listing = RankUploads.read(listing_file.parent)
        if listing is None or listing.bucket != bucket or listing.prefix != join_key(step_prefix, role_dir):
            continue
        entries += [ManifestEntry(f"{role_dir}/{e.path}", e.size, e.sha256) for e in listing.files]
    return entries
