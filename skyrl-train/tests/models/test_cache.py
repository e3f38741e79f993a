"""build_once: a cache folder appears complete or not at all, and is built once per manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_train.models.cache import MARKER_NAME, build_once, cache_root, is_complete

MANIFEST = {"kind": "test", "version": 1}


def write_payload(text: str):
    def build(folder: Path) -> None:
        (folder / "payload.txt").write_text(text)

    return build


def test_cache_root_follows_skyrl_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path / "models"
    monkeypatch.delenv("SKYRL_CACHE_DIR")
    assert cache_root() == Path.home() / ".cache" / "skyrl" / "models"


def test_builds_once_then_reuses(tmp_path):
    target = tmp_path / "thing"
    assert build_once(target, write_payload("first"), MANIFEST) is True
    assert build_once(target, write_payload("second"), MANIFEST) is False
    assert (target / "payload.txt").read_text() == "first"
    assert is_complete(target, MANIFEST)


def test_failed_build_leaves_nothing_behind(tmp_path):
    def half_then_crash(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_once(tmp_path / "thing", half_then_crash, MANIFEST)
    assert list(tmp_path.iterdir()) == [tmp_path / ".thing.lock"]


def test_leftover_of_a_killed_build_is_removed_and_never_used(tmp_path):
    leftover = tmp_path / ".thing.tmp-dead"
    leftover.mkdir()
    (leftover / "payload.txt").write_text("half")
    assert build_once(tmp_path / "thing", write_payload("whole"), MANIFEST) is True
    assert not leftover.exists()
    assert (tmp_path / "thing" / "payload.txt").read_text() == "whole"


def test_changed_manifest_rebuilds(tmp_path):
    target = tmp_path / "thing"
    build_once(target, write_payload("v1"), {"version": 1})
    assert build_once(target, write_payload("v2"), {"version": 2}) is True
    assert (target / "payload.txt").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".thing.lock", "thing"]


def test_folder_not_made_here_is_left_alone(tmp_path):
    target = tmp_path / "thing"
    target.mkdir()
    (target / "mine.txt").write_text("user data")
    with pytest.raises(FileExistsError, match=MARKER_NAME):
        build_once(target, write_payload("x"), MANIFEST)
    assert (target / "mine.txt").read_text() == "user data"
