"""Fault soak: the main job's recipe on the tiny model while a driver injects faults at random (seeded), then a table
of what the run survived and lost.

    .venv/bin/python benchmarks/fault_soak.py --steps 30 --faults 200          # the full soak (root: tmpfs for disk)
    .venv/bin/python benchmarks/fault_soak.py --steps 4 --faults 12 --eval-interval 2   # the slow test's version

The run: `examples/mcp/grpo.yaml` (GRPO with LoRA over the bundled market-data MCP server) on the tiny random model
(`skyrl_train.testing.tiny_model_path()`), 4 prompts x 2 samples a step, a checkpoint every step, S3 on (a local moto
server), rollouts from `python -m skyrl_train.serve` processes (`generator.run_engines_locally=false`). Every part
is a real process; faults reach them from outside:

- ``mcp_kill`` / ``mcp_hang``: the MCP server is started through a stdio relay (``fault_soak.py mcp-relay``) that
  records the real server's pid; the driver sends it SIGKILL, or SIGSTOP and SIGCONT after ``--hang-s`` seconds
  (longer than the recipe's call timeout, set to ``MCP_CALL_TIMEOUT_S`` here).
- ``tool_output_1mb``: the relay replaces the next tool result with 1 MiB of text.
- ``malformed_call``: each engine sits behind an HTTP proxy; an armed proxy replaces the next sampled completion with
  a malformed tool call (token ids of that text, no logprobs). The random tiny model never writes a tool call itself,
  so the proxy also replaces ``CALL_SHARE`` of the completions with a well-formed call: otherwise no tool would run.
- ``engine_kill``: SIGKILL of a serve process (while the trainer keeps at least one engine); dead servers are started
  again before the next trainer launch, which syncs its weights to them.
- ``s3_error`` / ``s3_kill_mid_upload``: S3 traffic goes through a proxy in front of moto that answers a burst of
  1-4 requests with ``503 SlowDown``, or SIGKILLs the trainer while it uploads a checkpoint object.
- ``trainer_kill``: SIGKILL of the trainer at a random time; the same command runs again (``resume_mode=latest``).
- ``disk_full``: the checkpoint folder is a tmpfs of ``--ckpt-fs-mb`` MiB (mounting needs root; without it this kind
  is skipped and the table says so) and the run keeps every local checkpoint, so only the driver frees space; it fills
  the tmpfs up to 64 KiB, the next checkpoint fails (the fault counts then), the driver frees the space and runs the
  command again.

Faults come in a burst as each step starts, once a launch has synced its weights (start-up is over), sized to spend
the budget by `SPEND_BY` of the steps and spread over the step time measured so far; none come after the last commit.
An armed fault (malformed call, 1 MiB output, S3 burst) counts as injected when it reaches the run. Each injected fault is logged to ``<workdir>/faults.jsonl``. The run sets
``trainer.max_infra_failure_ratio=1.0``: a soak injects far more faults per step than a run meets, and the guard would
stop it on purpose.

A non-crash fault counts as survived unless the trainer process it hit exits with an error of its own (not one the
driver caused) before committing another checkpoint; a kill or full disk counts as survived once a later launch
resumes from the step committed when it hit and commits again (or finishes). At the end: S3 holds every step ever
committed; every complete S3 checkpoint downloads (manifest sizes and sha256) and every local committed one is read,
and their files load (safetensors, torch.load) with the step their trainer state names; the committed step never went
back and every launch resumed at the step committed when it started; every eval dump's JSONL lines parse, locally and
in S3, with `aggregated_results.jsonl` in every dump S3 marks done and every local dump of a logged eval. Prints the
table; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SERVED_NAME = "soak-policy"
MCP_CALL_TIMEOUT_S = 3.0
CALL_SHARE = 0.5
"""Share of completions the engine proxy turns into a well-formed tool call (the tiny model never writes one)."""
ONE_MIB = 1 << 20
DISK_MARGIN_BYTES = 64 << 10
SPEND_BY = 0.8
"""The driver sizes its bursts to spend the budget by this share of the steps."""
FIRST_STEP_S = 5.0
"""Step time assumed until two commits of one launch are seen."""
TRAINING_MARK = "engines now generate with weight version"
"""A trainer log line written once start-up is over (the first weight sync); faults start after it."""
SHARES = {
    "malformed_call": 45,
    "s3_error": 45,
    "tool_output_1mb": 30,
    "mcp_kill": 30,
    "mcp_hang": 15,
    "engine_kill": 15,
    "trainer_kill": 10,
    "s3_kill_mid_upload": 5,
    "disk_full": 5,
}
"""Faults of each kind per 200."""
KINDS = tuple(SHARES)
CRASH_KINDS = ("trainer_kill", "s3_kill_mid_upload", "disk_full")
WELL_FORMED_CALL = '<tool_call>{"name": "search_tickers", "arguments": {"query": "Northwind"}}</tool_call>'
MALFORMED_CALLS = (
    '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "CDRW", "date": </tool_call>',
    '<tool_call>{"name" "search_tickers" "arguments" {query: Northwind}}</tool_call>',
    "<tool_call>not a call at all</tool_call>",
    '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
    '<tool_call>["search_tickers", {"query": 7}]</tool_call>',
    '<tool_call>{"name": "get_stock_price", "arguments": "CDRW"}',
)


def fault_budget(total: int) -> dict[str, int]:
    """Faults per kind for `total` faults, in the proportions of `SHARES` (largest remainder); when `total` allows
    it, every kind gets at least one (taken from the largest)."""
    if total < 0:
        raise ValueError(f"--faults must be >= 0, got {total}")
    weight = sum(SHARES.values())
    exact = {kind: total * share / weight for kind, share in SHARES.items()}
    budget = {kind: int(value) for kind, value in exact.items()}
    by_remainder = sorted(KINDS, key=lambda kind: (int(exact[kind]) - exact[kind], KINDS.index(kind)))
    for kind in by_remainder[: total - sum(budget.values())]:
        budget[kind] += 1
    if total >= len(KINDS):
        for kind in [kind for kind in KINDS if budget[kind] == 0]:
            budget[max(budget, key=budget.get)] -= 1
            budget[kind] = 1
    return budget


# ------------------------------------------------------------------------------------------------ the MCP relay


def mcp_relay(control: Path) -> None:
    """Run the bundled market server as a child and relay MCP's newline-delimited JSON-RPC between it and this
    process's stdio. The child's pid is written to ``control/mcp_pids/``; a tool result answered while a token file
    sits in ``control/arm_1mb/`` is replaced by 1 MiB of text (the token is consumed, an event is logged)."""
    server = subprocess.Popen(
        [PYTHON, "-m", "skyrl_integrations.mcp.servers.market"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    pid_file = control / "mcp_pids" / str(server.pid)
    pid_file.write_text("")
    calls: set = set()

    def client_to_server() -> None:
        for line in sys.stdin.buffer:
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(line)
                if message.get("method") == "tools/call":
                    calls.add(message.get("id"))
            server.stdin.write(line)
            server.stdin.flush()
        server.stdin.close()

    threading.Thread(target=client_to_server, daemon=True).start()
    for line in server.stdout:
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(line)
            if message.get("id") in calls and "result" in message and _claim(control / "arm_1mb"):
                message["result"] = {"content": [{"type": "text", "text": "x" * ONE_MIB}], "isError": False}
                line = (json.dumps(message) + "\n").encode()
                _log_event(control, "tool_output_1mb")
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    pid_file.unlink(missing_ok=True)
    os._exit(0)  # the server is gone: the client sees the connection close


def _claim(folder: Path) -> bool:
    """Take one token file from `folder` (deleting it: another relay cannot take the same one), False when there is
    none."""
    for token in sorted(folder.iterdir()):
        with contextlib.suppress(FileNotFoundError):
            token.unlink()
            return True
    return False


def _log_event(control: Path, kind: str) -> None:
    with open(control / "events.jsonl", "a") as events:
        events.write(json.dumps({"kind": kind, "time": time.time()}) + "\n")


# ------------------------------------------------------------------------------------------------ HTTP proxies


class FaultProxy:
    """A reverse proxy (starlette app on a `BackgroundServer` thread) in front of `target`; subclasses decide per
    request whether to answer with a fault (`intercept`) and may edit a response (`edit`)."""

    def __init__(self, target: str):
        import httpx
        from starlette.applications import Starlette
        from starlette.routing import Route

        from skyrl_train.serve import BackgroundServer

        self.target = target
        self.lock = threading.Lock()
        self.http = httpx.AsyncClient(timeout=None)
        methods = ["GET", "PUT", "POST", "DELETE", "HEAD"]
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=methods)])
        self.server = BackgroundServer(app)
        self.server.start()
        self.url = self.server.url

    async def _handle(self, request):
        import httpx
        from starlette.requests import ClientDisconnect
        from starlette.responses import Response

        try:
            body = await request.body()
        except ClientDisconnect:  # the client went away mid-request (e.g. the trainer was just killed)
            return Response(status_code=499)
        fault = self.intercept(request.method, request.url.path)
        if fault is not None:
            return fault
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        url = self.target + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            answer = await self.http.request(request.method, url, content=body, headers=headers)
        except httpx.TransportError as error:
            return Response(f"proxy: {self.target} unreachable: {error}", status_code=502)
        content = self.edit(request.url.path, answer.status_code, answer.content)
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS | {"content-encoding"}}
        return Response(content, status_code=answer.status_code, headers=kept)

    def intercept(self, method: str, path: str):
        return None

    def edit(self, path: str, status: int, content: bytes) -> bytes:
        return content

    def stop(self) -> None:
        self.server.stop()


_HOP_HEADERS = frozenset({"connection", "content-length", "transfer-encoding", "keep-alive"})


class S3FaultProxy(FaultProxy):
    """In front of moto: answers the next 1-4 requests with 503 SlowDown for each armed ``s3_error``; with
    `kill_on_upload` set, SIGKILLs the trainer as it uploads a checkpoint object (not the manifest)."""

    def __init__(self, target: str, soak: Soak, rng: random.Random):
        super().__init__(target)
        self.soak = soak
        self.rng = rng
        self.burst_left = 0
        self.kill_on_upload = False

    def intercept(self, method, path):
        from starlette.responses import Response

        with self.lock:
            upload = method in ("PUT", "POST") and "/global_step_" in path and "/evals/" not in path
            if upload and self.kill_on_upload and not path.endswith("MANIFEST.json"):
                self.kill_on_upload = False
                self.soak.kill_trainer("s3_kill_mid_upload")
            if self.burst_left == 0 and self.soak.take_armed("s3_error"):
                self.burst_left = self.rng.randint(1, 4)
            if self.burst_left:
                self.burst_left -= 1
                body = "<Error><Code>SlowDown</Code><Message>injected by the fault soak</Message></Error>"
                return Response(body, status_code=503, media_type="application/xml")
        return None


class EngineFaultProxy(FaultProxy):
    """In front of one serve process: replaces an armed completion by a malformed tool call, and `CALL_SHARE` of the
    others by a well-formed one (see the module docstring)."""

    def __init__(self, target: str, soak: Soak, rng: random.Random):
        super().__init__(target)
        self.soak = soak
        self.rng = rng

    def edit(self, path, status, content):
        if path != "/v1/completions" or status != 200:
            return content
        answer = json.loads(content)
        for choice in answer.get("choices", []):
            text = self._replacement()
            if text is not None:
                ids = self.soak.tokenizer.encode(text, add_special_tokens=False)
                choice.update(text=text, token_ids=ids, logprobs=None, finish_reason="stop")
        return json.dumps(answer).encode()

    def _replacement(self) -> str | None:
        with self.lock:
            if self.soak.take_armed("malformed_call"):
                return self.rng.choice(MALFORMED_CALLS)
            return WELL_FORMED_CALL if self.rng.random() < CALL_SHARE else None


# ------------------------------------------------------------------------------------------------ processes


class EngineServer:
    """One `python -m skyrl_train.serve` process behind an `EngineFaultProxy` (whose URL the trainer uses)."""

    def __init__(self, model: str, log: Path, soak: Soak, rng: random.Random):
        self.model, self.log = model, log
        self.process: subprocess.Popen | None = None
        self.proxy: EngineFaultProxy | None = None
        self.start()
        self.proxy = EngineFaultProxy(self.base_url, soak, rng)

    def start(self) -> None:
        from skyrl_train.testing import TEST_CONTROL_TOKEN

        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "skyrl_train.serve", "--model", self.model, "--port", "0"]
                + ["--served-model-name", SERVED_NAME, "--log-level", "warning"]
                + ["--enable-control", "--lora-root", str(self.log.parent)],  # the soak's folder holds lora_sync/
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                # tiny model; the cores are shared with the trainer
                env={**os.environ, "OMP_NUM_THREADS": "1", "SKYRL_CONTROL_TOKEN": TEST_CONTROL_TOKEN},
            )
        for line in self.process.stdout:
            if line.startswith("serving "):
                self.base_url = line.rsplit(" at ", 1)[1].strip().removesuffix("/v1")
                break
        else:
            raise RuntimeError(f"python -m skyrl_train.serve exited with {self.process.wait()}; see {self.log}")
        threading.Thread(target=self.process.stdout.read, daemon=True).start()
        if self.proxy is not None:
            self.proxy.target = self.base_url

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self.proxy.stop()
        if self.alive:
            self.process.kill()
        self.process.wait()


@dataclasses.dataclass
class Launch:
    """One run of the training command."""

    number: int
    resumed_from: int | None
    """The committed step (pointer file) when it started."""
    exit_code: int | None = None
    caused_by: str | None = None
    """The fault kind the driver ended it with (SIGKILL, full disk), None if it ended by itself."""
    committed_at_end: int | None = None
    """The committed step when it ended."""
    faults: list[str] = dataclasses.field(default_factory=list)
    """Non-crash faults injected since its last commit."""
    training: bool = False
    """Its log shows the first weight sync: start-up and preflight are over."""
    metrics_from: int = 0
    """Lines of metrics.jsonl before it started."""
    recovered: bool = False
    """A later launch resumed from `committed_at_end` and made progress (for a launch the driver ended)."""


@dataclasses.dataclass
class Tally:
    """Faults per kind that reached the run, and those of them it survived."""

    injected: Counter = dataclasses.field(default_factory=Counter)
    survived: Counter = dataclasses.field(default_factory=Counter)


# ------------------------------------------------------------------------------------------------ the soak


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = Path(args.workdir)
        self.control = self.work / "control"
        self.ckpts = self.work / "ckpts"
        self.exports = self.work / "exports"
        self.budget = fault_budget(args.faults)
        self.tally = Tally()
        self.armed: Counter = Counter()
        self.lock = threading.Lock()
        self.launches: list[Launch] = []
        self.trainer: subprocess.Popen | None = None
        self.pointer_history: list[int] = []
        self.disk_filler: Path | None = None
        self.skipped: dict[str, str] = {}
        self.finished = threading.Event()
        self.relay_events_read = 0
        self.commit_times: list[tuple[int, float]] = []
        """(launch number, time) of every commit seen."""

    # -- setup -------------------------------------------------------------------------------------------------------

    def setup(self, stack: contextlib.ExitStack) -> None:
        from skyrl_train.models import load_tokenizer
        from skyrl_train.testing import tiny_model_path
        from skyrl_train.testing.s3 import moto_server, s3_client, s3_env

        for folder in (self.control / "mcp_pids", self.control / "arm_1mb", self.exports, self.ckpts):
            folder.mkdir(parents=True, exist_ok=True)
        (self.control / "events.jsonl").touch()
        self.model = tiny_model_path()
        self.tokenizer = load_tokenizer(self.model)
        self._make_data()
        self._mount_ckpt_fs(stack)
        moto = stack.enter_context(moto_server(self.work / "moto.log"))
        os.environ.update(s3_env(moto))
        self.bucket = "soak"
        s3_client(moto).create_bucket(Bucket=self.bucket)
        self.moto = moto
        self.s3_proxy = S3FaultProxy(moto, self, random.Random(self.args.seed + 1))
        stack.callback(self.s3_proxy.stop)
        self.engines = [
            EngineServer(self.model, self.work / f"engine_{i}.log", self, random.Random(self.args.seed * 100 + i))
            for i in range(self.args.engines)
        ]
        for engine in self.engines:
            stack.callback(engine.stop)
        stack.callback(self._stop_trainer)

    def _make_data(self) -> None:
        data = self.work / "data"
        subprocess.run(
            [PYTHON, "-m", "skyrl_integrations.datasets.rule_based", "--output-dir", str(data)]
            + ["--train-size", str(4 * self.args.steps), "--val-size", "4", "--servers", "market"]
            + ["--complexities", "single", "--seed", str(self.args.seed), "--overwrite"],
            check=True,
            capture_output=True,
        )
        self.data = data

    def _mount_ckpt_fs(self, stack: contextlib.ExitStack) -> None:
        if self.budget["disk_full"] == 0:
            return
        mount = ["mount", "-t", "tmpfs", "-o", f"size={self.args.ckpt_fs_mb}m", "tmpfs", str(self.ckpts)]
        result = subprocess.run(mount, capture_output=True, text=True)
        if result.returncode != 0:
            why = (result.stderr or result.stdout).strip() or f"exit {result.returncode}"
            self.skipped["disk_full"] = f"cannot mount a tmpfs here ({why}): needs root or CAP_SYS_ADMIN"
            self.budget["disk_full"] = 0
            return
        stack.callback(lambda: subprocess.run(["umount", "-l", str(self.ckpts)], check=False))

    # -- the trainer ---------------------------------------------------------------------------------------------

    def command(self) -> list[str]:
        from skyrl_train.testing import TEST_CONTROL_TOKEN, TINY_RUN_OVERRIDES

        relay = [PYTHON, str(Path(__file__).resolve()), "mcp-relay", str(self.control)]
        servers = "{market: {command: [" + ", ".join(json.dumps(part) for part in relay) + "]}}"
        urls = ",".join(engine.proxy.url for engine in self.engines)
        mcp = "+environment.skyrl_gym.mcp_tool"
        return [
            PYTHON,
            "-m",
            "skyrl_train.entrypoints.main_base",
            "--config",
            str(REPO / "examples" / "mcp" / "grpo.yaml"),
            f"data.train_data=[{self.data / 'train.parquet'}]",
            f"data.val_data=[{self.data / 'validation.parquet'}]",
            f"{mcp}.demonstrations={REPO / 'examples' / 'mcp' / 'demonstrations.json'}",
            f"{mcp}.servers={servers}",
            f"{mcp}.call_timeout_s={MCP_CALL_TIMEOUT_S}",
            f"trainer.policy.model.path={self.model}",
            *TINY_RUN_OVERRIDES,
            "generator.sampling_params.max_generate_length=40",
            "generator.eval_sampling_params.max_generate_length=40",
            # GRPO alone: the recipe's warm start folds its adapter into the base weights, which remote engines never
            # get, and its ptx term and hinted rollouts need the warm start's demonstrations and hinted questions
            "trainer.warm_start=false",
            "sft.max_length=2048",  # the SFT keys back to their defaults: without conversations they are refused
            "sft.num_epochs=1",
            "trainer.algorithm.ptx_coef=0",
            "trainer.algorithm.hinted_rows_positive_only=false",
            "generator.train_without_hints=false",
            "trainer.eval_before_train=false",
            f"trainer.eval_interval={self.args.eval_interval}",
            "trainer.eval_batch_size=4",
            "trainer.ckpt_interval=1",
            "trainer.cpu_threads=1",
            "trainer.logger=[console,jsonl]",
            f"trainer.ckpt_path={self.ckpts}",
            f"trainer.export_path={self.exports}",
            "trainer.resume_mode=latest",
            "trainer.project_name=soak",
            "trainer.run_name=run",
            # a soak injects far more faults per step than a real run meets; the guard would stop it on purpose
            "trainer.max_infra_failure_ratio=1.0",
            f"trainer.s3.bucket={self.bucket}",
            f"trainer.s3.endpoint_url={self.s3_proxy.url}",
            "trainer.s3.keep_local=-1",  # no local rotation: only the driver frees the full disk
            "trainer.s3.keep_remote=-1",
            "generator.run_engines_locally=false",
            "generator.max_num_seqs=1024",  # back to the default: the recipe's value is for a local engine
            f"generator.num_inference_engines={len(self.engines)}",
            f"generator.remote_inference_engine_urls=[{urls}]",
            f"generator.model_name={SERVED_NAME}",
            f"generator.remote_inference_engine_control_token={TEST_CONTROL_TOKEN}",
            f"trainer.policy.model.lora.lora_sync_path={self.work / 'lora_sync'}",
        ]

    def committed(self) -> int | None:
        from skyrl_train.checkpoints import LATEST_CKPT_FILE

        with contextlib.suppress(OSError, ValueError):
            return int((self.ckpts / LATEST_CKPT_FILE).read_text())
        return None

    def launch(self) -> Launch:
        for engine in self.engines:
            if not engine.alive:
                engine.start()
        launch = Launch(len(self.launches) + 1, self.committed())
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
        launch.metrics_from = _line_count(self.exports / "metrics.jsonl")
        with open(self.log(launch), "w") as log:
            self.trainer = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env)
        self.launches.append(launch)
        return launch

    def kill_trainer(self, kind: str) -> None:
        """SIGKILL the running trainer as fault `kind` (counted now; survived once the next launch resumes)."""
        with self.lock:
            trainer, launch = self.trainer, self.launches[-1]
            if trainer is None or trainer.poll() is not None or launch.caused_by is not None:
                return
            launch.caused_by = kind
            self._injected(kind)
        trainer.send_signal(signal.SIGKILL)

    def _stop_trainer(self) -> None:
        if self.trainer is not None and self.trainer.poll() is None:
            self.trainer.kill()
            self.trainer.wait()

    # -- faults ----------------------------------------------------------------------------------------------------

    def _injected(self, kind: str) -> None:
        """Count one fault of `kind` as it reaches the run (the caller holds `lock`); a non-crash fault waits on the
        launch's next commit to count as survived. Each is logged to `faults.jsonl` with the step committed then."""
        self.tally.injected[kind] += 1
        launch = self.launches[-1]
        if kind not in CRASH_KINDS:
            launch.faults.append(kind)
        record = {"kind": kind, "launch": launch.number, "committed": self.committed(), "time": time.time()}
        with open(self.work / "faults.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n")

    def take_armed(self, kind: str) -> bool:
        """Use up one armed fault of `kind` (counting it as injected); False when none is armed."""
        with self.lock:
            if self.armed[kind] <= 0:
                return False
            self.armed[kind] -= 1
            self._injected(kind)
            return True

    def remaining(self) -> Counter:
        with self.lock:
            return Counter(
                {k: self.budget[k] - self.tally.injected[k] - self.armed[k] for k in KINDS if self.budget[k]}
            )

    def inject(self, kind: str) -> None:
        """Inject (or arm) one fault of `kind`; one that cannot hit now (no live MCP server, a single engine left, the
        disk already full) is not injected and stays in the budget."""
        if kind in ("malformed_call", "tool_output_1mb", "s3_error"):
            if kind == "tool_output_1mb":
                (self.control / "arm_1mb" / f"{time.time_ns()}").touch()
            with self.lock:
                self.armed[kind] += 1
        elif kind in ("mcp_kill", "mcp_hang"):
            self._signal_mcp(kind)
        elif kind == "engine_kill":
            self._kill_engine()
        elif kind == "trainer_kill":
            self.kill_trainer(kind)
        elif kind == "s3_kill_mid_upload":
            with self.s3_proxy.lock:
                self.s3_proxy.kill_on_upload = True
        elif kind == "disk_full":
            self._fill_disk()
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    def _count(self, kind: str) -> None:
        with self.lock:
            self._injected(kind)

    def _signal_mcp(self, kind: str) -> None:
        pids = [int(p.name) for p in (self.control / "mcp_pids").iterdir() if _running(int(p.name))]
        if not pids:
            return
        pid = self.rng.choice(pids)
        with contextlib.suppress(ProcessLookupError):
            if kind == "mcp_kill":
                os.kill(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGSTOP)
                threading.Timer(self.args.hang_s, _resume_process, args=(pid,)).start()
            self._count(kind)

    def _kill_engine(self) -> None:
        live = [engine for engine in self.engines if engine.alive]
        if len(live) < 2:
            return  # the trainer must keep an engine (dead ones start again before the next launch)
        self.rng.choice(live).process.kill()
        self._count("engine_kill")

    def _fill_disk(self) -> None:
        """Fill the checkpoint tmpfs; the fault counts when the launch's next checkpoint fails on it (see `_watch`)."""
        if self.disk_filler is not None:
            return
        self.disk_filler = self.ckpts / ".soak_filler"
        self.top_up_disk()
        with self.lock:
            self.launches[-1].caused_by = "disk_full"
            self.armed["disk_full"] += 1

    def top_up_disk(self) -> None:
        """Grow the filler file until at most `DISK_MARGIN_BYTES` are free (a rotation may have freed some)."""
        free = shutil.disk_usage(self.ckpts).free
        if free > DISK_MARGIN_BYTES:
            with open(self.disk_filler, "ab") as out, contextlib.suppress(OSError):
                os.posix_fallocate(out.fileno(), out.seek(0, os.SEEK_END), free - DISK_MARGIN_BYTES)

    def free_disk(self) -> None:
        if self.disk_filler is not None:
            self.disk_filler.unlink(missing_ok=True)
            self.disk_filler = None

    def drive_faults(self) -> None:
        """Inject faults in bursts until the budget is spent or the run ends: one burst as each step starts (a launch
        begins training, or a commit is seen) while the trainer trains, none once the last step is committed."""
        burst_at = None
        while not self.finished.is_set() and sum(self.remaining().values()) > 0:
            at = self._step_in_progress()
            if at is None or at == burst_at:
                self.finished.wait(0.1)
                continue
            burst_at = at
            self._burst(at)

    def _step_in_progress(self) -> tuple[int, int] | None:
        """(launch, committed step) while a launch trains towards a step not yet committed, else None."""
        with self.lock:
            launch = self.launches[-1]
            if not launch.training or launch.caused_by is not None or self.trainer.poll() is not None:
                return None
        committed = self.committed() or 0
        return None if committed >= self.args.steps else (launch.number, committed)

    def _burst(self, at: tuple[int, int]) -> None:
        """ceil(faults left / steps left until `SPEND_BY` of the run) faults of seeded random kinds, at seeded gaps
        spread over the measured step time; the burst ends early when the step ends (the next one recounts)."""
        steps_left = max(SPEND_BY * self.args.steps - at[1], 1.0)
        quota = math.ceil(sum(self.remaining().values()) / steps_left)
        for _ in range(quota):
            left = self.remaining()
            if sum(left.values()) <= 0 or self._step_in_progress() != at:
                return
            kind = self.rng.choice(list(left.elements()))
            if not (kind in CRASH_KINDS and at[1] == 0):  # a crash before the first commit only re-runs start-up
                self.inject(kind)
            self.finished.wait(self.rng.uniform(0, self.step_seconds() / quota))

    def step_seconds(self) -> float:
        """Median seconds between two commits of one launch so far (`FIRST_STEP_S` before there are any)."""
        gaps = [
            later - earlier
            for (launch, earlier), (same, later) in itertools.pairwise(self.commit_times)
            if launch == same
        ]
        return statistics.median(gaps) if gaps else FIRST_STEP_S

    # -- the run -----------------------------------------------------------------------------------------------------

    def run(self) -> None:
        self.started = time.monotonic()
        driver = threading.Thread(target=self.drive_faults, daemon=True)
        while True:
            launch = self.launch()
            if driver.ident is None:
                driver.start()
            self._watch(launch)
            if launch.exit_code == 0 and self.committed() == self.args.steps:
                break
            self.free_disk()
            if len(self.launches) >= self.args.max_launches:
                raise RuntimeError(f"{len(self.launches)} launches and the run is not done; see {self.work}")
        self.finished.set()
        driver.join()

    def _watch(self, launch: Launch) -> None:
        """Follow `launch` to its end: commits settle its pending faults as survived; relay events are counted."""
        while True:
            code = self.trainer.poll()
            self._read_relay_events()
            if self.disk_filler is not None:
                self.top_up_disk()
            if not launch.training:
                launch.training = TRAINING_MARK in self.log(launch).read_text(errors="replace")
            step = self.committed()
            if step is not None and (not self.pointer_history or step != self.pointer_history[-1]):
                self.pointer_history.append(step)
                self.commit_times.append((launch.number, time.monotonic()))
                self._settle(launch, survived=True, progressed=True)
            if code is not None:
                break
            time.sleep(0.2)
        with self.lock:
            launch.exit_code = code
            launch.committed_at_end = self.committed()
            if launch.caused_by == "disk_full":
                self.armed["disk_full"] -= 1
                if code == 0:  # it ended before another checkpoint: the full disk never hit it
                    launch.caused_by = None
                else:
                    self._injected("disk_full")
            if code != 0 and launch.caused_by is None:
                launch.caused_by = "crash"
        self._settle(launch, survived=launch.caused_by != "crash", progressed=code == 0)

    def _settle(self, launch: Launch, survived: bool, progressed: bool) -> None:
        """Pending faults of `launch`: survived when it commits, ends cleanly or is ended by the driver while still
        running; not survived when it crashes by itself. A crash fault that ended an earlier launch is survived once
        a launch resumes from the step committed then and commits again (or finishes)."""
        with self.lock:
            if survived:
                self.tally.survived.update(launch.faults)
            launch.faults.clear()
            if not progressed:
                return
            resumed = self.resumed_step(launch)
            for earlier in self.launches[: launch.number - 1]:
                if earlier.caused_by in CRASH_KINDS and not earlier.recovered and earlier.committed_at_end == resumed:
                    earlier.recovered = True
                    self.tally.survived[earlier.caused_by] += 1

    def log(self, launch: Launch) -> Path:
        return self.work / f"trainer_{launch.number}.log"

    def resumed_step(self, launch: Launch) -> int | None:
        """The step `launch`'s trainer says it resumed at (None: it started fresh)."""
        match = re.search(r"resumed from \S+ at step (\d+)", self.log(launch).read_text(errors="replace"))
        return int(match.group(1)) if match else None

    def _read_relay_events(self) -> None:
        lines = (self.control / "events.jsonl").read_text().splitlines()
        for line in lines[self.relay_events_read :]:
            kind = json.loads(line)["kind"]
            with self.lock:
                self.armed[kind] -= 1
                self._injected(kind)
        self.relay_events_read = len(lines)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _resume_process(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# ------------------------------------------------------------------------------------------------ checks and table


@dataclasses.dataclass
class Outcome:
    """What the soak measured and what its checks found."""

    rows: list[tuple[str, str]]
    """(figure, value) lines of the summary below the per-kind table."""
    problems: list[str]
    """Failed checks; empty when nothing was lost."""


def metrics_records(soak: Soak) -> list[dict]:
    path = soak.exports / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def check_checkpoints(soak: Soak, problems: list[str]) -> list[int]:
    """Every complete S3 checkpoint downloads (manifest sizes and sha256) and loads, every local committed one
    loads, and S3 holds every step the pointer ever named. Returns the complete S3 steps."""
    from skyrl_train.checkpoints import CheckpointManager
    from skyrl_train.storage.s3 import S3Store, join_key
    from skyrl_train.testing.s3 import complete_steps, s3_client

    run_prefix = "soak/run"
    in_s3 = complete_steps(soak.moto, soak.bucket, run_prefix)
    missing = sorted(set(soak.pointer_history) - set(in_s3))
    if missing:
        problems.append(f"committed steps missing from S3: {missing}")
    store = S3Store(s3_client(soak.moto), soak.bucket)
    with tempfile.TemporaryDirectory(dir=soak.work) as scratch:
        for step in in_s3:
            folder = Path(scratch) / f"global_step_{step}"
            try:
                store.download_folder(join_key(run_prefix, f"global_step_{step}"), folder)
            except Exception as error:  # noqa: BLE001 - any failure is a lost checkpoint, reported with its step
                problems.append(f"S3 checkpoint global_step_{step} does not download: {error}")
                continue
            problems.extend(_load_problems(folder, step, "S3"))
            shutil.rmtree(folder)
    local = CheckpointManager(soak.ckpts)
    for step in local.committed_steps():
        problems.extend(_load_problems(local.step_dirs()[step], step, "local"))
    return in_s3


def _load_problems(folder: Path, step: int, where: str) -> list[str]:
    """Load every weight / state file of a checkpoint folder; the trainer state must name `step`."""
    from safetensors.torch import load_file

    from skyrl_train.trainer import TRAINER_STATE_FILE
    from skyrl_train.utils.plain_data import load_plain

    try:
        for path in sorted(folder.rglob("*.safetensors")):
            load_file(str(path))
        for path in sorted(folder.rglob("*.pt")):
            load_plain(path)
        state = load_plain(folder / TRAINER_STATE_FILE)
    except Exception as error:  # noqa: BLE001 - any failure to load is what this check reports
        return [f"{where} checkpoint {folder.name} does not load: {error}"]
    if state.get("global_step") != step:
        return [f"{where} checkpoint {folder.name} holds global_step {state.get('global_step')}"]
    return []


def check_steps(soak: Soak, problems: list[str]) -> None:
    """The committed step never goes back, and every launch resumed at the step committed when it started."""
    history = soak.pointer_history
    if any(later < earlier for earlier, later in itertools.pairwise(history)):
        problems.append(f"the committed step went back: {history}")
    for launch in soak.launches:
        if soak.resumed_step(launch) != launch.resumed_from:
            problems.append(
                f"launch {launch.number} resumed at step {soak.resumed_step(launch)}, "
                f"but step {launch.resumed_from} was committed"
            )


def check_eval_dumps(soak: Soak, problems: list[str]) -> tuple[int, int]:
    """Every JSONL line of every eval dump parses, locally and in S3; a dump S3 marks done (its manifest) holds
    `aggregated_results.jsonl`, and so does every local dump of an eval the metrics logged. Returns (dumps
    complete, local dumps left unfinished by a kill during their eval)."""
    from skyrl_train.testing.s3 import s3_client, s3_keys

    complete, unfinished = 0, 0
    logged = evals_logged(soak)
    for dump in sorted((soak.exports / "dumped_evals").glob("global_step_*_evals")):
        for path in dump.glob("*.jsonl"):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if not _parses(line):
                    problems.append(f"{path} line {number} does not parse")
        if (dump / "aggregated_results.jsonl").exists():
            complete += 1
        elif int(dump.name.split("_")[2]) in logged:
            problems.append(f"{dump} has no aggregated_results.jsonl, but its eval was logged")
        else:
            unfinished += 1
    client = s3_client(soak.moto)
    keys = s3_keys(soak.moto, soak.bucket, "evals/")
    for manifest in (key for key in keys if key.endswith("/MANIFEST.json")):
        prefix = manifest.removesuffix("MANIFEST.json")
        if prefix + "aggregated_results.jsonl" not in keys:
            problems.append(f"s3://{soak.bucket}/{prefix} is marked done but has no aggregated_results.jsonl")
        for key in (k for k in keys if k.startswith(prefix) and k.endswith(".jsonl")):
            body = client.get_object(Bucket=soak.bucket, Key=key)["Body"].read().decode()
            if not all(_parses(line) for line in body.splitlines()):
                problems.append(f"s3://{soak.bucket}/{key} has a line that does not parse")
    return complete, unfinished


def steps_logged(soak: Soak) -> set[int]:
    """Training steps whose metrics reached metrics.jsonl (a kill between a step's commit and its log loses them)."""
    return {r["step"] for r in metrics_records(soak) if "reward/infra_failure_rate" in r}


def evals_logged(soak: Soak) -> set[int]:
    """Steps whose eval metrics reached metrics.jsonl."""
    return {r["step"] for r in metrics_records(soak) if any(k.startswith("eval/") for k in r)}


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def infra_failure_rows(soak: Soak) -> int:
    """Trajectories counted as infrastructure failures in the training steps (the last record of each step)."""
    per_step = {}
    for record in metrics_records(soak):
        if "reward/infra_failure_rate" in record:
            per_step[record["step"]] = record["reward/infra_failure_rate"]
    rows_per_step = 4 * 2  # TINY_RUN_OVERRIDES: 4 prompts x 2 samples
    return round(sum(per_step.values()) * rows_per_step)


def steps_lost(soak: Soak) -> tuple[int, int]:
    """(completed steps trained again, steps interrupted in progress) over the launches the driver or a crash ended:
    a completed step is one its launch logged, trained again if the next launch resumed below it; a launch ended
    before the last step was committed interrupted the step after its last commit."""
    path = soak.exports / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    redone, interrupted = 0, 0
    for launch, following in itertools.pairwise(soak.launches):
        steps = [json.loads(line)["step"] for line in lines[launch.metrics_from : following.metrics_from] if line]
        redone += max(0, max(steps, default=0) - (soak.resumed_step(following) or 0))
        interrupted += (launch.committed_at_end or 0) < soak.args.steps
    return redone, interrupted


def evaluate_soak(soak: Soak, wall_s: float) -> Outcome:
    problems: list[str] = []
    in_s3 = check_checkpoints(soak, problems)
    check_steps(soak, problems)
    dumps, unfinished = check_eval_dumps(soak, problems)
    if soak.committed() != soak.args.steps:
        problems.append(f"the run ended at step {soak.committed()}, not {soak.args.steps}")
    redone, interrupted = steps_lost(soak)
    crashes = [launch.number for launch in soak.launches if launch.caused_by == "crash"]
    if crashes:
        problems.append(f"launches that crashed by themselves: {crashes} (logs: {soak.work}/trainer_N.log)")
    rows = [
        ("faults injected / survived", f"{sum(soak.tally.injected.values())} / {sum(soak.tally.survived.values())}"),
        ("completed steps lost (trained again)", str(redone)),
        ("steps interrupted in progress (trained again from their start)", str(interrupted)),
        ("checkpoints committed (complete in S3)", f"{len(set(soak.pointer_history))} ({len(in_s3)})"),
        ("resumes (launches after the first)", str(len(soak.launches) - 1)),
        ("trainer crashes not caused by the driver", str(len(crashes))),
        ("rows counted as infrastructure failures", str(infra_failure_rows(soak))),
        ("eval dumps complete / left unfinished by a kill", f"{dumps} / {unfinished}"),
        (
            "steps whose metrics were logged / committed",
            f"{len(steps_logged(soak))} / {len(set(soak.pointer_history))}",
        ),
        ("evals logged / scheduled", f"{len(evals_logged(soak))} / {soak.args.steps // soak.args.eval_interval}"),
        ("wall time (on a shared machine)", f"{wall_s / 60:.1f} min"),
    ]
    return Outcome(rows, problems)


def format_table(soak: Soak, outcome: Outcome) -> str:
    lines = ["| fault | injected | survived |", "|---|---|---|"]
    for kind in KINDS:
        note = f" (skipped: {soak.skipped[kind]})" if kind in soak.skipped else ""
        lines.append(f"| `{kind}`{note} | {soak.tally.injected[kind]} | {soak.tally.survived[kind]} |")
    lines += ["", "| figure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in outcome.rows]
    lines.append("")
    lines.append("checks: " + ("all passed" if not outcome.problems else "FAILED"))
    lines += [f"- {problem}" for problem in outcome.problems]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ entry point


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps (default: %(default)s)")
    parser.add_argument("--faults", type=int, default=200, help="faults to inject (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and of every fault choice")
    parser.add_argument("--engines", type=int, default=3, help="serve processes (default: %(default)s)")
    parser.add_argument("--eval-interval", type=int, default=10, help="steps between evals (default: %(default)s)")
    parser.add_argument("--hang-s", type=float, default=2 * MCP_CALL_TIMEOUT_S, help="MCP hang length (seconds)")
    parser.add_argument("--ckpt-fs-mb", type=int, default=256, help="tmpfs size of the checkpoint folder (MiB)")
    parser.add_argument("--max-launches", type=int, default=100, help="give up after this many trainer launches")
    parser.add_argument("--workdir", help="folder for the run (default: a new temporary folder, kept)")
    args = parser.parse_args(argv)
    if args.engines < 1 or args.steps < 1:
        parser.error("--engines and --steps must be >= 1")
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="fault_soak_")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mcp-relay"]:
        mcp_relay(Path(argv[1]))
        return 0
    soak, outcome = run_soak(parse_args(argv))
    print(format_table(soak, outcome))
    return 1 if outcome.problems else 0


def run_soak(args: argparse.Namespace) -> tuple[Soak, Outcome]:
    """Set up, run to the last step under faults, check; every process started is stopped before it returns."""
    soak = Soak(args)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        soak.setup(stack)
        print(f"fault soak: {args.steps} steps, faults {soak.budget}, seed {args.seed}, in {soak.work}", flush=True)
        soak.run()
        outcome = evaluate_soak(soak, time.monotonic() - started)
    return soak, outcome


if __name__ == "__main__":
    sys.exit(main())
