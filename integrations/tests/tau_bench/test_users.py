"""User simulators: the scripted user, the LLM user's strategies against the project's OpenAI-compatible server
(`python -m skyrl_train.serve`, a subprocess) and endpoint failures as infrastructure failures."""

from __future__ import annotations

import http.server
import importlib.util
import json
import socket
import threading
from pathlib import Path

import pytest
from openai import OpenAI

from skyrl_gym import InfraFailureReason
from skyrl_integrations.tau_bench.users import (
    GREETING,
    STOP_TOKENS,
    LLMUser,
    LLMUserConfig,
    ScriptedUser,
    UserSimulatorError,
    stop_token,
)
from skyrl_train.models import DEFAULT_MODEL
from skyrl_train.testing import tiny_model  # noqa: F401

pytestmark = pytest.mark.timeout(900)


def _serve_openai():
    """The datasets tests' `serve_openai` helper (one definition of how tests start `skyrl_train.serve`)."""
    path = Path(__file__).parents[1] / "datasets" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_datasets_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.serve_openai


@pytest.fixture(scope="module")
def tiny_url(tiny_model, tmp_path_factory):  # noqa: F811
    with _serve_openai()(tiny_model, tmp_path_factory.mktemp("tiny-serve")) as url:
        yield url


@pytest.fixture(scope="module")
def default_url(tmp_path_factory):
    with _serve_openai()(DEFAULT_MODEL, tmp_path_factory.mktemp("default-serve")) as url:
        yield url


class CountingClient:
    """A real `OpenAI` client that counts its chat-completion calls."""

    def __init__(self, base_url: str):
        self.calls = 0
        self._client = OpenAI(base_url=base_url, api_key="EMPTY")  # pragma: allowlist secret
        self.chat = self
        self.completions = self

    def create(self, **kwargs):
        self.calls += 1
        return self._client.chat.completions.create(**kwargs)


def test_stop_tokens_are_found_by_substring():
    assert [stop_token(t) for t in ["Thanks! ###STOP###", "###TRANSFER###", "ok ###OUT-OF-SCOPE###", "stop"]] == [
        *STOP_TOKENS,
        None,
    ]


def test_the_scripted_user_is_deterministic():
    user = ScriptedUser("I need help.", ["Yes."])
    assert [user.opening().text, user.reply("a").text, user.reply("b").text, user.reply("c").text] == [
        "I need help.",
        "Yes.",
        "###STOP###",
        "###STOP###",
    ]


def test_the_llm_user_config_never_shows_its_api_key():
    config = LLMUserConfig(base_url="http://127.0.0.1:1/v1", model="m", api_key="sk-planted-0123")
    assert repr(config) == (
        "LLMUserConfig(base_url='http://127.0.0.1:1/v1', model='m', strategy='llm', temperature=0.0, max_tokens=256, "
        "timeout_s=60.0, prompt_price_per_1k_tokens=0.0, completion_price_per_1k_tokens=0.0)"
    )


@pytest.mark.parametrize(("strategy", "calls"), [("llm", (1, 1)), ("react", (1, 1)), ("verify", (2, 6))])
def test_llm_user_strategies_talk_to_a_real_endpoint(tiny_url, tiny_model, strategy, calls):  # noqa: F811
    config = LLMUserConfig(
        base_url=tiny_url,
        model=tiny_model,
        strategy=strategy,
        max_tokens=8,
        prompt_price_per_1k_tokens=2.0,
        completion_price_per_1k_tokens=4.0,
    )
    client = CountingClient(tiny_url)
    user = LLMUser(config, "You want to return order #W1.", client=client)
    turn = user.opening()
    assert calls[0] <= client.calls <= calls[1]
    assert [m["role"] for m in user.history] == ["user", "assistant"]  # roles flipped: the agent is the "user"
    assert user.history[0]["content"] == GREETING and user.history[1]["content"] == turn.text
    assert user.system.endswith("<scenario>\nYou want to return order #W1.\n</scenario>")
    assert turn.prompt_tokens > 0 and 0 < turn.completion_tokens <= 8 * client.calls and turn.latency_s > 0
    assert turn.cost_usd == pytest.approx((turn.prompt_tokens * 2.0 + turn.completion_tokens * 4.0) / 1000)


def test_reflection_rewrites_at_most_twice(tiny_url, tiny_model):  # noqa: F811
    client = CountingClient(tiny_url)
    user = LLMUser(LLMUserConfig(base_url=tiny_url, model=tiny_model, strategy="reflection", max_tokens=4), "x", client)
    user.opening()
    # 1 sample + 1 verdict; then per rejected attempt 1 rewrite + 1 verdict (2 attempts at most)
    assert client.calls in (2, 4, 6)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_fails_init_as_a_user_simulator_error(make_env):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    env = make_env("retail", "0", {"user": {"kind": "llm", "base_url": url, "model": "m", "timeout_s": 5}})
    with pytest.raises(UserSimulatorError, match=f"user simulator endpoint {url}"):
        env.init([])


class _OnceThenFailing(http.server.BaseHTTPRequestHandler):
    """Answers the first chat completion, then 500 for every later request."""

    served = 0

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).served += 1
        if type(self).served > 1:
            self.send_error(500, "engine crashed")
            return
        body = json.dumps(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Hi, I need help."},
                        "finish_reason": "stop",
                    }
                ],  # noqa: E501
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_endpoint_failure_mid_episode_ends_it_as_an_infra_failure(make_env):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OnceThenFailing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        env = make_env("retail", "0", {"user": {"kind": "llm", "base_url": url, "model": "m"}})
        messages, _ = env.init([])
        assert messages[-1] == {"role": "user", "content": "Hi, I need help."}
        out = env.step("How can I help?")
    finally:
        server.shutdown()
    assert (out["done"], out["reward"], out["observations"]) == (True, 0.0, [])
    assert out["infra_failure"].reason == InfraFailureReason.USER_SIMULATOR_FAILED
    assert out["infra_failure"].error.startswith("UserSimulatorError: ")
    metrics = env.get_metrics()
    assert (metrics["stop_user_simulator_failed"], metrics["user_turns"], metrics["user_prompt_tokens"]) == (1, 1, 10)


@pytest.mark.slow
def test_an_episode_with_the_llm_user_and_the_default_model_runs_end_to_end(make_env, default_url):
    user = {"kind": "llm", "base_url": default_url, "model": DEFAULT_MODEL, "max_tokens": 48, "temperature": 0.0}
    env = make_env("retail", "0", {"user": user, "max_turns": 3})  # a 135M user rarely says ###STOP###
    messages, _ = env.init([])
    assert messages[-1]["role"] == "user" and messages[-1]["content"].strip()
    out = {"done": False}
    for action in ["Could you give me your name and zip code?", "Thank you.", "Is there anything else?"]:
        out = env.step(action)
        if out["done"]:
            break
    metrics = env.get_metrics()
    assert out["done"] and out["metadata"]["done_reason"] in ("user_stop", "max_turns")
    assert metrics["user_turns"] >= 2 and metrics["user_prompt_tokens"] > 0 and metrics["user_latency_s"] > 0
    assert metrics["stop_user_simulator_failed"] == 0
