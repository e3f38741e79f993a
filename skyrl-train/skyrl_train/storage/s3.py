"""One S3 layer for checkpoints and eval dumps: a boto3 client factory and `S3Store`, whose folder operations
upload with a manifest written last, verify, download with checksums, list and delete.

Credentials come from boto3's standard chain (env vars, shared config/credentials files, SSO, instance or
container roles); nothing here reads or logs them. Any S3-compatible endpoint works through `endpoint_url`
(AWS, R2, MinIO, moto); with an endpoint set, path-style addressing is used, as those servers expect.

Every S3 error leaves this module as `S3StorageError` naming the `s3://` URL at fault. Local file errors
(e.g. a full disk while downloading) stay `OSError`, so callers can report them as such.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, TypeVar

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from skyrl_train.storage.manifest import (
    MANIFEST_FILE,
    Manifest,
    ManifestEntry,
    ManifestError,
    file_sha256,
    folder_files,
    sha256_of,
)
from skyrl_train.storage.retry import RetryPolicy, call_with_retries

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MIB = 1024 * 1024
_DELETE_BATCH = 1000  # the most keys one DeleteObjects call accepts


class S3StorageError(RuntimeError):
    """An S3 operation failed (after retries); the message names the URL and the reason."""


class IntegrityError(S3StorageError):
    """A downloaded object does not match its manifest entry (missing, wrong size or wrong checksum)."""


@dataclass(frozen=True)
class UploadReport:
    url: str
    files: int
    bytes: int
    seconds: float


def make_s3_client(endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 3):
    """A boto3 S3 client with bounded timeouts and botocore's `standard` per-request retries (`max_attempts`).

    Each call builds its own `boto3.session.Session`, so clients can be made from any thread.
    """
    config = Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        connect_timeout=10,
        read_timeout=120,
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def join_key(*parts: str) -> str:
    return "/".join(part.strip("/") for part in parts if part and part.strip("/"))


class S3Store:
    """Folder-level operations on one bucket. Thread-safe (boto3 clients are)."""

    def __init__(
        self,
        client,
        bucket: str,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.client = client
        self.bucket = bucket
        self.retry = retry
        self._sleep = sleep
        self._transfer = TransferConfig(multipart_threshold=64 * _MIB, multipart_chunksize=64 * _MIB, max_concurrency=4)

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"

    # -------------------------------------------------------------------------------------- folders

    def upload_folder(
        self,
        folder: Path,
        prefix: str,
        transform: Callable[[bytes], bytes] | None = None,
        uploaded: Sequence[ManifestEntry] = (),
    ) -> UploadReport:
        """Upload every file below `folder` to `prefix/<relative path>`, then `prefix/MANIFEST.json`.

        An earlier manifest at `prefix` is deleted first (the folder is incomplete while it changes), objects of
        an earlier upload that are not part of this one are deleted, and every object's size is checked before
        the manifest is written. `transform` rewrites each file's bytes before upload (e.g. to scrub secrets);
        the manifest then describes the uploaded bytes. `uploaded` lists files other processes already put at
        `prefix/<path>` (e.g. checkpoint shards uploaded from other nodes): they join the manifest, are kept and
        size-checked, and a local file of the same path is not uploaded again. A folder `folder_files` refuses (e.g.
        a symbolic link out of it) raises `ManifestError` before anything in the bucket changes.
        """
        start = time.perf_counter()
        files = list(folder_files(folder))
        manifest_key = join_key(prefix, MANIFEST_FILE)
        existing = self._list(prefix)
        self._delete_keys([key for key in existing if key == manifest_key])
        skip = {entry.path for entry in uploaded}
        entries = [*uploaded, *self._put_files(files, prefix, transform, skip)]
        manifest = Manifest(tuple(entries))
        stale = sorted(set(existing) - {join_key(prefix, e.path) for e in entries} - {manifest_key})
        self._delete_keys(stale)
        self._check_sizes(prefix, manifest)
        body = manifest.to_json().encode()
        self._put(manifest_key, partial(io.BytesIO, body), f"upload of {self.url(manifest_key)}")
        return UploadReport(
            self.url(join_key(prefix)) + "/", len(entries), manifest.total_bytes, time.perf_counter() - start
        )

    def upload_files(self, folder: Path, prefix: str) -> Manifest:
        """Upload every file below `folder` to `prefix/<relative path>` and check each object's size; no manifest is
        written (the caller lists the files in the manifest of an enclosing folder). Returns what was uploaded."""
        manifest = Manifest(tuple(self._put_files(list(folder_files(folder)), prefix)))
        self._check_sizes(prefix, manifest)
        return manifest

    def _put_files(
        self,
        files: list[tuple[str, Path]],
        prefix: str,
        transform: Callable[[bytes], bytes] | None = None,
        skip: Collection[str] = (),
    ) -> list[ManifestEntry]:
        """Upload `files` (`folder_files` of a folder) to `prefix/<relative path>`; returns their manifest entries."""
        entries = []
        for relative, path in files:
            if relative in skip:
                continue
            key = join_key(prefix, relative)
            what = f"upload of {path} to {self.url(key)}"
            if transform is None:
                entries.append(ManifestEntry(relative, path.stat().st_size, file_sha256(path)))
                self._put(key, partial(open, path, "rb"), what)
            else:
                data = transform(path.read_bytes())
                entries.append(ManifestEntry(relative, len(data), sha256_of(data)))
                self._put(key, partial(io.BytesIO, data), what)
        return entries

    def read_manifest(self, prefix: str) -> Manifest | None:
        """The manifest at `prefix`, or None if the folder has none (incomplete or absent)."""
        key = join_key(prefix, MANIFEST_FILE)

        def read() -> bytes | None:
            try:
                return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None
                raise

        data = self._call(read, f"reading {self.url(key)}")
        if data is None:
            return None
        try:
            return Manifest.from_json(data, self.url(key))
        except ManifestError as exc:
            raise IntegrityError(str(exc)) from exc

    def download_folder(self, prefix: str, dest: Path) -> Manifest:
        """Download the files `prefix`'s manifest lists into `dest`, checking each one's size and sha256."""
        manifest = self.read_manifest(prefix)
        if manifest is None:
            raise IntegrityError(f"{self.url(join_key(prefix))}/ has no {MANIFEST_FILE}: it is not a complete upload")
        self.download_files(prefix, manifest.files, dest)
        return manifest

    def download_files(self, prefix: str, files: Iterable[ManifestEntry], dest: Path) -> None:
        """Download `prefix/<path>` of each entry to `dest/<path>`, checking its size and sha256."""
        for entry in files:
            key = join_key(prefix, entry.path)
            target = dest / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            self._download_file(key, target)
            size = target.stat().st_size
            if size != entry.size:
                raise IntegrityError(f"{self.url(key)} has {size} bytes, its manifest says {entry.size}")
            if file_sha256(target) != entry.sha256:
                raise IntegrityError(f"{self.url(key)} does not match the sha256 in its manifest")

    def list_folders(self, prefix: str) -> dict[str, bool]:
        """Sub-folders of `prefix` (first path component below it) -> whether each has a manifest (is complete)."""
        folders: dict[str, bool] = {}
        base = join_key(prefix)
        for key in self._list(prefix):
            name, _, rest = key[len(base) + 1 :].partition("/")
            if rest:
                folders[name] = folders.get(name, False) or rest == MANIFEST_FILE
        return folders

    def delete_folder(self, prefix: str) -> int:
        """Delete every object below `prefix`, the manifest first (so the folder never looks complete while
        half deleted); returns the number of objects deleted."""
        keys = self._list(prefix)
        manifest_key = join_key(prefix, MANIFEST_FILE)
        self._delete_keys([key for key in keys if key == manifest_key])
        self._delete_keys([key for key in keys if key != manifest_key])
        return len(keys)

    # ---------------------------------------------------------------------------------- primitives

    def _put(self, key: str, open_body: Callable[[], IO[bytes]], what: str) -> None:
        def upload() -> None:
            with open_body() as body:
                self.client.upload_fileobj(body, self.bucket, key, Config=self._transfer)

        self._call(upload, what)

    def _download_file(self, key: str, target: Path) -> None:
        def download() -> None:
            try:
                self.client.download_file(self.bucket, key, str(target), Config=self._transfer)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    raise IntegrityError(f"{self.url(key)} is listed in its manifest but missing") from exc
                raise

        self._call(download, f"download of {self.url(key)}")

    def _list(self, prefix: str) -> dict[str, int]:
        """Every key below `prefix/` -> its size."""
        base = join_key(prefix) + "/"

        def listing() -> dict[str, int]:
            found = {}
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
                found.update({obj["Key"]: obj["Size"] for obj in page.get("Contents", [])})
            return found

        return self._call(listing, f"listing {self.url(base)}")

    def _delete_keys(self, keys: list[str]) -> None:
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": key} for key in keys[i : i + _DELETE_BATCH]]

            def delete(batch=batch) -> None:
                errors = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch}).get("Errors")
                if errors:
                    first = errors[0]
                    raise S3StorageError(
                        f"could not delete {len(errors)} objects, e.g. {self.url(first.get('Key', ''))}: "
                        f"{first.get('Code')} {first.get('Message')}"
                    )

            self._call(delete, f"deleting {len(batch)} objects in {self.url()}")

    def _check_sizes(self, prefix: str, manifest: Manifest) -> None:
        listed = self._list(prefix)
        for entry in manifest.files:
            key = join_key(prefix, entry.path)
            if listed.get(key) != entry.size:
                raise S3StorageError(
                    f"verification failed: {self.url(key)} has size {listed.get(key)}, expected {entry.size}"
                )

    def _call(self, fn: Callable[[], T], what: str) -> T:
        """`fn()` with retries; boto errors become `S3StorageError` naming `what`."""
        try:
            return call_with_retries(fn, what, self.retry, self._sleep)
        except (ClientError, BotoCoreError, Boto3Error) as exc:
            raise S3StorageError(f"{what} failed: {exc}") from exc
