"""LLM-based generation against the project's own OpenAI-compatible server (a subprocess), through the real
openai SDK client, bundled MCP servers and writer."""

from __future__ import annotations

import pytest

from skyrl_integrations.datasets.io import write_dataset
from skyrl_integrations.datasets.llm_based import REJECTIONS, LLMGenerationConfig, LLMTaskGenerator, main
from skyrl_integrations.datasets.validate import validate_files
from skyrl_train.models import DEFAULT_MODEL

pytestmark = pytest.mark.timeout(900)


def test_the_default_model_knob_is_the_name_serve_gives_the_default_model():
    assert LLMGenerationConfig().model == DEFAULT_MODEL


def test_noise_from_the_tiny_model_is_rejected_and_counted(tiny_model_url, tiny_model, tmp_path, monkeypatch, capsys):
    for var, value in {
        "N_SAMPLES": "1",
        "OPENAI_MODEL": tiny_model,
        "OPENAI_BASE_URL": tiny_model_url,
        "DOMAINS": "market",
        "COMPLEXITIES": "single",
    }.items():
        monkeypatch.setenv(var, value)
    argv = ["--output-dir", str(tmp_path / "out"), "--max-attempts", "2", "--max-tokens", "8", "--concurrency", "2"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    summary = out.splitlines()
    assert summary[:2] == [
        f"generating 1 question(s) with {tiny_model!r} at {tiny_model_url}",
        "generated 0 valid question(s) in 2 attempt(s)",
    ]
    counts = [line.split() for line in summary[2:]]
    assert sum(int(count) for _, count, _ in counts) == 2 and {reason for *_, reason in counts} <= set(REJECTIONS)
    assert err == "error: no valid question was generated; nothing written\n"
    assert not (tmp_path / "out").exists()


def test_the_default_model_generates_a_valid_task(default_model_url, tmp_path):
    # Greedy decoding and a fixed plan seed: the first attempt asks for web_search("Helix Robotics headquarters"),
    # which SmolLM2-135M-Instruct writes correctly; a second attempt is allowed as slack.
    config = LLMGenerationConfig(
        n_samples=1,
        model=DEFAULT_MODEL,
        base_url=default_model_url,
        domains=("market", "search"),
        complexities=("single",),
        max_attempts=2,
        max_tokens=96,
        temperature=0.0,
        seed=0,
    )
    with LLMTaskGenerator(config) as generator:
        report = generator.run()
    assert len(report.tasks) == 1, report.summary()
    write_dataset(report.tasks, tmp_path, val_ratio=0.0)
    # The validator re-executes the task's calls and finds its expected answer in the results.
    (checked,) = validate_files([str(tmp_path / "train.parquet")], execute=True)
    assert (checked.rows, checked.problems) == (1, [])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_default_model_run_of_six_samples_writes_rows_that_pass_the_validator(default_model_url, tmp_path, monkeypatch):
    for var, value in {
        "N_SAMPLES": "6",
        "OPENAI_MODEL": DEFAULT_MODEL,
        "OPENAI_BASE_URL": default_model_url,
        "DOMAINS": "market,search",
        "COMPLEXITIES": "single",
    }.items():
        monkeypatch.setenv(var, value)
    out = tmp_path / "out"
    assert main(["--output-dir", str(out), "--max-attempts", "12", "--max-tokens", "96", "--val-ratio", "0"]) == 0
    reports = validate_files([str(out / "train.parquet"), str(out / "validation.parquet")], execute=True)
    assert reports[0].rows >= 1
    assert [r.problems for r in reports] == [[], []]
