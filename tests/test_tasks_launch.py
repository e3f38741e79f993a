"""scripts/cluster/launch.sh (what the launch workflow runs) against a scripted `sky`: bounded retries on capacity
errors with the half-made cluster taken down between attempts, no retry on any other failure, and secrets passed
by name only when they are set.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CAPACITY_ERROR = (
    "sky.exceptions.ResourcesUnavailableError: Failed to provision all possible launchable resources. "
    "Relax the task's resource requirements: 1x AWS({'H200': 8})"
)


@pytest.fixture
def fake_sky(tmp_path: Path) -> Path:
    """A `sky` that logs each call and answers `launch` with the next outcome of $FAKE_SKY_OUTCOMES."""
    script = tmp_path / "sky"
    script.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        echo "$*" >>"{tmp_path}/calls"
        [[ "$1" == launch ]] || exit 0
        n=$(grep -c '^launch' "{tmp_path}/calls")
        read -r -a outcomes <<<"$FAKE_SKY_OUTCOMES"
        case "${{outcomes[$((n - 1))]}}" in
            ok) echo "Job finished (status: SUCCEEDED)."; exit 0 ;;
            capacity) echo "{CAPACITY_ERROR}"; exit 1 ;;
            jobfail) echo "Job finished (status: FAILED)."; exit 100 ;;
        esac
        """))
    script.chmod(0o755)
    return script


def _launch(fake_sky: Path, outcomes: str, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list]:
    run_env = {
        **os.environ,
        "SKY": str(fake_sky),
        "FAKE_SKY_OUTCOMES": outcomes,
        "LAUNCH_BACKOFF_SECONDS": "0",
        "LAUNCH_SECRETS": "WANDB_API_KEY OPENAI_API_KEY",  # pragma: allowlist secret
        "WANDB_API_KEY": "wandb-value",  # pragma: allowlist secret
        **env,
    }
    run_env.pop("OPENAI_API_KEY", None)
    result = subprocess.run(
        ["bash", "scripts/cluster/launch.sh", *args], cwd=REPO_ROOT, env=run_env, capture_output=True, text=True
    )
    calls_file = fake_sky.parent / "calls"
    calls = calls_file.read_text().splitlines() if calls_file.exists() else []
    return result, calls


def test_capacity_errors_are_retried_after_taking_the_cluster_down(fake_sky):
    result, calls = _launch(fake_sky, "capacity capacity ok", "gsm8k", "c1", "--env", "MODEL=m")
    assert result.returncode == 0, result.stderr
    launch = f"launch {REPO_ROOT}/tasks/gsm8k.yaml --cluster c1 --down --yes --secret WANDB_API_KEY --env MODEL=m"
    assert calls == [launch, "down --yes c1", launch, "down --yes c1", launch]
    assert "launch: gsm8k finished on attempt 3" in result.stdout


def test_attempts_are_bounded_and_the_backoff_doubles(fake_sky):
    result, calls = _launch(
        fake_sky, "capacity capacity capacity", "grpo", "c2", LAUNCH_ATTEMPTS="3", LAUNCH_BACKOFF_SECONDS="1"
    )
    assert result.returncode == 75
    assert [c.split()[0] for c in calls] == ["launch", "down"] * 3
    assert "next attempt in 1s" in result.stderr and "next attempt in 2s" in result.stderr
    assert "no capacity for grpo after 3 attempts" in result.stderr


def test_a_failed_job_is_not_retried(fake_sky):
    result, calls = _launch(fake_sky, "jobfail ok", "gsm8k", "c3")
    assert result.returncode == 100
    assert len(calls) == 1 and calls[0].startswith("launch ")
    assert "failed with status 100 (not a capacity error); not retrying" in result.stderr


def test_unknown_task_is_refused_before_any_launch(fake_sky):
    result, calls = _launch(fake_sky, "ok", "nope", "c4")
    assert result.returncode == 2
    assert calls == []
    assert "tasks/nope.yaml" in result.stderr


def test_launch_workflow_dispatch_inputs_retries_and_final_sky_down():
    import yaml

    workflow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "launch.yaml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert list(triggers) == ["workflow_dispatch"]
    inputs = triggers["workflow_dispatch"]["inputs"]
    assert {"task", "model", "data_version", "resume_run_name", "nodes"} <= set(inputs)
    assert sorted(inputs["task"]["options"]) == sorted(p.stem for p in (REPO_ROOT / "tasks").glob("*.yaml"))
    steps = workflow["jobs"]["launch"]["steps"]
    launch = next(s for s in steps if s.get("name") == "Launch")
    assert "bash scripts/cluster/launch.sh" in launch["run"]
    secrets = {k: v for k, v in launch["env"].items() if "secrets." in str(v)}
    assert set(launch["env"]["LAUNCH_SECRETS"].split()) == set(secrets)  # every secret passed is a repository secret
    assert all(v == f"${{{{ secrets.{k} }}}}" for k, v in secrets.items())
    down = next(s for s in steps if s.get("name") == "sky down")
    assert down["if"] == "always()" and 'sky down --yes "$CLUSTER"' in down["run"]
    assert steps.index(down) > steps.index(launch)
