"""Decoding with the LoRA adapter folded into copies of the base weights: the adapter's outputs, the module's own
weights back afterwards."""

from __future__ import annotations

import torch

from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.inference_engines.lora_merge import MergedLoRA

from .conftest import build_model

PROMPTS = [[1, 4093, 198, 19556, 2, 198], [1, 9690, 198, 2683, 314, 253, 1535, 2]]
GREEDY = SamplingParams(temperature=0.0, max_generate_length=4, additional_kwargs={"ignore_eos": True})


def lora_layers(model):
    return [m for m in model.modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")]


def test_the_folded_model_computes_the_adapters_logits_and_restore_gives_back_the_very_same_tensors(tiny_model):
    model = build_model(tiny_model, "trained_lora")
    ids = torch.tensor([PROMPTS[1]])
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
