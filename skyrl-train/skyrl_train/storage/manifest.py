"""`MANIFEST.json`: the list of files of one uploaded folder, with sizes and sha256 checksums.

The manifest is uploaded LAST, after every file is in the bucket with its expected size, so a folder in S3
is complete exactly when its manifest exists. A download checks every file against it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MANIFEST_FILE = "MANIFEST.json"
MANIFEST_FORMAT = 1
_CHUNK = 8 * 1024 * 1024


class ManifestError(ValueError):
    """A manifest that cannot be parsed, or a folder that cannot be listed in one; the message names the location."""


@dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative to the folder, '/'-separated
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[ManifestEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    def to_json(self) -> str:
        files = [{"path": e.path, "size": e.size, "sha256": e.sha256} for e in self.files]
        return json.dumps({"format": MANIFEST_FORMAT, "total_bytes": self.total_bytes, "files": files}, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> Manifest:
        """Parse a manifest; `source` (its S3 URL or path) is named in the error if it is malformed."""
        try:
            data = json.loads(text)
            if data.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"unsupported format {data.get('format')!r}")
            entries = tuple(ManifestEntry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in data["files"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(f"{source} is not a valid manifest: {exc}") from exc
        for entry in entries:
            if entry.path.startswith("/") or ".." in entry.path.split("/"):
                raise ManifestError(f"{source} lists a path outside its folder: {entry.path!r}")
        return cls(entries)


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def folder_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(relative '/'-path, path) of every regular file below `folder`, sorted; a file named like the manifest
    itself is an error, as it would be overwritten by it. A symbolic link that resolves outside `folder` is an error
    naming the link (an upload never copies what lies outside its folder: credentials, another run's files); a link
    inside it is uploaded as the file it points to (a linked folder is not entered)."""
    root = folder.resolve()
    entries = sorted(folder.rglob("*"))
    for path in entries:
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            raise ManifestError(
                f"{path} is a symbolic link to {path.resolve()}, outside the folder being uploaded ({folder}): refused"
            )
    for path in (p for p in entries if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if relative == MANIFEST_FILE:
            raise ManifestError(f"{path} clashes with the upload manifest's name {MANIFEST_FILE}")
        yield relative, path
