"""`load_causal_lm` and `load_backbone` refuse a folder whose weights would leave parameters random."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from skyrl_train.models import load_backbone, load_causal_lm

WEIGHTS = "model.safetensors"


def _copy_with_weights(source: str, target: Path, rewrite) -> Path:
    shutil.copytree(source, target)
    save_file(rewrite(load_file(str(Path(source) / WEIGHTS))), str(target / WEIGHTS))
    return target


def test_a_complete_folder_loads_its_own_weights(tiny_model):
    model = load_causal_lm(tiny_model)
    stored = load_file(str(Path(tiny_model) / WEIGHTS))
    for name, param in model.state_dict().items():
        if name in stored:
            assert torch.equal(param, stored[name]), name


def test_a_training_checkpoints_peft_state_dict_is_refused_not_loaded_as_random_weights(tiny_model, tmp_path):
    # What a LoRA policy's state dict looks like on disk: every key under peft's wrapper, so none matches the model.
    folder = _copy_with_weights(
        tiny_model, tmp_path / "ckpt", lambda weights: {f"base_model.model.{k}": v for k, v in weights.items()}
    )
    with pytest.raises(ValueError, match="missing") as error:
        load_causal_lm(folder)
    message = str(error.value)
    assert str(folder) in message and "random weights" in message and "unexpected" in message
    assert "model.layers.0." in message  # names parameters the checkpoint lacks


def test_one_missing_parameter_is_enough_to_refuse(tiny_model, tmp_path):
    dropped = "model.layers.1.mlp.down_proj.weight"
    folder = _copy_with_weights(
        tiny_model, tmp_path / "partial", lambda weights: {k: v for k, v in weights.items() if k != dropped}
    )
    with pytest.raises(ValueError, match=r"1 missing \(e\.g\. model\.layers\.1\.mlp\.down_proj\.weight\)"):
        load_causal_lm(folder)


def test_a_critic_backbone_loads_from_a_causal_lm_folder_and_refuses_a_peft_state_dict(tiny_model, tmp_path):
    backbone = load_backbone(tiny_model)
    stored = load_file(str(Path(tiny_model) / WEIGHTS))
    assert torch.equal(backbone.embed_tokens.weight, stored["model.embed_tokens.weight"])
    folder = _copy_with_weights(
        tiny_model, tmp_path / "ckpt", lambda weights: {f"base_model.model.{k}": v for k, v in weights.items()}
    )
    with pytest.raises(ValueError, match="missing"):
        load_backbone(folder)
