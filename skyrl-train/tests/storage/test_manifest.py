"""Manifest parsing and building."""

import pytest

from skyrl_train.storage import MANIFEST_FILE, Manifest, ManifestEntry, ManifestError
from skyrl_train.storage.manifest import folder_files


def test_a_manifest_round_trips_through_json():
    manifest = Manifest((ManifestEntry("policy/model.bin", 3, "ab" * 32), ManifestEntry("data.pt", 1, "cd" * 32)))
    assert Manifest.from_json(manifest.to_json(), "s3://b/k") == manifest
    assert manifest.total_bytes == 4


def test_malformed_manifest_names_its_location():
    with pytest.raises(ManifestError, match=r"s3://b/run/global_step_1/MANIFEST.json is not a valid manifest"):
        Manifest.from_json('{"format": 1, "files": [{"path": "x"}]}', "s3://b/run/global_step_1/MANIFEST.json")


def test_paths_outside_the_folder_are_rejected():
    text = '{"format": 1, "files": [{"path": "../../etc/passwd", "size": 1, "sha256": "00"}]}'
    with pytest.raises(ManifestError, match=r"lists a path outside its folder: '../../etc/passwd'"):
        Manifest.from_json(text, "s3://b/k")


def test_a_file_named_like_the_manifest_cannot_be_uploaded(tmp_path):
    (tmp_path / MANIFEST_FILE).write_text("{}")
    with pytest.raises(ManifestError, match="clashes with the upload manifest's name MANIFEST.json"):
        list(folder_files(tmp_path))
