"""`attention_implementation`: the block runs with the named attention, and so does the recompute of its checkpointed
layers in a later backward."""

from __future__ import annotations

import pytest
import torch
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from skyrl_train.models import load_causal_lm
from skyrl_train.models.attention import attention_implementation
from skyrl_train.testing import tiny_model_path
from skyrl_train.workers.trainable import enable_gradient_checkpointing

RECORDING = "skyrl_test_recording"
CALLS: list[int] = []
"""Layer index of each call of the recording attention."""


def recording_attention(module, query, key, value, attention_mask, **kwargs):
    CALLS.append(module.layer_idx)
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(RECORDING, recording_attention)


@pytest.fixture
def ids() -> torch.Tensor:
    return torch.arange(5, 17)[None, :]


def test_the_block_runs_the_named_attention_and_restores_the_previous_one(ids):
    model = load_causal_lm(tiny_model_path())
    previous = model.config._attn_implementation
    CALLS.clear()
    with attention_implementation(model, RECORDING), torch.no_grad():
        model(input_ids=ids)
    assert CALLS == [0, 1] and model.config._attn_implementation == previous


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointed_layers_recompute_under_the_attention_of_their_forward(ids, use_reentrant):
    model = load_causal_lm(tiny_model_path())
    enable_gradient_checkpointing(model, use_reentrant)
    model.train()
    CALLS.clear()
    with attention_implementation(model, RECORDING):
        logits = model(input_ids=ids).logits
    assert CALLS == [0, 1]
    logits.sum().backward()
    assert CALLS == [0, 1, 1, 0]  # the backward recomputes the last layer first
    assert model.config._attn_implementation != RECORDING
