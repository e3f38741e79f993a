"""Decoding with the LoRA adapter folded into copies of the base weights: the adapter's outputs, the module's own
weights back afterwards, the base weights' dtype kept (bf16 under an fp32 adapter); on every available device."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.inference_engines.hf.lora_merge import MergedLoRA
from skyrl_train.testing import on_every_device

from .conftest import build_model, model_input

PROMPTS = [[1, 4093, 198, 19556, 2, 198], [1, 9690, 198, 2683, 314, 253, 1535, 2]]
GREEDY = SamplingParams(temperature=0.0, max_generate_length=4, additional_kwargs={"ignore_eos": True})


def lora_layers(model):
    return [m for m in model.modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")]


@on_every_device
def test_the_folded_model_computes_the_adapters_logits_and_restore_gives_back_the_very_same_tensors(tiny_model, device):
    model = build_model(tiny_model, "trained_lora", device)
    ids = model_input(model, PROMPTS[1])
    with torch.no_grad():
        expected = model(ids).logits
    originals = {name: p.data_ptr() for name, p in model.named_parameters()}
    folded = MergedLoRA(model)
    assert folded.layers == len(lora_layers(model)) > 0
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, expected, atol=1e-5, rtol=1e-5)
    folded.restore()
    for name, p in model.named_parameters():
        assert p.data_ptr() == originals[name], name
    assert not any(layer.disable_adapters for layer in lora_layers(model))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, expected)


async def test_an_engine_folding_lora_samples_from_the_adapters_distribution(tiny_model, tiny_tokenizer):
    model = build_model(tiny_model, "trained_lora")
    engine = HFInferenceEngine(model, tiny_tokenizer, seed=0)
    sampling = SamplingParams(
        temperature=0.7, max_generate_length=12, logprobs=0, additional_kwargs={"ignore_eos": True}
    )
    output = await engine.generate({"prompt_token_ids": PROMPTS, "sampling_params": sampling})
    await engine.teardown()
    for prompt, response, logprobs in zip(PROMPTS, output["response_ids"], output["response_logprobs"], strict=True):
        with torch.no_grad():  # the unfolded adapter, one full forward
            logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1] / 0.7
        expected = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(response)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logprobs), expected, atol=1e-4, rtol=0)


async def test_while_busy_the_adapter_is_folded_and_when_drained_the_module_is_as_before(tiny_model, tiny_tokenizer):
    model = build_model(tiny_model, "trained_lora")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    engine = HFInferenceEngine(model, tiny_tokenizer, seed=0)
    seen = []
    handle = model.register_forward_pre_hook(
        lambda module, args: seen.append(all(layer.disable_adapters for layer in lora_layers(model)))
    )
    try:
        await engine.generate({"prompt_token_ids": PROMPTS, "sampling_params": GREEDY})
        await engine.sleep()
    finally:
        handle.remove()
        await engine.teardown()
    assert seen and all(seen)  # every forward pass ran with the adapter branch off (folded)
    assert not any(layer.disable_adapters for layer in lora_layers(model))
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def bf16_model_with_adapter(tiny_model: str, device: str, adapter_dtype: torch.dtype):
    """The tiny model in bf16 with a trained LoRA adapter in `adapter_dtype`: fp32 is what peft makes of an adapter
    over a bf16 model by default (`autocast_adapter_dtype`, the `trainer.bf16=true` + LoRA case); bf16 is a peft
    model cast to bf16 as a whole."""
    model = build_model(tiny_model, "trained_lora", device, dtype=torch.bfloat16)
    if adapter_dtype == torch.bfloat16:
        model.to(torch.bfloat16)
    assert {p.dtype for name, p in model.named_parameters() if "lora_" in name} == {adapter_dtype}
    return model


BF16_TOLERANCE = {"atol": 2e-2, "rtol": 1.6e-2}
"""Folded vs unfolded logits of the bf16 model (about 1 in size): one bf16 rounding of each merged weight apart."""


@on_every_device
@pytest.mark.parametrize("adapter_dtype", [torch.float32, torch.bfloat16], ids=["fp32_adapter", "bf16_adapter"])
def test_folding_into_a_bf16_model_keeps_its_weights_bf16_on_their_device_and_gives_the_adapters_logits(
    tiny_model, device, adapter_dtype
):
    model = bf16_model_with_adapter(tiny_model, device, adapter_dtype)
    ids = model_input(model, PROMPTS[1])
    with torch.no_grad():
        expected = model(ids).logits.float()
    folded = MergedLoRA(model)
    assert folded.layers == len(lora_layers(model)) > 0
    for layer in lora_layers(model):
        assert layer.base_layer.weight.dtype == torch.bfloat16
        assert layer.base_layer.weight.device.type == device
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits.float(), expected, **BF16_TOLERANCE)
    folded.restore()


@on_every_device
async def test_an_engine_folding_an_fp32_adapter_into_a_bf16_model_generates_with_the_adapters_logprobs(
    tiny_model, tiny_tokenizer, device
):
    model = bf16_model_with_adapter(tiny_model, device, torch.float32)
    engine = HFInferenceEngine(model, tiny_tokenizer, seed=0)
    greedy = SamplingParams(temperature=0.0, max_generate_length=6, logprobs=0, additional_kwargs={"ignore_eos": True})
    try:
        output = await engine.generate({"prompt_token_ids": PROMPTS, "sampling_params": greedy})
    finally:
        await engine.teardown()
    for prompt, response, logprobs in zip(PROMPTS, output["response_ids"], output["response_logprobs"], strict=True):
        assert len(response) == 6
        with torch.no_grad():  # the unfolded adapter, one full forward
            logits = model(model_input(model, prompt + response)).logits[0, len(prompt) - 1 : -1].float().cpu()
        expected = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(response)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logprobs), expected, **BF16_TOLERANCE)
