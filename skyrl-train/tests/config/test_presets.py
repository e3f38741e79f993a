"""Preset files (`--config FILE`): merged over the base config in order, before the overrides; `defaults` lists
resolved relative to the preset; errors name the preset file and the key."""

from pathlib import Path

import pytest

from skyrl_train.config import ConfigError, load_config, resolve_config, split_cli_args
from skyrl_train.config.loader import OVERRIDE


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------ order


def test_a_preset_sets_nested_keys_over_the_base_config(tmp_path):
    preset = write(tmp_path / "p.yaml", "trainer:\n  epochs: 3\n  policy:\n    optimizer_config:\n      lr: 3.0e-4\n")
    cfg = load_config(presets=[preset])
    assert (cfg.trainer.epochs, cfg.trainer.policy.optimizer_config.lr) == (3, 3e-4)
    assert cfg.trainer.seed == 42  # untouched keys keep the base value


def test_later_presets_win_over_earlier_ones(tmp_path):
    first = write(tmp_path / "first.yaml", "trainer:\n  epochs: 3\n  seed: 7\n")
    second = write(tmp_path / "second.yaml", "trainer:\n  epochs: 5\n")
    cfg = load_config(presets=[first, second])
    assert (cfg.trainer.epochs, cfg.trainer.seed) == (5, 7)


def test_overrides_apply_after_every_preset(tmp_path):
    preset = write(tmp_path / "p.yaml", "trainer:\n  epochs: 3\n")
    assert load_config(["trainer.epochs=4"], presets=[preset]).trainer.epochs == 4


def test_a_list_in_a_later_layer_replaces_the_list_before(tmp_path):
    preset = write(tmp_path / "p.yaml", "generator:\n  sampling_params:\n    stop: ['</a>', '</b>']\n")
    cfg = load_config(["generator.sampling_params.stop=['</c>']"], presets=[preset])
    assert cfg.generator.sampling_params.stop == ["</c>"]


def test_config_flags_are_split_from_the_overrides_keeping_their_order():
    args = ["trainer.epochs=2", "--config", "a.yaml", "--config=b.yaml", "~trainer.seed"]
    assert split_cli_args(args) == (["a.yaml", "b.yaml"], ["trainer.epochs=2", "~trainer.seed"])


def test_config_flag_without_a_file_is_an_error():
    with pytest.raises(ConfigError, match="--config needs a preset file"):
        split_cli_args(["trainer.epochs=2", "--config"])


def test_an_interpolation_in_a_preset_resolves_against_the_final_config(tmp_path):
    preset = write(tmp_path / "p.yaml", "trainer:\n  run_name: ${trainer.project_name}_run\n")
    assert load_config(["trainer.project_name=proj"], presets=[preset]).trainer.run_name == "proj_run"


def test_a_free_form_block_from_a_preset_merges_with_a_later_override(tmp_path):
    preset = write(tmp_path / "p.yaml", "trainer:\n  policy:\n    model_config_kwargs:\n      a: 1\n      b: 2\n")
    cfg = load_config(["trainer.policy.model_config_kwargs.b=3"], presets=[preset])
    assert cfg.trainer.policy.model_config_kwargs == {"a": 1, "b": 3}


# ---------------------------------------------------------------------------- override syntax on top


def test_tilde_resets_a_key_a_preset_set_to_the_default(tmp_path):
    preset = write(tmp_path / "p.yaml", "trainer:\n  seed: 7\n")
    assert load_config(["~trainer.seed"], presets=[preset]).trainer.seed == 42


def test_plus_on_a_key_a_preset_set_is_an_error_as_in_hydra(tmp_path):
    preset = write(tmp_path / "p.yaml", "trainer:\n  policy:\n    model_config_kwargs:\n      x: 1\n")
    with pytest.raises(ConfigError, match=r"Cannot add 'trainer.policy.model_config_kwargs.x'"):
        load_config(["+trainer.policy.model_config_kwargs.x=2"], presets=[preset])


def test_plus_adds_a_key_beside_the_keys_a_preset_set(tmp_path):
    preset = write(tmp_path / "p.yaml", "trainer:\n  policy:\n    model_config_kwargs:\n      x: 1\n")
    cfg = load_config(["+trainer.policy.model_config_kwargs.y=2"], presets=[preset])
    assert cfg.trainer.policy.model_config_kwargs == {"x": 1, "y": 2}


# ---------------------------------------------------------------------------------------- defaults


def test_defaults_resolve_relative_to_the_preset_and_apply_before_its_own_keys(tmp_path, monkeypatch):
    write(tmp_path / "recipes" / "base.yaml", "trainer:\n  epochs: 3\n  seed: 7\n")
    child = write(tmp_path / "recipes" / "jobs" / "job.yaml", "defaults: [../base.yaml]\ntrainer:\n  epochs: 5\n")
    monkeypatch.chdir(tmp_path)  # the entry is relative to job.yaml's folder, not to the working folder
    cfg = load_config(presets=[child])
    assert (cfg.trainer.epochs, cfg.trainer.seed) == (5, 7)


def test_a_defaults_entry_may_leave_out_the_yaml_suffix_as_in_hydra(tmp_path):
    write(tmp_path / "base.yaml", "trainer:\n  seed: 7\n")
    child = write(tmp_path / "job.yaml", "defaults: [base]\n")
    assert load_config(presets=[child]).trainer.seed == 7


def test_self_first_in_defaults_lets_the_defaults_win(tmp_path):
    write(tmp_path / "base.yaml", "trainer:\n  epochs: 3\n")
    child = write(tmp_path / "job.yaml", "defaults: [_self_, base.yaml]\ntrainer:\n  epochs: 5\n")
    assert load_config(presets=[child]).trainer.epochs == 3


def test_a_recipe_two_presets_build_on_is_applied_once_at_its_first_place(tmp_path):
    write(tmp_path / "recipe.yaml", "trainer:\n  epochs: 3\n")
    write(tmp_path / "tools.yaml", "defaults: [recipe.yaml]\ntrainer:\n  epochs: 4\n")
    job = write(tmp_path / "job.yaml", "defaults: [tools.yaml, recipe.yaml]\n")
    # applied twice, recipe.yaml would undo tools.yaml's value
    assert load_config(presets=[job]).trainer.epochs == 4


def test_a_defaults_cycle_is_an_error_naming_the_chain(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "a.yaml", "defaults: [b.yaml]\n")
    write(tmp_path / "b.yaml", "defaults: [a.yaml]\n")
    with pytest.raises(ConfigError, match=r"^Preset cycle: a.yaml -> b.yaml -> a.yaml$"):
        load_config(presets=["a.yaml"])


def test_a_preset_naming_itself_in_defaults_is_a_cycle(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "a.yaml", "defaults: [a.yaml]\n")
    with pytest.raises(ConfigError, match=r"^Preset cycle: a.yaml -> a.yaml$"):
        load_config(presets=["a.yaml"])


def test_a_missing_defaults_entry_names_the_preset_that_named_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "job.yaml", "defaults: [nowhere.yaml]\n")
    with pytest.raises(ConfigError, match=r"^Preset file not found: nowhere.yaml \(in the defaults of job.yaml\)$"):
        load_config(presets=["job.yaml"])


def test_defaults_that_are_not_a_list_of_paths_are_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "job.yaml", "defaults:\n  - trainer: fast\n")
    with pytest.raises(ConfigError, match=r"^job.yaml: 'defaults' must be a list of preset paths"):
        load_config(presets=["job.yaml"])


# ------------------------------------------------------------------------------------------ errors


def test_an_unknown_key_in_a_preset_names_the_file_and_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  polcy:\n    model:\n      path: x\n")
    with pytest.raises(ConfigError) as info:
        load_config(presets=["p.yaml"])
    assert info.value.problems == ["p.yaml: Unknown config key 'trainer.polcy'. Did you mean 'trainer.policy'?"]


def test_a_wrong_type_in_a_preset_names_the_file_and_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  epochs: many\n")
    with pytest.raises(ConfigError) as info:
        load_config(presets=["p.yaml"])
    assert info.value.problems == ["p.yaml: trainer.epochs: expected int, got str 'many'"]


def test_a_wrong_type_in_a_recipe_names_the_recipe_not_the_preset_built_on_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "recipe.yaml", "generator:\n  max_turns: several\n")
    write(tmp_path / "job.yaml", "defaults: [recipe.yaml]\ntrainer:\n  epochs: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(presets=["job.yaml"])
    assert info.value.problems == ["recipe.yaml: generator.max_turns: expected int, got str 'several'"]


def test_a_key_written_twice_in_one_preset_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  epochs: 1\n  epochs: 2\n")
    with pytest.raises(ConfigError, match=r"(?s)^p.yaml: cannot be read: .*found duplicate key epochs"):
        load_config(presets=["p.yaml"])


def test_a_block_written_twice_in_one_preset_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  epochs: 1\ngenerator:\n  max_turns: 2\ntrainer:\n  seed: 3\n")
    with pytest.raises(ConfigError, match=r"(?s)^p.yaml: cannot be read: .*found duplicate key trainer"):
        load_config(presets=["p.yaml"])


def test_a_dotted_key_in_a_preset_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer.epochs: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(presets=["p.yaml"])
    assert info.value.problems == [
        "p.yaml: key 'trainer.epochs': a preset nests its keys (`a: {b: 1}`), not dotted names."
    ]


def test_a_preset_that_is_not_a_mapping_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "- trainer.epochs=2\n")
    with pytest.raises(ConfigError, match=r"^p.yaml: a preset is a mapping of config keys, got a ListConfig$"):
        load_config(presets=["p.yaml"])


def test_a_bad_interpolation_in_a_preset_names_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p.yaml", "trainer:\n  run_name: ${oops\n")
    with pytest.raises(ConfigError, match=r"(?s)^p.yaml: cannot be read: .*full_key: trainer.run_name"):
        load_config(presets=["p.yaml"])


def test_a_missing_preset_file_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^Preset file not found: absent.yaml$"):
        load_config(presets=["absent.yaml"])


# ----------------------------------------------------------------------------------------- sources


def test_sources_name_the_preset_or_override_that_set_each_key_last(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "recipe.yaml", "trainer:\n  epochs: 3\n  seed: 7\n")
    write(tmp_path / "job.yaml", "defaults: [recipe.yaml]\ntrainer:\n  seed: 8\n")
    loaded = resolve_config(["trainer.eval_interval=2"], presets=["job.yaml"])
    assert [loaded.source_of(k) for k in ("trainer.epochs", "trainer.seed", "trainer.eval_interval")] == [
        "recipe.yaml",
        "job.yaml",
        OVERRIDE,
    ]
    assert loaded.source_of("trainer.max_ckpts_to_keep") is None


def test_a_block_merged_from_two_presets_keeps_each_keys_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "a.yaml", "trainer:\n  policy:\n    model_config_kwargs:\n      x: 1\n      y: 2\n")
    write(tmp_path / "b.yaml", "trainer:\n  policy:\n    model_config_kwargs:\n      x: 3\n")
    loaded = resolve_config(presets=["a.yaml", "b.yaml"])
    assert loaded.source_of("trainer.policy.model_config_kwargs.x") == "b.yaml"
    assert loaded.source_of("trainer.policy.model_config_kwargs.y") == "a.yaml"
