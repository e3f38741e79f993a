"""Probes for `test_every_key.py`: each builds one part of a run from a config (on the tiny model) and reads what it
built or did as plain values, by name, so that a test can compare a config with a key at its default against one with
the key set.

A probe is `Probe(name, read, overrides)`: `read(cfg, workdir)` returns `{observable: value}`; `overrides` are what
every config it reads needs (data files, small batches). Config values may name `{workdir}` (a fresh folder per
read), `{tiny}` and `{tiny_other}` (two tiny models with different random weights). Reads are deterministic: the same
config read twice gives equal values (`test_every_key.py` checks it per probe).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import SkyRLConfig, load_config
from skyrl_train.dataset import PromptDataLoader
from skyrl_train.distributed.fsdp import FSDPSetup
from skyrl_train.distributed.placement import plan_placement
from skyrl_train.distributed.worker_groups import fsdp2_roles
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.fully_async_trainer import generation_worker_count
from skyrl_train.inference_engines.vllm.engine_config import engine_bundles, engine_kwargs
from skyrl_train.models import load_tokenizer
from skyrl_train.sft.encoding import sft_datasets
from skyrl_train.sft.trainer import sft_optimizer_config, total_steps
from skyrl_train.sft.warm_start import WarmStart
from skyrl_train.storage.settings import S3Settings
from skyrl_train.testing import tiny_model_path
from skyrl_train.trainer import PPOTrainer
from skyrl_train.trainer_utils import Rollouts, prepare_generator_input
from skyrl_train.training_batch import TrainingInputBatch

TURNS_ENV = "every_key_turns"


class TurnsEnv(BaseTextEnv):
    """Rewards every turn with `env_config.reward` (default 1.0) and asks for another until `max_turns`: a
    multi-turn env whose rewards do not depend on what the random tiny model writes."""

    env_config_keys = frozenset({"reward"})

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        self.reward = float((env_config or {}).get("reward", 1.0))
        self.max_turns = int((extras or {})["max_turns"])

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        done = self.turns >= self.max_turns
        observations = [] if done else [{"role": "user", "content": "Go on."}]
        return BaseTextEnvStepOutput(observations=observations, reward=self.reward, done=done, metadata={})

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns}


@contextlib.contextmanager
def turns_env_registered() -> Iterator[None]:
    """`TurnsEnv` registered under `TURNS_ENV` for the block's time (a registration at import would show in every
    other test's list of registered envs)."""
    skyrl_gym.register(id=TURNS_ENV, entry_point=TurnsEnv)
    try:
        yield
    finally:
        skyrl_gym.deregister(TURNS_ENV)


@dataclasses.dataclass(frozen=True)
class Probe:
    name: str
    """What it builds or runs, for the table and test ids."""
    read: Callable[[SkyRLConfig, Path], dict[str, Any]]
    overrides: tuple[str, ...] = ()


def tiny_paths() -> dict[str, str]:
    return {"tiny": tiny_model_path(), "tiny_other": tiny_model_path(seed=1)}


def config_for(probe: Probe, settings: tuple[str, ...], workdir: Path) -> SkyRLConfig:
    """The probe's config: the tiny model in fp32 with its folders under `workdir`, the probe's overrides, then
    `settings` (the row's `where` and the key's value)."""
    names = {"{workdir}": str(workdir), **{f"{{{k}}}": v for k, v in tiny_paths().items()}}
    overrides = [
        "trainer.policy.model.path={tiny}",
        "trainer.bf16=false",
        "trainer.gradient_checkpointing=false",
        "trainer.ckpt_path={workdir}/ckpts",
        "trainer.export_path={workdir}/exports",
        *probe.overrides,
        *settings,
    ]
    return load_config([_named(o, names) for o in overrides])


def _named(override: str, names: dict[str, str]) -> str:
    for name, value in names.items():
        override = override.replace(name, value)
    return override


def observe(probe: Probe, settings: tuple[str, ...], workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    write_data(workdir)
    return probe.read(config_for(probe, settings, workdir), workdir)


# ------------------------------------------------------------------------------------------------------------ data


def _row(content: str, source: str, hint: str | None = None) -> dict[str, Any]:
    return {
        "prompt": [{"role": "user", "content": content if hint is None else f"{content} {hint}"}],
        "env_class": None,
        "data_source": source,
        "reward_spec": {"method": "rule", "ground_truth": "4"},
        "extra_info": {"hint": hint},
    }


def write_data(workdir: Path) -> None:
    """`prompts.jsonl`: 8 short prompts of sources a (4) and b (4), each ending with a hint (`extra_info.hint`), and one
    of ~60 tokens; `other.jsonl`: 2 other prompts; `gsm8k/{train,validation}.parquet`: 2 synthetic gsm8k problems
    each."""
    rows = [_row(f"What is {i}+{i}?", "a" if i < 4 else "b", hint="Hint: add.") for i in range(8)]
    rows.append(_row("Add these numbers please: " + " + ".join(str(i) for i in range(25)), "a"))
    (workdir / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    other = [_row(f"Name {i} colours.", "c") for i in range(2)]
    (workdir / "other.jsonl").write_text("".join(json.dumps(row) + "\n" for row in other))
    splits = generate_dataset(train_size=2, val_size=2, seed=3, few_shot=0)
    for row in splits["train"] + splits["validation"]:
        row["env_class"] = None
    write_dataset(splits, workdir / "gsm8k")
    chats = [_chat(i) for i in range(4)]
    (workdir / "chats.jsonl").write_text("".join(json.dumps(row) + "\n" for row in chats))
    (workdir / "chats_other.jsonl").write_text("".join(json.dumps(_chat(i + 10)) + "\n" for i in range(2)))


def _chat(i: int) -> dict[str, Any]:
    """An SFT row (skyrl_train.sft): a tool conversation under `messages`, another under `chat`, tools under
    `functions`."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": i, "b": i}}}
    messages = [
        {"role": "user", "content": f"What is {i}+{i}?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": str(2 * i)},
        {"role": "assistant", "content": f"It is {2 * i}."},
    ]
    chat = [{"role": "user", "content": f"Say {i}."}, {"role": "assistant", "content": str(i)}]
    return {"messages": messages, "chat": chat, "functions": [{"type": "function", "function": {"name": "add"}}]}


def _outcome(build: Callable[[], Any]) -> Any:
    """What `build` returns, or the error it raises (type and message)."""
    try:
        return build()
    except Exception as error:  # the observable is the refusal itself
        return f"{type(error).__name__}: {error}"


# ----------------------------------------------------------------------------------------- the data loader's batches


def _loader_batches(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    exp = BasePPOExp(cfg)
    dataset = exp.get_train_dataset()
    loader = exp.get_train_loader(dataset)
    batches = [[p[0]["content"] for p in batch["prompt"]] for batch in loader]
    return {
        "prompts": batches,
        "sources": [sorted(e["data_source"] for e in batch["env_extras"]) for batch in loader],
        "dataset_size": len(dataset),
        "batch_sizes": [len(b) for b in batches],
    }


LOADER = Probe(
    "the training batches the loader draws",
    _loader_batches,
    ("data.train_data=[{workdir}/prompts.jsonl]", "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2"),
)


# -------------------------------------------------------------------------------------------------- the workers


def _lora_facts(model: torch.nn.Module) -> dict[str, Any]:
    modules = {name: m for name, m in model.named_modules() if hasattr(m, "lora_A")}
    first = next(iter(modules.values()), None)
    return {
        "lora_modules": sorted(name.rsplit(".", 1)[-1] for name in modules),
        "lora_scaling": first.scaling["default"] if first else None,
        "lora_dropout": getattr(first.lora_dropout["default"], "p", 0.0) if first else None,
        "lora_A_std": round(first.lora_A["default"].weight.std().item(), 1) if first else None,
    }


def _lr_schedule(worker) -> list[float]:
    """The learning rate of the first three optimizer steps (the scheduler stepped with no gradients)."""
    lrs = []
    for _ in range(3):
        lrs.append(worker.optimizer.param_groups[0]["lr"])
        worker.optimizer.step()
        worker.scheduler.step()
    return lrs


def _trainable_facts(worker) -> dict[str, Any]:
    group = worker.optimizer.param_groups[0]
    layer = worker.model.get_decoder().layers[0] if hasattr(worker.model, "get_decoder") else None
    checkpointing = getattr(layer, "_gradient_checkpointing_func", None)
    return {
        **_lora_facts(worker.model),
        "trainable_parameters": sum(p.numel() for p in worker.model.parameters() if p.requires_grad),
        "betas": tuple(group["betas"]),
        "weight_decay": group["weight_decay"],
        "max_grad_norm": worker.max_grad_norm,
        "lr_schedule": _lr_schedule(worker),
        "gradient_checkpointing": bool(getattr(layer, "gradient_checkpointing", False)),
        "reentrant": getattr(checkpointing, "keywords", {}).get("use_reentrant"),
    }


def _q_proj_sum(model: torch.nn.Module) -> float:
    weight = next(
        p for name, p in model.named_parameters() if "layers.0.self_attn.q_proj" in name and "lora" not in name
    )
    return round(weight.float().sum().item(), 4)


def _workers(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    torch.manual_seed(0)  # LoRA init
    policy, ref, critic = BasePPOExp(cfg).get_workers(10)
    facts: dict[str, Any] = {f"policy.{k}": v for k, v in _trainable_facts(policy).items()}
    facts["policy.compute_dtype"] = str(policy.autocast_dtype or next(policy.model.parameters()).dtype)
    facts["policy.weights"] = _q_proj_sum(policy.model)
    facts["policy.attention_dropout"] = policy.model.config.attention_dropout
    facts["ref"] = None if ref is None else type(ref).__name__
    facts["ref.weights"] = None if ref is None else _q_proj_sum(ref.model)
    facts["ref.attention_dropout"] = None if ref is None else ref.model.config.attention_dropout
    facts["critic"] = None if critic is None else type(critic).__name__
    if critic is not None:
        facts.update({f"critic.{k}": v for k, v in _trainable_facts(critic).items()})
        facts["critic.attention_dropout"] = critic.model.config.attention_dropout
        facts["critic.heads"] = sorted(name for name, _ in critic.model.named_children())
    return facts


WORKERS = Probe("the workers built from this config", _workers)


def _strategy(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    return {
        "strategy": _outcome(lambda: type(BasePPOExp(cfg).strategy).__name__),
        "device": _outcome(lambda: str(BasePPOExp(cfg).strategy.device)),
        "weight_sync": _outcome(lambda: BasePPOExp(cfg).get_weight_sync(None, policy=None).mode),
    }


STRATEGY = Probe("the training strategy and device", _strategy)


def _added_keys(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    run_cfg = BasePPOExp(cfg).cfg  # what the run's trainer and generator hooks receive
    return {
        "trainer.algorithm": run_cfg.trainer.algorithm.get("overlong_buffer_len"),
        "generator": run_cfg.generator.get("miniswe_traj_dir"),
    }


ADDED_KEYS = Probe("keys added with `+`, as custom code reads them from the run's config", _added_keys)


# --------------------------------------------------------------------------------- a policy and critic update


def _fixed_batch(policy) -> TrainingInputBatch:
    """Two rows (one left-padded) of 3 prompt + 4 response tokens. Old logprobs are the policy's own shifted so that
    ratios spread over 0.6 .. 1.65; ref logprobs and rollout logprobs are shifted further (the rollout's geometric
    mean ratio is above 1.01 in row 0 and below 0.99 in row 1); advantages +1 / -1."""
    batch = TrainingInputBatch(
        {
            "sequences": torch.tensor([[5, 6, 7, 8, 9, 10, 11], [0, 12, 13, 14, 15, 16, 17]]),
            "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1]]),
            "response_mask": torch.ones(2, 4, dtype=torch.long),
            "loss_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        }
    )
    current = policy.compute_logprobs(batch, 2)
    old = current + torch.tensor([[0.5, -0.5, -0.1, -0.3], [0.3, -0.5, 0.5, -0.05]])
    batch["action_log_probs"] = old
    batch["base_action_log_probs"] = current + torch.tensor([[0.2, -0.4, 0.1, 0.3], [-0.2, 0.4, 0.0, 0.6]])
    batch["rollout_logprobs"] = old + torch.tensor([[-0.7, 0.0, 0.3, -0.1], [0.0, 0.2, 0.9, -0.7]])
    batch["advantages"] = torch.tensor([[1.0] * 4, [-1.0] * 4])
    batch["values"] = torch.tensor([[0.5, 0.1, -0.4, 0.9], [0.0, 0.3, 0.2, -0.6]])
    batch["returns"] = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0]])
    return batch


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def _change(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    after = _weights(model)
    return round(sum((after[n] - before[n]).double().norm().item() for n in before), 8)


def _update(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    policy, _, critic = BasePPOExp(cfg).get_workers(10)
    shapes: list[tuple[int, ...]] = []
    policy.model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    batch = _fixed_batch(policy)
    before = _weights(policy.model)
    metrics = {k: round(v, 6) for k, v in policy.ppo_train(batch, 2, 2, 2).items()}
    facts: dict[str, Any] = {**metrics, "policy.weight_change": _change(before, policy.model), "forwards": shapes}
    if critic is not None:
        before = _weights(critic.model)
        facts.update({k: round(v, 6) for k, v in critic.ppo_train(batch, 2, 2, 2).items()})
        facts["critic.weight_change"] = _change(before, critic.model)
    return facts


UPDATE = Probe(
    "two policy (and critic) updates on a fixed batch: metrics and weight change",
    _update,
    ("trainer.policy.optimizer_config.lr=1e-3",),
)


# ------------------------------------------------------------------------------- one trainer step on fixed rollouts


def _fixed_rollouts(cfg: SkyRLConfig) -> Rollouts:
    """2 prompts x 2 samples: rewards 1, 0 (a group with signal, its question hinted) and 0, 0 (zero variance)."""
    batch = {
        "prompt": [[{"role": "user", "content": q}] for q in ("a", "b")],
        "env_class": [None, None],
        "env_extras": [{"extra_info": {"hint": "Hint: x."}}, {}],
        "uid": ["0", "1"],
    }
    generator_input, uids = prepare_generator_input(batch, 2, cfg.generator.sampling_params, "gsm8k", "train", 1)
    responses = [[8, 9, 10], [11, 12, 13, 14], [15, 16], [17, 18, 19]]
    output = {
        "prompt_token_ids": [[5, 6, 7]] * 4,
        "response_ids": responses,
        "rewards": [1.0, 0.0, 0.0, 0.0],
        "loss_masks": [[1] * len(r) for r in responses],
        "stop_reasons": ["stop"] * 4,
        "rollout_logprobs": None,
    }
    return Rollouts.from_generation(generator_input, uids, output)


def _rounded(tensor: torch.Tensor) -> list:
    return [[round(x, 5) for x in row] for row in tensor.tolist()]


def _trainer_step(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    exp = BasePPOExp(cfg)
    policy, ref, critic = exp.get_workers(10)
    calls: list[tuple] = []
    seen: dict[str, Any] = {}
    for role, worker in (("policy", policy), ("critic", critic)):
        if worker is not None:
            train = worker.ppo_train

            def recorded(batch, mini, micro, epochs, role=role, train=train, **ptx):
                calls.append((f"{role}.ppo_train", mini, micro, epochs))
                seen[role] = batch
                seen[f"{role}.sft_batch"] = ptx.get("sft_batch")
                return train(batch, mini, micro, epochs, **ptx)

            worker.ppo_train = recorded
    logprobs = policy.compute_logprobs

    def recorded_logprobs(batch, micro):
        calls.append(("policy.compute_logprobs", micro))
        return logprobs(batch, micro)

    policy.compute_logprobs = recorded_logprobs
    trainer = PPOTrainer(cfg, None, exp.get_tokenizer(), [None], None, None, policy, ref, critic)
    metrics = asyncio.run(trainer.train_step(_fixed_rollouts(cfg)))
    batch = seen["policy"]
    dumps = exp.export_path / "dumped_data"
    return {
        "calls": calls,
        "advantages": _rounded(batch["advantages"]),
        "returns": _rounded(batch["returns"]),
        "loss_mask": batch["loss_mask"].tolist(),
        "kl_in_reward": {k: round(v, 6) for k, v in metrics.items() if k.startswith("loss/")},
        "kl_coef_after": None if trainer.kl_controller is None else trainer.kl_controller.value,
        "policy/final_loss": round(metrics["policy/final_loss"], 6),
        "ptx_conversations": None if seen["policy.sft_batch"] is None else seen["policy.sft_batch"].batch_size,
        "dumped": sorted(p.name for p in dumps.iterdir()) if dumps.exists() else [],
    }


STEP = Probe(
    "one trainer step on fixed rollouts: calls, advantages, KL-in-reward, the policy loss",
    _trainer_step,
    (
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "trainer.micro_train_batch_size_per_gpu=2",
        "trainer.micro_forward_batch_size_per_gpu=2",
        "generator.n_samples_per_prompt=2",
    ),
)


def _dynamic_sampler(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    """The trainer's dynamic sampler fed the fixed rollouts (one group of two with a reward signal) three times."""
    sampler = PPOTrainer(cfg, None, None, [None], None, None, None).dynamic_sampler
    if sampler is None:
        return {"batches": None}
    rollouts = _fixed_rollouts(cfg)
    return {"batches": [_outcome(lambda: getattr(sampler.add(rollouts), "num_rows", None)) for _ in range(3)]}


DYNAMIC_SAMPLER = Probe(
    "the trainer's dynamic sampler on fixed rollouts",
    _dynamic_sampler,
    ("trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2"),
)

THINKING_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% if think %}<think>{% endif %}{%- endif %}"
)


def _generation_prompt(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    exp = BasePPOExp(cfg)
    tokenizer = exp.get_tokenizer()
    tokenizer.chat_template = THINKING_TEMPLATE
    return {"text": tokenizer.decode(exp.get_generator(exp.cfg, tokenizer, None).generation_prompt_ids)}


GENERATION_PROMPT = Probe("the generator's generation prompt (a template that reads `think`)", _generation_prompt)


# ------------------------------------------------------------------------------- generation through the trainer


def _generation(phase: str) -> Callable[[SkyRLConfig, Path], dict[str, Any]]:
    def read(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
        exp = BasePPOExp(cfg)
        tokenizer = exp.get_tokenizer()
        policy, _, _ = exp.get_workers(10)
        engine = exp.get_inference_engine(policy, tokenizer)
        generator = exp.get_generator(exp.cfg, tokenizer, engine)
        outputs = []
        generate = generator.generate

        async def recorded(generator_input):
            outputs.append(await generate(generator_input))
            return outputs[-1]

        generator.generate = recorded
        engine_params = []
        engine_generate = engine.generate

        async def recorded_engine(input_batch):
            engine_params.append(dataclasses.asdict(input_batch["sampling_params"]))
            return await engine_generate(input_batch)

        engine.generate = recorded_engine
        train_loader = exp.get_train_loader(exp.get_train_dataset())
        eval_dataset = exp.get_eval_dataset()
        eval_loader = PromptDataLoader.for_eval(eval_dataset, cfg.trainer.eval_batch_size) if eval_dataset else None
        trainer = PPOTrainer(
            cfg, None, tokenizer, train_loader, eval_loader, generator, policy, inference_engine=engine
        )

        async def run():
            try:
                if phase == "train":
                    await trainer.generate(next(iter(train_loader)), {})
                else:
                    await trainer.eval()
            finally:
                await engine.teardown()

        outcome = _outcome(lambda: asyncio.run(run()))
        keys = ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons")
        output = {k: [o.get(k) for o in outputs] for k in keys}
        output["rollout_logprobs"] = [
            None if o.get("rollout_logprobs") is None else [[round(x, 4) for x in r] for r in o["rollout_logprobs"]]
            for o in outputs
        ]
        output["rows"] = [len(o["response_ids"]) for o in outputs]
        output["engine_sampling_params"] = engine_params[0] if engine_params else None
        output["outcome"] = outcome
        return output

    return read


_GENERATION = (
    "data.train_data=[{workdir}/prompts.jsonl]",
    "data.val_data=[{workdir}/other.jsonl]",
    f"environment.env_class={TURNS_ENV}",
    "trainer.train_batch_size=1",
    "trainer.policy_mini_batch_size=1",
    "trainer.eval_batch_size=2",
    "generator.n_samples_per_prompt=2",
    "generator.sampling_params.max_generate_length=4",
    "generator.eval_sampling_params.max_generate_length=4",
    "trainer.algorithm.use_kl_loss=false",
    "trainer.dump_eval_results=false",
)
TRAIN_GENERATION = Probe("a training batch's rollouts (real generator, hf engine)", _generation("train"), _GENERATION)
EVAL_GENERATION = Probe("an eval's rollouts (real generator, hf engine)", _generation("eval"), _GENERATION)


# ------------------------------------------------------------------------------------------ a tiny training run


DATA_FILES = ("gsm8k", "prompts.jsonl", "other.jsonl", "chats.jsonl", "chats_other.jsonl")
"""What `write_data` writes."""


def _tree(root: Path) -> list[str]:
    """Folders and files up to three levels under `root` (without the data files)."""
    return sorted(
        str(p.relative_to(root))
        for p in root.glob("**/*")
        if len(p.relative_to(root).parts) <= 3 and p.parts[len(root.parts)] not in DATA_FILES
    )


def _run(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    calls: list[tuple] = []

    class Recorded(BasePPOExp):
        def get_generator(self, cfg, tokenizer, engine):
            generator = super().get_generator(cfg, tokenizer, engine)
            generate = generator.generate

            async def recorded(generator_input):
                metadata = generator_input["batch_metadata"]
                calls.append((metadata.training_phase, metadata.global_step, len(generator_input["prompts"])))
                return await generate(generator_input)

            generator.generate = recorded
            return generator

        def write_report(self) -> None:
            """No plots: the run's files are what is read."""

    torch.manual_seed(0)
    outcome = _outcome(Recorded(cfg).run)
    return {"generate_calls": calls, "tree": _tree(workdir), "outcome": outcome}


RUN = Probe(
    "a tiny training run (BasePPOExp.run): generate calls and the files it writes",
    _run,
    (
        "data.train_data=[{workdir}/gsm8k/train.parquet]",
        "data.val_data=[{workdir}/gsm8k/validation.parquet]",
        "trainer.max_prompt_length=1024",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "trainer.micro_train_batch_size_per_gpu=2",
        "trainer.micro_forward_batch_size_per_gpu=2",
        "trainer.eval_batch_size=2",
        "generator.n_samples_per_prompt=2",
        "generator.sampling_params.max_generate_length=2",
        "generator.eval_sampling_params.max_generate_length=2",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.dump_eval_results=false",
    ),
)


# ------------------------------------------------------------------------------------------- supervised fine-tuning


def _sft(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    tokenizer = load_tokenizer(cfg.trainer.policy.model.path)

    def facts() -> dict[str, Any]:
        train, evaluation = sft_datasets(cfg, tokenizer)
        loader = PromptDataLoader(train, cfg.sft.batch_size, seed=cfg.trainer.seed, collate_fn=len)
        return {
            "conversations": len(train),
            "eval_conversations": None if evaluation is None else len(evaluation),
            "response_ids": train[0].response_ids,
            "loss_tokens": [sum(example.loss_mask) for example in train],
            "truncated": train.truncated_rows,
            "steps": total_steps(cfg, len(train)),
            "batch_sizes": list(loader),
            "lr": sft_optimizer_config(cfg).lr,
        }

    result = _outcome(facts)
    return {"outcome": None, **result} if isinstance(result, dict) else {"outcome": result}


SFT = Probe(
    "the SFT data, steps and optimizer (skyrl_train.sft)",
    _sft,
    ("sft.train_data=[{workdir}/chats.jsonl]", "sft.batch_size=2"),
)


def _warm_start(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    policy, ref, _ = BasePPOExp(cfg).get_workers(10)
    warm_start = WarmStart(cfg, load_tokenizer(cfg.trainer.policy.model.path), policy, ref)
    return {"fold": warm_start.fold, "reference_takes_policy": warm_start.reference_takes_policy}


WARM_START = Probe(
    "the warm start's switch to RL (skyrl_train.sft.warm_start)",
    _warm_start,
    ("trainer.warm_start=true", "sft.train_data=[{workdir}/chats.jsonl]", "trainer.policy.model.lora.rank=4"),
)


# ----------------------------------------------------------------------------------------------- engines and sync


def _hf_engine(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    exp = BasePPOExp(cfg)
    policy, _, _ = exp.get_workers(10)
    engine = exp.get_inference_engine(policy, exp.get_tokenizer())
    return {
        "max_num_seqs": engine._batcher.max_num_seqs,
        "prefix_cache_bytes": engine._batcher.prefix_cache.max_bytes,
        "num_threads": engine.num_threads,
    }


HF_ENGINE = Probe("the hf engine built from this config", _hf_engine, ("trainer.algorithm.use_kl_loss=false",))


def _vllm_args(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    """What `create_vllm_engines` would start (no vLLM, no Ray): each engine's arguments and bundle, and the weight
    sync the trainer would use."""
    g = cfg.generator
    return {
        "engine_args": engine_kwargs(
            g,
            cfg.trainer.policy.model.path,
            lora_rank=cfg.trainer.policy.model.lora.rank,
            sleep=False,
            seed=cfg.trainer.seed,
        ),
        "engines": len(
            engine_bundles(
                g.num_inference_engines, g.inference_engine_tensor_parallel_size, colocated=False, use_gpu=False
            )
        ),
        "weight_sync": _outcome(lambda: _sync_facts(BasePPOExp(cfg).get_weight_sync(None, policy=None))),
    }


def _sync_facts(sender) -> tuple:
    return sender.mode, sender.backend, sender.chunk_bytes, sender.override_existing, sender.lora_sync_path


VLLM_ARGS = Probe(
    "the vLLM engine arguments (inference_engines/vllm/engine_config.py)",
    _vllm_args,
    ("generator.backend=vllm", "trainer.algorithm.use_kl_loss=false", "trainer.placement.colocate_all=false"),
)

REMOTE = (
    "generator.run_engines_locally=false",
    "generator.remote_inference_engine_urls=[127.0.0.1:8101]",
    "generator.weight_sync_backend=gloo",
    "trainer.algorithm.use_kl_loss=false",
)


def _remote(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    exp = BasePPOExp(cfg)
    tokenizer = exp.get_tokenizer()
    engine = exp.get_inference_engine(None, tokenizer)
    sender = _outcome(lambda: exp.get_weight_sync(engine, policy=None))
    engines = getattr(engine, "engines", [engine])
    return {
        "engine": type(engine).__name__,
        "urls": [getattr(e, "url", None) for e in engines],
        "model_names": [getattr(e, "model_name", None) for e in engines],
        "api_keys": [getattr(e, "api_key", None) for e in engines],
        "control_tokens": [getattr(e, "control_token", None) for e in engines],
        "weight_sync_ranks": _outcome(engine.weight_sync_ranks),
        "sync": sender if isinstance(sender, str) else _sync_facts(sender),
    }


REMOTE_ENGINES = Probe("the remote engines and their weight sync", _remote, REMOTE)


def _trainer_loop(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    """Which training loop the entrypoint runs, the off-policy correction it trains with and, when asynchronous,
    how many generation coroutines it starts."""
    return {
        "trainer": BasePPOExp(cfg).get_trainer_class().__name__,
        "tis": cfg.trainer.algorithm.off_policy_correction.tis_ratio_type,
        "generation_workers": generation_worker_count(cfg.trainer),
    }


TRAINER_LOOP = Probe("the training loop the entrypoint runs (remote engines)", _trainer_loop, REMOTE)


def _placement(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    plan = plan_placement(cfg.trainer.placement, fsdp2_roles(cfg.trainer), use_gpu=False)
    return {
        "groups": [len(g) for g in plan.groups],
        "roles": [dataclasses.astuple(p) for p in plan.roles.values()],
    }


PLACEMENT = Probe(
    "the fsdp2 placement plan (distributed/placement.py, no Ray)",
    _placement,
    ("trainer.strategy=fsdp2",),
)


def _sharding(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    t = cfg.trainer
    return {
        f"{role}": (setup.fsdp_size, setup.reshard_after_forward)
        for role in ("policy", "ref", "critic")
        for setup in [FSDPSetup(getattr(t, role).fsdp_config, "cpu", t.bf16, role)]
    }


SHARDING = Probe("each fsdp2 role's sharding setup (distributed/fsdp.py)", _sharding, ("trainer.strategy=fsdp2",))


# ----------------------------------------------------------------------------------- checkpoints, S3, endpoint


def _s3(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    settings = S3Settings.from_trainer_config(cfg.trainer, environ={"AWS_REGION": "eu-west-1"})
    return {"settings": None if settings is None else dataclasses.asdict(settings)}


S3 = Probe("the S3 settings", _s3, ("trainer.s3.bucket=ckpts",))


def _checkpoints(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    """A manager over a folder holding committed steps 1 .. 3; what it resumes from and what rotation keeps."""
    manager = BasePPOExp(cfg).get_checkpoint_manager()
    for step in (1, 2, 3):
        manager.save(step, lambda folder: (folder / "state.txt").write_text("x"))
    resume = _outcome(lambda: manager.resolve_resume(cfg.trainer.resume_mode, cfg.trainer.resume_path))
    return {
        "resume_from": resume if resume is None or isinstance(resume, str) else resume.name,
        "kept": manager.committed_steps(),
        "root": str(manager.root.relative_to(workdir)),
    }


CHECKPOINTS = Probe("the trainer's checkpoint manager", _checkpoints)


def _endpoint(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    exp = BasePPOExp(cfg)
    endpoint = exp.get_http_endpoint(engine=None, tokenizer=exp.get_tokenizer())
    if endpoint is None:
        return {"endpoint": None}
    return {
        "endpoint": (endpoint.served_model_name, endpoint.server.host, endpoint.server.port),
        "api_key": endpoint.access.api_key,
    }


ENDPOINT = Probe("the HTTP endpoint (not started)", _endpoint, ("generator.enable_http_endpoint=true",))


def _env_runner(cfg: SkyRLConfig, workdir: Path) -> dict[str, Any]:
    exp = BasePPOExp(cfg)
    runner = exp.get_generator(exp.cfg, exp.get_tokenizer(), None).env_runner
    session = runner.open(TURNS_ENV, {})
    runner.shutdown()
    return {
        "pool_threads": getattr(runner.executor, "_max_workers", 0),
        "env": (session.env.reward, session.env.max_turns),
    }


ENV_RUNNER = Probe("the generator's env runner", _env_runner)
