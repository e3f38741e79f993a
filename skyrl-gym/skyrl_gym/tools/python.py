"""`PythonCodeExecutorToolGroup`: run model-written Python in a fresh, resource-limited subprocess.

Each call starts `python -I` (isolated: no user site, no PYTHON* variables, no script dir on sys.path)
in its own session and process group, inside a temporary working directory that is removed afterwards,
with stdin at end-of-file and a minimal environment. A small bootstrap sets the address-space and CPU
limits in the child (no `preexec_fn`, which is unsafe when the parent has threads), then runs the code.
The parent enforces the wall-clock limit and kills the whole process group on timeout, and also after
a normal exit so background children cannot outlive the call. Output is read incrementally and only
a bounded amount is kept, so a flood of output cannot exhaust the parent's memory.
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

from skyrl_gym.tools.core import ToolGroup, tool

ERROR_PREFIX = "Error executing Python code: "
_CODE_FILE = ".snippet.py"
_DRAIN_GRACE = 1.0

# Runs in the child. The user's code is compiled as "<string>" (like `python -c`), registered with
# linecache so tracebacks show its lines, and run as __main__; the bootstrap frame is left out of tracebacks.
_BOOTSTRAP = """
import linecache, resource, sys, traceback, types
def _boot(code_file, memory_bytes, cpu_seconds):
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
_boot(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
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


class PythonCodeExecutorToolGroup(ToolGroup):
    """One tool, `python(code)`, returning the program's stdout or an `Error executing Python code: ...` text."""

    def __init__(self, timeout: float = 10.0, memory_limit_mb: int = 512, max_output_chars: int = 10000):
        super().__init__(name="PythonCodeExecutorToolGroup")
        self.timeout = timeout
        self.memory_limit_mb = memory_limit_mb
        self.max_output_chars = max_output_chars

    @tool
    def python(self, code: str) -> str:
        """Run `code` and return its stdout; errors, timeouts and memory exhaustion come back as text."""
        try:
            return self._run(code if isinstance(code, str) else str(code))
        except OSError as exc:  # e.g. no process slots or disk space left: report, never raise
            return f"{ERROR_PREFIX}could not start the interpreter ({exc})"

    def _run(self, code: str) -> str:
        with tempfile.TemporaryDirectory(prefix="skyrl_python_", ignore_cleanup_errors=True) as workdir:
            with open(os.path.join(workdir, _CODE_FILE), "w", encoding="utf-8") as f:
                f.write(code)
            argv = [
                sys.executable,
                "-I",
                "-c",
                _BOOTSTRAP,
                _CODE_FILE,
                str(self.memory_limit_mb * 1024 * 1024),
                str(math.ceil(self.timeout) + 1),
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
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            stdout = _Capture(self.max_output_chars * 4, keep_tail=False)
            stderr = _Capture(self.max_output_chars * 4, keep_tail=True)
            with proc.stdout, proc.stderr:
                timed_out = _collect(proc, self.timeout, {proc.stdout: stdout, proc.stderr: stderr})
        return self._report(proc.returncode, timed_out, stdout, stderr)

    def _report(self, returncode: int, timed_out: bool, stdout: _Capture, stderr: _Capture) -> str:
        if timed_out:
            return f"{ERROR_PREFIX}timed out after {self.timeout:g} s"
        err = _decode_tail(stderr, self.max_output_chars).strip()
        last_line = err.rsplit("\n", 1)[-1]
        if last_line.split(":", 1)[0].endswith("MemoryError"):  # also numpy's _ArrayMemoryError
            return f"{ERROR_PREFIX}MemoryError: the code exceeded the memory limit of {self.memory_limit_mb} MB"
        if err:
            return ERROR_PREFIX + err
        if returncode == -signal.SIGXCPU:
            return f"{ERROR_PREFIX}CPU time limit exceeded"
        if returncode < 0:
            return f"{ERROR_PREFIX}the process was killed by signal {signal.Signals(-returncode).name}"
        if returncode != 0:
            return f"{ERROR_PREFIX}the process exited with status {returncode}"
        return _decode_head(stdout, self.max_output_chars)
