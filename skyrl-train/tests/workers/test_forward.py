"""Response logprobs: padding-invariant, equal to a plain log_softmax at the sampling temperature."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.models import load_causal_lm
from skyrl_train.workers import position_ids_from_attention_mask, response_logprobs


@pytest.fixture
def model(model_path):
    return load_causal_lm(model_path)


def _alone(batch, i):
    """Row ``i`` without any padding, ``[1, p + r]``, and its response length ``r``."""
    keep = batch["attention_mask"][i].bool()
    return batch["sequences"][i, keep].unsqueeze(0), int(batch["response_mask"][i].sum())


def test_position_ids_count_real_tokens_from_zero():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    assert position_ids_from_attention_mask(mask).tolist() == [[0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 4, 5]]


@torch.no_grad()
def test_left_padded_batch_matches_each_sequence_alone(model, batch):
    width = batch["response_mask"].shape[1]
    padded, _ = response_logprobs(model, batch["sequences"], batch["attention_mask"], width)
    for i in range(batch.batch_size):
        sequence, r = _alone(batch, i)
        alone, _ = response_logprobs(model, sequence, torch.ones_like(sequence), r)
        torch.testing.assert_close(padded[i, :r], alone[0], atol=1e-5, rtol=0)


@torch.no_grad()
def test_equals_log_softmax_of_a_plain_forward_at_the_temperature(model, batch):
    temperature = 0.7
    width = batch["response_mask"].shape[1]
    ours, _ = response_logprobs(model, batch["sequences"], batch["attention_mask"], width, temperature)
    for i in range(batch.batch_size):
        sequence, r = _alone(batch, i)
        logits = model(input_ids=sequence).logits[0] / temperature
        expected = torch.log_softmax(logits[-r - 1 : -1], dim=-1).gather(-1, sequence[0, -r:, None]).squeeze(-1)
        torch.testing.assert_close(ours[i, :r], expected, atol=1e-5, rtol=0)


@torch.no_grad()
def test_temperature_zero_counts_as_one(model, batch):
    args = (model, batch["sequences"], batch["attention_mask"], batch["response_mask"].shape[1])
    assert torch.equal(response_logprobs(*args, 0.0)[0], response_logprobs(*args, 1.0)[0])


@torch.no_grad()
def test_response_padding_is_zero(model, batch):
    logprobs, entropy = response_logprobs(
        model, batch["sequences"], batch["attention_mask"], batch["response_mask"].shape[1], with_entropy=True
    )
    padding = batch["response_mask"] == 0
    assert (logprobs[padding] == 0).all() and (entropy[padding] == 0).all()
    assert (logprobs[~padding] < 0).all() and (entropy[~padding] > 0).all()


@torch.no_grad()
def test_entropy_equals_the_full_distribution_entropy(model, batch):
    sequence, r = _alone(batch, 0)
    _, entropy = response_logprobs(model, sequence, torch.ones_like(sequence), r, 0.5, with_entropy=True)
    log_p = torch.log_softmax(model(input_ids=sequence).logits[0, -r - 1 : -1] / 0.5, dim=-1)
    # rtol: fp32 entropies near 10 differ by a few ulps between AVX2 and AVX-512 kernels
    torch.testing.assert_close(entropy[0], -(log_p.exp() * log_p).sum(-1), atol=1e-5, rtol=1.3e-6)


@torch.no_grad()
def test_matches_the_logprobs_of_kv_cached_generation_from_left_padded_prompts(model, make_batch):
    # What an HF inference engine reports while sampling: log_softmax(logits / T) at each sampled token.
    prompts = make_batch(prompt_lengths=(2, 6), response_lengths=(1, 1))
    width = prompts["sequences"].shape[1] - 1
    sequences, attention_mask = prompts["sequences"][:, :width], prompts["attention_mask"][:, :width]
    temperature = 0.7
    torch.manual_seed(0)
    out = model.generate(
        input_ids=sequences,
        attention_mask=attention_mask,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        max_new_tokens=5,
        min_new_tokens=5,
        output_logits=True,
        return_dict_in_generate=True,
    )
    generated = out.sequences[:, width:]
    rollout = torch.stack(
        [
            torch.log_softmax(step / temperature, dim=-1).gather(-1, generated[:, i, None]).squeeze(-1)
            for i, step in enumerate(out.logits)
        ],
        dim=1,
    )
    full_mask = torch.cat([attention_mask, torch.ones_like(generated)], dim=1)
    ours, _ = response_logprobs(model, out.sequences, full_mask, 5, temperature)
    torch.testing.assert_close(ours, rollout, atol=1e-4, rtol=0)


def _counting_forwards(model) -> list[int]:
    """Wrap the decoder's forward (every pass through the model runs it) to record the columns of each call."""
    calls: list[int] = []
    decoder = model.get_decoder()
    forward = decoder.forward

    def counted(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[1])
        return forward(*args, **kwargs)

    decoder.forward = counted
    return calls


def test_uniform_forwards_share_no_prefix_and_give_the_same_logprobs(model):
    # Four rows behind one 70-token prompt: shared once by default, run whole with uniform (FSDP2 ranks).
    prompt = torch.arange(100, 170)
    sequences = torch.stack([torch.cat([prompt, torch.tensor([5 + i, 9, 11])]) for i in range(4)])
    mask = torch.ones_like(sequences)
    calls = _counting_forwards(model)
    with torch.no_grad():
        shared, _ = response_logprobs(model, sequences, mask, 3)
        shared_calls, calls[:] = list(calls), []
        uniform, _ = response_logprobs(model, sequences, mask, 3, uniform=True)
    assert sorted(shared_calls) == [4, 69] and calls == [73]  # a prefix pass + the rows' own tokens; one whole pass
    torch.testing.assert_close(uniform, shared, atol=1e-5, rtol=0)


def test_a_uniform_micro_batch_without_response_tokens_still_runs_a_forward_with_a_graph(model):
    sequences = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 10, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0]])
    calls = _counting_forwards(model)
    skipped, _ = response_logprobs(model, sequences, mask, 2)
    assert calls == [] and not skipped.requires_grad
    logprobs, entropy = response_logprobs(model, sequences, mask, 2, with_entropy=True, uniform=True)
    assert len(calls) == 1
    assert torch.equal(logprobs, torch.zeros(2, 2)) and torch.equal(entropy, torch.zeros(2, 2))
    logprobs.sum().backward()  # what the other ranks' backward needs of this one
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters() if p.requires_grad)
