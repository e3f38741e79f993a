"""The ptx term of a PPO update (`PolicyWorker.ppo_train`'s ``sft_batch``, ``trainer.algorithm.ptx_coef``): each
optimizer step's gradient is the RL loss's plus ``ptx_coef`` times the SFT loss's of the conversations."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.training_batch import TrainingInputBatch

PTX_COEF = 0.5


def _rl_batch(make_batch, on_policy, worker) -> TrainingInputBatch:
    batch = on_policy(worker, make_batch())
    batch["advantages"] = torch.tensor([[1.0, -2.0, 0.5, 1.0], [0.3, 0.3, 0, 0], [-1.0, 2.0, 1.0, 0], [4.0, 0, 0, 0]])
    return batch


def _sft_batch(make_batch) -> TrainingInputBatch:
    """Three conversations, the middle response token of the first out of the loss (an observation)."""
    batch = make_batch((2, 4, 3), (3, 2, 4), seed=7)
    batch["loss_mask"][0, 1] = 0.0
    return batch.select(["sequences", "attention_mask", "response_mask", "loss_mask"])


def _gradient_of_step(worker, train) -> dict[str, torch.Tensor]:
    """The gradient the worker's next optimizer step applies, while ``train()`` runs (the step is taken)."""
    seen: dict[str, torch.Tensor] = {}
    step = worker.optim_step

    def recorded():
        seen.update({name: p.grad.clone() for name, p in worker.model.named_parameters() if p.grad is not None})
        return step()

    worker.optim_step = recorded
    train()
    return seen


@pytest.mark.parametrize("micro_batch_size", [1, 4])
def test_the_step_gradient_is_the_rl_one_plus_ptx_coef_times_the_sft_one(
    build_policy, make_batch, on_policy, micro_batch_size
):
    workers = [build_policy(ptx_coef=PTX_COEF) for _ in range(3)]
    rl = _gradient_of_step(workers[0], lambda: workers[0].ppo_train(_rl_batch(make_batch, on_policy, workers[0]), 4, 4))
    sft = _gradient_of_step(workers[1], lambda: workers[1].sft_train(_sft_batch(make_batch), 3))
    both = _gradient_of_step(
        workers[2],
        lambda: workers[2].ppo_train(
            _rl_batch(make_batch, on_policy, workers[2]), 4, micro_batch_size, sft_batch=_sft_batch(make_batch)
        ),
    )
    assert both.keys() == rl.keys() == sft.keys() and both
    for name, gradient in both.items():
        expected = rl[name] + PTX_COEF * sft[name]
        assert (gradient - expected).norm() <= 1e-5 * expected.norm() + 1e-9, name
    assert any((sft[name].norm() > 1e-3 * rl[name].norm()) for name in rl)  # the term is not negligible here


def test_ptx_metrics_are_the_sft_loss_of_the_conversations_before_each_step(build_policy, make_batch, on_policy):
    """Two mini-batches: two optimizer steps, each with the ptx term under its own weights; the metrics average them,
    the RL metrics are those of the update without the term."""
    worker, plain = build_policy(ptx_coef=PTX_COEF), build_policy(ptx_coef=PTX_COEF)
    conversations = _sft_batch(make_batch)
    first = worker.sft_eval(conversations, 3)
    metrics = worker.ppo_train(_rl_batch(make_batch, on_policy, worker), 2, 2, sft_batch=conversations)
    plain_metrics = plain.ppo_train(_rl_batch(make_batch, on_policy, plain), 2, 2)
    after = worker.sft_eval(conversations, 3)
    assert first["loss"] > after["loss"]  # the term trained the conversations
    assert min(first["loss"], after["loss"]) < metrics["policy/ptx_loss"] < first["loss"]  # step 2's is in between
    assert 0.0 <= metrics["policy/ptx_token_accuracy"] <= 1.0
    assert metrics["policy/policy_loss"] != plain_metrics["policy/policy_loss"]  # step 2 saw other weights...
    assert "policy/ptx_loss" not in plain_metrics
    single = build_policy(ptx_coef=PTX_COEF)
    one_step = single.ppo_train(_rl_batch(make_batch, on_policy, single), 4, 2, sft_batch=conversations)
    assert one_step["policy/ptx_loss"] == pytest.approx(first["loss"], rel=1e-5)  # ...a single step saw the first
    assert one_step["policy/ptx_token_accuracy"] == pytest.approx(first["token_accuracy"])
