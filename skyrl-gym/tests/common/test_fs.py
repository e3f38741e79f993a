"""`atomic_write_text`: the file holds the old or the new text, never a part, and no temporary file is left."""

import pytest

from skyrl_gym.common.fs import atomic_write_text


def test_writes_the_text_and_leaves_only_the_file(tmp_path):
    target = tmp_path / "pointer.txt"
    atomic_write_text(target, "12\n")
    assert target.read_text() == "12\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pointer.txt"]


def test_replaces_an_existing_file(tmp_path):
    target = tmp_path / "pointer.txt"
    target.write_text("old\n")
    atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n"


def test_a_failed_write_keeps_the_old_text_and_removes_the_temporary_file(tmp_path):
    target = tmp_path / "pointer.txt"
    target.write_text("old\n")
    with pytest.raises(TypeError):
        atomic_write_text(target, b"not text")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pointer.txt"]
