"""`PythonCodeExecutorToolGroup`: run model-written Python in a fresh, resource-limited, sandboxed subprocess.

Each call starts `python -I` (isolated: no user site, no PYTHON* variables, no script dir on sys.path)
in its own session and process group, inside a temporary working directory that is removed afterwards,
with stdin at end-of-file and a minimal environment. The process runs in the sandbox of
`skyrl_gym.tools.sandbox`: its own filesystem view (system folders and the Python installation read-only, the
working directory the only writable folder; no home folder, repository, credentials or checkpoints), its own
processes, and no network unless `allow_network`. A small bootstrap sets the address-space and CPU
limits in the child (no `preexec_fn`, which is unsafe when the parent has threads), then runs the code.
The parent enforces the wall-clock limit and kills the whole process group on timeout, and also after
a normal exit so background children cannot outlive the call. Output is read incrementally and only
a bounded amount is kept, so a flood of output cannot exhaust the parent's memory.

`execute_python` runs one program and returns a structured `PythonExecution`; the tool group formats that as
upstream's text. Without network, the child also gets an audit hook that refuses internet sockets, connect/bind
and name resolution, so Python-level networking fails with a clear `PermissionError` (the network namespace
stops everything else). `unsafe_no_sandbox=True` runs the program without the sandbox, as this user with this
user's files, for machines that cannot create user namespaces; the audit hook is then the only network barrier.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from skyrl_gym.tools.core import ToolGroup, tool
from skyrl_gym.tools.sandbox import require_sandbox

logger = logging.getLogger(__name__)

ERROR_PREFIX = "Error executing Python code: "
_CODE_FILE = ".snippet.py"
_DRAIN_GRACE = 1.0

# Runs in the child. The user's code is compiled as "<string>" (like `python -c`), registered with
# linecache so tracebacks show its lines, and run as __main__; the bootstrap frame is left out of tracebacks.
_BOOTSTRAP = """
import linecache, resource, sys, traceback, types
from _socket import AF_UNIX
_NETWORK_EVENTS = frozenset(("socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo",
                             "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr",
                             "socket.getnameinfo"))
def _deny_network(event, args):
    # AF_UNIX socket pairs stay allowed: asyncio's event loop needs one to wake itself up.
    if event in _NETWORK_EVENTS or (event == "socket.__new__" and args[1] != AF_UNIX):
        raise PermissionError("network access is disabled in this sandbox")
# Tracebacks through the hook must not show lines of the user's code, which is also named "<string>".
_deny_network.__code__ = _deny_network.__code__.replace(co_filename="<sandbox>")
def _boot(code_file, memory_bytes, cpu_seconds, block_network):
    if block_network == "1":
        sys.addaudithook(_deny_network)
    for kind, soft, hard in ((resource.RLIMIT_AS, memory_bytes, memory_bytes),
                             (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)):
        inherited = resource.getrlimit(kind)[1]
        if inherited != resource.RLIM_INFINITY:
            soft, hard = min(soft, inherited), min(hard, inherited)
        resource.setrlimit(kind, (soft, hard))
    with open(code_file, encoding="utf-8") as f:
        source = f.read()
    linecache.cache["<string>"] = (len(source), None, source.splitlines(True), "<string>")
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    try:
        exec(compile(source, "<string>", "exec"), module.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        sys.exit(1)
_boot(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
"""


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class _Capture:
    """Keeps the head (stdout) or the tail (stderr) of a stream, up to `limit` bytes, and counts the rest."""

    def __init__(self, limit: int, keep_tail: bool):
        self.limit, self.keep_tail = limit, keep_tail
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.keep_tail:
            self.data += chunk
            del self.data[: max(0, len(self.data) - self.limit)]
        elif len(self.data) < self.limit:
            self.data += chunk[: self.limit - len(self.data)]


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it (its pid keeps naming the process group)."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _collect(proc: subprocess.Popen, timeout: float, captures: dict) -> bool:
    """Read both pipes until they close; returns True if the wall-clock limit was hit.

    The process group is killed on timeout, and also as soon as the child exits (background children
    would otherwise keep the pipes open). A process that left the group and still holds a pipe only
    delays the return by `_DRAIN_GRACE` seconds.
    """
    deadline = time.monotonic() + timeout
    timed_out = False
    killed_at = None
    with selectors.DefaultSelector() as selector:
        for stream in captures:
            selector.register(stream, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if killed_at is None and (_exited(proc) or now >= deadline):
                timed_out, killed_at = now >= deadline, now
                _kill_group(proc)
            elif killed_at is not None and (not selector.get_map() or now - killed_at > _DRAIN_GRACE):
                break
            for key, _ in selector.select(timeout=0.05):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    captures[key.fileobj].add(chunk)
                else:
                    selector.unregister(key.fileobj)
    proc.wait()
    return timed_out


def _decode_head(capture: _Capture, max_chars: int) -> str:
    text = capture.data.decode("utf-8", errors="replace")
    if len(text) <= max_chars and capture.total <= len(capture.data):
        return text
    return (
        f"{text[:max_chars]}\n... [output truncated: showing the first {max_chars} characters of {capture.total} bytes]"
    )


def _decode_tail(capture: _Capture, max_chars: int) -> str:
    text = capture.data.decode("utf-8", errors="replace")
    if len(text) <= max_chars and capture.total <= len(capture.data):
        return text
    return f"[... earlier output cut: showing the last {max_chars} characters]\n{text[-max_chars:]}"


@dataclass(frozen=True)
class PythonExecution:
    """What one sandboxed run produced. `stdout` keeps the head and `stderr` the tail, each with a cut marker."""

    stdout: str
    stderr: str
    returncode: int  # negative: killed by that signal (always SIGKILL after a timeout)
    timed_out: bool
    timeout: float
    memory_limit_mb: int

    @property
    def out_of_memory(self) -> bool:
        last_line = self.stderr.strip().rsplit("\n", 1)[-1]
        return last_line.split(":", 1)[0].endswith("MemoryError")  # also numpy's _ArrayMemoryError

    @property
    def failure(self) -> str | None:
        """Why the sandbox stopped the program (time, memory, CPU, a signal), or None if it ended on its own."""
        if self.timed_out:
            return f"timed out after {self.timeout:g} s"
        if self.out_of_memory:
            return f"MemoryError: the code exceeded the memory limit of {self.memory_limit_mb} MB"
        if self.returncode == -signal.SIGXCPU:
            return "CPU time limit exceeded"
        if self.returncode < 0:
            return f"the process was killed by signal {signal.Signals(-self.returncode).name}"
        return None


@contextlib.contextmanager
def _popen_unsandboxed(argv: list[str], workdir: str, **popen_kwargs):
    """`Sandbox.popen`'s counterpart for `unsafe_no_sandbox`: the program as a plain child process."""
    proc = subprocess.Popen(argv, cwd=workdir, **popen_kwargs)
    yield proc, lambda: proc.returncode


def execute_python(
    code: str,
    *,
    timeout: float = 10.0,
    memory_limit_mb: int = 512,
    max_output_chars: int = 10000,
    allow_network: bool = False,
    unsafe_no_sandbox: bool = False,
) -> PythonExecution:
    """Run `code` in a fresh sandboxed interpreter (see the module docstring) and return what it produced.

    Raises:
        SandboxUnavailableError: this machine cannot run the sandbox (checked once per process; see
            `skyrl_gym.tools.sandbox.require_sandbox`), unless `unsafe_no_sandbox`.
        OSError: the process cannot be started.
    """
    sandbox = None if unsafe_no_sandbox else require_sandbox(allow_network)
    with tempfile.TemporaryDirectory(prefix="skyrl_python_", ignore_cleanup_errors=True) as workdir:
        with open(os.path.join(workdir, _CODE_FILE), "w", encoding="utf-8") as f:
            f.write(code)
        program = [
            sys.executable,
            "-I",
            "-c",
            _BOOTSTRAP,
            _CODE_FILE,
            str(memory_limit_mb * 1024 * 1024),
            str(math.ceil(timeout) + 1),
            "0" if allow_network else "1",
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        stdout = _Capture(max_output_chars * 4, keep_tail=False)
        stderr = _Capture(max_output_chars * 4, keep_tail=True)
        start = _popen_unsandboxed if sandbox is None else sandbox.popen
        pipes = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        with start(program, workdir, env=env, start_new_session=True, **pipes) as (proc, exit_status):
            with proc.stdout, proc.stderr:
                timed_out = _collect(proc, timeout, {proc.stdout: stdout, proc.stderr: stderr})
            returncode = exit_status()
    return PythonExecution(
        stdout=_decode_head(stdout, max_output_chars),
        stderr=_decode_tail(stderr, max_output_chars),
        returncode=returncode,
        timed_out=timed_out,
        timeout=timeout,
        memory_limit_mb=memory_limit_mb,
    )


class PythonCodeExecutorToolGroup(ToolGroup):
    """One tool, `python(code)`, returning the program's stdout or an `Error executing Python code: ...` text.

    Programs run in the sandbox without network; `allow_network=True` gives them the host's network and
    `unsafe_no_sandbox=True` runs them without the sandbox (see the module docstring). The sandbox is checked when
    the group is made: `SandboxUnavailableError` then names what this machine lacks.
    """

    def __init__(
        self,
        timeout: float = 10.0,
        memory_limit_mb: int = 512,
        max_output_chars: int = 10000,
        allow_network: bool = False,
        unsafe_no_sandbox: bool = False,
    ):
        super().__init__(name="PythonCodeExecutorToolGroup")
        self.timeout = timeout
        self.memory_limit_mb = memory_limit_mb
        self.max_output_chars = max_output_chars
        self.allow_network = allow_network
        self.unsafe_no_sandbox = unsafe_no_sandbox
        if unsafe_no_sandbox:
            logger.warning(
                "PythonCodeExecutorToolGroup(unsafe_no_sandbox=True): model-written code runs as this user, with read "
                "and write access to this user's files (home folder, credentials, checkpoints)"
            )
        else:
            require_sandbox(allow_network)

    @tool
    def python(self, code: str) -> str:
        """Run `code` and return its stdout; errors, timeouts and memory exhaustion come back as text."""
        try:
            execution = execute_python(
                code if isinstance(code, str) else str(code),
                timeout=self.timeout,
                memory_limit_mb=self.memory_limit_mb,
                max_output_chars=self.max_output_chars,
                allow_network=self.allow_network,
                unsafe_no_sandbox=self.unsafe_no_sandbox,
            )
        except OSError as exc:  # e.g. no process slots or disk space left: report, never raise
            return f"{ERROR_PREFIX}could not start the interpreter ({exc})"
        return _report(execution)


def _report(execution: PythonExecution) -> str:
    """Upstream's text contract: stdout on success, otherwise one `Error executing Python code: ...` line."""
    if execution.timed_out or execution.out_of_memory:
        return ERROR_PREFIX + execution.failure
    err = execution.stderr.strip()
    if err:
        return ERROR_PREFIX + err
    if execution.failure:
        return ERROR_PREFIX + execution.failure
    if execution.returncode != 0:
        return f"{ERROR_PREFIX}the process exited with status {execution.returncode}"
    return execution.stdout
