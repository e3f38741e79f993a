"""The `cross_entropy` policy loss and the SFT step: hand-computed values, and the same loss and gradient whatever the
micro-batch size or sample packing."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.algorithms import PolicyLossRegistry, compute_loss_normalizer, reduce_loss
from skyrl_train.config import ConfigError, build_config, load_config
from skyrl_train.dataset import convert_prompts_responses_to_batch_tensors
from skyrl_train.workers import PolicyWorker

LOG_PROBS = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.25, -4.0]])
LOSS_MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])


def test_cross_entropy_is_minus_logp_on_loss_tokens():
    loss, metrics = PolicyLossRegistry.get("cross_entropy")(
        LOG_PROBS, torch.zeros(2, 3), torch.zeros(2, 3), None, loss_mask=LOSS_MASK
    )
    assert loss.tolist() == [[1.0, 2.0, 0.0], [3.0, 0.25, 0.0]]
    assert metrics == {}


def test_token_mean_over_the_batch_is_the_same_summed_over_micro_batches():
    """(1 + 2 + 3 + 0.25) / 4 loss tokens = 1.5625; each row alone, divided by the batch's 4 tokens: 0.75 + 0.8125."""
    loss, _ = PolicyLossRegistry.get("cross_entropy")(LOG_PROBS, LOG_PROBS, LOG_PROBS, None, loss_mask=LOSS_MASK)
    z = compute_loss_normalizer([LOSS_MASK[:1], LOSS_MASK[1:]], "token_mean")
    assert z == 4.0
    assert reduce_loss(loss, LOSS_MASK, "token_mean").item() == 1.5625
    rows = [reduce_loss(loss[i : i + 1], LOSS_MASK[i : i + 1], "token_mean", normalizer=z).item() for i in range(2)]
    assert rows == [0.75, 0.8125]


def _batch() -> tuple:
    """Three rows: prompts of 3, 1 and 2 tokens, responses of 4, 2 and 3 with the middle of the first out of the loss
    (an observation)."""
    prompts = [[5, 6, 7], [8], [9, 10]]
    responses = [[11, 12, 13, 14], [15, 16], [17, 18, 19]]
    masks = [[1, 0, 0, 1], [1, 1], [1, 1, 1]]
    batch = convert_prompts_responses_to_batch_tensors(0, prompts, responses, [0.0] * 3, masks)
    return batch, prompts, responses, masks


def _expected(model, prompts, responses, masks) -> tuple[float, float]:
    """Mean −log p and top-1 rate of the loss tokens, from each row's own plain forward."""
    nll, top1, tokens = 0.0, 0.0, 0
    with torch.no_grad():
        for prompt, response, mask in zip(prompts, responses, masks, strict=True):
            ids = torch.tensor([prompt + response])
            logprobs = torch.log_softmax(model(ids).logits[0, len(prompt) - 1 : -1].double(), dim=-1)
            for t, (token, m) in enumerate(zip(response, mask, strict=True)):
                if m:
                    nll -= logprobs[t, token].item()
                    top1 += float(logprobs[t].argmax().item() == token)
                    tokens += 1
    return nll / tokens, top1 / tokens


def _policy(tiny_model: str, packing: bool = False) -> PolicyWorker:
    cfg = build_config(
        {"trainer": {"policy": {"model": {"path": tiny_model}, "optimizer_config": {"lr": 1e-3, "weight_decay": 0.0}}}}
    )
    torch.manual_seed(0)
    return PolicyWorker(cfg.trainer.policy, cfg.trainer.algorithm, num_training_steps=1, sample_packing=packing)


def test_the_sft_step_loss_is_the_mean_negative_log_likelihood_of_the_loss_tokens(tiny_model):
    policy = _policy(tiny_model)
    batch, prompts, responses, masks = _batch()
    nll, top1 = _expected(policy.model, prompts, responses, masks)
    metrics = policy.sft_train(batch, 2)
    assert metrics["loss"] == pytest.approx(nll, rel=1e-5)
    assert metrics["token_accuracy"] == pytest.approx(top1)
    assert metrics["num_tokens"] == 7.0
    assert metrics["grad_norm"] > 0 and metrics["lr"] == 1e-3 and metrics["skipped_steps"] == 0.0


def test_sft_eval_reports_the_same_loss_without_training(tiny_model):
    policy = _policy(tiny_model)
    batch, prompts, responses, masks = _batch()
    before = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    metrics = policy.sft_eval(batch, 1)
    assert metrics["loss"] == pytest.approx(_expected(policy.model, prompts, responses, masks)[0], rel=1e-5)
    assert all(torch.equal(p, before[name]) for name, p in policy.model.named_parameters())


@pytest.mark.parametrize(("micro_batch_size", "packing"), [(1, False), (1, True)], ids=["micro-1", "packed"])
def test_the_step_is_the_same_whatever_the_micro_batches_or_packing(tiny_model, micro_batch_size, packing):
    """Against one unpacked micro-batch of all 3 rows. The updates are compared per tensor to 1e-3 (relative): Adam's
    first step moves an element by ~lr whatever the size of its gradient, so float noise in a gradient element that is
    ~0 shows in its update (measured: 2e-4 at most); the loss and the gradient norm to 1e-5."""
    reference, other = _policy(tiny_model), _policy(tiny_model, packing)
    initial = {name: p.detach().clone() for name, p in reference.model.named_parameters()}
    expected = reference.sft_train(_batch()[0], 3)
    metrics = other.sft_train(_batch()[0], micro_batch_size)
    for key in ("loss", "token_accuracy", "grad_norm"):
        assert metrics[key] == pytest.approx(expected[key], rel=1e-5), key
    for (name, trained), (_, expected_weight) in zip(
        other.model.named_parameters(), reference.model.named_parameters(), strict=True
    ):
        update, expected_update = trained - initial[name], expected_weight - initial[name]
        assert (update - expected_update).norm() <= 1e-3 * expected_update.norm(), name


def test_the_sft_step_ignores_the_rl_loss_settings(tiny_model):
    """The worker's RL loss (here gspo with KL and entropy terms) does not enter the SFT step."""
    cfg = build_config(
        {
            "trainer": {
                "policy": {"model": {"path": tiny_model}},
                "algorithm": {"policy_loss_type": "gspo", "use_entropy_loss": True, "loss_reduction": "sequence_mean"},
            }
        }
    )
    torch.manual_seed(0)
    policy = PolicyWorker(cfg.trainer.policy, cfg.trainer.algorithm, num_training_steps=1, temperature=0.5)
    batch, prompts, responses, masks = _batch()
    nll, _ = _expected(policy.model, prompts, responses, masks)
    assert policy.sft_train(batch, 3)["loss"] == pytest.approx(nll, rel=1e-5)


def test_cross_entropy_as_the_rl_loss_refuses_kl_and_entropy_terms():
    with pytest.raises(ConfigError) as error:
        load_config(["trainer.algorithm.policy_loss_type=cross_entropy", "trainer.algorithm.use_entropy_loss=true"])
    assert any(p.startswith("trainer.algorithm.use_kl_loss=true has no effect") for p in error.value.problems)
    assert any(p.startswith("trainer.algorithm.use_entropy_loss=true has no effect") for p in error.value.problems)
    load_config(["trainer.algorithm.policy_loss_type=cross_entropy", "trainer.algorithm.use_kl_loss=false"])
