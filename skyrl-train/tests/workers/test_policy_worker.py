"""PolicyWorker: exact micro-batching, optimizer-step guards, loss terms, PPO direction and health metrics."""

from __future__ import annotations

import math

import pytest
import torch

from skyrl_train.algorithms import PolicyLossRegistry
from skyrl_train.config.schema import AlgorithmConfig
from skyrl_train.testing import randomize_lora_b


def _params(worker):
    return {name: p.detach().clone() for name, p in worker.model.named_parameters()}


def _grads(worker):
    return {name: p.grad.clone() for name, p in worker.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_reduction", ["token_mean", "sequence_mean"])
def test_micro_batch_size_does_not_change_the_gradient(build_policy, batch, on_policy, loss_reduction):
    grads = []
    for micro_batch_size in (1, 4):
        worker = build_policy(loss_reduction=loss_reduction)
        on_policy(worker, batch)
        batch["advantages"] = torch.tensor(
            [[1.0, -2.0, 0.5, 1.0], [0.3, 0.3, 0, 0], [-1.0, 2.0, 1.0, 0], [4.0, 0, 0, 0]]
        )
        worker.forward_backward(batch, micro_batch_size)
        grads.append(_grads(worker))
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:  # equal up to float32 summation order
        error = (grads[0][name] - grads[1][name]).norm() / grads[1][name].norm()
        assert error < 1e-5, name


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_gradient_checkpointing_gives_the_same_lora_gradient(build_policy, batch, on_policy, mode):
    grads = []
    for checkpointing in (None, mode):
        torch.manual_seed(0)
        worker = build_policy(lora_rank=4, gradient_checkpointing=checkpointing)
        with torch.no_grad():  # a non-zero adapter, so that lora_A gets a gradient too
            for name, param in worker.model.named_parameters():
                if "lora_B" in name:
                    param.fill_(0.01)
        on_policy(worker, batch)
        batch["advantages"][:, 0] = 1.0
        worker.forward_backward(batch, micro_batch_size=2)
        grads.append(_grads(worker))
    assert grads[0].keys() == grads[1].keys() and any("lora_A" in name for name in grads[0])
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-7, rtol=1e-5)


def test_old_logprobs_do_not_depend_on_the_micro_batch_size(build_policy, batch):
    worker = build_policy()
    one, four = (worker.compute_logprobs(batch, micro_batch_size=size) for size in (1, 4))
    torch.testing.assert_close(one, four, atol=1e-5, rtol=0)


def test_step_metrics_are_exact_mini_batch_values_for_any_micro_batch_size(build_policy, batch, on_policy):
    worker = build_policy()
    on_policy(worker, batch)
    batch["advantages"] = torch.randn(batch["advantages"].shape, generator=torch.Generator().manual_seed(1))
    one, four = (worker.forward_backward(batch, size) for size in (1, 4))
    assert one.keys() == four.keys()
    for key in one:
        # abs: ratio_std is the square root of a difference of near-equal numbers (4e-7 seen on an AVX2 CPU)
        assert one[key] == pytest.approx(four[key], rel=1e-5, abs=1e-6), key
    # The mean response length is 10 tokens / 4 rows; on-policy ratios are 1 (to an ulp or two of the logprobs: the
    # update's forward and the old-logprob forward run other batch shapes, whose fp32 kernels can round differently).
    assert one["response_length"] == pytest.approx(2.5)
    assert (one["ratio_min"], one["ratio_max"], one["ratio_std"]) == pytest.approx((1.0, 1.0, 0.0), abs=1e-5)


def test_ratio_statistics_are_those_of_the_masked_token_ratios(build_policy, batch, on_policy):
    worker = build_policy()
    on_policy(worker, batch)
    shift = torch.linspace(-0.3, 0.3, 16).reshape(4, 4)
    batch["action_log_probs"] = batch["action_log_probs"] - shift  # ratio = exp(shift) on every token
    metrics = worker.forward_backward(batch, micro_batch_size=1)
    ratios = shift[batch["loss_mask"] > 0].double().exp()
    assert metrics["ratio_mean"] == pytest.approx(ratios.mean().item(), abs=1e-6)
    assert metrics["ratio_std"] == pytest.approx(ratios.std(correction=0).item(), abs=1e-6)
    assert metrics["ratio_min"] == pytest.approx(math.exp(-0.3), abs=1e-6)
    assert metrics["ratio_max"] == pytest.approx(ratios.max().item(), abs=1e-6)


def test_full_fine_tuning_changes_base_weights(build_policy, batch, on_policy):
    worker = build_policy()
    on_policy(worker, batch)
    batch["advantages"][0] = 1.0
    before = _params(worker)
    worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    after = _params(worker)
    assert not torch.equal(before["model.layers.0.mlp.down_proj.weight"], after["model.layers.0.mlp.down_proj.weight"])
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])


def test_non_finite_gradient_skips_the_step(build_policy, batch, on_policy):
    worker = build_policy()
    on_policy(worker, batch)
    batch["advantages"][0, 0] = math.inf
    before = _params(worker)
    metrics = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=4)
    assert metrics["policy/skipped_steps"] == 1.0
    assert not math.isfinite(metrics["policy/grad_norm"])
    assert all(torch.equal(before[name], p) for name, p in worker.model.named_parameters())
    assert worker.scheduler.last_epoch == 0 and not worker.optimizer.state
    assert all(p.grad is None for p in worker.model.parameters())


def test_all_zero_loss_mask_skips_the_mini_batch(build_policy, batch, on_policy):
    worker = build_policy(optimizer={"weight_decay": 0.1})
    on_policy(worker, batch)
    batch["advantages"][:] = 1.0
    batch["loss_mask"][:2] = 0.0  # first mini-batch of 2 rows has nothing to train on
    metrics = worker.ppo_train(batch, mini_batch_size=2, micro_batch_size=1)
    assert metrics["policy/empty_loss_mask_skips"] == 1.0
    assert worker.scheduler.last_epoch == 1  # only the second mini-batch stepped


def test_all_zero_loss_mask_leaves_weights_untouched(build_policy, batch, on_policy):
    worker = build_policy(optimizer={"weight_decay": 0.1})
    on_policy(worker, batch)
    batch["loss_mask"][:] = 0.0
    before = _params(worker)
    metrics = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=4)
    assert metrics == {
        "policy/skipped_steps": 0,
        "policy/empty_loss_mask_skips": 1.0,
        "policy/degenerate_update": 0.0,
        "policy/old_logprobs_from_update_forward": 0.0,
    }
    assert all(torch.equal(before[name], p) for name, p in worker.model.named_parameters())


def test_kl_loss_term_matches_k3_by_hand(build_policy, batch, on_policy):
    worker = build_policy(use_kl_loss=True, kl_loss_coef=0.5, kl_estimator_type="k3")
    on_policy(worker, batch)
    # Reference logprobs 0.5 below the policy's on every token: k3 = exp(-0.5) - (-0.5) - 1 = 0.1065307 per token.
    batch["base_action_log_probs"] = batch["action_log_probs"] - 0.5
    metrics = worker.forward_backward(batch, micro_batch_size=2)
    assert metrics["policy_kl"] == pytest.approx(0.1065307, abs=1e-6)
    assert metrics["policy_loss"] == 0.0  # zero advantages
    assert metrics["final_loss"] == pytest.approx(0.5 * 0.1065307, abs=1e-6)


def test_entropy_bonus_lowers_the_loss_by_coef_times_entropy(build_policy, batch, on_policy):
    worker = build_policy(use_entropy_loss=True, entropy_loss_coef=0.1)
    on_policy(worker, batch)
    metrics = worker.forward_backward(batch, micro_batch_size=4)
    assert metrics["policy_entropy"] > 0
    assert metrics["final_loss"] == pytest.approx(-0.1 * metrics["policy_entropy"], rel=1e-6)


def test_ppo_update_raises_the_logprob_of_a_positive_advantage_sequence(build_policy, batch, on_policy):
    worker = build_policy(lr=1e-3)
    on_policy(worker, batch)
    batch["advantages"][0] = 1.0  # only row 0 is rewarded
    before = batch["action_log_probs"][0].sum()
    worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    after = worker.compute_logprobs(batch, micro_batch_size=4)[0].sum()
    assert after > before + 0.1


def test_update_metrics_report_upstream_status_keys_and_ratio_health(build_policy, batch, on_policy):
    worker = build_policy(lr=1e-3)
    on_policy(worker, batch)
    batch["advantages"][:, 0] = torch.tensor([1.0, -1.0, 1.0, -1.0])
    metrics = worker.ppo_train(batch, mini_batch_size=2, micro_batch_size=1, update_epochs=2)
    for key in ("final_loss", "policy_loss", "policy_entropy", "response_length", "policy_lr", "grad_norm"):
        assert f"policy/{key}" in metrics, key
    for key in ("ratio_mean", "ratio_std", "ratio_min", "ratio_max", "approx_kl_old"):
        assert f"policy/{key}" in metrics, key
    for key in ("clip_frac_low", "clip_frac_high", "clip_ratio", "ppo_kl"):
        assert f"policy/loss_metrics/{key}" in metrics, key
    assert metrics["policy/policy_lr"] == 1e-3
    assert metrics["policy/skipped_steps"] == 0 and metrics["policy/degenerate_update"] == 0.0
    assert metrics["policy/ratio_min"] < 1.0 < metrics["policy/ratio_max"]  # later steps see the moved policy


def test_update_where_the_policy_never_moves_is_flagged_degenerate(build_policy, batch, on_policy, caplog):
    # lr 1e-30 is positive, but far too small to change any float32 weight: every ratio stays exactly 1.
    worker = build_policy(lr=1e-30)
    on_policy(worker, batch)
    batch["advantages"][:] = 1.0
    metrics = worker.ppo_train(batch, mini_batch_size=2, micro_batch_size=2)
    assert metrics["policy/degenerate_update"] == 1.0
    assert "DEGENERATE POLICY UPDATE" in caplog.text


def test_single_on_policy_step_is_not_degenerate(build_policy, batch, on_policy):
    # One optimizer step: ratios of exactly 1 are expected since no forward ran after the step.
    worker = build_policy(lr=1e-30)
    on_policy(worker, batch)
    batch["advantages"][:] = 1.0
    metrics = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    assert metrics["policy/ratio_std"] == 0.0 and metrics["policy/degenerate_update"] == 0.0


def test_rollout_train_logprob_gap_is_reported_on_loss_masked_tokens(build_policy, batch, on_policy):
    worker = build_policy()
    on_policy(worker, batch)
    batch["rollout_logprobs"] = batch["action_log_probs"] + 0.25 * batch["loss_mask"] + 9.0 * (1 - batch["loss_mask"])
    metrics = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=4)
    assert metrics["policy/rollout_train_logprobs_abs_diff_mean"] == pytest.approx(0.25)
    assert metrics["policy/rollout_train_logprobs_abs_diff_std"] == pytest.approx(0.0, abs=1e-6)


def test_grad_norm_is_reported_before_clipping(build_policy, batch, on_policy):
    worker = build_policy(optimizer={"max_grad_norm": 1e-3})
    on_policy(worker, batch)
    batch["advantages"][:] = 1.0
    worker.forward_backward(batch, micro_batch_size=4)
    expected = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in worker.model.parameters()])).item()
    step = worker.optim_step()
    assert step["grad_norm"] == pytest.approx(expected, rel=1e-5) and expected > 1e-3


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_a_single_update_without_old_logprobs_uses_its_own_forward_as_the_old_policy(
    build_policy, batch, on_policy, lora_rank
):
    # The trainer leaves action_log_probs out when a batch gets exactly one optimizer step: the update must be the
    # same as with the separately computed old logprobs, whose ratios to the update's forward are 1 up to rounding.
    results = []
    for precomputed in (True, False):
        torch.manual_seed(0)  # the same LoRA A matrices in both workers
        worker = build_policy(lr=1e-3, lora_rank=lora_rank)
        on_policy(worker, batch)
        batch["advantages"] = torch.tensor(
            [[1.0, -2.0, 0.5, 1.0], [0.3, 0.3, 0, 0], [-1.0, 2.0, 1.0, 0], [4.0, 0, 0, 0]]
        )
        if not precomputed:
            del batch["action_log_probs"]
        metrics = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
        assert metrics["policy/ratio_min"] == pytest.approx(1.0, abs=1e-5)
        assert metrics["policy/ratio_max"] == pytest.approx(1.0, abs=1e-5)
        results.append((_params(worker), metrics["policy/policy_loss"]))
    (params_a, loss_a), (params_b, loss_b) = results
    assert loss_b == pytest.approx(loss_a, abs=1e-6)
    for name in params_a:
        torch.testing.assert_close(params_b[name], params_a[name], atol=1e-6, rtol=1e-5)


def test_with_lora_dropout_the_old_logprobs_come_from_a_separate_eval_mode_forward(
    build_policy, batch, on_policy, caplog
):
    worker = build_policy(lora_rank=4, lora_dropout=0.5)
    randomize_lora_b(worker.model)  # a non-zero adapter, so that dropout on its input changes the output
    assert worker.stochastic_forward and not build_policy(lora_rank=4).stochastic_forward
    expected_old = on_policy(worker, batch)["action_log_probs"].clone()
    del batch["action_log_probs"]
    computed_old = []
    logprobs = worker._logprobs
    worker._logprobs = lambda *args: computed_old.append(logprobs(*args)) or computed_old[-1]
    metrics = worker.ppo_train(batch, mini_batch_size=4, micro_batch_size=2)
    assert metrics["policy/old_logprobs_from_update_forward"] == 0.0
    assert "the policy has dropout" in caplog.text
    assert len(computed_old) == 1
    torch.testing.assert_close(computed_old[0], expected_old, atol=1e-5, rtol=0)
    assert metrics["policy/ratio_std"] > 0  # dropout in the update forward: its ratios are not all 1


def test_a_batch_without_old_logprobs_needs_a_single_optimizer_step(build_policy, batch, on_policy):
    worker = build_policy()
    on_policy(worker, batch)
    del batch["action_log_probs"]
    with pytest.raises(
        ValueError, match="only valid for a single optimizer step; got update_epochs=1, mini_batch_size=2"
    ):
        worker.ppo_train(batch, mini_batch_size=2, micro_batch_size=2)


def test_a_custom_registered_policy_loss_receives_the_algorithm_config(build_policy, batch, on_policy):
    received = []

    def surrogate(log_probs, old_log_probs, advantages, config, loss_mask=None, rollout_logprobs=None):
        received.append(config)
        return -advantages * log_probs * loss_mask, {}

    PolicyLossRegistry.register("test_surrogate", surrogate)
    try:
        worker = build_policy(policy_loss_type="test_surrogate", eps_clip_high=0.28)
        worker.ppo_train(on_policy(worker, batch), mini_batch_size=4, micro_batch_size=2)
    finally:
        PolicyLossRegistry.unregister("test_surrogate")
    assert len(received) == 2 and all(config is worker.algorithm_config for config in received)  # per micro-batch
    assert isinstance(received[0], AlgorithmConfig) and received[0].eps_clip_high == 0.28


def _update_with_and_without_the_backward_skip(build_policy, batch, on_policy, monkeypatch, **algorithm):
    """The same update twice from the same weights: as shipped, then with every micro-batch run with a backward.
    Returns both runs' (metrics, weights after the step), the weights before it, and whether each micro-batch of the
    first run ran with grad."""
    runs, with_grad = [], []
    for skip in (True, False):
        torch.manual_seed(0)
        worker = build_policy(lora_rank=4, sample_packing=True, **algorithm)
        randomize_lora_b(worker.model, seed=1)
        if not skip:
            monkeypatch.setattr(worker, "_adds_no_gradient", lambda micro_batch: False)
        loss_fn = worker._micro_batch_loss
        monkeypatch.setattr(
            worker,
            "_micro_batch_loss",
            lambda *args, fn=loss_fn: with_grad.append(torch.is_grad_enabled()) or fn(*args),
        )
        update = batch.select(list(batch.keys()))
        on_policy(worker, update)
        before = _params(worker)
        metrics = worker.ppo_train(update, mini_batch_size=4, micro_batch_size=1)
        runs.append((metrics, _params(worker)))
    return runs, before, with_grad[:4]


@pytest.mark.parametrize("advantages", ["two_rows_zero", "all_zero"])
def test_zero_advantage_micro_batches_skip_their_backward_with_the_same_step_and_metrics(
    build_policy, make_batch, on_policy, monkeypatch, advantages
):
    batch = make_batch(prompt_lengths=(40, 40, 40, 40))  # a shared prompt prefix: the packed update shares it
    batch["sequences"][1:, : batch["sequences"].shape[1] - 4] = batch["sequences"][0, :-4]
    if advantages == "two_rows_zero":
        batch["advantages"][0] = 1.0
        batch["advantages"][2] = -0.5
    (skipped, full), before, with_grad = _update_with_and_without_the_backward_skip(
        build_policy, batch, on_policy, monkeypatch, optimizer={"weight_decay": 0.01}
    )
    assert with_grad == ([True, False, True, False] if advantages == "two_rows_zero" else [False] * 4)
    _assert_same_step(skipped, full, before)


def test_rows_without_a_loss_mask_skip_their_backward_even_with_a_kl_term(
    build_policy, make_batch, on_policy, monkeypatch
):
    batch = make_batch(prompt_lengths=(40, 40, 40, 40))
    batch["sequences"][1:, : batch["sequences"].shape[1] - 4] = batch["sequences"][0, :-4]
    batch["advantages"][0] = 1.0
    batch["loss_mask"][[1, 3]] = 0  # e.g. groups the zero-variance filter dropped
    batch["base_action_log_probs"] = -torch.rand(batch["loss_mask"].shape, generator=torch.Generator().manual_seed(2))
    (skipped, full), before, with_grad = _update_with_and_without_the_backward_skip(
        build_policy, batch, on_policy, monkeypatch, use_kl_loss=True, kl_loss_coef=0.1
    )
    assert with_grad == [True, False, True, False]  # row 2: advantage 0, but its KL term has a gradient
    assert full[0]["policy/policy_kl"] > 0
    _assert_same_step(skipped, full, before)


def _assert_same_step(skipped, full, before):
    """The update with skipped backwards reports the same metrics and takes the same step as the full one."""
    assert skipped[0].keys() == full[0].keys()
    for key in full[0]:
        assert skipped[0][key] == pytest.approx(full[0][key], rel=1e-6, abs=1e-7), key
    for name, weight in full[1].items():
        torch.testing.assert_close(skipped[1][name], weight, atol=0, rtol=0)
    assert any(not torch.equal(weight, before[name]) for name, weight in full[1].items())  # weight decay at least


@pytest.mark.parametrize("term", [{"use_kl_loss": True, "kl_loss_coef": 0.1}, {"use_entropy_loss": True}])
def test_a_kl_or_entropy_term_keeps_the_backward_of_zero_advantage_rows(build_policy, batch, term):
    worker = build_policy(**term)
    assert not worker._adds_no_gradient(batch)
    assert build_policy()._adds_no_gradient(batch)


def test_a_custom_policy_loss_is_not_assumed_zero_at_zero_advantage(build_policy, batch):
    PolicyLossRegistry.register("test_constant_push", lambda log_probs, *args, **kwargs: (-log_probs, {}))
    try:
        assert not build_policy(policy_loss_type="test_constant_push")._adds_no_gradient(batch)
    finally:
        PolicyLossRegistry.unregister("test_constant_push")
