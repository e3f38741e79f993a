"""Tiny random Llama models share the real tokenizer and build deterministically."""

from __future__ import annotations

import time

import torch
from safetensors.torch import load_file

from skyrl_train.models import load_causal_lm, load_tokenizer, make_tiny_causal_lm
from skyrl_train.testing import tiny_model_path


def test_tiny_model_shares_the_real_tokenizer_and_runs(smollm2_path, tmp_path):
    path = make_tiny_causal_lm(smollm2_path, cache_dir=tmp_path)
    real, tiny = load_tokenizer(smollm2_path), load_tokenizer(path)
    assert len(tiny) == len(real) == 49152
    assert (tiny.bos_token_id, tiny.eos_token_id, tiny.pad_token_id, tiny.unk_token_id) == (1, 2, 2, 0)
    assert tiny.chat_template == real.chat_template
    assert tiny("hello world").input_ids == real("hello world").input_ids

    start = time.perf_counter()
    model = load_causal_lm(path)
    assert time.perf_counter() - start < 3.0
    assert model.config.vocab_size == 49152 and model.config.num_hidden_layers == 2
    assert (model.config.bos_token_id, model.config.eos_token_id) == (1, 2)
    assert (model.generation_config.bos_token_id, model.generation_config.eos_token_id) == (1, 2)
    assert model.generation_config.pad_token_id == 2
    ids = torch.tensor([real("<|im_start|>user\nHi<|im_end|>").input_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], 49152) and torch.isfinite(logits).all()


def test_tiny_model_is_cached_and_deterministic(smollm2_path, tmp_path):
    first = make_tiny_causal_lm(smollm2_path, cache_dir=tmp_path / "a")
    assert make_tiny_causal_lm(smollm2_path, cache_dir=tmp_path / "a") == first
    second = make_tiny_causal_lm(smollm2_path, cache_dir=tmp_path / "b")
    a, b = load_file(f"{first}/model.safetensors"), load_file(f"{second}/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    other_seed = make_tiny_causal_lm(smollm2_path, cache_dir=tmp_path / "a", seed=1)
    assert other_seed != first


def test_testing_helper_gives_the_standard_tiny_model(smollm2_path, tmp_path):
    path = tiny_model_path(smollm2_path, cache_dir=tmp_path)
    assert path == make_tiny_causal_lm(smollm2_path, num_layers=2, hidden_size=64, seed=0, cache_dir=tmp_path)


def test_tiny_models_pad_id_is_no_token_of_a_chat_and_every_chat_tokens_embedding_is_nonzero(smollm2_path, tmp_path):
    path = make_tiny_causal_lm(smollm2_path, cache_dir=tmp_path)
    tokenizer, model = load_tokenizer(path), load_causal_lm(path)
    conversation = [
        {"role": "system", "content": "Solve the problem. Put the answer after ####."},
        {"role": "user", "content": "Tom has 3 apples and buys 4 more. How many?"},
        {"role": "assistant", "content": "3 + 4 = 7\n#### 7"},
    ]
    ids = tokenizer(tokenizer.apply_chat_template(conversation, tokenize=False)).input_ids
    assert model.config.pad_token_id == 0  # <|endoftext|>: SmolLM2's chat template never writes it
    assert {1, 2} <= set(ids) and model.config.pad_token_id not in ids
    rows = model.get_input_embeddings().weight[torch.tensor(ids)]
    assert bool((rows.abs().sum(dim=-1) > 0).all())
    assert model.get_input_embeddings().padding_idx == 0
