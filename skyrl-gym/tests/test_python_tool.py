import os
import socket
import time

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


def test_background_children_are_killed(tools, tmp_path):
    marker = tmp_path / "survived"
    child = f"import time; time.sleep(1.5); open({str(marker)!r}, 'w')"
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {child!r}])\nprint('started')"
    assert run(tools, code) == "started\n"
    time.sleep(2.0)
    assert not marker.exists()


def test_isolated_mode_ignores_python_environment_variables(tools, monkeypatch):
    monkeypatch.setenv("PYTHONSTARTUP_MARKER", "1")
    assert run(tools, "import os, sys\nprint(sys.flags.isolated, 'PYTHONSTARTUP_MARKER' in os.environ)") == "1 False\n"


def test_execute_python_keeps_stdout_stderr_and_exit_code_apart():
    code = "import sys\nprint('partial')\nsys.stderr.write('warned\\n')\nsys.exit(4)"
    execution = execute_python(code, timeout=5.0)
    assert (execution.stdout, execution.stderr, execution.returncode) == ("partial\n", "warned\n", 4)
    assert (execution.timed_out, execution.failure) == (False, None)


def test_blocked_network_refuses_connections_to_a_listening_local_socket():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"
        execution = execute_python(code, timeout=5.0, block_network=True)
    assert execution.returncode == 1
    assert execution.stderr.endswith("PermissionError: network access is disabled in this sandbox\n")


def test_blocked_network_still_allows_asyncio_event_loops():
    code = "import asyncio\nasyncio.run(asyncio.sleep(0))\nprint('loop ok')"
    assert execute_python(code, timeout=5.0, block_network=True).stdout == "loop ok\n"


def test_launcher_is_prepended_to_the_interpreter_command():
    execution = execute_python(
        "import os\nprint(os.environ['LAUNCHED_BY'])", timeout=5.0, launcher=["env", "LAUNCHED_BY=env"]
    )
    assert execution.stdout == "env\n"
