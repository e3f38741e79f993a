"""The sandbox model-written programs run in (`execute_python`): their own filesystem view, processes and network.

A sandboxed program runs in new user, mount, PID and (unless network is allowed) network namespaces, made with
util-linux's `unshare` by this user: no root, only unprivileged user namespaces. Its filesystem is an empty
read-only tmpfs holding:

- read-only binds of the system folders (`SYSTEM_PATHS`; symlinks such as `/bin -> usr/bin` stay links), of the
  few files of /etc that loading libraries, user names, name resolution and TLS read (`ETC_PATHS`), and of the
  Python installation running this process (its prefixes: the venv and the interpreter's installation);
- /dev/null, zero, full, random and urandom, and a fresh read-only /proc that shows only the sandbox's processes;
- the working folder, the only writable place.

Nothing else is in it: not the home folder, the repository, `.env`, `~/.aws`, checkpoints or other processes. The old
root is detached (`pivot_root`) and every capability dropped (`setpriv`: empty bounding set, no new privileges) before
the program starts, so it cannot remount anything writable. Without network, its network namespace has only a
loopback device that is down: no connection at all, 127.0.0.1 included. With `allow_network` it shares the host's.

The namespace's first process is a small init (`_INIT`) that starts the program, waits for it and writes its exact
exit status (-N: killed by signal N) to a pipe that only it holds, so the program is an ordinary process (signals,
CPU limits and exit statuses behave as outside) and background processes it leaves die when it ends.

`require_sandbox` checks once per process that this works here (the tools exist, the kernel allows the namespaces,
and a program inside sees only its working folder writable) and raises `SandboxUnavailableError` naming what is
missing otherwise. There is no silent fallback: running unsandboxed is `execute_python(unsafe_no_sandbox=True)`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_PATHS = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/resolv.conf",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
)
"""Bound where they exist (symlinks followed). Not /etc as a whole: it holds the host's private keys and secrets."""
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
TOOLS = ("unshare", "sh", "mkdir", "ln", "mount", "umount", "pivot_root", "setpriv")
"""The programs the sandbox is made with: util-linux's, a POSIX shell's and coreutils'."""
_TOOL_SEARCH_PATH = "/usr/sbin:/sbin"
"""Searched after $PATH: pivot_root lives in sbin, which a normal user's PATH often lacks."""
_OPT_OUT = (
    "; without the sandbox, model-written code runs only with unsafe_no_sandbox=True (the python MCP server: "
    "SKYRL_PYTHON_UNSAFE_NO_SANDBOX=1), as this user with this user's files"
)

# The sandbox's first process (`python -I -S -c _INIT STATUS_FD PROGRAM...`): runs the program as its child and writes
# the child's exit status to STATUS_FD, which the program never gets.
_INIT = """
import os, sys
status_fd = int(sys.argv[1])
child = os.fork()
if child == 0:
    os.close(status_fd)
    os.execv(sys.argv[2], sys.argv[2:])
while True:
    pid, status = os.wait()
    if pid == child:
        os.write(status_fd, str(os.waitstatus_to_exitcode(status)).encode())
        break
"""

# Run inside the sandbox by `require_sandbox`: prints every mount point other than the working folder that is writable.
_SELF_CHECK = r"""
import os
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    point = fields[4].replace("\\040", " ")
    if "rw" in fields[5].split(",") and point != os.getcwd():
        print(point)
"""


class SandboxUnavailableError(RuntimeError):
    """This machine cannot run the sandbox; the message names what is missing."""


@dataclass(frozen=True)
class Sandbox:
    """Starts programs in the sandbox (see the module docstring); made by `require_sandbox`."""

    tools: dict[str, str]
    """Absolute path of each of `TOOLS`."""
    allow_network: bool = False

    @contextlib.contextmanager
    def popen(
        self, argv: Sequence[str], workdir: str, **popen_kwargs: Any
    ) -> Iterator[tuple[subprocess.Popen, Callable[[], int]]]:
        """Start `argv` (its first item an absolute path) in the sandbox with `workdir` (absolute) as its working
        and only writable folder; `popen_kwargs` go to `subprocess.Popen`. Yields the process (wait for it inside
        the context) and a function giving, once it has ended, the program's exit status as `subprocess` reports
        it (the launcher's own status if the program never ended, e.g. all was killed on a timeout)."""
        read_fd, write_fd = os.pipe()
        try:
            with tempfile.TemporaryDirectory(prefix="skyrl_sandbox_root_") as root:
                namespaces = ["--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child"]
                if not self.allow_network:
                    namespaces.append("--net")
                init = [sys.executable, "-I", "-S", "-c", _INIT, str(write_fd)]
                command = [self.tools["unshare"], *namespaces, "--", self.tools["sh"], "-c"]
                command += [self._setup_script(root, workdir), "skyrl-sandbox", *init, *argv]
                proc = subprocess.Popen(command, cwd=workdir, pass_fds=(write_fd,), **popen_kwargs)
                os.close(write_fd)
                write_fd = -1
                yield proc, functools.partial(_exit_status, proc, read_fd)
        finally:
            for fd in (read_fd, write_fd):
                if fd >= 0:
                    os.close(fd)

    def _setup_script(self, root: str, workdir: str) -> str:
        """The shell script that runs as the new namespaces' root: mount the view on `root`, move into it (the old
        root detached), drop every capability and exec its arguments."""
        entries = view_entries()
        tool = {name: shlex.quote(path) for name, path in self.tools.items()}
        q = shlex.quote
        folders = {os.path.dirname(target) for _, _, target in entries}
        folders |= {target for kind, _, target in entries if kind == "dir"} | {"/proc", workdir}
        lines = [
            "set -eu",
            f"{tool['mount']} -t tmpfs -o nosuid,nodev,mode=0755,size=1m skyrl-sandbox {q(root)}",
            f"{tool['mkdir']} -p {' '.join(q(root + folder) for folder in sorted(folders))}",
        ]
        for kind, source, target in entries:
            if kind == "link":
                lines.append(f"{tool['ln']} -s {q(source)} {q(root + target)}")
                continue
            if kind == "file":
                lines.append(f": >{q(root + target)}")
            lines.append(f"{tool['mount']} --bind -o ro {q(source)} {q(root + target)}")
        lines += [
            f"{tool['mount']} -t proc -o ro,nosuid,nodev,noexec proc {q(root + '/proc')}",
            f"{tool['mount']} --bind {q(workdir)} {q(root + workdir)}",
            f"{tool['mount']} -o remount,ro {q(root)}",
            f"cd {q(root)}",
            f"{tool['pivot_root']} . .",
            f"{tool['umount']} -l .",
            f"cd {q(workdir)}",
            f'exec {tool["setpriv"]} --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"',
        ]
        return "\n".join(lines) + "\n"


def _exit_status(proc: subprocess.Popen, status_fd: int) -> int:
    os.set_blocking(status_fd, False)
    try:
        reported = os.read(status_fd, 32)
    except BlockingIOError:
        reported = b""
    return int(reported) if reported else proc.returncode


def view_entries() -> list[tuple[str, str, str]]:
    """The sandbox's read-only view as (kind, source, target) triples: kind "link" (target is a symlink to source),
    "dir" or "file" (source bound at target). Raises `SandboxUnavailableError` when the Python installation holds the
    home folder, which binding it would expose."""
    entries = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            entries.append(("link", os.readlink(path), path))
        elif os.path.isdir(path):
            entries.append(("dir", path, path))
    for path in (*ETC_PATHS, *DEVICES):
        if os.path.exists(path):
            entries.append(("dir" if os.path.isdir(path) else "file", path, path))
    entries += [("dir", prefix, prefix) for prefix in python_prefixes()]
    return entries


def python_prefixes() -> list[str]:
    """The folders of the running Python (venv, installation) that are not in a system folder, outermost only."""
    candidates = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    candidates.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    home = os.path.realpath(os.path.expanduser("~"))
    prefixes: list[str] = []
    for prefix in sorted(os.path.abspath(p) for p in candidates):
        if _is_within(prefix, SYSTEM_PATHS) or _is_within(prefix, prefixes):
            continue
        if _is_within(home, [os.path.realpath(prefix)]):
            raise SandboxUnavailableError(
                f"the Python installation at {prefix} contains the home folder {home}: a sandbox that can run this "
                "interpreter would expose the home folder; use a venv or interpreter outside it"
            )
        prefixes.append(prefix)
    return prefixes


def _is_within(path: str, folders: Sequence[str]) -> bool:
    return any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in folders)


@functools.cache
def require_sandbox(allow_network: bool = False) -> Sandbox:
    """The sandbox, checked to work on this machine (once per process and `allow_network`).

    Raises:
        SandboxUnavailableError: a tool is missing, the kernel refuses the namespaces, or the self-check found a
            writable folder besides the working one; the message says which and what to do.
    """
    search_path = f"{os.environ.get('PATH', '')}:{_TOOL_SEARCH_PATH}"
    tools = {name: shutil.which(name, path=search_path) for name in TOOLS}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        raise SandboxUnavailableError(
            f"the Python sandbox needs {', '.join(missing)} (util-linux, coreutils and a POSIX shell), which are not "
            f"installed{_OPT_OUT}"
        )
    sandbox = Sandbox(tools, allow_network)
    check = [sys.executable, "-I", "-c", _SELF_CHECK]
    with tempfile.TemporaryDirectory(prefix="skyrl_python_") as workdir:
        try:
            with sandbox.popen(check, workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as started:
                proc, exit_status = started
                try:
                    stdout, stderr = proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()  # unshare --kill-child takes the sandbox down with it
                    proc.wait()
                    raise SandboxUnavailableError(f"the Python sandbox did not start within 30 s{_OPT_OUT}") from None
                status = exit_status()
        except OSError as error:
            raise SandboxUnavailableError(f"the Python sandbox could not start ({error}){_OPT_OUT}") from error
    if status != 0:
        raise SandboxUnavailableError(
            f"the Python sandbox could not be set up ({stderr.strip() or f'exit status {status}'}): it needs "
            "unprivileged user, mount and PID namespaces (sysctl user.max_user_namespaces > 0; on Ubuntu 24.04 "
            "also kernel.apparmor_restrict_unprivileged_userns=0; in a container, a seccomp profile that allows "
            f"them){_OPT_OUT}"
        )
    if stdout.strip():
        writable = ", ".join(stdout.split())
        raise SandboxUnavailableError(
            f"the Python sandbox's self-check found writable folders besides its own: {writable}"
        )
    return sandbox
