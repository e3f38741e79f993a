"""`FewRowLinears`: float32 linear layers on the CPU take few-row inputs as ``(W @ xᵀ)ᵀ`` while the hf engine is busy
(the same product up to float rounding), other layers are left alone, and everything goes back when it drains."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from skyrl_train.inference_engines import HFInferenceEngine, SamplingParams
from skyrl_train.inference_engines.hf import few_row_linear as few_row_linear_module
from skyrl_train.inference_engines.hf.decode_weights import DecodeWeights
from skyrl_train.inference_engines.hf.few_row_linear import MAX_ROWS, MIN_ROWS, FewRowLinears

from .conftest import build_model
from .test_lora_merge import PROMPTS, lora_layers


class ScaledLinear(nn.Linear):
    """A subclass with its own forward: not a plain linear layer."""

    def forward(self, x):
        return 2 * super().forward(x)


def replaced(module: nn.Module) -> bool:
    return "forward" in vars(module)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 48), (2, 48), (3, 1, 48), (4, 5, 48), (MAX_ROWS, 48), (MAX_ROWS + 1, 48)])
def test_a_few_row_linear_gives_the_same_product_and_its_gradients(shape, bias):
    torch.manual_seed(0)
    layer = nn.Linear(48, 40, bias=bias)
    x = torch.randn(shape, requires_grad=True)
    expected = layer(x)
    expected_grads = torch.autograd.grad(expected.square().sum(), [x, *layer.parameters()])
    linears = FewRowLinears(layer)
    assert linears.layers == 1 and replaced(layer)
    out = layer(x)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), [x, *layer.parameters()])
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-5)
    linears.restore()
    assert not replaced(layer)


def test_the_few_row_form_runs_from_min_to_max_rows_only(monkeypatch):
    layer = nn.Linear(8, 8)
    calls = []
    monkeypatch.setattr(torch, "matmul", lambda *args: calls.append(args[1].shape[1]) or torch.mm(*args))
    FewRowLinears(layer)
    for rows in (1, MIN_ROWS, MAX_ROWS, MAX_ROWS + 1):
        layer(torch.randn(rows, 8))
    assert calls == [MIN_ROWS, MAX_ROWS]


def test_only_plain_float32_linear_layers_on_the_cpu_take_the_few_row_form():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8).to(torch.bfloat16), ScaledLinear(8, 8), nn.LayerNorm(8))
    linears = FewRowLinears(model)
    assert [replaced(module) for module in model] == [True, False, False, False]
    assert linears.layers == 1
    linears.restore()
    linears.restore()  # a second restore changes nothing
    assert not any(replaced(module) for module in model)


def test_decode_weights_put_the_few_row_form_on_the_decoded_weights_and_take_it_off(tiny_model):
    model = build_model(tiny_model, "trained_lora")
    base_layers = [layer.base_layer for layer in lora_layers(model)]
    weights = DecodeWeights(model, fold_lora=True, dtype=None)
    assert all(replaced(layer) for layer in base_layers)
    weights.restore()
    assert not any(replaced(module) for module in model.modules())
    weights = DecodeWeights(model, fold_lora=True, dtype=torch.bfloat16)  # bf16 on the CPU: not measured, left alone
    assert not any(replaced(module) for module in model.modules())
    weights.restore()


async def test_the_engine_decodes_in_the_few_row_form_with_the_library_s_greedy_tokens(
    tiny_model, tiny_tokenizer, monkeypatch
):
    model = build_model(tiny_model, "trained_lora")
    greedy = SamplingParams(temperature=0.0, max_generate_length=8, logprobs=0, additional_kwargs={"ignore_eos": True})
    few_row_rows = []  # rows of every input that took the few-row form
    own_forward = few_row_linear_module._few_row_forward

    def counting_forward(module, x):
        rows = x.numel() // x.shape[-1]
        if MIN_ROWS <= rows <= few_row_linear_module.MAX_ROWS:
            few_row_rows.append(rows)
        return own_forward(module, x)

    monkeypatch.setattr(few_row_linear_module, "_few_row_forward", counting_forward)
    outputs = {}
    for max_rows in (0, MAX_ROWS):  # 0: every input takes the library's path
        monkeypatch.setattr(few_row_linear_module, "MAX_ROWS", max_rows)
        engine = HFInferenceEngine(model, tiny_tokenizer, seed=0)
        try:
            outputs[max_rows] = await engine.generate({"prompt_token_ids": PROMPTS, "sampling_params": greedy})
        finally:
            await engine.teardown()
        assert bool(few_row_rows) == (max_rows > 0)
    assert len(PROMPTS) in few_row_rows  # the decode steps of every prompt together
    assert not any(replaced(module) for module in model.modules())
    assert outputs[MAX_ROWS]["response_ids"] == outputs[0]["response_ids"]
    for few_row, library in zip(outputs[MAX_ROWS]["response_logprobs"], outputs[0]["response_logprobs"], strict=True):
        torch.testing.assert_close(torch.tensor(few_row), torch.tensor(library), rtol=0, atol=1e-4)
