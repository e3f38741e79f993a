"""bf16 on the CPU (`utils.device.Precision`): the workers' forwards under bf16 autocast over fp32 weights give the
fp32 loss, gradients, logprobs and values within bf16 tolerance, while the weights, gradients and optimizer state
stay fp32 and the LM head, logprobs, entropy and losses are computed in fp32.

Forced with ``autocast_dtype`` (as ``trainer.bf16=true`` does), so these run on any CPU, with AMX or without.
"""

import copy

import pytest
import torch

from skyrl_train.config.schema import AlgorithmConfig, CriticConfig, LoraConfig, ModelConfig, RefConfig, RefModelConfig
from skyrl_train.models import load_causal_lm
from skyrl_train.workers import CriticWorker, RefWorker
from skyrl_train.workers.lm_head import head_logprobs, head_outside_autocast

BF16 = torch.bfloat16
ADVANTAGES = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, 0, 0], [1.0, 1.0, 1.0, 0], [-1.0, 0, 0, 0]])
LOGPROB_TOLERANCE = 0.05
"""Absolute (nats) on a response token's logprob: bf16 matmuls round their inputs to 8 significant bits."""


def _gradient(worker, batch) -> tuple[dict[str, float], torch.Tensor]:
    """One mini-batch's metrics and the flattened gradient it leaves on the trainable weights."""
    metrics = worker.forward_backward(batch, micro_batch_size=2)
    return metrics, torch.cat([p.grad.flatten() for p in worker._params])


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
@pytest.mark.parametrize("sample_packing", [False, True], ids=["padded", "packed"])
def test_a_training_step_under_bf16_autocast_has_the_fp32_loss_and_gradient_within_bf16_tolerance(
    build_policy, batch, lora_rank, sample_packing
):
    batch["advantages"] = ADVANTAGES.clone()
    workers = {}
    for autocast in (None, BF16):
        torch.manual_seed(0)  # the same LoRA A matrices
        worker = build_policy(
            lora_rank=lora_rank, lr=1e-2, sample_packing=sample_packing, use_entropy_loss=True, autocast_dtype=autocast
        )
        batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=4)
        workers[autocast] = (worker, batch["action_log_probs"], *_gradient(worker, batch))
    _, old_fp32, metrics_fp32, grad_fp32 = workers[None]
    worker, old_bf16, metrics_bf16, grad_bf16 = workers[BF16]
    mask = batch["loss_mask"] > 0
    assert old_bf16.dtype == torch.float32
    assert 0 < (old_bf16 - old_fp32)[mask].abs().max() < LOGPROB_TOLERANCE  # autocast ran, and stayed close
    for key in ("policy_loss", "policy_entropy", "final_loss"):
        assert metrics_bf16[key] == pytest.approx(metrics_fp32[key], abs=0.02), key
    cosine = torch.nn.functional.cosine_similarity(grad_bf16, grad_fp32, dim=0)
    assert cosine > 0.99
    assert grad_bf16.norm() == pytest.approx(grad_fp32.norm().item(), rel=0.05)
    # fp32 masters: weights, gradients and the optimizer state after a step
    worker.optim_step()
    trainable = worker._params
    assert {p.dtype for p in trainable} == {torch.float32}
    assert {s["exp_avg"].dtype for s in worker.optimizer.state.values()} == {torch.float32}


@pytest.mark.parametrize("checkpointing", ["reentrant", "non_reentrant"])
def test_activation_checkpointing_recomputes_under_the_same_autocast(build_policy, batch, checkpointing):
    batch["advantages"] = ADVANTAGES.clone()
    gradients = []
    for gradient_checkpointing in (None, checkpointing):
        torch.manual_seed(0)
        worker = build_policy(lora_rank=4, gradient_checkpointing=gradient_checkpointing, autocast_dtype=BF16)
        batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=4)
        gradients.append(_gradient(worker, batch)[1])
    torch.testing.assert_close(gradients[1], gradients[0], atol=1e-6, rtol=1e-5)


def test_on_policy_ratios_under_bf16_autocast_are_exactly_one_and_the_old_logprobs_reuse_the_update_forward(
    build_policy, batch
):
    batch["advantages"] = ADVANTAGES.clone()
    worker = build_policy(lora_rank=4, lr=1e-2, autocast_dtype=BF16)
    reused = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)  # no action_log_probs: reused
    assert reused["policy/old_logprobs_from_update_forward"] == 1.0
    assert reused["policy/ratio_min"] == reused["policy/ratio_max"] == 1.0
    # old logprobs from the eval-mode pass in the update's micro-batches (bf16 rounding depends on a micro-batch's
    # shape): the update's training-mode forward computes the very same ones
    batch["action_log_probs"] = worker.compute_logprobs(batch, micro_batch_size=2)
    separate = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    assert separate["policy/ratio_min"] == separate["policy/ratio_max"] == 1.0


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["separate", "adapter_off"])
def test_the_reference_computes_under_the_policys_autocast(build_policy, batch, lora_rank):
    logprobs = {}
    for autocast in (None, BF16):
        policy = build_policy(lora_rank=lora_rank, autocast_dtype=autocast)
        ref = RefWorker.for_policy(policy, RefConfig(model=RefModelConfig(path=None)))
        assert ref.autocast_dtype == autocast
        logprobs[autocast] = ref.compute_logprobs(batch, micro_batch_size=4)
    mask = batch["loss_mask"] > 0
    assert logprobs[BF16].dtype == torch.float32
    assert 0 < (logprobs[BF16] - logprobs[None])[mask].abs().max() < LOGPROB_TOLERANCE


def test_the_critic_under_bf16_autocast_values_in_fp32_within_bf16_tolerance(model_path, batch):
    values, grads = {}, {}
    batch["returns"] = torch.linspace(-1, 1, batch["loss_mask"].numel()).view_as(batch["loss_mask"])
    for autocast in (None, BF16):
        critic = CriticWorker(
            CriticConfig(model=ModelConfig(path=model_path, lora=LoraConfig(rank=0))),
            AlgorithmConfig(),
            autocast_dtype=autocast,
        )
        with torch.no_grad():  # a non-zero head, so that the values depend on the backbone
            critic.model.value_head.weight.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(0))
        values[autocast] = critic.compute_values(batch, micro_batch_size=4)
        batch["values"] = values[autocast]
        critic.forward_backward(batch, micro_batch_size=2)
        grads[autocast] = torch.cat([p.grad.flatten() for p in critic._params])
    mask = batch["loss_mask"] > 0
    assert values[BF16].dtype == torch.float32
    assert 0 < (values[BF16] - values[None])[mask].abs().max() < 0.01 < values[None][mask].abs().max()
    assert torch.nn.functional.cosine_similarity(grads[BF16], grads[None], dim=0) > 0.99


def test_the_chunked_lm_head_ignores_autocast_so_its_backward_recomputes_the_forwards_fp32_logits():
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(6, 16, generator=generator, requires_grad=True)
    weight = torch.randn(50, 16, generator=generator)
    targets = torch.randint(0, 50, (6,), generator=generator)
    results = []
    for enabled in (False, True):
        with torch.autocast("cpu", dtype=BF16, enabled=enabled):
            logprobs, entropy = head_logprobs(hidden, weight, targets, 0.7, with_entropy=True)
        (grad,) = torch.autograd.grad((logprobs + entropy).sum(), hidden)
        results.append((logprobs, entropy, grad))
    for plain, under_autocast in zip(*results, strict=True):
        assert under_autocast.dtype == torch.float32
        assert torch.equal(under_autocast, plain)


def test_a_models_own_lm_head_kept_out_of_autocast_gives_fp32_logits_in_its_deep_copies_too(model_path):
    """The logits of models the chunked head does not serve (FSDP-sharded ones, other heads)."""
    model = load_causal_lm(model_path)
    ids = torch.tensor([[1, 20, 300, 4000]])
    head_outside_autocast(model)
    for each in (model, copy.deepcopy(model)):
        with torch.no_grad(), torch.autocast("cpu", dtype=BF16):
            logits = each(ids).logits
            hidden = each.get_decoder()(ids).last_hidden_state
        assert hidden.dtype == logits.dtype == torch.float32
        torch.testing.assert_close(logits, hidden @ each.get_output_embeddings().weight.T, atol=1e-5, rtol=1e-5)
