"""Attacks on a real `python -m skyrl_train.serve` process (the `hf` backend with the tiny model, started as the CLI
starts it), once with the defaults (no control routes, no API key) and once guarded (`--enable-control` with a
control token, `--api-key`, `--lora-root`): none of them runs code, changes the server or stops it from answering."""

from __future__ import annotations

import base64
import copy
import os
import pickle
import shlex
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from skyrl_train.serve.control import CONTROL_PATHS
from skyrl_train.testing import TEST_CONTROL_TOKEN, tiny_model  # noqa: F401
from skyrl_train.testing.serve_process import start_server

NAME = "tiny"
API_KEY = "sk-security-test"  # pragma: allowlist secret
API = {"Authorization": f"Bearer {API_KEY}"}
CONTROL = {"Authorization": f"Bearer {TEST_CONTROL_TOKEN}"}
COMPLETION = {"model": NAME, "prompt": [1, 2, 3], "max_tokens": 2}
HUNDRED_MB = 100 * 2**20


class TouchMarker:
    """Unpickling it runs `touch <path>`: the payload of a code-execution attack."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(self.path)}",)


def payload(marker: Path) -> str:
    """A pickle that creates `marker` when loaded, as base64 text (the form `ipc_handles` used to be unpickled from)."""
    return base64.b64encode(pickle.dumps(TouchMarker(marker))).decode("ascii")


# One body of every shape each POST route takes; the attack puts the payload in each of their fields in turn.
BODIES: dict[str, list[dict[str, Any]]] = {
    "/v1/completions": [{**COMPLETION, "max_tokens": 1, "stop": ["x"], "user": "u", "metadata": {"k": "v"}}],
    "/v1/chat/completions": [
        {
            "model": NAME,
            "max_tokens": 1,
            "messages": [
                {"role": "system", "content": "s", "name": "n"},
                {"role": "user", "content": [{"type": "text", "text": "t"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
                {"role": "tool", "content": "r", "tool_call_id": "c"},
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        }
    ],
    "/update_weights": [
        {"type": "version", "weight_version": 1},
        {"type": "broadcast", "names": ["w"], "dtypes": ["float32"], "shapes": [[1]], "weight_version": 1},
        {"type": "lora", "lora_path": "/tmp", "weight_version": 1},
        {
            "type": "cuda_ipc",
            "names": ["w"],
            "dtypes": ["float32"],
            "shapes": [[1]],
            "offsets": [0],
            "ipc_handles": {"GPU-0": "x"},
            "weight_version": 1,
        },
    ],
    # world_size 1 is refused, so no variant joins a weight-update group
    "/init_weight_update_communicator": [{"master_addr": "127.0.0.1", "master_port": 1, "world_size": 1}],
    "/wake_up": [{"tags": ["weights"]}],
    "/reset_prefix_cache": [{"x": "y"}],
    "/destroy_weights_update_group": [{"x": "y"}],
    "/sleep": [{"x": "y"}],  # last but /wake_up below: generation waits while asleep
}
ATTACK_ORDER = [*BODIES, "/wake_up"]


def with_payload(body: Any, text: str) -> Iterator[Any]:
    """`body` with each of its leaves (and each container) replaced by `text` in turn; dict keys too."""
    yield text
    if isinstance(body, dict):
        for key, value in body.items():
            for variant in with_payload(value, text):
                yield {**body, key: variant}
            yield {**{k: v for k, v in body.items() if k != key}, text: value}
    elif isinstance(body, list):
        for i, value in enumerate(body):
            for variant in with_payload(value, text):
                yield [*body[:i], variant, *body[i + 1 :]]


@pytest.fixture(scope="module")
def open_server(tiny_model):  # noqa: F811
    """The defaults: no control routes, no API key."""
    process, url = start_server(tiny_model, NAME, enable_control=False)
    yield url
    process.kill()
    process.wait(30)


@pytest.fixture(scope="module")
def guarded_server(tiny_model, tmp_path_factory):  # noqa: F811
    """Control routes behind `TEST_CONTROL_TOKEN`, OpenAI routes behind `API_KEY`, LoRA folders under a root."""
    root = tmp_path_factory.mktemp("lora_root")
    process, url = start_server(tiny_model, NAME, lora_root=root, env={"SKYRL_API_KEY": API_KEY})
    yield url
    process.kill()
    process.wait(30)


def send_every_payload(url: str, text: str) -> list[int]:
    """POST the payload in every field of every route's bodies, and as a raw body, with both credentials; the
    statuses."""
    statuses = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for route in ATTACK_ORDER:
            headers = CONTROL if route in CONTROL_PATHS else API
            for body in BODIES[route]:
                for variant in with_payload(copy.deepcopy(body), text):
                    statuses.append(client.post(route, json=variant, headers=headers).status_code)
            raw = base64.b64decode(text)
            for content_type in ("application/json", "application/octet-stream"):
                response = client.post(route, content=raw, headers={**headers, "Content-Type": content_type})
                statuses.append(response.status_code)
        assert client.get("/health").status_code == 200
    return statuses


@pytest.mark.parametrize("server", ["open_server", "guarded_server"])
def test_a_pickle_in_any_field_of_any_route_runs_nothing(server, request, tmp_path):
    url = request.getfixturevalue(server)
    marker = tmp_path / "pwned"
    statuses = send_every_payload(url, payload(marker))
    time.sleep(1.0)
    assert not marker.exists()
    assert len(statuses) > 100 and 500 not in statuses
    # The payload is live: loading it the way `ipc_handles` used to be loaded creates its marker.
    live = tmp_path / "live"
    pickle.loads(base64.b64decode(payload(live)))
    assert live.exists()


def test_control_routes_answer_404_when_off_even_with_a_token(open_server):
    for path in CONTROL_PATHS:
        response = httpx.post(open_server + path, json={}, headers=CONTROL)
        assert response.status_code == 404, path


@pytest.mark.parametrize("path", CONTROL_PATHS)
def test_control_routes_refuse_a_missing_or_wrong_token(guarded_server, path):
    assert httpx.post(guarded_server + path, json={}).status_code == 401
    assert httpx.post(guarded_server + path, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert httpx.post(guarded_server + path, json={}, headers=API).status_code == 403


def test_control_routes_work_with_the_token(guarded_server):
    body = {"type": "version", "weight_version": 7}
    response = httpx.post(guarded_server + "/update_weights", json=body, headers=CONTROL)
    assert response.json() == {"status": "ok", "weight_version": 7}
    assert httpx.post(guarded_server + "/reset_prefix_cache", json={}, headers=CONTROL).status_code == 200
    assert httpx.get(guarded_server + "/health").json() == {"status": "ok", "weight_version": 7}


@pytest.mark.parametrize("server", ["open_server", "guarded_server"])
def test_a_foreign_host_or_origin_is_refused(server, request):
    url = request.getfixturevalue(server)
    port = urlsplit(url).port
    rebinding = {"Host": f"attacker.example:{port}", **API}
    assert httpx.post(url + "/v1/completions", json=COMPLETION, headers=rebinding).status_code == 421
    assert httpx.get(url + "/health", headers={"Host": "attacker.example"}).status_code == 421
    cross_site = {"Origin": "http://attacker.example", **API}
    assert httpx.post(url + "/v1/completions", json=COMPLETION, headers=cross_site).status_code == 403
    same_origin = {"Origin": f"http://127.0.0.1:{port}", **API}
    assert httpx.post(url + "/v1/completions", json=COMPLETION, headers=same_origin).status_code == 200


def test_a_100_mb_body_is_refused_quickly_and_the_server_still_answers(guarded_server):
    host, port = urlsplit(guarded_server).hostname, urlsplit(guarded_server).port
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {HUNDRED_MB}\r\n\r\n"
    )
    start = time.monotonic()
    with socket.create_connection((host, port), timeout=10) as sock:  # the headers only: refused before the body
        sock.sendall(head.encode())
        answer = sock.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 413") and time.monotonic() - start < 5
    start = time.monotonic()
    try:  # the whole body: 413, or the connection closed under the upload once the server answered
        headers = {**API, "Content-Type": "application/json"}
        status = httpx.post(guarded_server + "/v1/completions", content=b" " * HUNDRED_MB, headers=headers).status_code
    except httpx.TransportError:
        status = None
    assert status in (413, None) and time.monotonic() - start < 30
    assert httpx.post(guarded_server + "/v1/completions", json=COMPLETION, headers=API).status_code == 200


def test_a_million_choices_are_refused_quickly_and_the_server_still_answers(guarded_server):
    start = time.monotonic()
    response = httpx.post(guarded_server + "/v1/completions", json={**COMPLETION, "n": 10**6}, headers=API)
    assert (response.status_code, response.json()["error"]["param"]) == (400, "n")
    assert time.monotonic() - start < 5
    assert httpx.post(guarded_server + "/v1/completions", json=COMPLETION, headers=API).status_code == 200


def test_openai_routes_need_the_api_key_when_one_is_set(guarded_server):
    for key in (None, "wrong"):
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        response = httpx.post(guarded_server + "/v1/completions", json=COMPLETION, headers=headers)
        assert response.status_code == 401
    sdk = openai.OpenAI(base_url=guarded_server + "/v1", api_key=API_KEY, max_retries=0)
    assert sdk.completions.create(**COMPLETION).usage.completion_tokens == 2


def test_a_local_client_without_a_key_works_with_the_defaults(open_server):
    sdk = openai.OpenAI(base_url=open_server + "/v1", api_key="unused", max_retries=0)  # pragma: allowlist secret
    assert sdk.completions.create(**COMPLETION).usage.completion_tokens == 2
