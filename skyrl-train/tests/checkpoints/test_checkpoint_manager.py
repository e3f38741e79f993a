"""CheckpointManager: atomic commits, resume resolution, rotation, failure handling."""

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from skyrl_train.checkpoints import LATEST_CKPT_FILE, CheckpointError, CheckpointManager, ResumeMode


def write_state(value):
    def write(folder):
        (folder / "policy").mkdir()
        (folder / "policy" / "model.bin").write_text(f"weights-{value}")
        (folder / "trainer_state.txt").write_text(str(value))

    return write


def listing(root):
    return sorted(p.name for p in root.iterdir())


def test_save_commits_the_folder_then_the_pointer(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save(5, write_state(5))
    assert path == tmp_path / "global_step_5"
    assert (path / "policy" / "model.bin").read_text() == "weights-5"
    assert (tmp_path / LATEST_CKPT_FILE).read_text() == "5\n"
    assert listing(tmp_path) == ["global_step_5", LATEST_CKPT_FILE]


def test_resume_latest_returns_the_newest_committed_folder(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, write_state(1))
    manager.save(2, write_state(2))
    assert manager.resolve_resume("latest") == tmp_path / "global_step_2"


def test_resume_latest_without_pointer_starts_fresh(tmp_path):
    assert CheckpointManager(tmp_path).resolve_resume("latest") is None


def test_resume_none_ignores_existing_checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, write_state(1))
    assert manager.resolve_resume(None) is None
    assert manager.resolve_resume("none") is None


def test_resume_from_path_requires_a_step_folder(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(3, write_state(3))
    assert manager.resolve_resume("from_path", str(tmp_path / "global_step_3")) == tmp_path / "global_step_3"
    with pytest.raises(CheckpointError, match="needs trainer.resume_path"):
        manager.resolve_resume("from_path")
    with pytest.raises(CheckpointError, match="not an existing global_step_N folder"):
        manager.resolve_resume("from_path", str(tmp_path))


def test_unknown_resume_mode_is_named():
    with pytest.raises(CheckpointError, match="trainer.resume_mode='lastest' is not one of: none, latest, from_path"):
        ResumeMode.parse("lastest")


def test_pointer_to_a_missing_folder_falls_back_to_the_newest_local_checkpoint(tmp_path, caplog):
    manager = CheckpointManager(tmp_path)
    manager.save(2, write_state(2))
    manager.save(4, write_state(4))
    shutil.rmtree(tmp_path / "global_step_4")
    assert manager.resolve_resume("latest") == tmp_path / "global_step_2"
    assert (tmp_path / LATEST_CKPT_FILE).read_text() == "2\n"
    assert "names step 4 but" in caplog.text and "falling back to the newest local checkpoint, step 2" in caplog.text


def test_pointer_to_a_missing_folder_and_no_other_copy_starts_fresh(tmp_path, caplog):
    manager = CheckpointManager(tmp_path)
    manager.save(4, write_state(4))
    shutil.rmtree(tmp_path / "global_step_4")
    assert manager.resolve_resume("latest") is None
    assert listing(tmp_path) == []
    assert "no copy of checkpoint step 4 exists anywhere: starting fresh" in caplog.text


def test_failed_write_keeps_the_previous_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, write_state(1))

    def disk_full(folder):
        (folder / "policy").mkdir()
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(
        CheckpointError, match=r"could not write checkpoint .*global_step_2 \(No space left on device\)"
    ):
        manager.save(2, disk_full)
    assert listing(tmp_path) == ["global_step_1", LATEST_CKPT_FILE]
    assert manager.resolve_resume("latest") == tmp_path / "global_step_1"


def test_a_library_error_on_a_full_disk_is_a_checkpoint_error_and_keeps_the_previous_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, write_state(1))

    def tokenizer_save_on_a_full_disk(folder):  # the tokenizers library raises a plain Exception, not an OSError
        raise Exception("No space left on device (os error 28)")

    with pytest.raises(
        CheckpointError,
        match=r"could not write checkpoint .*global_step_2 \(No space left on device \(os error 28\)\); "
        r"the previous checkpoint \(step 1\) is intact",
    ):
        manager.save(2, tokenizer_save_on_a_full_disk)
    assert listing(tmp_path) == ["global_step_1", LATEST_CKPT_FILE]


def test_rotation_keeps_the_newest_committed_checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path, max_ckpts_to_keep=2)
    for step in (1, 2, 3, 4):
        manager.save(step, write_state(step))
    assert listing(tmp_path) == ["global_step_3", "global_step_4", LATEST_CKPT_FILE]


def test_rotation_never_counts_or_deletes_uncommitted_folders(tmp_path):
    manager = CheckpointManager(tmp_path, max_ckpts_to_keep=1, ckpt_interval=10)
    manager.save(10, write_state(10))
    (tmp_path / "global_step_90").mkdir()  # another run's folder, not committed here
    manager.save(20, write_state(20))
    assert listing(tmp_path) == ["global_step_20", "global_step_90", LATEST_CKPT_FILE]


def test_keep_zero_is_rejected(tmp_path):
    with pytest.raises(CheckpointError, match="max_ckpts_to_keep=0"):
        CheckpointManager(tmp_path, max_ckpts_to_keep=0)


def test_resaving_a_step_replaces_it(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(7, write_state("old"))
    manager.save(7, write_state("new"))
    assert (tmp_path / "global_step_7" / "trainer_state.txt").read_text() == "new"
    assert listing(tmp_path) == ["global_step_7", LATEST_CKPT_FILE]


def test_folder_saved_but_not_committed_is_dropped_on_resume(tmp_path):
    manager = CheckpointManager(tmp_path, ckpt_interval=5)
    manager.save(5, write_state(5))
    uncommitted = tmp_path / "global_step_10"  # killed after the folder rename, before the pointer write
    uncommitted.mkdir()
    write_state(10)(uncommitted)
    assert manager.resolve_resume("latest") == tmp_path / "global_step_5"
    assert listing(tmp_path) == ["global_step_5", LATEST_CKPT_FILE]


def test_folders_far_ahead_of_the_pointer_belong_to_another_run(tmp_path):
    manager = CheckpointManager(tmp_path, ckpt_interval=5)
    manager.save(5, write_state(5))
    (tmp_path / "global_step_30").mkdir()
    with pytest.raises(CheckpointError, match="inconsistent checkpoint folder .*global_step_30 .*another run"):
        manager.resolve_resume("latest")
    assert (tmp_path / "global_step_30").is_dir()


SAVER = textwrap.dedent("""
    import sys, time
    from skyrl_train.checkpoints import CheckpointManager

    root, step = sys.argv[1], int(sys.argv[2])

    def slow_write(folder):
        (folder / "policy").mkdir()
        with open(folder / "policy" / "model.bin", "w") as f:
            f.write("partial")
            f.flush()
            print("writing", flush=True)
            time.sleep(60)

    CheckpointManager(root).save(step, slow_write)
    """)


def test_sigkill_during_a_save_leaves_the_previous_checkpoint_as_latest(tmp_path):
    CheckpointManager(tmp_path).save(1, write_state(1))
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path), "2"], stdout=subprocess.PIPE, text=True)
    assert saver.stdout.readline().strip() == "writing"
    os.kill(saver.pid, signal.SIGKILL)
    saver.wait(timeout=10)

    assert f".global_step_2.partial-{saver.pid}" in listing(tmp_path)
    manager = CheckpointManager(tmp_path)
    assert manager.resolve_resume("latest") == tmp_path / "global_step_1"

    manager.save(2, write_state(2))
    assert listing(tmp_path) == ["global_step_1", "global_step_2", LATEST_CKPT_FILE]


def test_staging_folder_of_a_live_process_is_left_alone(tmp_path):
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path), "3"], stdout=subprocess.PIPE, text=True)
    try:
        assert saver.stdout.readline().strip() == "writing"
        CheckpointManager(tmp_path).save(1, write_state(1))
        assert f".global_step_3.partial-{saver.pid}" in listing(tmp_path)
    finally:
        saver.kill()
        saver.wait(timeout=10)
