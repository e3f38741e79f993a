"""S3CheckpointSink against a real S3-compatible server (moto in server mode): upload, verify, rotate, resume."""

import errno
import logging
import shutil
import threading

import pytest

from skyrl_train.checkpoints import LATEST_CKPT_FILE, CheckpointError, CheckpointManager
from skyrl_train.storage import BackgroundUploader, RetryPolicy, S3CheckpointSink, S3Store
from skyrl_train.storage.rank_uploads import RANK_UPLOADS_FILE, RankUploads
from skyrl_train.testing.s3 import s3_client


def write_state(value):
    def write(folder):
        (folder / "policy").mkdir()
        (folder / "policy" / "model.bin").write_text(f"weights-{value}")
        (folder / "trainer_state.txt").write_text(str(value))

    return write


def listing(root):
    return sorted(p.name for p in root.iterdir())


def remote_keys(endpoint, bucket, prefix="proj/"):
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def complete_steps(endpoint, bucket, run="run1"):
    return sorted(
        int(key.split("/")[2].removeprefix("global_step_"))
        for key in remote_keys(endpoint, bucket, f"proj/{run}/")
        if key.endswith("/MANIFEST.json")
    )


class Run:
    """A CheckpointManager with an S3 sink on `bucket`, as the trainer builds it."""

    def __init__(self, root, endpoint, bucket, run="run1", keep_local=1, keep_remote=3, resume=()):
        self.uploader = BackgroundUploader()
        store = S3Store(s3_client(endpoint), bucket, RetryPolicy(attempts=1))
        prefixes = [f"proj/{name}" for name in resume]
        self.sink = S3CheckpointSink(store, f"proj/{run}", self.uploader, keep_local, keep_remote, prefixes)
        self.manager = CheckpointManager(root, sink=self.sink)

    def save(self, *steps):
        for step in steps:
            self.manager.save(step, write_state(step))
            self.flush()

    def flush(self):
        assert self.uploader.flush(timeout=30) == []


def test_each_checkpoint_is_uploaded_with_a_manifest_and_older_local_copies_rotated(
    tmp_path, s3_server, s3_bucket, caplog
):
    caplog.set_level(logging.INFO, logger="skyrl_train")
    run = Run(tmp_path, s3_server, s3_bucket, keep_local=1)
    run.save(1, 2)
    assert remote_keys(s3_server, s3_bucket) == [
        "proj/run1/global_step_1/MANIFEST.json",
        "proj/run1/global_step_1/policy/model.bin",
        "proj/run1/global_step_1/trainer_state.txt",
        "proj/run1/global_step_2/MANIFEST.json",
        "proj/run1/global_step_2/policy/model.bin",
        "proj/run1/global_step_2/trainer_state.txt",
    ]
    assert listing(tmp_path) == ["global_step_2", LATEST_CKPT_FILE]
    assert f"uploaded checkpoint global_step_2 to s3://{s3_bucket}/proj/run1/global_step_2/: 2 files, 10 bytes" in (
        caplog.text
    )


def test_remote_checkpoints_beyond_keep_remote_are_deleted(tmp_path, s3_server, s3_bucket):
    run = Run(tmp_path, s3_server, s3_bucket, keep_remote=2)
    run.save(1, 2, 3, 4)
    run.manager.save(5, write_state(5))  # rotation before this save drops what upload 4 left beyond keep_remote
    run.flush()
    assert complete_steps(s3_server, s3_bucket) == [4, 5]


def test_a_checkpoint_waiting_for_its_upload_is_not_deleted_locally(tmp_path, s3_server, s3_bucket):
    run = Run(tmp_path, s3_server, s3_bucket, keep_local=0)
    run.save(1)
    release = threading.Event()
    run.uploader.submit("something slow ahead in the queue", release.wait)
    run.manager.save(2, write_state(2))
    run.manager.save(3, write_state(3))  # rotates before saving: 2 is still waiting to upload
    assert listing(tmp_path) == ["global_step_2", "global_step_3", LATEST_CKPT_FILE]
    release.set()
    run.flush()
    assert listing(tmp_path) == [LATEST_CKPT_FILE]
    assert complete_steps(s3_server, s3_bucket) == [1, 2, 3]


def test_a_failed_upload_keeps_the_local_copy_and_is_reported(tmp_path, s3_server, s3_bucket, caplog):
    run = Run(tmp_path, s3_server, "no-such-bucket", keep_local=1)
    run.save(1, 2)
    assert listing(tmp_path) == ["global_step_1", "global_step_2", LATEST_CKPT_FILE]
    assert sorted(run.sink.failed) == [1, 2]
    assert (
        f"checkpoint {tmp_path / 'global_step_1'} NOT uploaded to s3://no-such-bucket/proj/run1/global_step_1/: "
        in caplog.text
    )
    assert "NoSuchBucket" in caplog.text and "; local copy kept" in caplog.text
    run.sink.close()
    assert "checkpoint step 2 is NOT in S3 (upload failed: " in caplog.text


def test_resume_fetches_the_step_latest_names_when_its_local_copy_was_removed_after_upload(
    tmp_path, s3_server, s3_bucket
):
    Run(tmp_path, s3_server, s3_bucket, keep_local=0).save(1, 2)
    assert listing(tmp_path) == [LATEST_CKPT_FILE]  # pointer says 2, folder gone: the repair case

    resumed = Run(tmp_path, s3_server, s3_bucket).manager.resolve_resume("latest")
    assert resumed == tmp_path / "global_step_2"
    assert (resumed / "policy" / "model.bin").read_text() == "weights-2"
    assert (tmp_path / LATEST_CKPT_FILE).read_text() == "2\n"


def test_resume_on_an_empty_machine_downloads_the_newest_complete_s3_step(tmp_path, s3_server, s3_bucket, caplog):
    caplog.set_level(logging.INFO, logger="skyrl_train")
    Run(tmp_path / "vm1", s3_server, s3_bucket).save(1, 2)
    s3_client(s3_server).put_object(Bucket=s3_bucket, Key="proj/run1/global_step_3/policy/model.bin", Body=b"half")

    resumed = Run(tmp_path / "vm2", s3_server, s3_bucket).manager.resolve_resume("latest")
    assert resumed == tmp_path / "vm2" / "global_step_2"
    assert (resumed / "trainer_state.txt").read_text() == "2"
    assert f"downloaded checkpoint global_step_2 from s3://{s3_bucket}/proj/run1/global_step_2/" in caplog.text


def test_an_incomplete_s3_step_left_by_a_killed_upload_is_deleted_by_the_next_rotation(tmp_path, s3_server, s3_bucket):
    Run(tmp_path / "vm1", s3_server, s3_bucket).save(1)
    s3_client(s3_server).put_object(Bucket=s3_bucket, Key="proj/run1/global_step_2/policy/model.bin", Body=b"half")
    run = Run(tmp_path / "vm2", s3_server, s3_bucket)
    run.manager.resolve_resume("latest")
    run.save(2)
    assert complete_steps(s3_server, s3_bucket) == [1, 2]
    assert "proj/run1/global_step_2/policy/model.bin" in remote_keys(s3_server, s3_bucket)


def test_a_step_committed_locally_but_missing_in_s3_is_uploaded_again_on_resume(tmp_path, s3_server, s3_bucket):
    CheckpointManager(tmp_path).save(1, write_state(1))  # e.g. the process was killed before its upload
    run = Run(tmp_path, s3_server, s3_bucket)
    assert run.manager.resolve_resume("latest") == tmp_path / "global_step_1"
    run.flush()
    assert complete_steps(s3_server, s3_bucket) == [1]


def test_resume_run_name_starts_from_another_runs_newest_checkpoint(tmp_path, s3_server, s3_bucket):
    Run(tmp_path / "old", s3_server, s3_bucket, run="old").save(1, 2)
    new = Run(tmp_path / "new", s3_server, s3_bucket, run="new", resume=["old"])
    assert new.manager.resolve_resume("latest") == tmp_path / "new" / "global_step_2"
    new.save(3)
    assert complete_steps(s3_server, s3_bucket, "new") == [2, 3]
    assert complete_steps(s3_server, s3_bucket, "old") == [1, 2]


def test_this_runs_own_checkpoints_win_over_resume_run_name(tmp_path, s3_server, s3_bucket):
    Run(tmp_path / "old", s3_server, s3_bucket, run="old").save(5)
    Run(tmp_path / "vm1", s3_server, s3_bucket, run="new").save(1)
    restarted = Run(tmp_path / "vm2", s3_server, s3_bucket, run="new", resume=["old"])
    assert restarted.manager.resolve_resume("latest") == tmp_path / "vm2" / "global_step_1"


def test_a_pointer_to_a_missing_folder_without_s3_copy_falls_back_to_the_newest_local(
    tmp_path, s3_server, s3_bucket, caplog
):
    Run(tmp_path, s3_server, s3_bucket, keep_local=-1).save(1, 2)
    shutil.rmtree(tmp_path / "global_step_2")
    s3_client(s3_server).delete_object(Bucket=s3_bucket, Key="proj/run1/global_step_2/MANIFEST.json")
    resumed = Run(tmp_path, s3_server, s3_bucket).manager.resolve_resume("latest")
    assert resumed == tmp_path / "global_step_1"
    assert (tmp_path / LATEST_CKPT_FILE).read_text() == "1\n"
    assert "falling back to the newest local checkpoint, step 1" in caplog.text


def test_disk_full_while_saving_keeps_the_previous_checkpoint_and_s3_unchanged(tmp_path, s3_server, s3_bucket):
    run = Run(tmp_path, s3_server, s3_bucket)
    run.save(1)
    before = remote_keys(s3_server, s3_bucket)

    def disk_full(folder):
        (folder / "policy").mkdir()
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError, match=r"global_step_2 \(No space left on device\); the previous checkpoint"):
        run.manager.save(2, disk_full)
    run.flush()
    assert listing(tmp_path) == ["global_step_1", LATEST_CKPT_FILE]
    assert remote_keys(s3_server, s3_bucket) == before
    assert run.manager.resolve_resume("latest") == tmp_path / "global_step_1"


def test_a_fresh_start_over_this_runs_s3_checkpoints_is_refused(tmp_path, s3_server, s3_bucket):
    Run(tmp_path / "vm1", s3_server, s3_bucket).save(1)
    with pytest.raises(CheckpointError, match=r"proj/run1/ already holds checkpoints global_step_1 past this run's"):
        Run(tmp_path / "vm2", s3_server, s3_bucket).manager.resolve_resume("none")


def test_a_damaged_s3_checkpoint_stops_the_resume_with_a_clear_error(tmp_path, s3_server, s3_bucket):
    Run(tmp_path / "vm1", s3_server, s3_bucket).save(1)
    s3_client(s3_server).put_object(Bucket=s3_bucket, Key="proj/run1/global_step_1/trainer_state.txt", Body=b"9")
    with pytest.raises(CheckpointError, match=r"global_step_1/ is damaged .* delete its MANIFEST.json"):
        Run(tmp_path / "vm2", s3_server, s3_bucket).manager.resolve_resume("latest")
    assert listing(tmp_path / "vm2") == []


def test_files_uploaded_by_ranks_on_other_nodes_join_the_manifest_and_survive_a_rotation_during_the_save(
    tmp_path, s3_server, s3_bucket
):
    run = Run(tmp_path / "driver", s3_server, s3_bucket, keep_local=1)
    store = run.sink.store

    def write(folder):  # what the fsdp2 worker group does on nodes without a shared ckpt_path
        shards = tmp_path / "node_b" / "scratch"
        shards.mkdir(parents=True)
        (shards / "__1_0.distcp").write_bytes(b"shard of rank 1")
        uploaded = store.upload_files(shards, "proj/run1/global_step_1/policy")
        (folder / "policy").mkdir()
        RankUploads(s3_bucket, "proj/run1/global_step_1/policy", uploaded.files).write(folder / "policy")
        run.sink.rotate(run.manager)  # e.g. after another step's upload: the step's files are not abandoned
        (folder / "trainer_state.txt").write_text("1")

    run.manager.save(1, write)
    run.flush()
    assert remote_keys(s3_server, s3_bucket) == [
        "proj/run1/global_step_1/MANIFEST.json",
        f"proj/run1/global_step_1/policy/{RANK_UPLOADS_FILE}",
        "proj/run1/global_step_1/policy/__1_0.distcp",
        "proj/run1/global_step_1/trainer_state.txt",
    ]

    resumed = Run(tmp_path / "fresh", s3_server, s3_bucket).manager.resolve_resume("latest")
    assert (resumed / "policy" / "__1_0.distcp").read_bytes() == b"shard of rank 1"  # the manifest names it
    listing_back = RankUploads.read(resumed / "policy")
    assert (listing_back.url(), [e.path for e in listing_back.files]) == (
        f"s3://{s3_bucket}/proj/run1/global_step_1/policy/",
        ["__1_0.distcp"],
    )
