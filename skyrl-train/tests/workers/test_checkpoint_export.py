"""Checkpoints restore weights, optimizer and scheduler exactly; the HF export reproduces the policy."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.workers import RefWorker


@pytest.fixture
def rewarded_batch(batch):
    batch["advantages"][:, :2] = torch.tensor([[1.0, 0.5], [-1.0, 0.5], [0.2, -0.3], [1.0, 0.0]])
    return batch


def _train_step(worker, batch, on_policy):
    on_policy(worker, batch)
    worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_resumed_training_matches_uninterrupted_training(build_policy, rewarded_batch, on_policy, tmp_path, lora_rank):
    # A decaying LR and weight decay make the scheduler and optimizer state matter for the second step.
    settings = dict(lora_rank=lora_rank, optimizer={"scheduler": "linear", "weight_decay": 0.1}, num_training_steps=4)
    torch.manual_seed(0)
    uninterrupted = build_policy(**settings)
    _train_step(uninterrupted, rewarded_batch, on_policy)
    uninterrupted.save_checkpoint(tmp_path / "policy")
    _train_step(uninterrupted, rewarded_batch, on_policy)

    torch.manual_seed(1)  # a different fresh adapter: loading must overwrite it
    resumed = build_policy(**settings)
    resumed.load_checkpoint(tmp_path / "policy")
    assert resumed.lr == pytest.approx(0.75e-3)  # linear decay: step 1 of 4
    _train_step(resumed, rewarded_batch, on_policy)

    expected = dict(uninterrupted.model.named_parameters())
    for name, param in resumed.model.named_parameters():
        assert torch.equal(param, expected[name]), name


def test_checkpoint_folder_layout(build_policy, tmp_path):
    build_policy(lora_rank=4).save_checkpoint(tmp_path)
    files = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if path.is_file()}
    assert {"model.safetensors", "optimizer.pt", "extra_state.pt", "huggingface/config.json"} <= files
    assert "huggingface/tokenizer.json" in files


def test_loading_a_checkpoint_with_other_trainable_parameters_fails(build_policy, tmp_path):
    build_policy(lora_rank=4).save_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="trainable parameters"):
        build_policy().load_checkpoint(tmp_path)


def test_checkpoint_restores_rng_state(build_policy, tmp_path):
    worker = build_policy()
    worker.save_checkpoint(tmp_path)
    expected = torch.rand(3)
    worker.load_checkpoint(tmp_path)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_hf_export_loads_with_transformers_and_reproduces_the_policy(
    build_policy, rewarded_batch, on_policy, tmp_path, lora_rank
):
    worker = build_policy(lora_rank=lora_rank, temperature=0.9)
    _train_step(worker, rewarded_batch, on_policy)
    worker.export_hf(tmp_path / "export")
    exported = RefWorker.from_pretrained(str(tmp_path / "export"), temperature=0.9)
    assert type(exported.model).__name__ == "LlamaForCausalLM"
    torch.testing.assert_close(
        exported.compute_logprobs(rewarded_batch, micro_batch_size=4),
        worker.compute_logprobs(rewarded_batch, micro_batch_size=4),
        atol=1e-5,
        rtol=0,
    )
    assert (tmp_path / "export" / "tokenizer.json").is_file()
