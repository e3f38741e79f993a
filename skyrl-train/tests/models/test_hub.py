"""`trainer.push_to_hub` is refused, naming the repo and the reason, when the Hub cannot take a push: huggingface_hub's
offline mode, and a Hub endpoint nothing answers on. Each case runs in a fresh process, because huggingface_hub reads
its environment when it is imported."""

import os
import socket
import subprocess
import sys

CHECK = "from skyrl_train.models.hub import check_hub_access; check_hub_access('skyrl-tests/tiny')"


def _check(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return subprocess.run(
        [sys.executable, "-c", CHECK], env=base | env, capture_output=True, text=True, timeout=120, check=False
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_offline_mode_is_refused_with_the_reason():
    done = _check(HF_HUB_OFFLINE="1", HF_TOKEN="hf_test")  # pragma: allowlist secret
    assert done.returncode == 1
    assert (
        "HubPushError: trainer.push_to_hub=true cannot push to 'skyrl-tests/tiny' on https://huggingface.co: "
        "huggingface_hub is in offline mode (HF_HUB_OFFLINE is set)"
    ) in done.stderr


def test_an_unreachable_hub_is_refused_with_the_connection_error():
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    done = _check(HF_ENDPOINT=endpoint, HF_TOKEN="hf_test")  # pragma: allowlist secret
    assert done.returncode == 1
    assert f"HubPushError: trainer.push_to_hub=true cannot push to 'skyrl-tests/tiny' on {endpoint}: " in done.stderr
    assert "ConnectError" in done.stderr and "Connection refused" in done.stderr
