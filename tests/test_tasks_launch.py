"""tasks/launch/launch.sh (what the launch workflow runs) against a scripted `sky`: bounded retries on capacity
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
            setup_then_capacity) echo "⚙︎ Running setup on 2 nodes."; echo "{CAPACITY_ERROR}"; exit 1 ;;
            job_then_capacity) echo "⚙︎ Job submitted, ID: 1"; echo "(head, rank=0) {CAPACITY_ERROR}"; exit 100 ;;
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
        ["bash", "tasks/launch/launch.sh", *args], cwd=REPO_ROOT, env=run_env, capture_output=True, text=True
    )
    calls_file = fake_sky.parent / "calls"
    calls = calls_file.read_text().splitlines() if calls_file.exists() else []
    return result, calls


def test_capacity_errors_are_retried_after_taking_the_cluster_down(fake_sky):
    result, calls = _launch(fake_sky, "capacity capacity ok", "gsm8k", "c1", "--env", "MODEL=m")
    assert result.returncode == 0, result.stderr
    launch = (
        f"launch {REPO_ROOT}/tasks/gsm8k.yaml --cluster c1 --down --yes --secret WANDB_API_KEY "
        "--secret RAY_AUTH_TOKEN --env MODEL=m"
    )
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


@pytest.mark.parametrize(("outcome", "status"), [("setup_then_capacity", 1), ("job_then_capacity", 100)])
def test_a_capacity_error_after_the_task_started_is_not_retried(fake_sky, outcome, status):
    """Once SkyPilot printed that the setup runs or the job was submitted, the job may have run: never again."""
    result, calls = _launch(fake_sky, f"{outcome} ok", "gsm8k", "c5")
    assert result.returncode == status
    assert len(calls) == 1 and calls[0].startswith("launch ")
    assert f"failed with status {status} after the task started on the cluster; not retrying" in result.stderr


@pytest.mark.parametrize("given", ["", "t" * 64])
def test_the_ray_token_is_passed_by_name_and_fresh_for_each_launch_unless_given(fake_sky, given):
    tokens = fake_sky.parent / "tokens"
    script = fake_sky.read_text().replace(
        "#!/usr/bin/env bash\n", f'#!/usr/bin/env bash\necho "$RAY_AUTH_TOKEN" >>"{tokens}"\n'
    )
    fake_sky.write_text(script)
    for cluster in ("c6", "c7"):
        result, calls = _launch(fake_sky, "ok ok", "grpo", cluster, RAY_AUTH_TOKEN=given)
        assert result.returncode == 0, result.stderr
        assert "--secret RAY_AUTH_TOKEN" in calls[-1] and "t" * 64 not in calls[-1]
    first, second = tokens.read_text().split()
    if given:
        assert first == second == given
    else:
        assert len(first) == len(second) == 64 and first != second


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
    assert {"task", "model", "checkpoint", "data_version", "resume_run_name", "nodes"} <= set(inputs)
    assert sorted(inputs["task"]["options"]) == sorted(p.stem for p in (REPO_ROOT / "tasks").glob("*.yaml"))
    steps = workflow["jobs"]["launch"]["steps"]
    launch = next(s for s in steps if s.get("name") == "Launch")
    assert "bash tasks/launch/launch_args.sh" in launch["run"] and "bash tasks/launch/launch.sh" in launch["run"]
    assert {"TASK", "MODEL", "CHECKPOINT", "RESUME_RUN_NAME", "DATA_VERSION", "NODES"} <= set(launch["env"])
    secrets = {k: v for k, v in launch["env"].items() if "secrets." in str(v)}
    assert set(launch["env"]["LAUNCH_SECRETS"].split()) == set(secrets)  # every secret passed is a repository secret
    assert all(v == f"${{{{ secrets.{k} }}}}" for k, v in secrets.items())
    down = next(s for s in steps if s.get("name") == "sky down")
    assert down["if"] == "always()" and 'sky down --yes "$CLUSTER"' in down["run"]
    assert steps.index(down) > steps.index(launch)


def _launch_args(**inputs: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MODEL", "CHECKPOINT", "RESUME_RUN_NAME", "NODES")}
    return subprocess.run(
        ["bash", "tasks/launch/launch_args.sh"],
        cwd=REPO_ROOT,
        env={**env, "RUN_NAME": "r1", **inputs},
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({"CHECKPOINT": "s3://b/p/run/global_step_40"}, ["CHECKPOINT=s3://b/p/run/global_step_40"]),
        ({"MODEL": "Qwen/Qwen3-8B"}, ["MODEL=Qwen/Qwen3-8B"]),
        ({"RESUME_RUN_NAME": "gsm8k-1"}, ["EVAL_RUN_NAME=gsm8k-1"]),
    ],
    ids=["checkpoint", "model", "analyse-a-run"],
)
def test_the_workflow_passes_the_eval_task_a_checkpoint_a_model_or_a_run_to_analyse(inputs, expected):
    result = _launch_args(TASK="eval", NODES="1", **inputs)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["--env", "RUN_NAME=r1", "--env", *expected]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"TASK": "eval"}, "eval takes exactly one of checkpoint, model or resume_run_name"),
        ({"TASK": "eval", "MODEL": "m", "CHECKPOINT": "s3://b/c"}, "eval takes exactly one of"),
        ({"TASK": "eval", "MODEL": "m", "NODES": "2"}, "eval runs on 1 node (nodes=2)"),
        ({"TASK": "gsm8k", "CHECKPOINT": "s3://b/c"}, "checkpoint is read by the eval task only"),
        ({"TASK": "gsm8k", "DATA_VERSION": "v1"}, "data_version is read by the grpo task only"),
        ({"TASK": "tau_bench"}, "tau_bench needs user_base_url and user_model"),
    ],
)
def test_inputs_a_task_cannot_take_are_refused_by_name(inputs, message):
    result = _launch_args(**inputs)
    assert result.returncode == 2
    assert message in result.stderr


def test_training_tasks_get_their_node_count_model_and_resume_run():
    result = _launch_args(TASK="grpo", NODES="2", MODEL="m", RESUME_RUN_NAME="old", DATA_VERSION="v3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        *("--env", "RUN_NAME=r1", "--num-nodes", "2", "--env", "MODEL=m", "--env", "RESUME_RUN_NAME=old"),
        *("--env", "DATA_VERSION=v3"),
    ]
