"""Repository tooling: CI workflows, the CI entry point, the README's commands and the lint hooks.

These guard the glue that every other check depends on: a workflow that GitHub would reject, a README
command that no longer matches what CI runs, or a secret scan that silently passes everything.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS_DIR = REPO_ROOT / ".github" / "workflows"
README_COMMANDS = ["bash examples/mcp/run_grpo.sh", "bash scripts/test.sh"]


def _tool(name: str) -> str:
    """Path of a dev tool: the one next to this interpreter (the .venv) first, then PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found next to {sys.executable} or on PATH; run `bash scripts/setup.sh`")
    return found


def _run(args: list[str], cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def _actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    # actionlint runs shellcheck/pyflakes over `run:` scripts only when they are installed; make that explicit
    # so the result does not depend on an unrelated tool being on PATH in some environments.
    args = [_tool("actionlint"), "-no-color"]
    if shutil.which("shellcheck") is None:
        args.append("-shellcheck=")
    if shutil.which("pyflakes") is None:
        args.append("-pyflakes=")
    return _run([*args, *map(str, paths)])


def _workflow_files() -> list[Path]:
    return sorted(p for p in WORKFLOWS_DIR.iterdir() if p.suffix in {".yml", ".yaml"})


# --- GitHub Actions workflows --------------------------------------------------------------------------


@pytest.mark.parametrize("workflow", _workflow_files(), ids=lambda p: p.name)
def test_workflow_passes_actionlint(workflow: Path) -> None:
    result = _actionlint(workflow)
    assert result.returncode == 0, f"actionlint rejected {workflow.name}:\n{result.stdout}{result.stderr}"


def test_actionlint_rejects_a_broken_workflow(tmp_path: Path) -> None:
    """The check above can fail: a workflow with a bad `needs`, no `runs-on` and a bad expression is rejected."""
    broken = tmp_path / ".github" / "workflows" / "broken.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        "on: push\n"
        "jobs:\n"
        "  test:\n"
        "    needs: no-such-job\n"
        "    steps:\n"
        "      - run: echo ${{ github.no_such_context_key }}\n"
    )
    result = _actionlint(broken)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "no-such-job" in output
    assert "runs-on" in output


def _load_workflow(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the bare key `on` as the boolean True.
    data["on"] = data.pop(True, data.get("on"))
    return data


def _test_sh_suites() -> list[str]:
    text = (REPO_ROOT / "scripts" / "test.sh").read_text()
    line = next(line for line in text.splitlines() if "-m pytest" in line)
    return [word for word in shlex.split(line) if word.endswith("tests") or word == "tests"]


def test_cpu_ci_runs_lint_secret_scan_and_every_suite_of_test_sh() -> None:
    workflow = _load_workflow(WORKFLOWS_DIR / "cpu_ci.yaml")
    assert set(workflow["on"]) == {"push", "pull_request"}
    assert workflow["on"]["push"]["branches"] == ["main", "rc/**"]
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["concurrency"]["cancel-in-progress"] is True
    assert "github.ref" in workflow["concurrency"]["group"]

    jobs = workflow["jobs"]
    assert all("timeout-minutes" in job for job in jobs.values())

    lint_runs = "\n".join(step.get("run", "") for step in jobs["lint"]["steps"])
    assert 'export PATH="$PWD/.venv/bin:$PATH"\npre-commit run --all-files' in lint_runs  # hooks find the tools on PATH
    assert re.search(r"gitleaks\"? git ", lint_runs), "lint job must run the gitleaks history scan"

    test_job = jobs["test"]
    assert test_job["needs"] == "lint"
    suites = _test_sh_suites()
    assert suites == ["skyrl-gym/tests", "skyrl-train/tests", "integrations/tests", "tests"]
    assert test_job["strategy"]["matrix"]["suite"] == suites
    test_runs = "\n".join(step.get("run", "") for step in test_job["steps"])
    assert "bash scripts/setup.sh" in test_runs
    assert '.venv/bin/python -m pytest "${{ matrix.suite }}"' in test_runs


# --- CI entry point and README -------------------------------------------------------------------------


def test_ci_run_calls_the_test_script() -> None:
    ci_run = REPO_ROOT / ".ci" / "run"
    assert os.access(ci_run, os.X_OK), ".ci/run must be executable"
    commands = [line.strip() for line in ci_run.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert commands[-1] in {"exec bash scripts/test.sh", "bash scripts/test.sh"}, commands
    assert _run(["bash", "-n", str(ci_run)]).returncode == 0


def _fenced_blocks(markdown: str) -> list[list[str]]:
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S)
    return [
        [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]
        for block in blocks
    ]


def test_readme_documents_exactly_the_two_commands() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert README_COMMANDS in _fenced_blocks(readme), "README needs one fenced block with exactly the two commands"
    assert "bash scripts/test.sh --slow" in readme
    assert (REPO_ROOT / "scripts" / "test.sh").is_file()


# --- pre-commit hooks ----------------------------------------------------------------------------------


def test_pre_commit_config_is_valid_and_offline() -> None:
    config_path = REPO_ROOT / ".pre-commit-config.yaml"
    result = _run([_tool("pre-commit"), "validate-config", str(config_path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "deprecated" not in (result.stdout + result.stderr).lower()

    config = yaml.safe_load(config_path.read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"], "remote hook repos need the network"
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert {"ruff", "black", "detect-secrets"} <= {hook["id"] for hook in hooks}
    for hook in hooks:
        assert hook["language"] in {"unsupported", "pygrep"}, hook["id"]
        if hook["language"] == "unsupported":
            executable = shlex.split(hook["entry"])[0]
            assert "/" not in executable, f"{hook['id']}: {executable} is a path, not a tool looked up on PATH"
            _tool(executable)  # a dev tool of requirements-dev.txt, installed in this environment


def test_the_hooks_run_from_an_environment_outside_the_checkout(tmp_path: Path) -> None:
    """`pre-commit run` in a clone without .venv, with only the dev tools' folder (and git's) on PATH, as in a
    user's own venv or conda env: ruff and black find a badly formatted file."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in (".pre-commit-config.yaml", ".secrets.baseline", "pyproject.toml"):
        shutil.copyfile(REPO_ROOT / name, clone / name)
    (clone / "bad.py").write_text("import os\nx=1\n")
    tools = Path(_tool("pre-commit")).parent
    env = {"PATH": f"{tools}:{Path(shutil.which('git')).parent}", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-cache")
    for command in (["git", "init", "-q"], ["git", "add", "-A"]):
        subprocess.run(command, cwd=clone, env=env, check=True, timeout=60)
    result = subprocess.run(
        ["pre-commit", "run", "--all-files"], cwd=clone, env=env, capture_output=True, text=True, timeout=120
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert re.search(r"ruff check .*Failed", output) and "F401" in output  # `import os` unused
    assert re.search(r"black --check .*Failed", output)
    assert re.search(r"detect-secrets .*Passed", output)


def _detect_secrets_hook(tmp_path: Path, target: Path) -> subprocess.CompletedProcess[str]:
    # A copy of the committed baseline: the hook may rewrite the baseline it is given.
    baseline = tmp_path / "baseline.json"
    shutil.copyfile(REPO_ROOT / ".secrets.baseline", baseline)
    return _run([_tool("detect-secrets-hook"), "--baseline", str(baseline), str(target)])


def _fake_aws_credentials() -> tuple[str, str]:
    # Built at run time so that no scanner ever sees a credential-shaped literal in this repository.
    rng = random.Random(20240601)
    key_id = "AKIA" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=16))
    secret = "".join(rng.choices(string.ascii_letters + string.digits + "/+", k=40))
    return key_id, secret


def test_secrets_baseline_has_no_findings_and_skips_the_venv() -> None:
    baseline = json.loads((REPO_ROOT / ".secrets.baseline").read_text())
    assert baseline["results"] == {}, "audit and remove the secret instead of baselining it"
    excluded = [f["pattern"] for f in baseline["filters_used"] if f["path"].endswith("should_exclude_file")]
    assert excluded and any(re.search(pattern, ".venv/lib/x.py") for pattern in excluded[0])


def test_detect_secrets_hook_flags_a_fake_aws_key(tmp_path: Path) -> None:
    key_id, secret = _fake_aws_credentials()
    leaky = tmp_path / "settings.py"
    leaky.write_text(f'aws_access_key_id = "{key_id}"\naws_secret_access_key = "{secret}"\n')
    result = _detect_secrets_hook(tmp_path, leaky)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "AWS Access Key" in result.stdout + result.stderr


def test_detect_secrets_hook_passes_a_clean_file(tmp_path: Path) -> None:
    clean = tmp_path / "settings.py"
    clean.write_text('import os\n\naws_secret_access_key = os.environ["AWS_SECRET_ACCESS_KEY"]\nregion = "us-east-1"\n')
    result = _detect_secrets_hook(tmp_path, clean)
    assert result.returncode == 0, result.stdout + result.stderr
