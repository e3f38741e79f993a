"""ppo_base_config.yaml and docs/config_reference.md are rendered from the schema and never drift from it."""

import subprocess
import sys

from omegaconf import OmegaConf

from skyrl_train.config import BASE_CONFIG_PATH
from skyrl_train.config.render_yaml import DOCS_PATH, render_docs, render_yaml

RERENDER = "run `python -m skyrl_train.config.render_yaml` after changing skyrl_train/config/schema.py"


def test_committed_yaml_equals_the_rendered_one():
    assert BASE_CONFIG_PATH.read_text() == render_yaml(), RERENDER


def test_committed_docs_equal_the_rendered_ones():
    assert DOCS_PATH.read_text() == render_docs(), RERENDER


def test_yaml_keeps_upstream_interpolations():
    raw = OmegaConf.load(BASE_CONFIG_PATH)
    assert OmegaConf.to_container(raw.generator)["model_name"] == "${trainer.policy.model.path}"
    assert OmegaConf.to_container(raw.generator)["max_input_length"] == "${trainer.max_prompt_length}"
    assert OmegaConf.to_container(raw.trainer.ref.model)["path"] == "${trainer.policy.model.path}"


def test_help_text_is_the_comment_above_its_key():
    lines = BASE_CONFIG_PATH.read_text().splitlines()
    i = lines.index("  trajectory_timeout_seconds: 900")
    assert lines[i - 1] == "  # Wall-clock limit per trajectory; 0 = no limit."


def test_docs_have_a_row_per_key_with_type_and_default():
    assert "| `trainer.train_batch_size` | int | `1024` | Prompts per training step. |" in DOCS_PATH.read_text()


def test_check_mode_passes_on_fresh_files():
    result = subprocess.run([sys.executable, "-m", "skyrl_train.config.render_yaml", "--check"], capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
