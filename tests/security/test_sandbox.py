"""Model-written Python runs sandboxed: it cannot read the user's files, write outside its folder, see other processes
or reach the network unless allowed, and ordinary code still runs.

Every test runs real programs through `skyrl_gym.tools.python` (the gym tool group and `execute_python`, which the
python MCP server also uses) in the real sandbox of this machine; none is skipped where the sandbox is missing: a
machine that cannot run it fails here with `SandboxUnavailableError` naming what it lacks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from skyrl_gym.tools.python import PythonCodeExecutorToolGroup, execute_python

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def planted_in_home():
    """A file with a secret in the real home folder, removed afterwards: (path, secret)."""
    path = Path.home() / f".skyrl-sandbox-planted-{uuid.uuid4().hex}"
    secret = f"aws_secret_access_key={uuid.uuid4().hex}"
    path.write_text(secret)
    yield path, secret
    path.unlink()


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 that records what each connection sends: (port, list of received payloads)."""
    received: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(5)
                received.append(connection.recv(1024))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join()
    server.close()


def run(code: str, **kwargs) -> tuple[int, str, str]:
    execution = execute_python(code, timeout=10.0, **kwargs)
    return execution.returncode, execution.stdout, execution.stderr


def test_ordinary_code_runs_and_returns_its_output():
    tools = PythonCodeExecutorToolGroup(timeout=10.0)
    code = "import json, math, statistics\nprint(json.dumps({'mean': statistics.mean([1, 2, 3]), 'pi': math.pi}))"
    assert tools.execute_tool("python", code) == '{"mean": 2, "pi": 3.141592653589793}\n'


def test_a_file_planted_in_the_home_folder_cannot_be_read(planted_in_home):
    path, secret = planted_in_home
    code = f"import os\nprint(os.path.exists({str(path)!r}))\nprint(open({str(path)!r}).read())"
    returncode, stdout, stderr = run(code)
    assert (returncode, stdout) == (1, "False\n")
    assert secret not in stderr
    assert stderr.endswith(f"FileNotFoundError: [Errno 2] No such file or directory: {str(path)!r}\n")


def test_the_repository_env_files_and_system_secrets_are_not_visible(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("SKYRL_API_KEY=planted")
    paths = [str(REPO_ROOT / "README.md"), str(env_file), "/etc/shadow", str(Path.home() / ".aws")]
    assert [os.path.exists(path) for path in paths[:3]] == [True, True, True]  # on this machine
    assert run(f"import os\nprint([os.path.exists(p) for p in {paths!r}])") == (0, "[False, False, False, False]\n", "")


def test_nothing_can_be_written_outside_the_working_folder(tmp_path):
    targets = [str(tmp_path / "escaped.txt"), os.path.join(sys.prefix, "escaped.txt"), "/usr/escaped.txt", "/escaped"]
    code = (
        "import os\n"
        f"for target in {targets!r}:\n"
        "    try:\n"
        "        open(target, 'w').write('x')\n"
        "        print('wrote', target)\n"
        "    except OSError as error:\n"
        "        print(error.strerror)\n"
        "open('inside.txt', 'w').write('x')\n"
        "print(sorted(os.listdir('.')))"
    )
    returncode, stdout, _ = run(code)
    assert (returncode, stdout.splitlines()) == (
        0,
        ["No such file or directory", "Read-only file system", "Read-only file system", "Read-only file system"]
        + ["['.snippet.py', 'inside.txt']"],
    )
    assert [os.path.exists(target) for target in targets] == [False, False, False, False]


def test_read_only_folders_cannot_be_remounted_writable():
    code = (
        "import subprocess\n"
        "for argv in (['mount', '-o', 'remount,rw', '/usr'], ['unshare', '--user', '--map-root-user', '--mount',\n"
        "             'mount', '-o', 'remount,rw', '/usr']):\n"
        "    print(subprocess.run(argv, capture_output=True).returncode != 0)\n"
        "open('/usr/escaped', 'w')"
    )
    returncode, stdout, stderr = run(code)
    assert (returncode, stdout) == (1, "True\nTrue\n")
    assert stderr.endswith("OSError: [Errno 30] Read-only file system: '/usr/escaped'\n")
    assert not os.path.exists("/usr/escaped")


def test_only_the_sandboxes_own_processes_are_visible():
    # pid 1 is the sandbox's init, the program its child; the trainer and the rest of the machine are not there
    code = "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == sorted({1, os.getpid()}))"
    assert run(code) == (0, "True\n", "")


def test_no_socket_reaches_a_listening_local_server(listener):
    port, received = listener
    direct = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'direct')"
    returncode, _, stderr = run(direct)
    assert returncode == 1
    assert stderr.endswith("PermissionError: network access is disabled in this sandbox\n")
    # A child process does not inherit the audit hook: the network namespace stops it.
    child = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'child')"
    escape = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {child!r}], check=True)"
    returncode, _, stderr = run(escape)
    assert returncode == 1
    assert "OSError: [Errno 101] Network is unreachable" in stderr
    assert received == []


def test_the_gym_tool_group_has_no_network_by_default(listener):
    port, received = listener
    tools = PythonCodeExecutorToolGroup(timeout=10.0)
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"
    assert tools.execute_tool("python", code).endswith("PermissionError: network access is disabled in this sandbox")
    assert received == []


def test_the_network_key_turns_the_network_on(listener):
    port, received = listener
    tools = PythonCodeExecutorToolGroup(timeout=10.0, allow_network=True)
    code = (
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'allowed')\nprint('sent')"
    )
    assert tools.execute_tool("python", code) == "sent\n"
    assert received == [b"allowed"]


def test_a_machine_without_the_sandbox_tools_gets_an_error_naming_them(tmp_path):
    make_group = "from skyrl_gym.tools.python import PythonCodeExecutorToolGroup\nPythonCodeExecutorToolGroup()"
    result = subprocess.run(
        [sys.executable, "-c", make_group], env={"PATH": str(tmp_path)}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.endswith(
        "skyrl_gym.tools.sandbox.SandboxUnavailableError: the Python sandbox needs unshare, sh, mkdir, ln, mount, "
        "umount, setpriv (util-linux, coreutils and a POSIX shell), which are not installed; without the sandbox, "
        "model-written code runs only with unsafe_no_sandbox=True (the python MCP server: "
        "SKYRL_PYTHON_UNSAFE_NO_SANDBOX=1), as this user with this user's files\n"
    )
