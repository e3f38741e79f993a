"""`trainer.warm_start`: SFT steps on the policy, then RL, in one main_base job, with the KL reference the warm-started
policy (by default) or the base model."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import ConfigError, build_config, load_config
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.models import load_tokenizer
from skyrl_train.models.lora import ADAPTER_DIR
from skyrl_train.sft.warm_start import WarmStart
from skyrl_train.testing import TINY_RUN_OVERRIDES, randomize_lora_b
from skyrl_train.tracking.metrics_file import read_metrics
from skyrl_train.trainer import DATA_STATE_FILE, PTX_STATE_KEY
from skyrl_train.utils.plain_data import load_plain
from skyrl_train.workers import PolicyWorker

from .conftest import TOOL_CONVERSATION, write_jsonl


def lora_policy(tiny_model: str) -> PolicyWorker:
    cfg = build_config({"trainer": {"policy": {"model": {"path": tiny_model, "lora": {"rank": 4}}}}})
    torch.manual_seed(0)
    return PolicyWorker(cfg.trainer.policy, cfg.trainer.algorithm, num_training_steps=1)


def test_folding_the_adapter_keeps_the_policy_and_makes_it_the_adapter_off_model(tiny_model):  # noqa: F811
    policy = lora_policy(tiny_model)
    randomize_lora_b(policy.model, std=0.05)  # a trained adapter
    ids = torch.tensor([[1, 4093, 198, 27148, 282, 48006, 60, 47, 2]])
    with torch.no_grad():
        before = policy.model(ids).logits
        with policy.model.disable_adapter():
            base = policy.model(ids).logits
        version = policy.weight_version.value
        policy.fold_adapter()
        after = policy.model(ids).logits
        with policy.model.disable_adapter():
            reference = policy.model(ids).logits
    assert not torch.allclose(before, base, atol=1e-3)  # the adapter mattered
    assert torch.allclose(after, before, atol=1e-5)
    assert torch.allclose(reference, before, atol=1e-5)  # the reference is now the warm-started policy
    assert all(not p.any() for name, p in policy.model.named_parameters() if ".lora_B." in name)
    assert policy.weight_version.value > version and policy.base_weights_folded


def test_a_separate_optimizer_leaves_the_workers_own_untouched(tiny_model):  # noqa: F811
    policy = lora_policy(tiny_model)
    own, schedule = policy.optimizer, policy.scheduler
    sft = build_config({"trainer": {"policy": {"optimizer_config": {"lr": 0.5}}}}).trainer.policy.optimizer_config
    with policy.separate_optimizer(sft, 10):
        assert policy.lr == 0.5 and policy.optimizer is not own
        policy.optimizer.step()
    assert policy.optimizer is own and policy.scheduler is schedule
    assert own.state_dict()["state"] == {} and policy.lr == 1e-6


@pytest.fixture
def warm_start_run(tmp_path, tiny_model):  # noqa: F811
    """``warm_start_run(name, *overrides) -> {step: metrics}``: main_base with a warm start on 8 tool conversations
    (2 steps of 4), then 2 GRPO steps of 2 gsm8k prompts x 2 samples, LoRA rank 4, a KL loss, an eval of 2 prompts
    before RL and after each step, checkpoints every step; runs of one name share their folders."""
    write_dataset(generate_dataset(train_size=4, val_size=2, seed=3, few_shot=0), tmp_path / "data")
    demos = write_jsonl(tmp_path / "demos.jsonl", [{"messages": TOOL_CONVERSATION}] * 8)

    def run(name: str, *overrides: str) -> dict[int, dict]:
        out = tmp_path / name
        cfg = load_config(
            [
                f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
                f"data.val_data=[{tmp_path / 'data' / 'validation.parquet'}]",
                f"trainer.policy.model.path={tiny_model}",
                *TINY_RUN_OVERRIDES,
                "trainer.train_batch_size=2",
                "trainer.policy_mini_batch_size=2",
                "trainer.max_prompt_length=1024",
                "trainer.policy.model.lora.rank=4",
                "trainer.policy.optimizer_config.lr=1e-3",
                "trainer.eval_interval=1",
                "trainer.eval_batch_size=2",
                "generator.eval_sampling_params.max_generate_length=4",
                "trainer.ckpt_interval=1",
                "trainer.logger=jsonl",
                f"trainer.ckpt_path={out / 'ckpts'}",
                f"trainer.export_path={out / 'exports'}",
                "trainer.warm_start=true",
                f"sft.train_data=[{demos}]",
                "sft.batch_size=4",
                "sft.lr=1e-2",
                *overrides,
            ]
        )
        BasePPOExp(cfg).run()
        return read_metrics(out / "exports" / "metrics.jsonl").steps

    return run


def test_warm_start_then_rl_runs_end_to_end_with_the_warm_start_as_reference(warm_start_run, tmp_path):
    rows = warm_start_run("run")
    assert sorted(rows) == [0, 1, 2]
    start = rows[0]
    assert start["warm_start/steps"] == 2 and start["warm_start/conversations"] == 8
    assert "eval_base/all/avg_score" in start and "eval/all/avg_score" in start  # base, then the warm-started policy
    assert start["timing/warm_start"] > 0
    assert rows[1]["policy/policy_kl"] == 0.0  # the fresh adapter: the policy is its reference, the warm start
    sft = read_metrics(tmp_path / "run/exports/warm_start/metrics.jsonl").steps
    losses = [sft[step]["sft/loss"] for step in sorted(sft) if "sft/loss" in sft[step]]
    assert len(losses) == 2 and losses[1] < losses[0] and start["warm_start/loss"] == losses[1]
    assert (tmp_path / "run/exports/dumped_evals/base_evals/synthetic_arithmetic.jsonl").is_file()
    assert (tmp_path / "run/exports/dumped_evals/global_step_0_evals/synthetic_arithmetic.jsonl").is_file()
    assert (tmp_path / "run/ckpts/warm_start/model.safetensors").is_file()
    export = tmp_path / "run/exports/global_step_2/policy"  # merged: the whole policy; no adapter of a base nobody has
    assert (export / "config.json").is_file() and not (export / ADAPTER_DIR).exists()

    # A resumed run loads the saved warm start instead of training it again.
    sft_lines = (tmp_path / "run/exports/warm_start/metrics.jsonl").read_text()
    resumed = warm_start_run("run", "trainer.epochs=2")
    assert sorted(resumed) == [0, 1, 2, 3, 4]
    assert (tmp_path / "run/exports/warm_start/metrics.jsonl").read_text() == sft_lines


def test_restore_loads_the_folded_weights_into_a_new_policy(warm_start_run, tmp_path, tiny_model):  # noqa: F811
    warm_start_run("run", "trainer.eval_interval=-1", "trainer.epochs=1")
    saved = load_file(str(tmp_path / "run/ckpts/warm_start/model.safetensors"))
    cfg = load_config(
        [
            f"trainer.policy.model.path={tiny_model}",
            "trainer.policy.model.lora.rank=4",
            f"trainer.ckpt_path={tmp_path / 'run/ckpts'}",
            "trainer.warm_start=true",
            f"sft.train_data=[{tmp_path / 'demos.jsonl'}]",
        ]
    )
    policy = lora_policy(tiny_model)
    name = "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"
    original = policy.model.state_dict()[name].clone()
    assert WarmStart(cfg, load_tokenizer(tiny_model), policy, None).restore() and policy.base_weights_folded
    assert torch.equal(policy.model.state_dict()[name], saved[name])
    assert not torch.equal(saved[name], original)  # the warm start's adapter is in the base weights


def test_with_the_base_as_reference_rl_trains_on_the_warm_start_adapter(warm_start_run, tmp_path):
    rows = warm_start_run("base", "trainer.warm_start_reference=base", "trainer.eval_interval=-1")
    assert rows[1]["policy/policy_kl"] > 0.0  # the policy is the warm start, its reference the base
    assert (tmp_path / "base/exports/global_step_2/policy" / ADAPTER_DIR / "adapter_config.json").is_file()


def test_full_fine_tuning_copies_the_warm_start_into_the_reference_model(warm_start_run):
    rows = warm_start_run("full", "trainer.policy.model.lora.rank=0", "trainer.eval_interval=-1", "sft.lr=1e-3")
    assert rows[1]["policy/policy_kl"] == 0.0


def test_the_ptx_term_trains_on_the_conversations_during_rl_and_resumes_where_it_was(warm_start_run, tmp_path):
    """8 conversations, 2 a step: 4 ptx batches a pass; after 2 steps the pass is half done, after 4 (resumed at 2)
    the next one starts."""
    ptx = ("trainer.algorithm.ptx_coef=0.5", "trainer.algorithm.ptx_batch_size=2", "trainer.eval_interval=-1")
    rows = warm_start_run("ptx", *ptx)
    assert all(
        rows[step]["policy/ptx_loss"] > 0 and 0 <= rows[step]["policy/ptx_token_accuracy"] <= 1 for step in (1, 2)
    )
    state = load_plain(tmp_path / "ptx/ckpts/global_step_2" / DATA_STATE_FILE)
    assert (state[PTX_STATE_KEY]["epoch"], state[PTX_STATE_KEY]["position"]) == (0, 2)
    warm_start_run("ptx", *ptx, "trainer.epochs=2")
    state = load_plain(tmp_path / "ptx/ckpts/global_step_4" / DATA_STATE_FILE)
    assert (state[PTX_STATE_KEY]["epoch"], state[PTX_STATE_KEY]["position"]) == (1, 0)


def test_a_ptx_term_needs_a_warm_start():
    with pytest.raises(ConfigError) as error:
        load_config(["trainer.algorithm.ptx_coef=0.1"])
    assert any(p.startswith("trainer.algorithm.ptx_coef > 0 trains on the warm start's") for p in error.value.problems)


def test_a_warm_start_needs_data_and_the_single_strategy():
    with pytest.raises(ConfigError) as error:
        load_config(["trainer.warm_start=true", "trainer.strategy=fsdp2"])
    problems = "\n".join(error.value.problems)
    assert "trainer.warm_start=true needs conversations to fine-tune on: set sft.train_data." in problems
    assert "trainer.warm_start=true runs with trainer.strategy=single only" in problems


def test_a_folded_warm_start_refuses_engines_that_get_only_the_adapter():
    with pytest.raises(ConfigError) as error:
        load_config(
            [
                "trainer.warm_start=true",
                "sft.train_data=[demos.jsonl]",
                "trainer.policy.model.lora.rank=4",
                "generator.run_engines_locally=false",
            ]
        )
    assert any(p.startswith("trainer.warm_start_reference=warm_start folds") for p in error.value.problems)
