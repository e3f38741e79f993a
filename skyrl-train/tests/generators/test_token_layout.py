"""Exact token sequences, loss masks, logprobs and rewards the agent loop produces (SmolLM2's real template).

Literal ids used below (checked against the tokenizer in the first two tests):
    PROMPT   "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n"
             "<|im_start|>user\\nWhat is 2+2?<|im_end|>\\n<|im_start|>assistant\\n"
    ANSWER   "The answer is 4."      THREE "I think 3."      FIVE "Maybe 5."      FOUR "It is 4."
    OBS_TRY  "\\n<|im_start|>user\\nTry again.<|im_end|>\\n<|im_start|>assistant\\n"
    OBS_ALMOST "\\n<|im_start|>user\\nAlmost.<|im_end|>\\n<|im_start|>assistant\\n"
    EOS = 2 (<|im_end|>)
"""

from __future__ import annotations

import pytest

PROMPT = [
    1,
    9690,
    198,
    2683,
    359,
    253,
    5356,
    5646,
    11173,
    3365,
    3511,
    308,
    34519,
    28,
    7018,
    411,
    407,
    19712,
    8182,
    2,
    198,
]
PROMPT += [1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 9531, 198]
ANSWER = [504, 2988, 314, 216, 36, 30]
THREE = [57, 1510, 216, 35, 30]
FIVE = [26314, 216, 37, 30]
FOUR = [1589, 314, 216, 36, 30]
OBS_TRY = [198, 1, 4093, 198, 20011, 1163, 30, 2, 198, 1, 520, 9531, 198]
OBS_ALMOST = [198, 1, 4093, 198, 18700, 30, 2, 198, 1, 520, 9531, 198]
GENERATION_PROMPT = [1, 520, 9531, 198]
"""<|im_start|>assistant\\n"""
EOS = 2
"""<|im_end|>"""
ANSWER_TAG = [9617, 11247, 46]
"""</answer>"""


def test_literal_ids_are_the_tokenizers_encoding(tokenizer):
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    assert encode("The answer is 4.") == ANSWER
    assert encode("I think 3.") == THREE
    assert encode("Maybe 5.") == FIVE
    assert encode("It is 4.") == FOUR
    assert encode("\n<|im_start|>user\nTry again.<|im_end|>\n<|im_start|>assistant\n") == OBS_TRY
    assert encode("\n<|im_start|>user\nAlmost.<|im_end|>\n<|im_start|>assistant\n") == OBS_ALMOST
    assert encode("</answer>") == ANSWER_TAG


def test_prompt_ids_are_the_chat_template_with_generation_prompt(tokenizer):
    text = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.encode(text, add_special_tokens=False) == PROMPT


async def test_one_turn_episode(make_generator, batch, step):
    logprobs = [-0.5, -1.5, -0.25, -2.0, -0.75, -1.0, -0.125]
    generator, _ = make_generator([{"ids": ANSWER + [EOS], "logprobs": logprobs}])
    out = await generator.generate(batch(script=[step(reward=1.0, done=True)]))
    assert out["prompt_token_ids"] == [PROMPT]
    assert out["response_ids"] == [[504, 2988, 314, 216, 36, 30, 2]]
    assert out["loss_masks"] == [[1, 1, 1, 1, 1, 1, 1]]
    assert out["rollout_logprobs"] == [[-0.5, -1.5, -0.25, -2.0, -0.75, -1.0, -0.125]]
    assert out["rewards"] == [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]]
    assert out["stop_reasons"] == ["stop"]


async def test_three_turn_episode(make_generator, batch, step):
    script = [
        step(reward=0.0, observation="Try again."),
        step(reward=0.5, observation="Almost."),
        step(reward=1.0, done=True),
    ]
    generator, _ = make_generator([THREE + [EOS], FIVE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=script))
    # fmt: off
    assert out["response_ids"] == [[
        57, 1510, 216, 35, 30, 2,                                # I think 3.<|im_end|>
        198, 1, 4093, 198, 20011, 1163, 30, 2, 198, 1, 520, 9531, 198,  # \n<|im_start|>user\nTry again. ...
        26314, 216, 37, 30, 2,                                   # Maybe 5.<|im_end|>
        198, 1, 4093, 198, 18700, 30, 2, 198, 1, 520, 9531, 198,  # \n<|im_start|>user\nAlmost. ...
        1589, 314, 216, 36, 30, 2,                               # It is 4.<|im_end|>
    ]]
    assert out["loss_masks"] == [[
        1, 1, 1, 1, 1, 1,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        1, 1, 1, 1, 1,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        1, 1, 1, 1, 1, 1,
    ]]
    # fmt: on
    assert out["response_ids"][0] == THREE + [EOS] + OBS_TRY + FIVE + [EOS] + OBS_ALMOST + FOUR + [EOS]
    assert out["prompt_token_ids"] == [PROMPT]
    assert out["stop_reasons"] == ["stop"]


async def test_each_turns_reward_sits_on_its_last_sampled_token(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(0.5, observation="Almost."), step(1.0, done=True)]
    generator, _ = make_generator([THREE + [EOS], FIVE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=script))
    # Turns occupy [0, 6), [19, 24) and [36, 42); each reward is on the turn's final (EOS) token.
    rewards = out["rewards"][0]
    assert len(rewards) == 42
    assert {i: r for i, r in enumerate(rewards) if r} == {23: 0.5, 41: 1.0}


async def test_observation_tokens_have_zero_logprobs(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    replies = [{"ids": THREE + [EOS], "logprobs": [-1.0] * 6}, {"ids": FOUR + [EOS], "logprobs": [-2.0] * 6}]
    generator, _ = make_generator(replies)
    out = await generator.generate(batch(script=script))
    assert out["rollout_logprobs"] == [[-1.0] * 6 + [0.0] * 13 + [-2.0] * 6]


async def test_engine_receives_the_exact_running_context(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, engine = make_generator([THREE + [EOS], FOUR + [EOS]])
    await generator.generate(batch(script=script))
    assert [call["prompt_token_ids"] for call in engine.calls] == [[PROMPT], [PROMPT + THREE + [EOS] + OBS_TRY]]


async def test_env_receives_the_decoded_text(make_generator, batch, step, scripted_envs):
    generator, _ = make_generator([ANSWER + [EOS]])
    await generator.generate(batch(script=[step(1.0, done=True)]))
    assert scripted_envs[0].actions == ["The answer is 4."]


async def test_final_observation_is_dropped(make_generator, batch, step):
    generator, _ = make_generator([ANSWER + [EOS]])
    out = await generator.generate(batch(script=[step(reward=1.0, done=True, observation="Correct!")]))
    assert out["response_ids"] == [ANSWER + [EOS]]


async def test_no_observation_and_not_done_appends_just_the_generation_prompt(make_generator, batch, step):
    script = [step(0.0), step(1.0, done=True)]
    generator, engine = make_generator([THREE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=script))
    assert out["response_ids"] == [THREE + [EOS] + [1, 520, 9531, 198] + FOUR + [EOS]]
    assert out["response_ids"][0][6:10] == GENERATION_PROMPT


async def test_session_id_is_the_trajectory_id(make_generator, batch, step):
    generator, engine = make_generator([ANSWER + [EOS], ANSWER + [EOS]])
    await generator.generate(batch(script=[step(1.0, done=True)], n=2))
    assert sorted(call["session_ids"][0] for call in engine.calls) == ["q_0", "q_1"]


async def test_max_generate_length_is_passed_on_every_call(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, engine = make_generator([THREE + [EOS], FOUR + [EOS]], **{"sampling_params.max_generate_length": 7})
    await generator.generate(batch(script=script))
    assert [call["sampling_params"].max_generate_length for call in engine.calls] == [7, 7]


async def test_running_context_over_max_input_length_stops_before_the_next_turn(make_generator, batch, step):
    # After turn 1 the context is 37 + 6 + 13 = 56 tokens > 55: no second generation.
    script = [step(0.3, observation="Try again."), step(1.0, done=True)]
    generator, engine = make_generator([THREE + [EOS], FOUR + [EOS]], max_input_length=55)
    out = await generator.generate(batch(script=script))
    assert len(engine.calls) == 1
    assert out["stop_reasons"] == ["length"]
    assert out["response_ids"] == [THREE + [EOS]]
    assert out["rewards"] == [[0.0, 0.0, 0.0, 0.0, 0.0, 0.3]]


async def test_context_equal_to_max_input_length_still_generates(make_generator, batch, step):
    script = [step(0.3, observation="Try again."), step(1.0, done=True)]
    generator, engine = make_generator([THREE + [EOS], FOUR + [EOS]], max_input_length=56)
    out = await generator.generate(batch(script=script))
    assert len(engine.calls) == 2
    assert out["stop_reasons"] == ["stop"]


async def test_prompt_over_max_input_length_gives_a_masked_placeholder(make_generator, batch, step):
    generator, engine = make_generator([], max_input_length=36)
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert engine.calls == []
    assert out["stop_reasons"] == ["length"]
    assert (out["response_ids"], out["loss_masks"], out["rewards"]) == ([[EOS]], [[0]], [[0.0]])


async def test_engine_stop_reason_is_passed_through(make_generator, batch, step):
    generator, _ = make_generator([{"ids": ANSWER, "stop_reason": "length"}])
    out = await generator.generate(batch(script=[step(0.0, done=True)]))
    assert out["stop_reasons"] == ["length"]
    assert out["response_ids"] == [ANSWER]


async def test_eos_is_appended_after_a_stop_string_and_masked(make_generator, batch, step):
    generator, _ = make_generator(
        [{"ids": ANSWER + ANSWER_TAG, "logprobs": [-1.0] * 9}], **{"sampling_params.stop": ["</answer>"]}
    )
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["response_ids"] == [[504, 2988, 314, 216, 36, 30, 9617, 11247, 46, 2]]
    assert out["loss_masks"] == [[1, 1, 1, 1, 1, 1, 1, 1, 1, 0]]
    assert out["rollout_logprobs"] == [[-1.0] * 9 + [0.0]]
    assert out["rewards"] == [[0.0] * 8 + [1.0, 0.0]]


async def test_no_eos_is_appended_when_disabled(make_generator, batch, step):
    generator, _ = make_generator(
        [ANSWER + ANSWER_TAG],
        **{"sampling_params.stop": ["</answer>"], "append_eos_token_after_stop_str_in_multi_turn": False},
    )
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["response_ids"] == [ANSWER + ANSWER_TAG]


async def test_no_eos_is_appended_when_the_model_emitted_it(make_generator, batch, step):
    generator, _ = make_generator([ANSWER + ANSWER_TAG + [EOS]], **{"sampling_params.stop": ["</answer>"]})
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["response_ids"] == [ANSWER + ANSWER_TAG + [EOS]]
    assert out["loss_masks"] == [[1] * 10]


@pytest.mark.parametrize("ids", [[EOS], [216, EOS]], ids=["eos-only", "whitespace"])
async def test_empty_generation_is_trained_on_and_counted(make_generator, batch, step, ids):
    """An empty answer is the policy's own failure: its sampled tokens stay in the loss, so it can be unlearned."""
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, _ = make_generator([ids, FOUR + [EOS]])
    out = await generator.generate(batch(script=script))
    assert out["response_ids"] == [ids + OBS_TRY + FOUR + [EOS]]
    assert out["loss_masks"] == [[1] * len(ids) + [0] * 13 + [1] * 6]
    assert out["env_metrics"][0]["empty_responses"] == 1
    assert out["rollout_metrics"]["generate/empty_responses"] == 1


async def test_engine_returning_no_tokens_counts_as_an_empty_eos(make_generator, batch, step):
    generator, _ = make_generator([[]])
    out = await generator.generate(batch(script=[step(0.0, done=True)]))
    assert (out["response_ids"], out["loss_masks"], out["rollout_logprobs"]) == ([[EOS]], [[0]], [[0.0]])
    assert out["rollout_metrics"]["generate/empty_responses"] == 1


async def test_rollout_logprobs_are_none_when_not_requested(make_generator, batch, step):
    generator, _ = make_generator([ANSWER + [EOS]], **{"sampling_params.logprobs": None})
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["rollout_logprobs"] is None


async def test_postprocessed_action_replaces_the_turn_out_of_the_loss(make_generator, batch, step):
    rewritten = {**step(1.0, done=True), "postprocessed_action": "It is 4."}
    generator, _ = make_generator([ANSWER + [EOS]])
    out = await generator.generate(batch(script=[rewritten]))
    assert out["response_ids"] == [FOUR + [EOS]]
    assert out["loss_masks"] == [[0] * 6]
    assert out["rewards"] == [[0.0] * 5 + [1.0]]


async def test_context_status_is_appended_to_the_observation(make_generator, batch, step, tokenizer):
    # Context after turn 1's output: 37 prompt + 6 generated = 43 of 100 tokens; turn 1 of max_turns 3.
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]], inject_context_status=True, max_input_length=100)
    out = await generator.generate(batch(script=script))
    observation = tokenizer.decode(out["response_ids"][0][6:-6])
    assert observation == (
        "\n<|im_start|>user\nTry again.\n[Context: 43/100 tokens (43%), Turn 1/3]<|im_end|>\n<|im_start|>assistant\n"
    )


async def test_single_message_mode_keeps_one_assistant_message(make_generator, batch, step):
    # Turn EOS stripped, observation content encoded raw, one EOS at the end carrying the final reward
    # with the logprob the model gave it.
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    replies = [{"ids": THREE + [EOS], "logprobs": [-1.0] * 6}, {"ids": FOUR + [EOS], "logprobs": [-2.0] * 5 + [-0.25]}]
    generator, engine = make_generator(replies, use_conversation_multi_turn=False)
    out = await generator.generate(batch(script=script))
    assert out["response_ids"] == [[57, 1510, 216, 35, 30, 20011, 1163, 30, 1589, 314, 216, 36, 30, 2]]
    assert out["loss_masks"] == [[1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1]]
    assert out["rollout_logprobs"] == [[-1.0] * 5 + [0.0] * 3 + [-2.0] * 5 + [-0.25]]
    assert out["rewards"] == [[0.0] * 13 + [1.0]]
    assert engine.calls[1]["prompt_token_ids"] == [PROMPT + THREE + [20011, 1163, 30]]


async def test_single_message_mode_adds_no_eos_after_a_length_stop(make_generator, batch, step):
    generator, _ = make_generator([{"ids": FOUR, "stop_reason": "length"}], use_conversation_multi_turn=False)
    out = await generator.generate(batch(script=[step(1.0, done=True)]))
    assert out["response_ids"] == [FOUR]
    assert out["rewards"] == [[0.0] * 4 + [1.0]]
