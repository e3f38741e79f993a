"""A policy update on any device and in either dtype is the CPU float32 update, within the dtype's tolerance.

Device-parameterised: on a machine without a GPU only the CPU cases run (bf16 included, the path a GPU run takes by
default); where CUDA is visible the same checks run on it. Batches go in on the CPU and logprobs come back on it.
"""

import pytest
import torch

from skyrl_train.testing import on_every_device

ADVANTAGES = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, 0, 0], [1.0, 1.0, 1.0, 0], [-1.0, 0, 0, 0]])
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 0.05}
"""Absolute tolerance on logprobs (nats) against the CPU float32 step: fp32 kernels differ by rounding only, bf16
weights and activations by ~2^-8 relative."""


def _step(build_policy, batch, *, device, dtype, lora_rank):
    torch.manual_seed(0)  # the same LoRA A matrices for every device and dtype
    worker = build_policy(lora_rank=lora_rank, lr=1e-2, dtype=dtype, device=device)
    batch = batch.to("cpu")
    batch["advantages"] = ADVANTAGES.clone()
    batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=4)
    metrics = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    after = worker.compute_logprobs(batch, micro_batch_size=4)
    return batch["action_log_probs"], after, metrics


@on_every_device
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_a_policy_update_matches_the_cpu_fp32_update(build_policy, batch, device, dtype, lora_rank):
    expected_before, expected_after, expected_metrics = _step(
        build_policy, batch, device="cpu", dtype=torch.float32, lora_rank=lora_rank
    )
    before, after, metrics = _step(build_policy, batch, device=device, dtype=dtype, lora_rank=lora_rank)
    assert before.device.type == after.device.type == "cpu"
    assert before.dtype == after.dtype == torch.float32
    mask = batch["loss_mask"] > 0
    tolerance = TOLERANCE[dtype]
    torch.testing.assert_close(before[mask], expected_before[mask], atol=tolerance, rtol=0)
    torch.testing.assert_close(after[mask], expected_after[mask], atol=tolerance, rtol=0)
    # The step moved every row's logprobs by more than the tolerance, and by as much as on the CPU in fp32.
    moved, expected_moved = (after - before).sum(-1), (expected_after - expected_before).sum(-1)
    assert expected_moved.abs().min() > 4 * tolerance
    torch.testing.assert_close(moved, expected_moved, atol=2 * tolerance, rtol=0)
    assert metrics["policy/skipped_steps"] == 0.0
    assert metrics["policy/policy_loss"] == pytest.approx(expected_metrics["policy/policy_loss"], abs=tolerance)
