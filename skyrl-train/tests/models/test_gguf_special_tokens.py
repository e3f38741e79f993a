"""The conversion takes bos, eos and pad from the GGUF's own metadata, whatever the transformers version infers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGUFReader, GGUFWriter

from skyrl_train.models import BUILTIN_ALIASES, DEFAULT_MODEL, GgufConversionError, load_tokenizer
from skyrl_train.models.gguf_convert import SpecialToken, find_packaged_gguf, read_gguf_special_tokens


def metadata_id(reader: GGUFReader, key: str) -> int:
    return int(reader.fields[key].contents())


def write_gguf(path: Path, tokens: list[str], **ids: int) -> Path:
    """A GGUF holding only tokenizer metadata: ``tokens`` and ``bos`` / ``eos`` / ``pad`` ids as given."""
    writer = GGUFWriter(str(path), "llama")
    writer.add_token_list(tokens)
    for role, token_id in ids.items():
        getattr(writer, f"add_{role}_token_id")(token_id)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def default_gguf() -> GGUFReader:
    alias = BUILTIN_ALIASES[DEFAULT_MODEL]
    return GGUFReader(str(find_packaged_gguf(alias.distribution, alias.filename)))


def test_the_default_models_gguf_names_im_start_as_bos_and_im_end_as_eos_and_pad(default_gguf):
    ids = [metadata_id(default_gguf, f"tokenizer.ggml.{key}") for key in ("bos_token_id", "eos_token_id")]
    assert ids + [metadata_id(default_gguf, "tokenizer.ggml.padding_token_id")] == [1, 2, 2]
    assert default_gguf.fields["tokenizer.ggml.tokens"].contents()[:3] == [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
    ]


def test_converted_tokenizer_has_the_ggufs_special_tokens(default_gguf, smollm2_path):
    tokenizer = load_tokenizer(smollm2_path)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (
        metadata_id(default_gguf, "tokenizer.ggml.bos_token_id"),
        metadata_id(default_gguf, "tokenizer.ggml.eos_token_id"),
        metadata_id(default_gguf, "tokenizer.ggml.padding_token_id"),
    )


@pytest.mark.parametrize("config_file", ["config.json", "generation_config.json"])
def test_converted_configs_have_the_ggufs_special_token_ids(default_gguf, smollm2_path, config_file):
    config = json.loads((Path(smollm2_path) / config_file).read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (
        metadata_id(default_gguf, "tokenizer.ggml.bos_token_id"),
        metadata_id(default_gguf, "tokenizer.ggml.eos_token_id"),
        metadata_id(default_gguf, "tokenizer.ggml.padding_token_id"),
    )


def test_special_tokens_are_read_with_their_strings(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", ["<unk>", "<s>", "</s>", "<pad>"], bos=1, eos=2, pad=3)
    assert read_gguf_special_tokens(path) == {
        "bos": SpecialToken(1, "<s>"),
        "eos": SpecialToken(2, "</s>"),
        "pad": SpecialToken(3, "<pad>"),
    }


def test_a_gguf_without_padding_token_pads_with_eos_and_without_bos_has_none(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", ["<unk>", "<s>", "</s>"], eos=2)
    assert read_gguf_special_tokens(path) == {
        "bos": None,
        "eos": SpecialToken(2, "</s>"),
        "pad": SpecialToken(2, "</s>"),
    }


def test_a_gguf_without_eos_is_refused(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", ["<unk>", "<s>", "</s>"], bos=1)
    with pytest.raises(GgufConversionError, match="tokenizer.ggml.eos_token_id"):
        read_gguf_special_tokens(path)


def test_an_id_outside_the_vocabulary_is_refused(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", ["<unk>", "<s>", "</s>"], eos=2, pad=7)
    with pytest.raises(GgufConversionError, match="tokenizer.ggml.padding_token_id = 7 is outside"):
        read_gguf_special_tokens(path)
