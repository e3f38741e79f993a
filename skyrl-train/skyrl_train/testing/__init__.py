"""Helpers and pytest fixtures shared by the tests of every package.

Use a fixture by importing it into a test module or conftest (``from skyrl_train.testing import tiny_model_path``
registers nothing by itself; ``from skyrl_train.testing import tiny_model  # noqa: F401`` does), or list
``"skyrl_train.testing"`` in a root conftest's ``pytest_plugins``. Models go to the normal models cache
(``$SKYRL_CACHE_DIR/models`` or ``~/.cache/skyrl/models``), so they are built once per machine: the first build
converts SmolLM2-135M-Instruct for its tokenizer (~25 s), later sessions only load (well under a second).
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from skyrl_train.models import DEFAULT_MODEL, load_tokenizer, make_tiny_causal_lm
from skyrl_train.types.weight_version import WeightVersion
from skyrl_train.utils.device import available_devices

TINY_RUN_OVERRIDES = [
    "trainer.train_batch_size=4",
    "trainer.policy_mini_batch_size=4",
    "trainer.micro_train_batch_size_per_gpu=4",
    "trainer.micro_forward_batch_size_per_gpu=8",
    "generator.n_samples_per_prompt=2",
    "generator.sampling_params.max_generate_length=4",
    "trainer.bf16=false",
    "trainer.gradient_checkpointing=false",
]
"""Config overrides of a fast entrypoint run of the tiny model: 4 prompts x 2 samples a step in one mini-batch, 4 new
tokens, fp32, no gradient checkpointing. Tests add the data, the model path, LoRA / KL and checkpoint keys."""


def device_params() -> list:
    """`available_devices()` as pytest params marked ``gpu``: a test parameterised with them runs on the CPU here and
    in CI, and on the CPU and CUDA in the GPU check (``pytest -m gpu``, `scripts/gpu_check.sh`)."""
    return [pytest.param(device, id=device, marks=pytest.mark.gpu) for device in available_devices()]


on_every_device = pytest.mark.parametrize("device", device_params())
"""Decorator: run the test once per `device_params()` entry, with the device name as its ``device`` argument."""

TEST_TOKENIZER_ENV = "SKYRL_TEST_TOKENIZER"
"""Names a folder holding a tokenizer (and the model's config.json) that test models are built with instead of the
default model's: the GPU check (`scripts/gpu_check.sh`) ships one to a machine without the default model's package."""


def tokenizer_source_for_tests() -> str:
    """The tokenizer test models share: ``$SKYRL_TEST_TOKENIZER`` when set, else the default model (alias)."""
    return os.environ.get(TEST_TOKENIZER_ENV) or DEFAULT_MODEL


def tiny_model_path(tokenizer_source: str | os.PathLike[str] | None = None, **kwargs) -> str:
    """Folder of the standard tiny test model: 2 layers, hidden size 64, random (seed 0) weights, with
    ``tokenizer_source``'s tokenizer and chat template (default: `tokenizer_source_for_tests`). ``kwargs`` go to
    ``make_tiny_causal_lm``."""
    return make_tiny_causal_lm(tokenizer_source or tokenizer_source_for_tests(), **kwargs)


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """Session fixture: ``tiny_model_path()``; load with ``load_causal_lm(tiny_model)``."""
    return tiny_model_path()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model: str):
    """Session fixture: the tiny model's tokenizer (SmolLM2's), pad token set. Do not mutate it in tests."""
    return load_tokenizer(tiny_model)


def randomize_lora_b(model: torch.nn.Module, std: float = 0.02, seed: int = 0) -> int:
    """Fill every LoRA B matrix of a peft model with N(0, std²) values, as after training (peft starts them at zero,
    so a fresh adapter changes nothing), and bump the model's ``WeightVersion``. Returns how many were filled."""
    generator = torch.Generator().manual_seed(seed)
    matrices = [p for name, p in model.named_parameters() if ".lora_B." in name]
    with torch.no_grad():
        for matrix in matrices:
            matrix.copy_(torch.randn(matrix.shape, generator=generator) * std)
    WeightVersion.of(model).bump()
    return len(matrices)


def trainer_logprobs(policy, prompt: list[int], response: list[int]) -> torch.Tensor:
    """What the trainer recomputes for one rollout: ``policy.compute_logprobs`` (a `PolicyWorker`) of `response`
    after `prompt`, ``[len(response)]``."""
    from skyrl_train.training_batch import TrainingInputBatch

    ids = torch.tensor([prompt + response])
    batch = TrainingInputBatch(
        {
            "sequences": ids,
            "attention_mask": torch.ones_like(ids),
            "response_mask": torch.ones((1, len(response)), dtype=torch.long),
        }
    )
    return policy.compute_logprobs(batch, micro_batch_size=1)[0]


TEST_CONTROL_TOKEN = "skyrl-test-control-token"  # pragma: allowlist secret
"""The control token of the servers tests start (`served_model`, `serve_process.start_server`)."""


@contextlib.asynccontextmanager
async def served_model(model_path: str, tokenizer, name: str = "tiny", lora_root: str | os.PathLike | None = None):
    """A server over its own engine and model, as ``python -m skyrl_train.serve --enable-control`` runs it (OpenAI
    and control routes, the latter behind `TEST_CONTROL_TOKEN`; LoRA folders under ``lora_root``), on a free port of
    this process; yields ``(server, engine)`` and tears both down afterwards."""
    from skyrl_train.inference_engines import HFInferenceEngine
    from skyrl_train.models import load_causal_lm
    from skyrl_train.serve import AccessPolicy, BackgroundServer, create_app

    engine = HFInferenceEngine(load_causal_lm(model_path).eval(), tokenizer, seed=0)
    app = create_app(
        engine,
        tokenizer,
        served_model_name=name,
        max_model_len=8192,
        control_routes=True,
        access=AccessPolicy(control_token=TEST_CONTROL_TOKEN),
        lora_root=lora_root,
    )
    try:
        with BackgroundServer(app) as server:
            yield server, engine
    finally:
        await engine.teardown()
