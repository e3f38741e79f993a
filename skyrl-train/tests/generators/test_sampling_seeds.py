"""Reproducible rollouts: with sampling params that have no seed, each generation call samples with a seed derived from
`trainer.seed` and the call's identity (`sampling_seeds`), so its tokens do not depend on how the engine batches the
concurrent requests of the agent loops."""

from __future__ import annotations

import pytest

from skyrl_train.config.schema import SkyRLGymConfig
from skyrl_train.generators.base import BatchMetadata, GeneratorInput, TrajectoryID
from skyrl_train.generators.sampling_seeds import TrajectorySeeds, request_seed, trajectory_seeds
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.base import SamplingParams
from skyrl_train.inference_engines.hf.engine import HFInferenceEngine
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401

from .conftest import EOS, ScriptedEngine

TRAIN_STEP_3 = BatchMetadata(global_step=3, training_phase="train")


def test_request_seeds_are_fixed_hashes_of_the_trainer_seed_and_the_call_identity():
    # Pinned: a change here changes the rollouts of every seeded run.
    calls = [
        (42, "train", 1, TrajectoryID("7", 0), 0),
        (42, "train", 1, TrajectoryID("7", 1), 0),  # another sample of the prompt
        (42, "train", 1, TrajectoryID("7", 0), 1),  # the next turn
        (42, "eval", 1, TrajectoryID("7", 0), 0),
        (42, "train", 2, TrajectoryID("7", 0), 0),
        (43, "train", 1, TrajectoryID("7", 0), 0),  # another trainer.seed
    ]
    assert [request_seed(*call) for call in calls] == [
        618595546,
        736474479,
        1742319256,
        812843504,
        1451274901,
        1221047892,
    ]


@pytest.mark.parametrize(
    "base_seed, sampling_params, metadata",
    [
        pytest.param(42, SamplingParams(seed=5), TRAIN_STEP_3, id="explicit sampling seed"),
        pytest.param(None, SamplingParams(), TRAIN_STEP_3, id="generator without a seed"),
        pytest.param(42, SamplingParams(), None, id="batch without metadata"),
    ],
)
def test_no_seed_is_derived_where_the_requests_keep_their_sampling_params(base_seed, sampling_params, metadata):
    assert trajectory_seeds(base_seed, sampling_params, [TrajectoryID("q", 0)], metadata) == [None]


def test_no_seed_is_derived_for_a_row_without_a_trajectory_id():
    seeds = trajectory_seeds(42, SamplingParams(), [TrajectoryID("q", 0), None], TRAIN_STEP_3)
    assert seeds == [TrajectorySeeds(42, "train", 3, TrajectoryID("q", 0)), None]


def _scripted_generator(tokenizer, generator_cfg, script, seed: int | None, **overrides):
    engine = ScriptedEngine(tokenizer, script)
    generator = SkyRLGymGenerator(
        generator_cfg(**overrides), SkyRLGymConfig(max_env_workers=2), engine, tokenizer, seed=seed
    )
    return generator, engine


def _seeds_by_session(engine: ScriptedEngine) -> dict[str, list[int | None]]:
    seeds: dict[str, list[int | None]] = {}
    for call in engine.calls:
        seeds.setdefault(call["session_ids"][0], []).append(call["sampling_params"].seed)
    return seeds


async def test_each_turn_of_each_trajectory_samples_with_its_own_derived_seed(tokenizer, generator_cfg, batch, step):
    script = {session: [[EOS], [EOS]] for session in ("q_0", "q_1")}
    generator, engine = _scripted_generator(tokenizer, generator_cfg, script, seed=42)
    two_turns = [step(observation="Try again."), step(done=True)]
    await generator.generate(GeneratorInput(**batch(script=two_turns, n=2), batch_metadata=TRAIN_STEP_3))
    assert _seeds_by_session(engine) == {
        f"q_{sample}": [request_seed(42, "train", 3, TrajectoryID("q", sample), turn) for turn in (0, 1)]
        for sample in (0, 1)
    }


async def test_an_explicit_sampling_seed_reaches_every_request_unchanged(tokenizer, generator_cfg, batch, step):
    script = {session: [[EOS], [EOS]] for session in ("q_0", "q_1")}
    generator, engine = _scripted_generator(tokenizer, generator_cfg, script, seed=42, **{"sampling_params.seed": 5})
    two_turns = [step(observation="Try again."), step(done=True)]
    await generator.generate(GeneratorInput(**batch(script=two_turns, n=2), batch_metadata=TRAIN_STEP_3))
    assert _seeds_by_session(engine) == {"q_0": [5, 5], "q_1": [5, 5]}


# -- the real hf engine --------------------------------------------------------------------------------------------

QUESTIONS = [
    ("0", "Tom has 2 apples and buys 2 more. How many apples does he have?", "4"),
    ("1", "A box holds 3 pens. How many pens are in 2 boxes?", "6"),
]
SAMPLES = 2
MAX_TOKENS = 8


def _gsm8k_batch(reverse: bool) -> GeneratorInput:
    """2 gsm8k_multi_turn questions x 2 samples (at most 2 turns each), step 1 of training; `reverse` submits the
    trajectories in the opposite order."""
    rows = [(uid, text, answer, sample) for uid, text, answer in QUESTIONS for sample in range(SAMPLES)]
    if reverse:
        rows.reverse()
    return GeneratorInput(
        prompts=[[{"role": "user", "content": text}] for _, text, _, _ in rows],
        env_classes=["gsm8k_multi_turn"] * len(rows),
        env_extras=[{"reward_spec": {"ground_truth": answer}} for _, _, answer, _ in rows],
        trajectory_ids=[TrajectoryID(uid, sample) for uid, _, _, sample in rows],
        batch_metadata=BatchMetadata(global_step=1, training_phase="train"),
    )


@pytest.fixture
def rollouts(tiny_model, tiny_tokenizer, generator_cfg):  # noqa: F811
    """``await rollouts(trainer_seed, engine_seed, reverse=False, **engine_kwargs)`` -> ({trajectory id: response
    ids}, the engine's largest decode batch): one generation of `_gsm8k_batch` (temperature 1) by a fresh hf engine
    over the tiny model, with the generator seeded by `trainer_seed` and the engine's RNG by `engine_seed`."""
    cfg = generator_cfg(max_turns=2, **{"sampling_params.max_generate_length": MAX_TOKENS})

    async def generate(trainer_seed: int | None, engine_seed: int, reverse: bool = False, **engine_kwargs):
        engine = HFInferenceEngine(load_causal_lm(tiny_model), tiny_tokenizer, seed=engine_seed, **engine_kwargs)
        try:
            generator = SkyRLGymGenerator(
                cfg, SkyRLGymConfig(max_env_workers=4), engine, tiny_tokenizer, seed=trainer_seed
            )
            output = await generator.generate(_gsm8k_batch(reverse))
        finally:
            await engine.teardown()
        responses = dict(zip(output["trajectory_ids"], output["response_ids"], strict=True))
        return responses, engine.stats.max_batch_size

    return generate


SERIAL = dict(max_num_seqs=1, prefix_cache_bytes=0, shared_prefix_decode=False)
"""One sequence at a time, no prefix cache: every forward pass is shaped unlike a batched engine's."""


async def test_the_same_seed_samples_the_same_tokens_however_the_engine_batches_the_requests(rollouts):
    batched, widest = await rollouts(42, engine_seed=1, max_num_seqs=8)
    serial, one = await rollouts(42, engine_seed=2, reverse=True, **SERIAL)
    assert widest > 1 and one == 1  # the first engine batched requests, the second ran them one at a time
    assert serial == batched


async def test_without_a_seed_the_tokens_depend_on_how_the_engine_batches_the_requests(rollouts):
    batched, _ = await rollouts(None, engine_seed=1, max_num_seqs=8)
    serial, _ = await rollouts(None, engine_seed=1, **SERIAL)
    assert serial != batched


async def test_another_trainer_seed_samples_other_tokens(rollouts):
    first, _ = await rollouts(42, engine_seed=1, max_num_seqs=8)
    second, _ = await rollouts(43, engine_seed=1, max_num_seqs=8)
    assert all(first[trajectory] != second[trajectory] for trajectory in first)
