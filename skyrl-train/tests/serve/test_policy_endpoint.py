"""The trainer's live-policy endpoint: it serves only while the trainer generates, shares the generator's engine
(and its forward passes), and serves the weights the trainer just updated."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.inference_engines import SamplingParams
from skyrl_train.serve import PolicyEndpoint

from .conftest import CONTEXT, MODEL_NAME

REQUEST = {"model": MODEL_NAME, "prompt": [1, 2, 3], "max_tokens": 16, "temperature": 0, "ignore_eos": True}


class RolloutGenerator(GeneratorInterface):
    """A minimal real generator: one engine call for the batch's token-id prompts."""

    def __init__(self, engine):
        self.engine = engine

    async def generate(self, input_batch):
        params = SamplingParams(temperature=0, max_generate_length=16, additional_kwargs={"ignore_eos": True})
        return await self.engine.generate({"prompt_token_ids": input_batch["prompts"], "sampling_params": params})


@pytest.fixture
def endpoint(engine, tiny_tokenizer):
    endpoint = PolicyEndpoint(engine, tiny_tokenizer, served_model_name=MODEL_NAME, max_model_len=CONTEXT, port=0)
    endpoint.start()
    yield endpoint
    endpoint.stop()


async def until(condition, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_requests_wait_for_the_trainer_to_generate_and_finish_within_its_generation(endpoint, engine):
    generator = endpoint.serve_during_generation(RolloutGenerator(engine))
    async with httpx.AsyncClient(base_url=endpoint.url, timeout=60) as client:
        request = asyncio.create_task(client.post("/v1/completions", json=REQUEST))
        await until(lambda: endpoint.gate.waiting == 1)
        await asyncio.sleep(0.2)
        assert not request.done() and engine.stats.finished_requests == 0

        rollouts = await generator.generate({"prompts": [[4, 5, 6]]})
        # generate() returned only once the HTTP request's generation had finished too
        assert (endpoint.gate.in_flight, engine.stats.finished_requests) == (0, 2)
        response = await request
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 16
    assert len(rollouts["response_ids"][0]) == 16
    assert not endpoint.gate.is_open


async def test_http_requests_and_rollouts_share_forward_passes(endpoint, engine):
    generator = endpoint.serve_during_generation(RolloutGenerator(engine))
    async with httpx.AsyncClient(base_url=endpoint.url, timeout=60) as client:
        request = asyncio.create_task(client.post("/v1/completions", json=REQUEST))
        await until(lambda: endpoint.gate.waiting == 1)
        await generator.generate({"prompts": [[4, 5, 6]]})
        assert (await request).status_code == 200
    assert engine.stats.max_batch_size == 2


async def test_stopping_answers_waiting_requests_with_503(endpoint):
    async with httpx.AsyncClient(base_url=endpoint.url, timeout=60) as client:
        request = asyncio.create_task(client.post("/v1/completions", json=REQUEST))
        await until(lambda: endpoint.gate.waiting == 1)
        endpoint.gate.stop()
        response = await request
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "service_unavailable"


def test_training_serves_the_live_policy_while_generating(tmp_path, tiny_model):
    """Two real training steps with `generator.enable_http_endpoint=true`; at the start of each generation a
    client asks the endpoint for the greedy logprobs of a fixed completion. The second answer differs from the
    first: the endpoint serves the weights the first update produced."""
    write_dataset(generate_dataset(train_size=4, val_size=0, seed=3, few_shot=0), tmp_path / "data")
    cfg = load_config(
        [
            f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
            "data.val_data=[]",
            f"trainer.policy.model.path={tiny_model}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.micro_train_batch_size_per_gpu=4",
            "trainer.micro_forward_batch_size_per_gpu=4",
            "trainer.policy.optimizer_config.lr=1e-3",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.max_generate_length=4",
            "generator.enable_http_endpoint=true",
            "generator.http_endpoint_port=0",
            "generator.served_model_name=live-policy",
            "trainer.max_prompt_length=512",
            "trainer.bf16=false",
            "trainer.gradient_checkpointing=false",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.eval_interval=-1",
            "trainer.ckpt_interval=-1",
            "trainer.hf_save_interval=-1",
            "trainer.logger=jsonl",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}",
            f"trainer.export_path={tmp_path / 'exports'}",
        ]
    )
    answers = []

    class AskingGenerator(GeneratorInterface):
        """The generator, after asking the endpoint for a greedy completion with logprobs."""

        def __init__(self, generator, experiment):
            self.generator, self.experiment = generator, experiment

        async def generate(self, input_batch):
            request = {**REQUEST, "model": "live-policy", "max_tokens": 3, "logprobs": 0}
            async with httpx.AsyncClient(base_url=self.experiment.endpoint.url, timeout=60) as client:
                answers.append((await client.post("/v1/completions", json=request)).json())
            return await self.generator.generate(input_batch)

    class Experiment(BasePPOExp):
        def get_generator(self, cfg, tokenizer, engine):
            return AskingGenerator(super().get_generator(cfg, tokenizer, engine), self)

        def get_http_endpoint(self, engine, tokenizer):
            self.endpoint = super().get_http_endpoint(engine, tokenizer)
            return self.endpoint

    Experiment(cfg).run()
    assert len(answers) == 2
    first, second = (answer["choices"][0]["logprobs"]["token_logprobs"] for answer in answers)
    assert len(first) == len(second) == 3
    assert first != second
