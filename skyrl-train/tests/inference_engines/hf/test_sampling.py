"""Logits processing on a four-token vocabulary, against hand-computed distributions; choosing tokens on every
available device."""

from __future__ import annotations

import math

import torch

from skyrl_train.inference_engines import SamplingParams
from skyrl_train.inference_engines.hf.batcher import read_back_together
from skyrl_train.inference_engines.hf.sampling import (
    SamplingBatch,
    apply_repetition_penalty,
    choose_tokens,
    replace_zero_probability_tokens,
    sample_from_probs,
    sampled_logprobs,
    warp_probs,
)
from skyrl_train.testing import on_every_device

PROBS = [0.5, 0.25, 0.15, 0.1]


def warp(probs=PROBS, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    logits = torch.tensor([probs]).log()
    return warp_probs(
        logits, torch.tensor([temperature]), torch.tensor([top_k]), torch.tensor([top_p]), torch.tensor([min_p])
    )[0]


def assert_probs(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), atol=1e-6, rtol=0)


def test_no_truncation_leaves_the_distribution_unchanged():
    assert_probs(warp(), PROBS)


def test_temperature_two_takes_the_square_root_of_probabilities():
    # p ∝ [1, 2, 4] ** (1/2) = [1, 1.41421356, 2]; sum 4.41421356
    assert_probs(warp([1 / 7, 2 / 7, 4 / 7], temperature=2.0), [0.22654092, 0.32037724, 0.45308184])


def test_temperature_zero_is_treated_as_one_in_the_distribution():
    assert_probs(warp(temperature=0.0), PROBS)


def test_top_k_two_keeps_the_two_most_likely_tokens():
    assert_probs(warp(top_k=2), [2 / 3, 1 / 3, 0.0, 0.0])


def test_top_p_keeps_tokens_while_the_mass_before_them_is_below_p():
    # mass before each token: 0, 0.5, 0.75, 0.9
    assert_probs(warp(top_p=0.7), [2 / 3, 1 / 3, 0.0, 0.0])
    assert_probs(warp(top_p=0.8), [0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0.0])
    assert_probs(warp(top_p=0.3), [1.0, 0.0, 0.0, 0.0])


def test_top_p_applies_to_the_distribution_left_by_top_k():
    # top-k 3 renormalises to [0.5, 0.25, 0.15] / 0.9 = [0.556, 0.278, 0.167]; mass before token 2 is 0.833 >= 0.8
    assert_probs(warp(top_k=3, top_p=0.8), [2 / 3, 1 / 3, 0.0, 0.0])


def test_min_p_drops_tokens_below_a_fraction_of_the_most_likely():
    # thresholds 0.4 * 0.5 = 0.2 and 0.25 * 0.5 = 0.125
    assert_probs(warp(min_p=0.4), [2 / 3, 1 / 3, 0.0, 0.0])
    assert_probs(warp(min_p=0.25), [0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0.0])


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits_of_seen_tokens():
    logits = torch.tensor([[2.0, -1.0, 0.5, -0.5]])
    seen = torch.tensor([[True, True, False, False]])
    penalised = apply_repetition_penalty(logits, torch.tensor([2.0]), seen)
    assert penalised.tolist() == [[1.0, -2.0, 0.5, -0.5]]


def test_each_row_uses_its_own_parameters():
    logits = torch.tensor([PROBS, PROBS]).log()
    probs = warp_probs(
        logits, torch.tensor([1.0, 1.0]), torch.tensor([0, 2]), torch.tensor([0.8, 1.0]), torch.tensor([0.0, 0.0])
    )
    assert_probs(probs[0], [0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0.0])
    assert_probs(probs[1], [2 / 3, 1 / 3, 0.0, 0.0])


@on_every_device
def test_inverse_cdf_sampling_picks_the_interval_holding_the_uniform_and_skips_zero_probability_tokens(device):
    probs = torch.tensor([[0.25, 0.0, 0.5, 0.25]], device=device).expand(5, 4)
    # cdf = [0.25, 0.25, 0.75, 1.0] (exact in binary)
    tokens = sample_from_probs(probs, torch.tensor([0.0, 0.2499, 0.25, 0.7499, 0.75], device=device))
    assert tokens.device.type == device and tokens.tolist() == [0, 0, 2, 2, 3]


def test_the_largest_uniform_picks_the_last_token_with_probability_above_zero():
    probs = torch.tensor([[0.1, 0.6, 0.3, 0.0, 0.0], [0.7, 0.3, 0.0, 0.0, 0.0]])
    largest = 1 - 2**-24  # torch.rand's largest value
    assert sample_from_probs(probs, torch.tensor([largest, largest])).tolist() == [2, 1]


@on_every_device
def test_a_row_whose_token_has_zero_probability_takes_its_most_likely_token(device):
    probs = torch.tensor([[0.2, 0.0, 0.8], [0.5, 0.2, 0.3]], device=device)
    tokens = replace_zero_probability_tokens(probs, torch.tensor([1, 1], device=device))
    assert tokens.tolist() == [2, 1]


def test_logprob_is_log_softmax_of_raw_logits_over_temperature_with_zero_counted_as_one():
    logits = torch.tensor([[0.0, math.log(3.0)]] * 3)  # softmax [1/4, 3/4]
    logprobs = sampled_logprobs(logits, torch.tensor([1, 1, 1]), torch.tensor([1.0, 0.0, 0.5]))
    # T = 0.5: softmax of [0, 2 ln 3] = [1/10, 9/10]
    torch.testing.assert_close(logprobs, torch.tensor([math.log(0.75), math.log(0.75), math.log(0.9)]))


@on_every_device
def test_greedy_rows_take_the_argmax_after_the_repetition_penalty(device):
    logits = torch.tensor([[3.0, 2.0, 1.0]], device=device)
    batch = SamplingBatch.from_params([SamplingParams(temperature=0.0, repetition_penalty=2.0)], device)
    tokens = choose_tokens(logits, batch, seen=torch.tensor([[True, False, False]], device=device), uniforms=None)
    assert tokens.tolist() == [1]  # 3.0 / 2 = 1.5 < 2.0


@on_every_device
def test_a_batch_mixing_greedy_and_truncated_sampling_rows_chooses_each_rows_token_on_the_device(device):
    # Row 0 greedy; row 1 top-k 2 (probs [2/3, 1/3, 0, 0], cdf [2/3, 1, 1, 1]); row 2 top-p 0.8 and min-p 0.25
    # (probs [0.5, 0.25, 0.15, 0] / 0.9, cdf [0.556, 0.833, 1, 1]); row 3 repetition penalty 2 on the seen token 0
    # (logits log [0.25, 0.25, 0.15, 0.1], probs [1/3, 1/3, 0.2, 2/15], cdf [0.333, 0.667, 0.867, 1]).
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=1.0, top_k=2),
        SamplingParams(temperature=1.0, top_p=0.8, min_p=0.25),
        SamplingParams(temperature=1.0, repetition_penalty=2.0),
    ]
    batch = SamplingBatch.from_params(params, device)
    assert {t.device.type for t in (batch.temperature, batch.top_k, batch.top_p, batch.min_p)} == {device}
    logits = torch.tensor([PROBS] * 4, device=device).log()
    seen = torch.tensor([[False] * 4] * 3 + [[True, False, False, False]], device=device)
    uniforms = torch.tensor([0.99, 0.7, 0.9, 0.5], device=device)
    assert choose_tokens(logits, batch, seen, uniforms).tolist() == [0, 1, 2, 1]


def test_tokens_and_logprobs_read_back_in_one_copy_are_exactly_what_each_holds():
    tokens = torch.tensor([0, 49151, 2**40 + 1])
    logprobs = torch.tensor([-0.1234567, float("-inf"), -1e-30])
    token_list, logprob_list = read_back_together(tokens, logprobs)
    assert token_list == tokens.tolist() and all(type(token) is int for token in token_list)
    assert logprob_list == logprobs.tolist()
