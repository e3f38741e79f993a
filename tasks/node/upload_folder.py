"""Upload a local folder to `s3://bucket/prefix/` with a checksum manifest written last (skyrl_train's S3Store).

    .venv/bin/python tasks/node/upload_folder.py REPORT_DIR s3://skyrl-trajectories/analysis/my_run

The endpoint comes from AWS_ENDPOINT_URL (R2, MinIO, a local test server) and credentials from boto3's chain.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from skyrl_train.storage import ManifestError, S3StorageError, S3Store, make_s3_client


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("destination", help="s3://bucket/prefix")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    bucket, _, prefix = args.destination.removeprefix("s3://").partition("/")
    if not args.destination.startswith("s3://") or not bucket or not prefix.strip("/"):
        parser.error(f"{args.destination}: expected s3://<bucket>/<prefix>")
    store = S3Store(make_s3_client(os.environ.get("AWS_ENDPOINT_URL") or None), bucket)
    try:
        report = store.upload_folder(args.folder, prefix)
    except (S3StorageError, ManifestError) as e:
        print(f"upload_folder: error: {e}", file=sys.stderr)
        return 1
    print(f"uploaded {report.files} files ({report.bytes} bytes) to {report.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
