"""convert_prompts_responses_to_batch_tensors: exact padded layout, reward placement, mismatch errors.

Token ids are SmolLM2's: 1 = <|im_start|>, 2 = <|im_end|> (also the pad token), 4093 = "user", 198 = "\\n",
26843 = "Hi", 665 = " there", 520 = "ass".
"""

from __future__ import annotations

import pytest
import torch

from skyrl_train.dataset import convert_prompts_responses_to_batch_tensors

PROMPTS = [[1, 4093, 198], [1, 4093, 198, 26843, 198]]
RESPONSES = [[26843, 665, 2], [520]]


def _convert(pad=2, **overrides):
    kwargs = dict(
        prompts=PROMPTS,
        responses=RESPONSES,
        rewards=[1.0, [0.5]],
        loss_masks=[[1, 1, 1], [0]],
        logprobs=[[-0.1, -0.2, -0.3], [-1.0]],
    )
    kwargs.update(overrides)
    return convert_prompts_responses_to_batch_tensors(pad, **kwargs)


def test_pad_id_comes_from_the_tokenizer(tiny_tokenizer):
    assert tiny_tokenizer.pad_token_id == 2
    batch = _convert(tiny_tokenizer)
    assert batch["sequences"].tolist() == _convert(2)["sequences"].tolist()


def test_sequences_are_left_padded_prompts_then_right_padded_responses():
    assert _convert(pad=0)["sequences"].tolist() == [
        [0, 0, 1, 4093, 198, 26843, 665, 2],
        [1, 4093, 198, 26843, 198, 520, 0, 0],
    ]


def test_attention_mask_covers_real_tokens():
    assert _convert()["attention_mask"].tolist() == [
        [0, 0, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1, 0, 0],
    ]


def test_response_mask_marks_real_response_tokens():
    assert _convert()["response_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_scalar_reward_sits_on_the_last_response_token_per_token_list_is_kept():
    assert _convert()["rewards"].tolist() == [[0.0, 0.0, 1.0], [0.5, 0.0, 0.0]]


def test_per_token_rewards_of_a_multi_turn_response_are_used_as_is():
    batch = _convert(rewards=[[0.0, 0.25, 1.0], 0.0])
    assert batch["rewards"].tolist() == [[0.0, 0.25, 1.0], [0.0, 0.0, 0.0]]


def test_loss_mask_is_float_and_zero_padded():
    loss_mask = _convert()["loss_mask"]
    assert loss_mask.dtype == torch.float32
    assert loss_mask.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]


def test_rollout_logprobs_are_zero_padded():
    expected = torch.tensor([[-0.1, -0.2, -0.3], [-1.0, 0.0, 0.0]])
    torch.testing.assert_close(_convert()["rollout_logprobs"], expected, rtol=0, atol=0)


def test_rollout_logprobs_are_none_without_logprobs():
    assert _convert(logprobs=None)["rollout_logprobs"] is None


def test_dtypes_and_response_length_metadata():
    batch = _convert()
    dtypes = {k: batch[k].dtype for k in ("sequences", "attention_mask", "response_mask", "rewards")}
    assert dtypes == {
        "sequences": torch.int64,
        "attention_mask": torch.int64,
        "response_mask": torch.int64,
        "rewards": torch.float32,
    }
    assert batch.metadata == {"response_length": 3}


def test_empty_response_with_per_token_rewards_is_all_padding():
    batch = _convert(responses=[[26843, 665, 2], []], rewards=[1.0, []], loss_masks=[[1, 1, 1], []], logprobs=None)
    assert batch["sequences"].tolist()[1] == [1, 4093, 198, 26843, 198, 2, 2, 2]
    assert batch["response_mask"].tolist()[1] == [0, 0, 0]


def test_scalar_reward_on_an_empty_response_is_an_error():
    with pytest.raises(ValueError, match="sample 1: rewards is a scalar but the response is empty"):
        _convert(responses=[[26843, 665, 2], []], rewards=[1.0, 1.0], loss_masks=[[1, 1, 1], []], logprobs=None)


def test_zero_scalar_reward_on_an_empty_response_is_all_padding():
    # e.g. generator.batched=true: a trajectory that generated nothing (an infrastructure failure) has reward 0.0
    batch = _convert(responses=[[26843, 665, 2], []], rewards=[1.0, 0.0], loss_masks=[[1, 1, 1], []], logprobs=None)
    assert batch["rewards"].tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert batch["response_mask"].tolist()[1] == [0, 0, 0]


def test_loss_mask_length_mismatch_names_sample_and_field():
    with pytest.raises(ValueError, match="sample 1: loss_masks has 2 entries, but its response has 1 tokens"):
        _convert(loss_masks=[[1, 1, 1], [1, 1]])


def test_per_token_rewards_length_mismatch_names_sample_and_field():
    with pytest.raises(ValueError, match="sample 0: rewards has 2 entries, but its response has 3 tokens"):
        _convert(rewards=[[0.0, 1.0], 0.0])


def test_logprobs_length_mismatch_names_sample_and_field():
    with pytest.raises(ValueError, match="sample 0: logprobs has 4 entries, but its response has 3 tokens"):
        _convert(logprobs=[[-0.1, -0.2, -0.3, -0.4], [-1.0]])


def test_missing_logprobs_of_one_sample_names_it():
    with pytest.raises(ValueError, match="sample 1: logprobs has None"):
        _convert(logprobs=[[-0.1, -0.2, -0.3], None])


def test_sample_count_mismatch_names_the_field():
    with pytest.raises(ValueError, match="loss_masks has 1 samples, prompts has 2"):
        _convert(loss_masks=[[1, 1, 1]])


def test_tokenizer_without_pad_token_is_an_error():
    class NoPad:
        pad_token_id = None

    with pytest.raises(ValueError, match="no pad_token_id"):
        _convert(pad=NoPad())
