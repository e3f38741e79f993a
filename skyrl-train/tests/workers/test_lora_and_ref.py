"""LoRA policy and the reference worker: only the adapter trains; the reference is the base model."""

from __future__ import annotations

import torch

from skyrl_train.config.schema import RefConfig, RefModelConfig
from skyrl_train.workers import RefWorker


def test_lora_trains_only_adapter_weights(build_policy, batch, on_policy):
    torch.manual_seed(0)
    worker = build_policy(lora_rank=4)
    on_policy(worker, batch)
    batch["advantages"][0] = 1.0
    before = {name: p.detach().clone() for name, p in worker.model.named_parameters()}
    worker.ppo_train(batch, mini_batch_size=2, micro_batch_size=1)
    changed = {name for name, p in worker.model.named_parameters() if not torch.equal(before[name], p)}
    assert changed and all("lora_" in name for name in changed)
    assert all(p.requires_grad == ("lora_" in name) for name, p in worker.model.named_parameters())


def test_fresh_adapter_gives_policy_logprobs_equal_to_ref(build_policy, batch):
    torch.manual_seed(0)
    worker = build_policy(lora_rank=4)
    ref = RefWorker.for_policy(worker, RefConfig(model=RefModelConfig(path=None)))
    policy_logprobs = worker.compute_logprobs(batch, micro_batch_size=4)
    assert torch.equal(policy_logprobs, ref.compute_logprobs(batch, micro_batch_size=4))


def test_ref_with_adapter_disabled_equals_the_base_model_after_training(build_policy, batch, on_policy, model_path):
    torch.manual_seed(0)
    worker = build_policy(lora_rank=4, temperature=0.8)
    ref = RefWorker.for_policy(worker, RefConfig(model=RefModelConfig(path=model_path)))
    assert ref.model is worker.model  # no second copy
    on_policy(worker, batch)
    batch["advantages"][0] = 1.0
    worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    base = RefWorker.from_pretrained(model_path, temperature=0.8).compute_logprobs(batch, micro_batch_size=4)
    torch.testing.assert_close(ref.compute_logprobs(batch, micro_batch_size=2), base, atol=1e-6, rtol=0)
    assert not torch.allclose(worker.compute_logprobs(batch, micro_batch_size=4), base, atol=1e-4)


def test_full_fine_tuning_gets_a_separate_frozen_ref(build_policy, batch, on_policy):
    worker = build_policy()
    ref = RefWorker.for_policy(worker, RefConfig(model=RefModelConfig(path=worker.model_path)))
    assert ref.model is not worker.model
    assert not any(p.requires_grad for p in ref.model.parameters())
    before = ref.compute_logprobs(batch, micro_batch_size=4)
    on_policy(worker, batch)
    batch["advantages"][0] = 1.0
    worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=4)
    assert torch.equal(ref.compute_logprobs(batch, micro_batch_size=4), before)
