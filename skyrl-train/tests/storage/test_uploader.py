"""BackgroundUploader: ordered background jobs, bounded flush, and flush on exit / SIGTERM / SIGINT."""

import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from skyrl_train.storage import BackgroundUploader


def test_jobs_run_in_submission_order_off_the_calling_thread():
    uploader = BackgroundUploader()
    ran = []
    for name in ("a", "b", "c"):
        uploader.submit(name, lambda name=name: ran.append((name, threading.current_thread().name)))
    assert uploader.close(timeout=10) == []
    assert ran == [("a", "s3-upload"), ("b", "s3-upload"), ("c", "s3-upload")]


def test_flush_returns_the_jobs_still_pending_after_the_timeout():
    uploader = BackgroundUploader()
    release = threading.Event()
    uploader.submit("checkpoint /ckpt/global_step_1", release.wait)
    uploader.submit("eval dump /evals/global_step_1", lambda: None)
    assert uploader.flush(timeout=0.2) == ["checkpoint /ckpt/global_step_1", "eval dump /evals/global_step_1"]
    release.set()
    assert uploader.flush(timeout=10) == []
    uploader.close()


def test_close_names_unfinished_jobs_in_an_error(caplog):
    uploader = BackgroundUploader(flush_timeout=0.1)
    release = threading.Event()
    uploader.submit("checkpoint /ckpt/global_step_7", release.wait)
    assert uploader.close() == ["checkpoint /ckpt/global_step_7"]
    assert (
        "1 S3 upload(s) NOT finished (still running after 0.1 s); their local copies are kept: "
        "checkpoint /ckpt/global_step_7" in caplog.text
    )
    release.set()


def test_a_failing_job_is_logged_and_later_jobs_still_run(caplog):
    uploader = BackgroundUploader()
    ran = []

    def boom():
        raise RuntimeError("disk gone")

    uploader.submit("checkpoint 1", boom)
    uploader.submit("checkpoint 2", lambda: ran.append(2))
    assert uploader.close(timeout=10) == []
    assert ran == [2]
    assert "upload job checkpoint 1 failed unexpectedly" in caplog.text


def test_submit_after_close_is_an_error():
    uploader = BackgroundUploader()
    uploader.close()
    with pytest.raises(RuntimeError, match="the uploader is closed: checkpoint 3 was not queued"):
        uploader.submit("checkpoint 3", lambda: None)


CHILD = textwrap.dedent("""
    import logging, pathlib, signal, sys, time
    from skyrl_train.storage import BackgroundUploader

    # A shell without job control starts background commands with SIGINT ignored, and the child inherits that:
    # restore Python's own handler so the test sees what an interactive Ctrl-C does however pytest was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO)
    out, job_seconds, flush_timeout, mode = pathlib.Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    uploader = BackgroundUploader(flush_timeout=flush_timeout)
    uploader.install_exit_handlers()

    def job():
        time.sleep(job_seconds)
        out.write_text("uploaded")

    uploader.submit(f"checkpoint {out}", job)
    print("queued", flush=True)
    if mode == "train":
        try:
            while True:
                time.sleep(0.05)
        finally:
            uploader.close()
    """)


def run_child(tmp_path, job_seconds, flush_timeout, mode, send=None):
    out = tmp_path / "global_step_1"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), str(job_seconds), str(flush_timeout), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "queued"
    if send is not None:
        child.send_signal(send)
    _, stderr = child.communicate(timeout=60)
    return child.returncode, out, stderr


def test_sigterm_waits_for_the_pending_upload_then_exits_143(tmp_path):
    returncode, out, stderr = run_child(tmp_path, job_seconds=1, flush_timeout=30, mode="train", send=signal.SIGTERM)
    assert returncode == 143
    assert out.read_text() == "uploaded"
    assert "SIGTERM received: stopping; pending S3 uploads get up to 30 s" in stderr


def test_sigint_waits_for_the_pending_upload(tmp_path):
    returncode, out, _ = run_child(tmp_path, job_seconds=1, flush_timeout=30, mode="train", send=signal.SIGINT)
    assert returncode == -signal.SIGINT
    assert out.read_text() == "uploaded"


def test_normal_exit_waits_for_the_pending_upload(tmp_path):
    returncode, out, _ = run_child(tmp_path, job_seconds=1, flush_timeout=30, mode="exit")
    assert returncode == 0
    assert out.read_text() == "uploaded"


def test_exit_wait_is_bounded_and_names_what_is_not_uploaded(tmp_path):
    returncode, out, stderr = run_child(tmp_path, job_seconds=30, flush_timeout=0.5, mode="train", send=signal.SIGTERM)
    assert returncode == 143
    assert not out.exists()
    assert (
        f"1 S3 upload(s) NOT finished (still running after 0.5 s); their local copies are kept: checkpoint {out}"
        in (stderr)
    )
