"""`python -m skyrl_train.entrypoints.main_base key=value ...` loads and validates before training."""

import subprocess
import sys

import pytest

from skyrl_train.entrypoints import main_base


def test_invalid_config_exits_nonzero_naming_the_key():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "skyrl_train.entrypoints.main_base",
            "trainer.train_batch_size=3",
            "trainer.policy_mini_batch_size=2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "trainer.train_batch_size" in result.stderr and "trainer.policy_mini_batch_size" in result.stderr


def test_unknown_key_is_reported_with_a_suggestion(capsys):
    assert main_base.main(["trainer.polcy.model.path=x"]) == 2
    assert "Did you mean 'trainer.policy.model.path'?" in capsys.readouterr().err


def test_valid_config_reaches_the_run_which_names_a_missing_dataset(tmp_path):
    missing = tmp_path / "train.parquet"
    with pytest.raises(FileNotFoundError, match="train.parquet"):
        main_base.main([f"data.train_data=[{missing}]", f"trainer.export_path={tmp_path / 'exports'}"])
