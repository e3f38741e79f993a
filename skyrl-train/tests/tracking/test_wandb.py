"""W&B backend with no API key and no network: one shared offline run (wandb init costs seconds).

The offline run file (``run-<id>.wandb``) is read back directly: a 7-byte W&B header, then LevelDB-log records
(32 KiB blocks; each chunk has a 7-byte header: crc32 u32, length u16, type u8 = full/first/middle/last) whose
payloads are ``wandb_internal_pb2.Record`` protobufs.
"""

import json
import logging
import os
import signal
import struct
import subprocess
import sys

import pytest
import wandb
from wandb.proto import wandb_internal_pb2

from skyrl_train.tracking import Tracking
from skyrl_train.tracking.backends.wandb_backend import FLUSH_INTERVAL_S, choose_wandb_mode

_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _read_records(path):
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # block trailer too small for a header: zero padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _item_key(item):
    return item.key or "/".join(item.nested_key)


_CREDENTIAL_VARS = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_DIR")


def _keyless_env(home):
    """Variables that leave wandb no key to find: empty HOME, no netrc, wandb's own folders under HOME."""
    return {
        "HOME": str(home),
        "NETRC": str(home / "no-netrc"),
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_DATA_DIR": str(home / "data"),
    }


def _history(records):
    """(step, user metrics) of every history record; wandb's own ``_*`` keys left out."""
    out = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = {_item_key(i): json.loads(i.value_json) for i in record.history.item}
            out.append((items["_step"], {k: v for k, v in items.items() if not k.startswith("_")}))
    return out


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    """Log two steps to W&B with no key anywhere (empty HOME, no netrc, no WANDB_* credentials)."""
    home = tmp_path_factory.mktemp("home")
    out = tmp_path_factory.mktemp("run")
    notices = []
    handler = logging.Handler()
    handler.emit = lambda record: notices.append(record.getMessage())
    backend_logger = logging.getLogger("skyrl_train.tracking.backends.wandb_backend")
    backend_logger.addHandler(handler)
    with pytest.MonkeyPatch.context() as mp:
        for var in _CREDENTIAL_VARS:
            mp.delenv(var, raising=False)
        for var, value in _keyless_env(home).items():
            mp.setenv(var, value)
        config = {"trainer": {"lr": 1e-6}, "env_vars": {"WANDB_API_KEY": "should-not-leak"}}  # pragma: allowlist secret
        with Tracking("proj", "offline-test", "wandb", config=config, output_dir=out) as tracker:
            tracker.log({"reward/avg_raw_reward": 0.25, "env/last_error": "timeout"}, step=1)
            tracker.log({"reward/avg_raw_reward": 0.5}, step=2)
            run_dir = tracker.backends["wandb"].run_dir
        wandb.teardown()
    backend_logger.removeHandler(handler)
    [run_file] = run_dir.glob("run-*.wandb")
    return {"out": out, "run_dir": run_dir, "records": _read_records(run_file), "notices": notices}


def test_the_run_is_offline_under_output_dir_and_says_so(offline_run):
    assert offline_run["run_dir"].parent == offline_run["out"] / "wandb"
    assert offline_run["run_dir"].name.startswith("offline-run-")
    assert any("OFFLINE" in n for n in offline_run["notices"])


def test_the_run_file_holds_the_logged_history(offline_run):
    assert _history(offline_run["records"]) == [
        (1, {"reward/avg_raw_reward": 0.25}),
        (2, {"reward/avg_raw_reward": 0.5}),
    ]


_LOG_TWO_STEPS_THEN_HANG = f"""
import sys, time
from skyrl_train.tracking import Tracking
tracker = Tracking("proj", "killed", "wandb", output_dir=sys.argv[1])
tracker.log({{"reward/avg_raw_reward": 0.25}}, step=1)
tracker.log({{"reward/avg_raw_reward": 0.5}}, step=2)
time.sleep({FLUSH_INTERVAL_S} + 1.0)
print("logged", flush=True)
time.sleep(120)
"""


def test_steps_older_than_the_flush_interval_survive_a_sigkill_of_the_whole_job(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in _CREDENTIAL_VARS} | _keyless_env(tmp_path / "home")
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOG_TWO_STEPS_THEN_HANG, str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline() == "logged\n"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the trainer and wandb's service process alike
        proc.wait(timeout=30)
        proc.stdout.close()
    [run_file] = (tmp_path / "out" / "wandb").glob("offline-run-*/run-*.wandb")
    assert _history(_read_records(run_file)) == [
        (1, {"reward/avg_raw_reward": 0.25}),
        (2, {"reward/avg_raw_reward": 0.5}),
    ]


def test_the_run_config_has_secrets_redacted(offline_run):
    [run] = [r.run for r in offline_run["records"] if r.WhichOneof("record_type") == "run"]
    config = {_item_key(i): json.loads(i.value_json) for i in run.config.update}
    assert config["env_vars"] == {"WANDB_API_KEY": "<redacted>"}
    assert config["trainer"] == {"lr": 1e-6}


def test_no_mode_and_no_key_means_offline(tmp_path):
    assert choose_wandb_mode({"HOME": str(tmp_path)}) == "offline"


def test_a_key_or_an_explicit_mode_is_left_to_wandb(tmp_path):
    assert choose_wandb_mode({"HOME": str(tmp_path), "WANDB_API_KEY": "k"}) is None
    assert choose_wandb_mode({"HOME": str(tmp_path), "WANDB_MODE": "offline"}) is None


def test_a_wandb_login_netrc_entry_counts_as_a_key(tmp_path):
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert choose_wandb_mode({"HOME": str(tmp_path)}) is None


def test_explicit_online_without_a_key_is_an_error_instead_of_a_login_prompt(tmp_path):
    with pytest.raises(RuntimeError, match="WANDB_API_KEY"):
        choose_wandb_mode({"HOME": str(tmp_path), "WANDB_MODE": "online"})
