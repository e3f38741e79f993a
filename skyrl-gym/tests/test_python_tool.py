import contextlib
import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from skyrl_gym.tools.python import PythonCodeExecutorToolGroup, execute_python


@pytest.fixture
def tools():
    return PythonCodeExecutorToolGroup(timeout=2.0)


def run(tools, code):
    return tools.execute_tool("python", code)


def test_returns_stdout(tools):
    assert run(tools, "print(6 * 7)") == "42\n"


def test_exception_returns_traceback_text(tools):
    out = run(tools, "def f():\n    raise ValueError('boom')\nf()")
    assert out.startswith("Error executing Python code: Traceback (most recent call last):")
    assert out.endswith("ValueError: boom")
    assert 'File "<string>", line 2, in f' in out


def test_syntax_error(tools):
    out = run(tools, "print(")
    assert out.startswith("Error executing Python code: ")
    assert "SyntaxError" in out


def test_stderr_output_is_an_error(tools):
    assert run(tools, "import sys; sys.stderr.write('careful'); print('ok')") == "Error executing Python code: careful"


def test_non_zero_exit_without_stderr(tools):
    assert run(tools, "import sys; sys.exit(3)") == "Error executing Python code: the process exited with status 3"


def test_infinite_loop_times_out(tools):
    start = time.monotonic()
    assert run(tools, "while True: pass") == "Error executing Python code: timed out after 2 s"
    assert time.monotonic() - start < 3.5


def test_allocating_2gb_hits_the_memory_limit(tools):
    out = run(tools, "data = bytearray(2 * 1024 ** 3)\nprint(len(data))")
    assert out == "Error executing Python code: MemoryError: the code exceeded the memory limit of 512 MB"


def test_stdin_is_closed(tools):
    assert run(tools, "input()").endswith("EOFError: EOF when reading a line")


def test_runs_as_main_in_a_temporary_directory_that_is_removed(tools):
    out = run(tools, "import os\nprint(__name__)\nprint(os.getcwd())\nopen('left.txt', 'w').write('x')")
    name, workdir = out.split()
    assert name == "__main__"
    assert os.path.basename(workdir).startswith("skyrl_python_")
    assert not os.path.exists(workdir)


def test_huge_output_is_truncated_with_marker():
    tools = PythonCodeExecutorToolGroup(timeout=5.0, max_output_chars=100)
    out = run(tools, "print('x' * 1_000_000)")
    assert out == "x" * 100 + "\n... [output truncated: showing the first 100 characters of 1000001 bytes]"


def _processes_running(token: str) -> list[int]:
    """Pids of this machine's processes whose command line holds `token`."""
    pids = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                pids.append(int(entry))
    return pids


@pytest.mark.parametrize("unsafe_no_sandbox", [False, True], ids=["sandbox", "unsafe_no_sandbox"])
def test_background_children_are_killed(unsafe_no_sandbox):
    token = f"skyrl-background-child-{uuid.uuid4().hex}"
    child = f"import time; time.sleep(30)  # {token}"
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {child!r}])\nprint('started')"
    execution = execute_python(code, timeout=5.0, unsafe_no_sandbox=unsafe_no_sandbox)
    assert execution.stdout == "started\n"
    deadline = time.monotonic() + 5
    while _processes_running(token) and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGKILLed processes vanish once the kernel has reaped them
    assert _processes_running(token) == []


def test_isolated_mode_ignores_python_environment_variables(tools, monkeypatch):
    monkeypatch.setenv("PYTHONSTARTUP_MARKER", "1")
    assert run(tools, "import os, sys\nprint(sys.flags.isolated, 'PYTHONSTARTUP_MARKER' in os.environ)") == "1 False\n"


def test_execute_python_keeps_stdout_stderr_and_exit_code_apart():
    code = "import sys\nprint('partial')\nsys.stderr.write('warned\\n')\nsys.exit(4)"
    execution = execute_python(code, timeout=5.0)
    assert (execution.stdout, execution.stderr, execution.returncode) == ("partial\n", "warned\n", 4)
    assert (execution.timed_out, execution.failure) == (False, None)


def test_without_network_python_sockets_fail_with_a_clear_error():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"
        execution = execute_python(code, timeout=5.0)
    assert execution.returncode == 1
    assert execution.stderr.endswith("PermissionError: network access is disabled in this sandbox\n")


def test_without_network_asyncio_event_loops_still_run():
    code = "import asyncio\nasyncio.run(asyncio.sleep(0))\nprint('loop ok')"
    assert execute_python(code, timeout=5.0).stdout == "loop ok\n"


def test_a_signal_and_an_exit_status_above_128_are_told_apart():
    killed = execute_python("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", timeout=5.0)
    exited = execute_python("import sys\nsys.exit(143)", timeout=5.0)
    assert (killed.returncode, killed.failure) == (-15, "the process was killed by signal SIGTERM")
    assert (exited.returncode, exited.failure) == (143, None)


def test_the_cpu_limit_is_reported():
    code = "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (1, 3))\nwhile True: pass"
    execution = execute_python(code, timeout=8.0)
    assert (execution.returncode, execution.failure) == (-24, "CPU time limit exceeded")
