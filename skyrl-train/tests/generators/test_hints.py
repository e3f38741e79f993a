"""`generator.train_without_hints`: a hinted row is generated with its hint and trained on its question alone; and
`trainer.algorithm.hinted_rows_positive_only`, which keeps only what such rows got right."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.generators.utils import encode_chat, prompt_without_hint
from skyrl_train.trainer_utils import Rollouts, zero_negative_hinted_advantages

EOS = 2
FOUR = [1589, 314, 216, 36, 30]
"""It is 4."""
QUESTION = "What is 2+2?"
HINT = "Hint: add the two numbers."


def _ids(tokenizer, text: str, system: str | None = None) -> list[int]:
    messages = [{"role": "user", "content": text}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return encode_chat(tokenizer, messages, True)


def test_prompt_without_hint_cuts_the_hint_from_the_last_user_message():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"{QUESTION} {HINT}"},
        {"role": "assistant", "content": "ok"},
    ]
    assert prompt_without_hint(messages, HINT) == [messages[0], {"role": "user", "content": QUESTION}, messages[2]]
    assert messages[1]["content"] == f"{QUESTION} {HINT}"  # the caller's messages are left as they were


@pytest.mark.parametrize("messages", [[{"role": "user", "content": QUESTION}], [{"role": "system", "content": HINT}]])
def test_a_hint_that_does_not_end_the_last_user_message_is_refused(messages):
    with pytest.raises(ValueError, match="extra_info.hint 'Hint: add the two numbers.' is not the end of"):
        prompt_without_hint(messages, HINT)


@pytest.mark.parametrize("without", [False, True])
async def test_a_hinted_row_is_generated_with_the_hint_and_trained_without_it(
    make_generator, batch, step, tokenizer, without
):
    generator, engine = make_generator([FOUR + [EOS], FOUR + [EOS]], train_without_hints=without)
    script = [step(0.0, observation="go on"), step(1.0, done=True)]
    extras = {"extra_info": {"hint": HINT}, "system_prompt": "Be brief."}
    out = await generator.generate(batch(script=script, prompt=f"{QUESTION} {HINT}", **extras))
    hinted, plain = _ids(tokenizer, f"{QUESTION} {HINT}", "Be brief."), _ids(tokenizer, QUESTION, "Be brief.")
    assert engine.calls[0]["prompt_token_ids"] == [hinted]  # the rollout sees the hint, after the env's init
    assert out["prompt_token_ids"] == [plain if without else hinted]
    response = out["response_ids"][0]
    assert engine.calls[1]["prompt_token_ids"] == [hinted + response[: len(response) - len(FOUR) - 1]]
    assert out["loss_masks"][0].count(1) == 2 * len(FOUR + [EOS])  # both turns, as sampled
    assert out["conversations"][0].prompt[1]["content"] == f"{QUESTION} {HINT}"  # what the rollout saw


async def test_step_wise_rows_carry_the_unhinted_prompt_before_every_turn(make_generator, batch, step, tokenizer):
    generator, engine = make_generator(
        [FOUR + [EOS], FOUR + [EOS]], train_without_hints=True, step_wise_trajectories=True
    )
    script = [step(0.0, observation="go on"), step(1.0, done=True)]
    out = await generator.generate(batch(script=script, prompt=f"{QUESTION} {HINT}", extra_info={"hint": HINT}))
    hinted, plain = _ids(tokenizer, f"{QUESTION} {HINT}"), _ids(tokenizer, QUESTION)
    second_turn_context = engine.calls[1]["prompt_token_ids"][0]
    assert out["prompt_token_ids"] == [plain, plain + second_turn_context[len(hinted) :]]


async def test_rows_without_a_hint_keep_their_prompt(make_generator, batch, step, tokenizer):
    generator, _ = make_generator([FOUR + [EOS]], train_without_hints=True)
    out = await generator.generate(batch(script=[step(1.0, done=True)], extra_info={"hint": None}))
    assert out["prompt_token_ids"] == [_ids(tokenizer, QUESTION)]


async def test_a_hint_the_question_does_not_end_with_fails_the_batch(make_generator, batch, step):
    generator, _ = make_generator([FOUR + [EOS]], train_without_hints=True)
    with pytest.raises(ValueError, match="is not the end of the prompt's last user message 'What is 2\\+2\\?'"):
        await generator.generate(batch(script=[step(1.0, done=True)], extra_info={"hint": HINT}))


def test_hinted_rows_keep_only_positive_advantages():
    extras = [{"extra_info": {"hint": HINT}}] * 2 + [{"extra_info": {"hint": None}}, {}]
    rollouts = Rollouts({"response_ids": [[1]] * 4}, ["0", "0", "1", "1"], [None] * 4, extras)
    batch = {"advantages": torch.tensor([[0.75, 0.75], [-0.75, -0.75], [0.5, 0.5], [-0.5, -0.5]])}
    metrics = zero_negative_hinted_advantages(batch, rollouts)
    assert batch["advantages"].tolist() == [[0.75, 0.75], [0.0, 0.0], [0.5, 0.5], [-0.5, -0.5]]
    assert metrics == {"trainer/hinted_negative_advantage_fraction": 0.25}
