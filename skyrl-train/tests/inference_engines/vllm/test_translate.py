"""The vLLM edge without vLLM: sampling params in, finish reasons and logprobs out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from skyrl_gym.common.stop_reasons import StopReason
from skyrl_train.inference_engines import SamplingParams
from skyrl_train.inference_engines.vllm.translate import (
    logprobs_follow_contract,
    sampled_token_logprobs,
    stop_reason,
    vllm_sampling_kwargs,
)


def test_sampling_params_map_onto_vllm_fields():
    params = SamplingParams(
        max_generate_length=64,
        temperature=0.7,
        top_p=0.9,
        top_k=-1,
        min_p=0.05,
        repetition_penalty=1.1,
        stop=["</tool_call>"],
        seed=3,
        additional_kwargs={"ignore_eos": True},
    )
    assert vllm_sampling_kwargs(params) == {
        "max_tokens": 64,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 0,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "seed": 3,
        "logprobs": 0,
        "stop": ["</tool_call>"],
        "include_stop_str_in_output": True,
        "skip_special_tokens": True,
        "ignore_eos": True,
    }


def test_no_logprobs_and_no_stop_strings_map_to_none():
    kwargs = vllm_sampling_kwargs(SamplingParams(logprobs=None, top_k=5))
    assert (kwargs["logprobs"], kwargs["stop"], kwargs["top_k"]) == (None, None, 5)


def test_an_extra_key_vllm_is_not_given_is_refused_by_name():
    with pytest.raises(ValueError, match=r"\['best_of'\]"):
        vllm_sampling_kwargs(SamplingParams(additional_kwargs={"best_of": 2}))


@pytest.mark.parametrize(
    ("changes", "follows"),
    [
        ({}, True),
        ({"temperature": 0.3}, True),
        ({"temperature": 0.0}, True),
        ({"top_p": 0.9}, False),
        ({"top_k": 20}, False),
        ({"min_p": 0.1}, False),
        ({"repetition_penalty": 1.2}, False),
        ({"additional_kwargs": {"presence_penalty": 0.5}}, False),
        ({"additional_kwargs": {"ignore_eos": True}}, True),
    ],
)
def test_processed_logprobs_follow_the_contract_only_without_truncation_or_penalties(changes, follows):
    assert logprobs_follow_contract(SamplingParams().replace(**changes)) is follows


@pytest.mark.parametrize(
    ("finish", "ours"), [("stop", StopReason.STOP), ("length", StopReason.LENGTH), ("abort", StopReason.ABORT)]
)
def test_finish_reasons(finish, ours):
    assert stop_reason(finish) == ours


def test_an_unknown_finish_reason_is_an_error():
    with pytest.raises(ValueError, match="'error'"):
        stop_reason("error")


def logprob(value: float) -> SimpleNamespace:
    return SimpleNamespace(logprob=value)


def test_sampled_token_logprobs_pick_each_positions_sampled_token():
    # logprobs=0 gives the sampled token alone; a top-k request would add others, which must be ignored.
    positions = [{5: logprob(-0.25)}, {9: logprob(-1.5), 2: logprob(-0.1)}, {5: logprob(-3.0)}]
    assert sampled_token_logprobs([5, 9, 5], positions) == [-0.25, -1.5, -3.0]


def test_sampled_token_logprobs_refuse_misaligned_or_missing_entries():
    with pytest.raises(ValueError, match="2 logprob positions for 3 tokens"):
        sampled_token_logprobs([1, 2, 3], [{1: logprob(0.0)}, {2: logprob(0.0)}])
    with pytest.raises(ValueError, match="position 1 lack the sampled token 7"):
        sampled_token_logprobs([1, 7], [{1: logprob(0.0)}, {2: logprob(0.0)}])
    with pytest.raises(ValueError, match="no logprobs"):
        sampled_token_logprobs([1], None)
