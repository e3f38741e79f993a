"""`GeneratorOutput.conversations`: each trajectory as role/content messages, for inspection and eval dumps."""

from __future__ import annotations

from skyrl_train.generators.base import TrajectoryConversation

EOS = 2
THREE = [57, 1510, 216, 35, 30]
"""I think 3."""
FOUR = [1589, 314, 216, 36, 30]
"""It is 4."""
QUESTION = {"role": "user", "content": "What is 2+2?"}


async def test_conversation_is_the_initialised_prompt_then_turns_and_observations(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(1.0, done=True, observation="Correct.")]
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=script, system_prompt="Answer briefly."))
    assert out["conversations"] == [
        TrajectoryConversation(
            prompt=[{"role": "system", "content": "Answer briefly."}, QUESTION],
            response=[
                {"role": "assistant", "content": "I think 3."},
                {"role": "user", "content": "Try again."},
                {"role": "assistant", "content": "It is 4."},
                {"role": "user", "content": "Correct."},
            ],
        )
    ]


async def test_env_init_failure_keeps_the_dataset_prompt_and_no_turns(make_generator, batch):
    generator, _ = make_generator([])
    out = await generator.generate(batch(fail_in="init"))
    assert out["conversations"] == [TrajectoryConversation(prompt=[QUESTION], response=[])]


async def test_env_step_failure_keeps_the_turn_that_failed(make_generator, batch, step):
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]])
    out = await generator.generate(batch(script=[step(0.0, observation="Try again.")], fail_in="step:2"))
    assert out["stop_reasons"] == ["env_step_failed"]
    assert out["conversations"][0].response == [
        {"role": "assistant", "content": "I think 3."},
        {"role": "user", "content": "Try again."},
        {"role": "assistant", "content": "It is 4."},
    ]


async def test_step_wise_puts_the_conversation_on_the_last_row_only(make_generator, batch, step):
    script = [step(0.0, observation="Try again."), step(1.0, done=True)]
    generator, _ = make_generator([THREE + [EOS], FOUR + [EOS]], step_wise_trajectories=True)
    out = await generator.generate(batch(script=script))
    first, last = out["conversations"]
    assert first is None
    assert [message["content"] for message in last.response] == ["I think 3.", "Try again.", "It is 4."]
