"""The chunked LM head: logprobs, entropy and their gradients equal those of the full logits, chunk by chunk; models
whose logits are more than ``lm_head(hidden)`` keep the full route."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import CohereConfig, CohereForCausalLM

import skyrl_train.workers.forward as forward
from skyrl_train.models import load_causal_lm
from skyrl_train.workers import lm_head, response_logprobs
from skyrl_train.workers.lm_head import chunkable_head, head_logprobs

ROWS, HIDDEN, VOCAB = 13, 16, 50


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 4 rows at VOCAB (so 13 rows make 4 chunks, the last one short)."""
    monkeypatch.setattr(lm_head, "CHUNK_BYTES", 4 * 4 * VOCAB)


def full_logprobs_and_entropy(hidden, weight, targets, temperature):
    log_p = torch.log_softmax(hidden @ weight.T / temperature, dim=-1)
    return log_p.gather(-1, targets[:, None]).squeeze(-1), -(log_p.exp() * log_p).sum(dim=-1)


def leaves(seed):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(ROWS, HIDDEN, generator=generator, requires_grad=True)
    weight = torch.randn(VOCAB, HIDDEN, generator=generator, requires_grad=True)
    targets = torch.randint(0, VOCAB, (ROWS,), generator=generator)
    return hidden, weight, targets


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_entropy_and_their_gradients_equal_the_full_logits(small_chunks, temperature):
    grad_logprobs, grad_entropy = torch.randn(ROWS), torch.randn(ROWS)
    results = []
    for compute in (full_logprobs_and_entropy, head_logprobs):
        hidden, weight, targets = leaves(0)
        if compute is head_logprobs:
            logprobs, entropy = head_logprobs(hidden, weight, targets, temperature, with_entropy=True)
        else:
            logprobs, entropy = compute(hidden, weight, targets, temperature)
        ((logprobs * grad_logprobs).sum() + (entropy * grad_entropy).sum()).backward()
        results.append((logprobs.detach(), entropy.detach(), hidden.grad, weight.grad))
    for got, want in zip(*reversed(results), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_entropy_without_grad_is_a_metric_and_the_logprob_gradient_is_unchanged(small_chunks):
    hidden, weight, targets = leaves(1)
    logprobs, entropy = head_logprobs(hidden, weight, targets, 1.0, with_entropy=True, entropy_grad=False)
    assert not entropy.requires_grad
    logprobs.sum().backward()
    want_hidden, want_weight = leaves(1)[:2]
    full_logprobs_and_entropy(want_hidden, want_weight, targets, 1.0)[0].sum().backward()
    torch.testing.assert_close(hidden.grad, want_hidden.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weight.grad, want_weight.grad, atol=1e-5, rtol=1e-5)


def test_a_frozen_head_gets_no_gradient_and_entropy_is_skipped_unless_asked(small_chunks):
    hidden, weight, targets = leaves(2)
    weight.requires_grad_(False)
    logprobs, entropy = head_logprobs(hidden, weight, targets, 1.0)
    assert entropy is None
    logprobs.sum().backward()
    assert weight.grad is None and hidden.grad is not None


@pytest.fixture(scope="module")
def model(model_path):
    return load_causal_lm(model_path)


def test_a_micro_batch_through_the_chunked_head_equals_the_models_own_logits(
    model, make_batch, small_chunks, monkeypatch
):
    assert chunkable_head(model) is model.lm_head
    batch = make_batch()
    results = []
    for head in (model.lm_head, None):
        monkeypatch.setattr(forward, "chunkable_head", lambda m, head=head: head)
        model.zero_grad(set_to_none=True)
        logprobs, entropy = response_logprobs(
            model, batch["sequences"], batch["attention_mask"], 4, 0.8, with_entropy=True
        )
        (logprobs.sum() + entropy.sum()).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results.append((logprobs.detach(), entropy.detach(), grads))
    (got_lp, got_ent, got_grads), (want_lp, want_ent, want_grads) = results
    torch.testing.assert_close(got_lp, want_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(got_ent, want_ent, atol=1e-5, rtol=0)
    for got, want in zip(got_grads, want_grads, strict=True):
        # atol: the chunked and the full head sum a gradient over the vocabulary in another order (1.4e-5 seen on one
        # element of 3.1M on an AVX2 CPU)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_a_lora_wrapped_model_keeps_the_base_head_unless_the_adapter_targets_it(model_path):
    adapted = get_peft_model(load_causal_lm(model_path), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert chunkable_head(adapted) is adapted.get_base_model().lm_head
    on_head = get_peft_model(load_causal_lm(model_path), LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    assert chunkable_head(on_head) is None


def test_a_model_that_scales_its_logits_keeps_the_full_route():
    config = CohereConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    assert chunkable_head(CohereForCausalLM(config)) is None


def test_a_head_with_a_bias_keeps_the_full_route(model_path):
    model = load_causal_lm(model_path)
    model.lm_head = nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    assert chunkable_head(model) is None
