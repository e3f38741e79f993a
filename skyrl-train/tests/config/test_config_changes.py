"""The resolved config's difference from the base config (key, base value, value, what set it), and the entrypoints'
command line with `--config`: the change list logged once at start, preset errors named on stderr."""

import io
import logging
from pathlib import Path

from skyrl_train.config import config_changes, format_config_changes, resolve_config
from skyrl_train.config.changes import DERIVED, UNSET, ConfigChange
from skyrl_train.config.loader import OVERRIDE
from skyrl_train.entrypoints import main_base
from skyrl_train.preflight import validate_setup


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_changes_name_the_base_value_the_value_and_the_preset_or_override(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  epochs: 3\n  seed: 42\n")  # the seed is the base value: no change
    changes = config_changes(resolve_config(["trainer.eval_interval=2"], presets=["p.yaml"]))
    assert [c for c in changes if c.key.startswith("trainer.e")] == [
        ConfigChange("trainer.epochs", 1, 3, "p.yaml"),
        ConfigChange("trainer.eval_interval", 5, 2, OVERRIDE),
    ]
    assert "trainer.seed" not in [c.key for c in changes]


def test_a_key_that_follows_another_names_the_interpolation():
    changes = config_changes(resolve_config(["trainer.max_prompt_length=100"]))
    assert ConfigChange("generator.max_input_length", 512, 100, "${trainer.max_prompt_length}") in changes


def test_a_key_validation_fills_in_is_derived():
    loaded = resolve_config(
        ["trainer.max_prompt_length=100", "trainer.algorithm.loss_reduction=seq_mean_token_sum_norm"]
    )
    assert ConfigChange("trainer.algorithm.max_seq_len", None, 1124, DERIVED) in config_changes(loaded)


def test_a_key_added_to_a_free_form_block_was_unset_in_the_base():
    changes = config_changes(resolve_config(["+trainer.policy.model_config_kwargs.attn_implementation=sdpa"]))
    assert changes == [ConfigChange("trainer.policy.model_config_kwargs.attn_implementation", UNSET, "sdpa", OVERRIDE)]


def test_the_change_list_is_one_line_per_key_under_a_header():
    changes = [
        ConfigChange("trainer.epochs", 1, 3, "p.yaml"),
        ConfigChange("data.val_data", [], ["v.parquet"], OVERRIDE),
    ]
    assert format_config_changes(changes) == (
        "Config: 2 keys differ from the base config (ppo_base_config.yaml); key: base -> value [set by]\n"
        "  trainer.epochs: 1 -> 3  [p.yaml]\n"
        "  data.val_data: [] -> ['v.parquet']  [override]"
    )


def test_no_change_says_the_base_config_is_unchanged():
    assert format_config_changes(config_changes(resolve_config())) == (
        "Config: the base config (ppo_base_config.yaml), unchanged."
    )


def test_a_long_value_is_shortened_in_the_log():
    text = format_config_changes([ConfigChange("trainer.run_name", "a", "x" * 300, OVERRIDE)])
    assert text.splitlines()[1] == f"  trainer.run_name: 'a' -> '{'x' * 96}...  [override]"


def test_secret_values_are_redacted_in_the_log_and_their_keys_still_named():
    user = "environment.skyrl_gym.tau_bench.user"
    server_env = "environment.skyrl_gym.mcp_tool.servers.demo.env"
    loaded = resolve_config(
        [
            f"+{user}.api_key=sk-planted-1",
            f"+{server_env}.SERVICE_URL=https://u:planted@h",  # pragma: allowlist secret
            f"+{user}.model=m",
        ]
    )
    lines = format_config_changes(config_changes(loaded)).splitlines()
    assert f"  {user}.api_key: (unset) -> '<redacted>'  [override]" in lines
    assert f"  {server_env}.SERVICE_URL: (unset) -> '<redacted>'  [override]" in lines
    assert f"  {user}.model: (unset) -> 'm'  [override]" in lines
    assert "planted" not in "\n".join(lines)


def test_the_command_line_applies_presets_and_logs_the_changes_once(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  epochs: 3\n")
    seen = []
    with caplog.at_level(logging.INFO, logger=main_base.__name__):
        status = main_base.run_cli(["trainer.seed=7", "--config", "p.yaml"], "doc", seen.append)
    assert status == 0
    assert [(cfg.trainer.epochs, cfg.trainer.seed) for cfg in seen] == [(3, 7)]
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Config: ")]
    assert len(logged) == 1
    assert "  trainer.epochs: 1 -> 3  [p.yaml]" in logged[0].splitlines()
    assert "  trainer.seed: 42 -> 7  [override]" in logged[0].splitlines()


def test_the_command_line_names_the_preset_of_a_bad_key_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  epochs: many\n")
    assert main_base.run_cli(["--config", "p.yaml"], "doc", lambda cfg: None) == 2
    assert "p.yaml: trainer.epochs: expected int, got str 'many'" in capsys.readouterr().err


def test_the_validate_command_reads_presets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  epochs: many\n")
    out = io.StringIO()
    assert validate_setup(["--config=p.yaml"], out=out) == 1
    assert out.getvalue() == "FAIL config:\np.yaml: trainer.epochs: expected int, got str 'many'\n"
