"""MLflow backend against a local file store (no server, no network), read back with MLflow's own client."""

import pytest
from mlflow.tracking import MlflowClient

from skyrl_train.tracking import Tracking

CONFIG = {
    "trainer": {"policy": {"model": {"path": "tiny"}}, "epochs": 2},
    "env_vars": {"WANDB_API_KEY": "should-not-leak"},  # pragma: allowlist secret
}


@pytest.fixture
def no_tracking_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _runs(store):
    client = MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("proj")
    return client, client.search_runs([experiment.experiment_id])


def test_params_are_the_redacted_flat_config_and_metrics_are_logged_per_step(tmp_path, no_tracking_uri):
    with Tracking("proj", "run-1", "mlflow", config=CONFIG, output_dir=tmp_path) as tracker:
        tracker.log({"reward/avg_raw_reward": 0.25, "eval/all/pass@4": 0.5, "env/last_error": "timeout"}, step=1)
        tracker.log({"reward/avg_raw_reward": 0.75}, step=2)

    client, [run] = _runs(tmp_path / "mlruns")
    assert run.info.run_name == "run-1"
    assert run.info.status == "FINISHED"
    assert run.data.params == {
        "trainer.policy.model.path": "tiny",
        "trainer.epochs": "2",
        "env_vars.WANDB_API_KEY": "<redacted>",
    }
    history = client.get_metric_history(run.info.run_id, "reward/avg_raw_reward")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.75)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/all/pass_4")] == [(1, 0.5)]
    assert sorted(run.data.metrics) == ["eval/all/pass_4", "reward/avg_raw_reward"]


def test_a_resumed_run_logs_into_the_run_its_checkpoint_names(tmp_path, no_tracking_uri):
    with Tracking("proj", "run-1", "mlflow", config=CONFIG, output_dir=tmp_path) as first:
        first.log({"reward/avg_raw_reward": 0.25}, step=1)
        state = first.state()
    with Tracking("proj", "run-1", "mlflow", config=CONFIG, output_dir=tmp_path) as resumed:
        resumed.resume(state)
        resumed.log({"reward/avg_raw_reward": 0.5}, step=2)

    client, [run] = _runs(tmp_path / "mlruns")
    assert state == {"mlflow": {"run_id": run.info.run_id}}
    history = client.get_metric_history(run.info.run_id, "reward/avg_raw_reward")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.5)]


def test_mlflow_tracking_uri_chooses_the_store(tmp_path, monkeypatch):
    store = tmp_path / "elsewhere"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    with Tracking("proj", "run-1", "mlflow", output_dir=tmp_path / "out") as tracker:
        tracker.log({"reward/avg_raw_reward": 0.25}, step=1)
    assert not (tmp_path / "out" / "mlruns").exists()
    _, [run] = _runs(store)
    assert run.data.metrics == {"reward/avg_raw_reward": 0.25}
