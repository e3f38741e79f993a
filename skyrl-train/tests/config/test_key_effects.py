"""Effects of config keys no other test showed: each test builds the real part from its typed config section, with
non-default values, on the tiny model, and checks the value changed what the part does."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request

import pytest
import torch

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import ConfigError, load_config
from skyrl_train.config.schema import (
    AlgorithmConfig,
    CriticConfig,
    GeneratorConfig,
    LoraConfig,
    ModelConfig,
    OptimizerConfig,
    PolicyConfig,
    RefConfig,
    RefModelConfig,
)
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.inference_engines.base import SamplingParams
from skyrl_train.inference_engines.hf.engine import DEFAULT_PREFIX_CACHE_BYTES
from skyrl_train.models import load_causal_lm, load_tokenizer
from skyrl_train.storage.settings import S3Settings
from skyrl_train.testing import on_every_device, tiny_model_path
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.utils.device import cpu_has_amx_bf16
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker


@pytest.fixture(scope="module")
def tiny() -> str:
    return tiny_model_path()


def build(role: str, path: str, *, lora: LoraConfig | None = None, optimizer: OptimizerConfig | None = None, **kw):
    """A policy or critic worker on `path` from its typed section; full fine-tuning and defaults unless given."""
    model = ModelConfig(path=path, lora=lora or LoraConfig())
    optimizer = optimizer or OptimizerConfig()
    algorithm = AlgorithmConfig(use_kl_loss=False)
    if role == "policy":
        return PolicyWorker(
            PolicyConfig(model=model, optimizer_config=optimizer, **kw), algorithm, num_training_steps=10
        )
    return CriticWorker(CriticConfig(model=model, optimizer_config=optimizer, **kw), algorithm, num_training_steps=10)


def _lora_modules(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return {name: module for name, module in model.named_modules() if hasattr(module, "lora_A")}


@pytest.mark.parametrize("role", ["policy", "critic"])
def test_lora_settings_shape_the_adapter(tiny, role):
    lora = LoraConfig(
        rank=4,
        alpha=32,
        dropout=0.25,
        target_modules=["q_proj", "v_proj", "o_proj"],
        exclude_modules=["o_proj"],
        init_method="gaussian",
    )
    torch.manual_seed(0)
    modules = _lora_modules(build(role, tiny, lora=lora).model)
    # 2 layers x (q_proj, v_proj): o_proj is targeted but excluded, nothing else is targeted.
    assert sorted(name.rsplit(".", 1)[-1] for name in modules) == ["q_proj", "q_proj", "v_proj", "v_proj"]
    for module in modules.values():
        assert module.r["default"] == 4
        assert module.scaling["default"] == 32 / 4  # alpha / rank
        assert module.lora_dropout["default"].p == 0.25
        # gaussian init: A ~ N(0, 1/rank) (std 0.25); peft's default (kaiming) would give std 1/sqrt(3 x 64) ~ 0.07.
        std = module.lora_A["default"].weight.std().item()
        assert 0.18 < std < 0.32, std
        assert torch.count_nonzero(module.lora_B["default"].weight) == 0


@pytest.mark.parametrize("role", ["policy", "critic"])
def test_optimizer_settings_reach_adamw_and_the_warmup_schedule(tiny, role):
    optimizer = OptimizerConfig(
        lr=0.5, adam_betas=[0.5, 0.75], weight_decay=0.3, num_warmup_steps=4, scheduler="linear", max_grad_norm=2.5
    )
    worker = build(role, tiny, optimizer=optimizer)
    group = worker.optimizer.param_groups[0]
    assert (group["betas"], group["weight_decay"], worker.max_grad_norm) == ((0.5, 0.75), 0.3, 2.5)
    lrs = []
    for _ in range(3):
        lrs.append(worker.lr)
        worker.optimizer.step()
        worker.scheduler.step()
    assert lrs == [0.0, 0.5 * 1 / 4, 0.5 * 2 / 4]  # linear warmup over 4 steps to lr
    params = [p for p in worker.model.parameters() if p.requires_grad]
    for param in params:
        param.grad = torch.full_like(param, 3.0)
    step, seen = worker.optimizer.step, []

    def recording_step(*args, **kwargs):
        seen.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])).item())
        return step(*args, **kwargs)

    worker.optimizer.step = recording_step
    worker.optim_step()
    unclipped = 3.0 * sum(p.numel() for p in params) ** 0.5
    # The optimizer steps with the gradient clipped to max_grad_norm (float32 norms of large tensors: rel 1e-2).
    assert unclipped > 100 and seen == [pytest.approx(2.5, rel=1e-2)]


@pytest.mark.parametrize("role", ["policy", "critic", "ref"])
def test_model_config_kwargs_are_set_on_the_loaded_model_config(tiny, role):
    kwargs = {"attention_dropout": 0.125}
    if role == "ref":
        policy = build("policy", tiny)
        ref_config = RefConfig(model=RefModelConfig(path=tiny), model_config_kwargs=kwargs)
        model = RefWorker.for_policy(policy, ref_config).model
        assert policy.model.config.attention_dropout == 0.0  # the policy's own config is untouched
    else:
        model = build(role, tiny, model_config_kwargs=kwargs).model
    assert model.config.attention_dropout == 0.125


# ------------------------------------------------------------------------------ the run's parts, from the config


def experiment(tiny: str, tmp_path, *overrides: str) -> BasePPOExp:
    return BasePPOExp(
        load_config(
            [
                f"trainer.policy.model.path={tiny}",
                "trainer.bf16=false",
                "trainer.gradient_checkpointing=false",
                f"trainer.ckpt_path={tmp_path / 'ckpts'}",
                f"trainer.export_path={tmp_path / 'exports'}",
                *overrides,
            ]
        )
    )


def test_paths_bf16_and_checkpointing_decide_the_workers(tiny, tmp_path):
    other = tiny_model_path(seed=1)
    policy, ref, critic = experiment(
        tiny,
        tmp_path,
        "trainer.bf16=true",
        f"trainer.critic.model.path={tiny}",
        f"trainer.ref.model.path={other}",
        "trainer.gradient_checkpointing=true",
        "trainer.gradient_checkpointing_use_reentrant=true",
    ).get_workers(10)
    # bf16 weights on a GPU; on the CPU fp32 weights under bf16 autocast
    weights = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    assert isinstance(critic, CriticWorker)
    for worker in (policy, ref, critic):
        assert next(worker.model.parameters()).dtype == weights
        assert (worker.autocast_dtype or weights) == torch.bfloat16
    name = "model.layers.0.self_attn.q_proj.weight"
    expected = {path: load_causal_lm(path).get_parameter(name).to(weights) for path in (tiny, other)}
    assert torch.equal(policy.model.get_parameter(name), expected[tiny])
    assert torch.equal(ref.model.get_parameter(name), expected[other])
    layer = policy.model.model.layers[0]
    assert layer.gradient_checkpointing and layer._gradient_checkpointing_func.keywords == {"use_reentrant": True}
    _, no_ref, no_critic = experiment(tiny, tmp_path, "trainer.algorithm.use_kl_loss=false").get_workers(10)
    assert (no_ref, no_critic) == (None, None)


@on_every_device
def test_device_and_an_unset_bf16_place_the_workers_and_pick_their_dtype(tiny, tmp_path, device, caplog):
    exp = experiment(
        tiny, tmp_path, f"trainer.device={device}", "trainer.bf16=null", f"trainer.critic.model.path={tiny}"
    )
    with caplog.at_level(logging.INFO, logger="skyrl_train.entrypoints.main_base"):
        exp.log_device()
    policy, _, critic = exp.get_workers(10)
    # CUDA: bf16 weights. The CPU: fp32 weights, under bf16 autocast where it has AMX bf16 (tests/utils/test_device.py
    # checks the choice for both kinds of CPU).
    expected_dtype = torch.bfloat16 if device == "cuda" else torch.float32
    expected_autocast = torch.bfloat16 if device == "cpu" and cpu_has_amx_bf16() else None
    for worker in (policy, critic):
        param = next(worker.model.parameters())
        assert (param.device.type, param.dtype, worker.autocast_dtype) == (device, expected_dtype, expected_autocast)
    regime = {
        ("cuda", None): "bfloat16 weights (trainer.bf16 unset: bf16 on CUDA)",
        ("cpu", None): "float32 (trainer.bf16 unset and the CPU has no AMX bf16)",
        ("cpu", torch.bfloat16): "bf16 autocast over fp32 weights in training, bf16 weights in the hf engine "
        "(trainer.bf16 unset and the CPU has AMX bf16)",
    }[device, expected_autocast]
    assert f"(trainer.device={device}) in {regime}" in caplog.text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_a_cuda_device_on_a_machine_without_one_stops_the_run_before_anything_loads(tiny, tmp_path):
    with pytest.raises(ValueError, match=r"trainer.device=cuda but this process sees 0 CUDA device\(s\)"):
        experiment(tiny, tmp_path, "trainer.device=cuda")


@pytest.mark.parametrize("gib", [1.0, 0.25])
def test_the_cuda_ipc_threshold_is_the_chunk_size_of_a_cuda_ipc_weight_sync(tiny, tmp_path, gib):
    # Full fine-tuning, nccl and vLLM engines colocated with the fsdp2 policy: upstream's CUDA IPC case.
    exp = experiment(
        tiny,
        tmp_path,
        "trainer.strategy=fsdp2",
        "generator.backend=vllm",
        "trainer.algorithm.use_kl_loss=false",
        f"generator.weight_transfer_threshold_cuda_ipc_GB={gib}",
    )
    sender = exp.get_weight_sync(engine=None, policy=None)
    assert (sender.mode, sender.chunk_bytes) == ("cuda_ipc", int(gib * 2**30))


def test_the_cuda_ipc_threshold_is_refused_where_no_cuda_ipc_sync_runs(tiny):
    with pytest.raises(ConfigError, match=r"weight_transfer_threshold_cuda_ipc_GB=0.5 has no effect in this config"):
        load_config([f"trainer.policy.model.path={tiny}", "generator.weight_transfer_threshold_cuda_ipc_GB=0.5"])


@pytest.mark.parametrize("caching", [True, False])
def test_prefix_caching_and_max_num_seqs_configure_the_engine(tiny, tmp_path, caching):
    exp = experiment(tiny, tmp_path, f"generator.enable_prefix_caching={caching}", "generator.max_num_seqs=2")
    policy, _, _ = exp.get_workers(10)
    engine = exp.get_inference_engine(policy, exp.get_tokenizer())
    params = SamplingParams(temperature=0.0, max_generate_length=2)

    async def generate_twice():
        await engine.wake_up()
        for _ in range(2):  # the same five prompts twice: the second time their prefixes are cached
            await engine.generate(
                {"prompt_token_ids": [[5, 6, 7, 8, 9, 10, i] for i in range(5)], "sampling_params": params}
            )
        await engine.teardown()

    asyncio.run(generate_twice())
    stats = engine.stats
    assert stats.max_batch_size == 2  # five requests, at most two decoded together
    assert (stats.cached_prompt_tokens > 0) == caching


def test_prefix_cache_bytes_bounds_the_engines_prefix_cache(tiny, tmp_path):
    budget = 6000  # the tiny model's KV of about one of the prompts below with its response, not of five
    exp = experiment(tiny, tmp_path, f"generator.prefix_cache_bytes={budget}")
    policy, _, _ = exp.get_workers(10)
    engine = exp.get_inference_engine(policy, exp.get_tokenizer())
    params = SamplingParams(temperature=0.0, max_generate_length=2)

    async def generate():
        await engine.wake_up()
        prompts = [[20 + i, 5, 6, 7, 8, 9, 10] for i in range(5)]  # no two share a prefix
        await engine.generate({"prompt_token_ids": prompts, "sampling_params": params})
        await engine.teardown()  # joins the scheduler thread, which caches a sequence after reporting it finished

    asyncio.run(generate())
    cache = engine._batcher.prefix_cache
    assert cache.max_bytes == budget
    assert GeneratorConfig().prefix_cache_bytes == DEFAULT_PREFIX_CACHE_BYTES  # one default, as the engine's own
    assert 0 < cache.nbytes <= budget and 0 < len(cache) < 5


@pytest.mark.parametrize("packing", [True, False])
def test_sample_packing_runs_the_policy_and_ref_forwards_as_one_unpadded_row(tiny, tmp_path, packing):
    exp = experiment(tiny, tmp_path, f"trainer.use_sample_packing={packing}", "trainer.algorithm.use_kl_loss=true")
    policy, ref, _ = exp.get_workers(10)
    batch = TrainingInputBatch(
        {
            "sequences": torch.tensor([[0, 5, 6, 7, 8], [9, 10, 11, 12, 0]]),
            "attention_mask": torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]]),
            "response_mask": torch.tensor([[1, 1], [1, 0]]),
        }
    )
    shapes = []
    for model in (policy.model, ref.model):  # full fine-tuning: the ref is a model of its own
        model.get_decoder().register_forward_pre_hook(
            lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
        )
    policy.compute_logprobs(batch, micro_batch_size=2)
    ref.compute_logprobs(batch, micro_batch_size=2)
    assert shapes == ([(1, 8), (1, 8)] if packing else [(2, 5), (2, 5)])


def test_cpu_threads_is_the_thread_count_of_the_engines_forward_passes(tiny, tmp_path):
    exp = experiment(tiny, tmp_path, "trainer.cpu_threads=1")
    policy, _, _ = exp.get_workers(10)
    engine = exp.get_inference_engine(policy, exp.get_tokenizer())
    seen = []
    policy.model.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))

    async def generate():
        await engine.wake_up()
        await engine.generate(
            {"prompt_token_ids": [[5, 6, 7]], "sampling_params": SamplingParams(temperature=0.0, max_generate_length=2)}
        )
        await engine.teardown()

    asyncio.run(generate())
    assert seen == [1, 1]


def test_http_endpoint_host_is_where_the_endpoint_listens(tiny, tmp_path):
    exp = experiment(
        tiny,
        tmp_path,
        "generator.enable_http_endpoint=true",
        "generator.http_endpoint_host=127.0.0.2",
        "generator.http_endpoint_port=0",
    )
    policy, _, _ = exp.get_workers(10)
    tokenizer = exp.get_tokenizer()
    endpoint = exp.get_http_endpoint(exp.get_inference_engine(policy, tokenizer), tokenizer)
    endpoint.start()
    try:
        assert endpoint.url.startswith("http://127.0.0.2:")
        with urllib.request.urlopen(endpoint.url + "/v1/models", timeout=10) as response:
            assert response.status == 200
    finally:
        endpoint.stop()


def test_a_two_step_run_follows_the_loop_batch_eval_dump_and_checkpoint_keys(tiny, tmp_path):
    splits = generate_dataset(train_size=2, val_size=2, seed=3, few_shot=2)
    for row in splits["train"] + splits["validation"]:
        row["env_class"] = None  # rows without an env class take environment.env_class
    write_dataset(splits, tmp_path / "data")
    exp = experiment(
        tiny,
        tmp_path,
        f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
        f"data.val_data=[{tmp_path / 'data' / 'validation.parquet'}]",
        "environment.env_class=gsm8k_multi_turn",
        "trainer.max_prompt_length=1024",
        "trainer.epochs=2",  # 2 prompts, 2 per batch: one step per epoch
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=1",
        "trainer.critic_mini_batch_size=1",
        "trainer.micro_train_batch_size_per_gpu=2",
        "trainer.micro_forward_batch_size_per_gpu=3",
        "trainer.update_epochs_per_batch=2",
        f"trainer.critic.model.path={tiny}",
        "trainer.algorithm.advantage_estimator=gae",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.algorithm.use_kl_in_reward=true",
        "trainer.algorithm.zero_variance_filter=true",
        "generator.n_samples_per_prompt=2",
        "generator.sampling_params.max_generate_length=4",
        "trainer.eval_interval=1",
        "trainer.eval_before_train=false",
        "trainer.eval_batch_size=1",
        "generator.eval_n_samples_per_prompt=3",
        "generator.eval_sampling_params.max_generate_length=3",
        "generator.eval_sampling_params.temperature=0.5",
        "generator.eval_sampling_params.top_k=7",
        "generator.eval_sampling_params.top_p=0.9",
        "generator.eval_sampling_params.min_p=0.01",
        "generator.eval_sampling_params.repetition_penalty=1.1",
        "generator.eval_sampling_params.seed=11",
        "generator.eval_sampling_params.logprobs=null",
        "generator.eval_sampling_params.stop=['####']",
        "trainer.dump_data_batch=true",
        "trainer.dump_eval_results=false",
        "trainer.ckpt_interval=1",
        "trainer.hf_save_interval=1",
        "trainer.logger=jsonl",
    )
    calls: list[tuple] = []

    class Recorded(type(exp)):
        def get_generator(self, cfg, tokenizer, engine):
            generator = super().get_generator(cfg, tokenizer, engine)
            generate = generator.generate

            async def recorded(generator_input):
                phase = generator_input["batch_metadata"].training_phase
                calls.append(("generate", phase, len(generator_input["prompts"]), generator_input["sampling_params"]))
                calls.append(("env_classes", set(generator_input["env_classes"])))
                return await generate(generator_input)

            generator.generate = recorded
            return generator

        def get_workers(self, num_training_steps):
            policy, ref, critic = super().get_workers(num_training_steps)
            for name, worker in (("policy", policy), ("critic", critic)):
                ppo_train = worker.ppo_train

                def recorded_train(batch, mini, micro, epochs, name=name, ppo_train=ppo_train):
                    calls.append((f"{name}.ppo_train", mini, micro, epochs))
                    return ppo_train(batch, mini, micro, epochs)

                worker.ppo_train = recorded_train
            compute_logprobs = policy.compute_logprobs

            def recorded_logprobs(batch, micro):
                calls.append(("policy.compute_logprobs", micro))
                return compute_logprobs(batch, micro)

            policy.compute_logprobs = recorded_logprobs
            return policy, ref, critic

    Recorded(exp.cfg).run()
    eval_params = exp.cfg.generator.eval_sampling_params
    assert eval_params.logprobs is None and eval_params.stop == ["####"] and eval_params.seed == 11
    step = [
        ("generate", "train", 4, exp.cfg.generator.sampling_params),  # 2 prompts x n_samples_per_prompt
        ("env_classes", {"gsm8k_multi_turn"}),
        ("policy.compute_logprobs", 3),  # two mini-batches: old logprobs come from a separate forward pass
        ("critic.ppo_train", 2, 2, 2),  # mini-batch rows = critic_mini_batch_size x n; micro; epochs
        ("policy.ppo_train", 2, 2, 2),
        *[("generate", "eval", 3, eval_params), ("env_classes", {"gsm8k_multi_turn"})] * 2,  # 1 prompt x 3 each
    ]
    assert calls == step * 2  # epochs=2
    exports, ckpts = tmp_path / "exports", tmp_path / "ckpts"
    dumped = sorted(p.name for p in (exports / "dumped_data").iterdir())
    assert dumped == ["global_step_1_training_input.pkl", "global_step_2_training_input.pkl"]
    assert not (exports / "dumped_evals").exists()
    assert {p.name for p in ckpts.glob("global_step_*")} == {"global_step_1", "global_step_2"}
    assert sorted(p.parent.name for p in exports.glob("global_step_*/policy")) == ["global_step_1", "global_step_2"]
    logged = [json.loads(line) for line in (exports / "metrics.jsonl").read_text().splitlines()]
    assert [row["loss/kl_loss_coef"] for row in logged if "loss/kl_loss_coef" in row] == [0.001, 0.001]
    filtered = [row["trainer/zero_variance_filtered_fraction"] for row in logged if "trainer/response_tokens" in row]
    assert len(filtered) == 2 and all(0.0 <= f <= 1.0 for f in filtered)


def test_balance_by_gives_every_training_batch_one_prompt_of_each_data_source(tiny, tmp_path):
    rows = [
        {"prompt": [{"role": "user", "content": f"q{i}"}], "env_class": "gsm8k", "data_source": source}
        for i, source in enumerate(["a"] * 4 + ["b"] * 4)
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = f"data.train_data=[{tmp_path / 'train.jsonl'}]"
    overrides = (data, "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2")
    sources = {}
    for balance_by in ("null", "data_source"):
        exp = experiment(tiny, tmp_path, *overrides, f"data.balance_by={balance_by}")
        loader = exp.get_train_loader(exp.get_train_dataset())
        sources[balance_by] = [sorted(e["data_source"] for e in batch["env_extras"]) for batch in loader]
    assert sources["data_source"] == [["a", "b"]] * 4
    assert sources["null"] == [["a", "b"], ["a", "b"], ["a", "a"], ["b", "b"]]  # a plain shuffle (seed 42)


_THINKING_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% if think %}<think>{% endif %}{%- endif %}"
)


def test_chat_template_kwargs_reach_the_generators_chat_template(tiny):
    tokenizer = load_tokenizer(tiny)
    tokenizer.chat_template = _THINKING_TEMPLATE
    prompts = {}
    for overrides in ([], ["+generator.chat_template_kwargs.think=true"]):
        cfg = load_config(overrides)
        generator = SkyRLGymGenerator(cfg.generator, cfg.environment.skyrl_gym, None, tokenizer)
        prompts[bool(overrides)] = generator.generation_prompt_ids
    assert tokenizer.decode(prompts[False]) == "<|im_start|>assistant\n"
    assert tokenizer.decode(prompts[True]) == "<|im_start|>assistant\n<think>"


def test_s3_region_is_the_configured_one_over_the_environment():
    trainer = load_config(["trainer.s3.bucket=b", "trainer.s3.region=ap-south-1"]).trainer
    settings = S3Settings.from_trainer_config(trainer, environ={"AWS_REGION": "eu-west-1"})
    assert settings.region == "ap-south-1"
