"""Acceptance: on a real local Ray cluster, ``fsdp2`` trains exactly like ``single``, over the machine's ranks
(``machine_ranks``: 2 gloo processes on CPU, one rank per GPU on a GPU machine).

Same tiny model, seed and batch: the old and reference logprobs, the PPO metrics (loss, grad norm, clip ratio,
...) and the updated weights agree within 1e-5 (relative; per tensor for tensors), for LoRA and for full
fine-tuning. The batch is split into 2 mini-batches (2 optimizer steps) of 4 / ranks micro-batches per rank, so
with 2 ranks the global normaliser, the summed gradient and the clipping over sharded gradients are all exercised.
The cases whose point is the split over ranks are skipped on a machine that gives fewer than 2.
"""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config.schema import TrainerConfig
from skyrl_train.distributed.worker_groups import build_fsdp_workers
from skyrl_train.testing import tiny_model_path
from skyrl_train.testing.ray import local_ray, machine_ranks  # noqa: F401
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker
from skyrl_train.workers.protocols import Critic, Policy, Reference

pytestmark = [pytest.mark.slow, pytest.mark.gpu, pytest.mark.usefixtures("local_ray")]

MINI_BATCH, MICRO_BATCH = 4, 1
RTOL = 1e-5
RANKS = machine_ranks(at_most=MINI_BATCH)
"""Policy ranks (they must divide the mini-batch)."""
NEEDS_TWO_RANKS = pytest.mark.skipif(
    RANKS < 2, reason=f"its point is the split over 2 ranks; this machine gives {RANKS}"
)


def trainer_config(
    lora_rank: int, use_kl_loss: bool, fsdp_size: int, reshard_after_forward: bool, ranks: int = RANKS
) -> TrainerConfig:
    t = TrainerConfig()
    t.policy.fsdp_config.fsdp_size = fsdp_size
    t.policy.fsdp_config.reshard_after_forward = reshard_after_forward
    t.strategy = "fsdp2"
    t.placement.colocate_all = False
    t.placement.policy_num_gpus_per_node = ranks
    t.policy.model.path = t.ref.model.path = tiny_model_path()
    t.policy.model.lora.rank = lora_rank
    t.policy.model.lora.alpha = 16
    opt = t.policy.optimizer_config
    # Adam's first steps move an element by ~lr whatever its gradient's size, so a gradient element that is ~0 turns
    # float summation noise (the ranks add partial gradients in another order) into a difference of up to ~lr in
    # that weight. LoRA's B starts at 0, so its weights ARE the update and any lr compares the updates themselves;
    # full fine-tuning compares whole weights, and a small lr keeps that noise below 1e-5 of them.
    lr = 1e-3 if lora_rank else 1e-5
    opt.lr, opt.weight_decay, opt.scheduler, opt.max_grad_norm = lr, 0.0, "constant", 0.5
    t.algorithm.use_kl_loss = use_kl_loss
    t.algorithm.kl_loss_coef = 0.1
    t.algorithm.max_seq_len = 11
    t.gradient_checkpointing = False
    t.bf16 = False
    return t


def trainable(policy: PolicyWorker) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in policy.model.named_parameters() if p.requires_grad}


def run_single(t: TrainerConfig, batch: TrainingInputBatch) -> tuple[dict, dict, dict]:
    """The single-process step: (metrics, weights before, weights after); fills the batch's logprobs."""
    torch.manual_seed(t.seed)
    policy = PolicyWorker(t.policy, t.algorithm, num_training_steps=10)
    before = trainable(policy)
    batch["action_log_probs"] = policy.compute_logprobs(batch, MICRO_BATCH)
    if t.algorithm.use_kl_loss:
        batch["base_action_log_probs"] = RefWorker.for_policy(policy, t.ref).compute_logprobs(batch, MICRO_BATCH)
    metrics = policy.ppo_train(batch, MINI_BATCH, MICRO_BATCH)
    return metrics, before, trainable(policy)


@pytest.mark.parametrize(
    ("lora_rank", "use_kl_loss", "fsdp_size", "reshard_after_forward", "zero_advantage_rows"),
    [
        (8, True, -1, True, ()),
        (0, False, -1, True, ()),
        pytest.param(8, False, 1, False, (), marks=NEEDS_TWO_RANKS),
        pytest.param(8, False, -1, True, (0, 2, 3), marks=NEEDS_TWO_RANKS),
    ],
    ids=["lora-kl", "full", "lora-hsdp-no-reshard", "lora-zero-advantage-rows"],
)
def test_fsdp2_step_equals_single_step(
    lora_rank: int,
    use_kl_loss: bool,
    fsdp_size: int,
    reshard_after_forward: bool,
    zero_advantage_rows: tuple[int, ...],
    make_batch,
    assert_close,
):
    """``fsdp_size=1`` over several ranks is HSDP: each rank holds whole weights and gradients are all-reduced. Rows
    with zero advantages: with 2 ranks, in the first mini-batch (rows 0-1 on rank 0, 2-3 on rank 1) both ranks' first
    micro-batch skips its backward, and the second runs on both, as rank 0's row 1 needs it."""
    t = trainer_config(lora_rank, use_kl_loss, fsdp_size, reshard_after_forward)

    def make_batch_with_zeros() -> TrainingInputBatch:
        batch = make_batch()
        batch["advantages"][list(zero_advantage_rows)] = 0.0
        return batch

    single_batch = make_batch_with_zeros()
    single_metrics, initial_weights, single_weights = run_single(t, single_batch)

    policy, ref, critic = build_fsdp_workers(t, temperature=1.0, num_training_steps=10)
    try:
        assert critic is None and (ref is not None) == use_kl_loss and policy.world_size == RANKS
        assert isinstance(policy, Policy) and (ref is None or isinstance(ref, Reference))
        batch = make_batch_with_zeros()
        batch["action_log_probs"] = policy.compute_logprobs(batch, MICRO_BATCH)
        assert_close(batch["action_log_probs"], single_batch["action_log_probs"], "old logprobs")
        if use_kl_loss:
            batch["base_action_log_probs"] = ref.compute_logprobs(batch, MICRO_BATCH)
            assert_close(batch["base_action_log_probs"], single_batch["base_action_log_probs"], "ref logprobs")
        metrics = policy.ppo_train(batch, MINI_BATCH, MICRO_BATCH)
        weights = policy.trainable_state_dict()
    finally:
        policy.actors.kill()
        if ref is not None and ref.actors is not policy.actors:
            ref.actors.kill()

    assert set(metrics) == set(single_metrics)
    assert single_metrics["policy/grad_norm"] > t.policy.optimizer_config.max_grad_norm  # clipping took effect
    for key in ("policy/final_loss", "policy/policy_loss", "policy/grad_norm", "policy/policy_entropy"):
        assert metrics[key] == pytest.approx(single_metrics[key], rel=RTOL, abs=0), key
    # The rest includes differences of nearly equal logprobs (ppo_kl, approx_kl_old, ratio deviations), whose
    # relative error is large when they are ~0: those are compared to 1e-6 absolute (measured: ~1e-7).
    for key, value in single_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=RTOL, abs=1e-6), key
    assert set(weights) == set(single_weights)
    for name, value in single_weights.items():
        assert_close(weights[name], value, name)
    assert any(not torch.equal(weights[name], value) for name, value in initial_weights.items())


CRITIC_RANKS = machine_ranks(groups=2, at_most=MINI_BATCH)
"""Ranks of each of the two groups (policy and ref; critic), which take GPUs of their own."""


@pytest.mark.skipif(CRITIC_RANKS == 0, reason="the critic's group needs GPUs of its own: 2 GPUs at least")
def test_fsdp2_critic_and_separate_ref_equal_single(make_batch, assert_close):
    """Full fine-tuning with a KL term and a critic: a ref group sharing the policy's bundles (0.75 / 0.25) and a
    critic group of its own, each on `CRITIC_RANKS` ranks; ref logprobs, values, the critic update and its weights
    match."""
    t = trainer_config(0, True, -1, True, ranks=CRITIC_RANKS)
    t.placement.colocate_policy_ref = True
    t.placement.ref_num_gpus_per_node = t.placement.critic_num_gpus_per_node = CRITIC_RANKS
    t.critic.model.path = t.policy.model.path
    t.critic.optimizer_config.weight_decay, t.critic.optimizer_config.scheduler = 0.0, "constant"
    single_batch = make_batch()
    single_batch["base_action_log_probs"] = RefWorker.from_pretrained(t.ref.model.path).compute_logprobs(
        single_batch, MICRO_BATCH
    )
    torch.manual_seed(t.seed)
    critic = CriticWorker(t.critic, t.algorithm, num_training_steps=10)
    single_batch["values"] = critic.compute_values(single_batch, MICRO_BATCH)
    g = torch.Generator().manual_seed(3)
    single_batch["returns"] = torch.randn(single_batch["loss_mask"].shape, generator=g) * single_batch["loss_mask"]
    single_metrics = critic.ppo_train(single_batch, MINI_BATCH, MICRO_BATCH)
    single_weights = {name: p.detach().clone() for name, p in critic.model.named_parameters()}

    policy, ref, critic_group = build_fsdp_workers(t, temperature=1.0, num_training_steps=10)
    try:
        assert isinstance(ref, Reference) and isinstance(critic_group, Critic)
        batch = make_batch()
        batch["base_action_log_probs"] = ref.compute_logprobs(batch, MICRO_BATCH)
        batch["values"] = critic_group.compute_values(batch, MICRO_BATCH)
        batch["returns"] = single_batch["returns"]
        metrics = critic_group.ppo_train(batch, MINI_BATCH, MICRO_BATCH)
        weights = critic_group.trainable_state_dict()
    finally:
        for group in (policy, ref, critic_group):
            group.actors.kill()

    assert_close(batch["base_action_log_probs"], single_batch["base_action_log_probs"], "ref logprobs")
    assert_close(batch["values"], single_batch["values"], "values")
    assert set(metrics) == set(single_metrics)
    for key, value in single_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=RTOL, abs=1e-6), key
    assert set(weights) == set(single_weights)
    for name, value in single_weights.items():
        assert_close(weights[name], value, name)
