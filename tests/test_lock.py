"""Reproducible installs, read from the files (nothing installed): requirements/lock.txt pins every requirement of the
three pyprojects and of requirements-dev.txt at a version the requirement allows, the dev tools are pinned exactly,
the fork's three distributions pin each other at their one version, and scripts/setup.sh installs from the lock."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "lock.txt"
PYPROJECTS = [REPO / package / "pyproject.toml" for package in ("skyrl-gym", "skyrl-train", "integrations")]
OWN = {"skyrl-gym-toolfork", "skyrl-train-toolfork", "skyrl-integrations-toolfork"}
"""This fork's distributions: installed editable from the checkout, never from the lock."""
NOT_LOCKED = {"torch"}
"""Chosen by SKYRL_TORCH_SPEC (a CPU or a CUDA build), installed before the lock applies."""


def _lines(path: Path) -> list[str]:
    return [line.split(" #")[0].strip() for line in path.read_text().splitlines() if line.strip()[:1] not in ("", "#")]


def _lock() -> dict[str, Version]:
    pins = {}
    for line in _lines(LOCK):
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;]+)", line)
        assert match, f"{LOCK.name}: {line!r} is not an exact pin `name==version`"
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"{LOCK.name} pins {name} twice"
        pins[name] = Version(match.group(2))
    return pins


def _pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def _requirements() -> list[tuple[str, Requirement]]:
    """(where, requirement) of every dependency and optional dependency of the pyprojects and requirements-dev.txt."""
    found = []
    for path in PYPROJECTS:
        project = _pyproject(path)
        extras = [r for group in project.get("optional-dependencies", {}).values() for r in group]
        found += [(str(path.relative_to(REPO)), Requirement(r)) for r in project["dependencies"] + extras]
    found += [("requirements-dev.txt", Requirement(line)) for line in _lines(REPO / "requirements-dev.txt")]
    return found


def test_every_line_of_the_lock_is_one_exact_pin():
    assert len(_lock()) > 100


def test_the_lock_pins_every_requirement_at_a_version_it_allows():
    lock = _lock()
    for where, requirement in _requirements():
        name = canonicalize_name(requirement.name)
        if name in OWN | NOT_LOCKED:
            continue
        assert name in lock, f"{where}: {requirement} is not in {LOCK.name}; run scripts/refresh_lock.sh"
        assert requirement.specifier.contains(
            lock[name], prereleases=True
        ), f"{where}: {requirement} does not allow the locked {name}=={lock[name]}; run scripts/refresh_lock.sh"


def test_the_dev_tools_are_pinned_exactly_at_the_locked_version():
    lock = _lock()
    for where, requirement in _requirements():
        if where == "requirements-dev.txt":
            [spec] = requirement.specifier
            assert spec.operator == "==", f"{where}: {requirement} is not an exact pin"
            assert Version(spec.version) == lock[canonicalize_name(requirement.name)], requirement


def test_the_forks_distributions_share_one_version_and_pin_each_other_exactly():
    projects = [_pyproject(path) for path in PYPROJECTS]
    assert {p["name"] for p in projects} == OWN
    [version] = {p["version"] for p in projects}
    own = [(where, r) for where, r in _requirements() if canonicalize_name(r.name) in OWN]
    assert sorted(str(r) for _, r in own) == [
        f"skyrl-gym-toolfork=={version}",
        f"skyrl-gym-toolfork=={version}",
        f"skyrl-train-toolfork=={version}",
    ]


def test_setup_installs_from_the_lock_and_reinstalls_when_it_changes():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    stamp = setup[setup.index("stamp() {") : setup.index("wanted=")]
    assert '${lock:+"$lock"}' in stamp
    assert '${lock:+-c "$lock"} -r "$repo_root/requirements-dev.txt"' in setup
    assert 'lock="${SKYRL_LOCK-$repo_root/requirements/lock.txt}"' in setup
