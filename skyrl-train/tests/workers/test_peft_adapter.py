"""A LoRA policy's checkpoint and HF export hold a PEFT adapter folder that ``PeftModel.from_pretrained(base, folder)``
loads to the trained policy's logits, beside the merged export."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from skyrl_train.config.schema import LoraConfig, ModelConfig, PolicyConfig
from skyrl_train.workers import PolicyWorker

from .conftest import algorithm_config


@pytest.fixture
def trained_lora_policy(build_policy, batch, on_policy):
    worker = build_policy(lora_rank=4)
    batch["advantages"][:, :2] = torch.tensor([[1.0, 0.5], [-1.0, 0.5], [0.2, -0.3], [1.0, 0.0]])
    on_policy(worker, batch)
    worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    return worker


def _logits(model, batch) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=batch["sequences"], attention_mask=batch["attention_mask"]).logits


def _peft_logits(model_path, adapter, batch) -> torch.Tensor:
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    return _logits(PeftModel.from_pretrained(base, str(adapter)), batch)


@pytest.mark.parametrize("written_by", ["export_hf", "save_checkpoint"])
def test_the_adapter_loads_with_peft_to_the_policys_logits(
    trained_lora_policy, batch, model_path, tmp_path, written_by
):
    getattr(trained_lora_policy, written_by)(tmp_path / "policy")
    expected = _logits(trained_lora_policy.model, batch)
    assert not torch.allclose(expected, _logits(AutoModelForCausalLM.from_pretrained(model_path), batch))  # trained
    torch.testing.assert_close(_peft_logits(model_path, tmp_path / "policy" / "adapter", batch), expected)


def test_the_adapter_folder_has_peft_file_names_keys_and_config(trained_lora_policy, model_path, tmp_path):
    trained_lora_policy.export_hf(tmp_path / "policy")
    adapter = tmp_path / "policy" / "adapter"
    assert sorted(p.name for p in adapter.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["peft_type"], config["task_type"], config["r"], config["lora_alpha"]) == ("LORA", "CAUSAL_LM", 4, 16)
    assert config["base_model_name_or_path"] == model_path
    keys = load_file(adapter / "adapter_model.safetensors")
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in keys
    assert not [k for k in keys if ".default." in k]
    assert (tmp_path / "policy" / "model.safetensors").is_file()  # the merged export stays


def test_full_fine_tuning_writes_no_adapter(build_policy, tmp_path):
    worker = build_policy()
    worker.export_hf(tmp_path / "export")
    worker.save_checkpoint(tmp_path / "checkpoint")
    assert not (tmp_path / "export" / "adapter").exists()
    assert not (tmp_path / "checkpoint" / "adapter").exists()


def test_an_init_that_rewrote_the_base_weights_writes_no_adapter_and_says_why(model_path, tmp_path, caplog):
    lora = LoraConfig(rank=4, init_method="pissa_niter_2")
    worker = PolicyWorker(PolicyConfig(model=ModelConfig(path=model_path, lora=lora)), algorithm_config())
    with caplog.at_level(logging.WARNING, logger="skyrl_train.models.lora"):
        worker.export_hf(tmp_path / "export")
    assert not (tmp_path / "export" / "adapter").exists()
    assert "model.lora.init_method=pissa_niter_2 rewrote the base weights" in caplog.text
    assert (tmp_path / "export" / "model.safetensors").is_file()
