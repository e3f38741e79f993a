"""On a real local Ray cluster, ``fsdp2`` over the machine's ranks (``machine_ranks``: 2 gloo processes on CPU, one
rank per GPU on a GPU machine): a one-step update that takes its old logprobs from its own forward, with the
off-policy correction on, equals the single-process update with separately computed old logprobs: loss, every metric
(the correction's token and row fractions, reduced across the ranks when there are several) and the weights.

The 8-row batch of ``conftest`` (row 5 has no loss token, so 7 rows count in the row fractions) with rollout
logprobs that give each row one importance ratio (``ROW_RATIOS``); token TIS (cap 2) and the product mask
(0.5 .. 2.0) both act on it.
"""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config.schema import TrainerConfig
from skyrl_train.distributed.worker_groups import build_fsdp_workers
from skyrl_train.testing import tiny_model_path
from skyrl_train.testing.ray import local_ray, machine_ranks  # noqa: F401
from skyrl_train.workers import PolicyWorker

pytestmark = [pytest.mark.slow, pytest.mark.gpu, pytest.mark.usefixtures("local_ray")]

ROWS = 8
MICRO_BATCH = 2
RANKS = machine_ranks(at_most=ROWS // MICRO_BATCH)
"""Policy ranks (each takes whole micro-batches of the one mini-batch)."""
ROW_RATIOS = torch.tensor([3.0, 0.5, 1.0, 1.5, 1.2, 0.9, 2.5, 1.0])
FROM_FORWARD = "policy/old_logprobs_from_update_forward"


def trainer_config(lora_rank: int) -> TrainerConfig:
    t = TrainerConfig()
    t.strategy = "fsdp2"
    t.placement.colocate_all = False
    t.placement.policy_num_gpus_per_node = RANKS
    t.policy.model.path = tiny_model_path()
    t.policy.model.lora.rank = lora_rank
    t.policy.model.lora.alpha = 16
    opt = t.policy.optimizer_config
    opt.lr, opt.weight_decay, opt.scheduler, opt.max_grad_norm = (1e-3 if lora_rank else 1e-5), 0.0, "constant", 0.0
    t.algorithm.use_kl_loss = False
    opc = t.algorithm.off_policy_correction
    opc.tis_ratio_type, opc.token_tis_ratio_clip_high = "token", 2.0
    opc.sequence_mask_metric = "product"
    t.gradient_checkpointing = t.bf16 = False
    return t


def trainable(policy: PolicyWorker) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in policy.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("lora_rank", [8, 0], ids=["lora", "full"])
def test_fsdp2_update_with_old_logprobs_from_its_forward_and_the_correction_equals_single(
    lora_rank, make_batch, assert_close
):
    t = trainer_config(lora_rank)
    torch.manual_seed(t.seed)
    single = PolicyWorker(t.policy, t.algorithm, num_training_steps=10)
    single_batch = make_batch()
    single_batch["action_log_probs"] = single.compute_logprobs(single_batch, MICRO_BATCH)
    rollout_logprobs = (single_batch["action_log_probs"] - ROW_RATIOS.log()[:, None]) * single_batch["loss_mask"]
    single_batch["rollout_logprobs"] = rollout_logprobs
    single_metrics = single.ppo_train(single_batch, ROWS, MICRO_BATCH)
    single_weights = trainable(single)

    policy, _, _ = build_fsdp_workers(t, temperature=1.0, num_training_steps=10)
    try:
        batch = make_batch()  # no action_log_probs: the ranks take them from the update's forward
        batch["rollout_logprobs"] = rollout_logprobs
        metrics = policy.ppo_train(batch, ROWS, MICRO_BATCH)
        weights = policy.trainable_state_dict()
    finally:
        policy.actors.kill()

    assert (single_metrics.pop(FROM_FORWARD), metrics.pop(FROM_FORWARD)) == (0.0, 1.0)
    # Loss tokens per row: 1, 3, 2, 4, 3, 0, 4, 1 (18 in 7 rows). Row products 3, 0.125, 1, 5.06, 1.73, -, 39, 1:
    # rows 0, 1, 3 and 6 are outside [0.5, 2.0]; the tokens of rows 0 and 6 (5) are above the TIS cap.
    assert single_metrics["policy/loss_metrics/product_sequence_mask_masked_ratio"] == pytest.approx(4 / 7)
    assert single_metrics["policy/loss_metrics/tis_token_clip_high_ratio"] == pytest.approx(5 / 18)
    assert set(metrics) == set(single_metrics)
    for key, value in single_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert set(weights) == set(single_weights)
    for name, value in single_weights.items():
        assert_close(weights[name], value, name)
