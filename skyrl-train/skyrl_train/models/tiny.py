"""Tiny randomly initialised Llama models for tests, sharing a real model's tokenizer and chat template.

The folder is built once per (tokenizer, sizes, seed) under the models cache and loads in a fraction of a second.
Its vocab size, special-token ids, chat template and context length are the tokenizer source's, so token ids,
masks and prompts in tests are exactly what the real model would see; only the weights are random.

One exception: the model config's ``pad_token_id``. transformers makes it the embedding's ``padding_idx``, a row
initialised to zero that never gets a gradient. The real model's pad token (``<|im_end|>`` for SmolLM2, which every
chat turn contains) keeps its trained row, but a random model would start with a zero row there, and a zero input
row makes the first RMSNorm's gradient ~1/sqrt(eps) (at 30 layers it overflows to NaN). So the tiny model's config
names a special token that chat-templated conversations never contain (`unused_pad_token_id`); the tokenizer and the
generation config keep the source's pad token.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from skyrl_train.models.cache import build_once, cache_root
from skyrl_train.models.resolve import DEFAULT_MODEL, resolve_model_path

# Bump when the build below changes, so cached tiny models made by older code are rebuilt.
TINY_FORMAT = 2
_SAMPLE_CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
]
"""What `unused_pad_token_id` renders with the chat template to see which special tokens prompts contain."""
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def make_tiny_causal_lm(
    tokenizer_source: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    num_layers: int = 2,
    hidden_size: int = 64,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 128,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
) -> str:
    """Path of a cached folder holding a random LlamaForCausalLM (float32) plus ``tokenizer_source``'s tokenizer.

    Same arguments give the same weights on every machine (the init runs under ``torch.manual_seed(seed)`` in a
    forked RNG, leaving the caller's RNG untouched). ``tokenizer_source`` is anything ``resolve_model_path``
    accepts; the default alias is converted first if it is not cached yet. ``cache_dir`` overrides the models
    cache, and is also where an alias tokenizer source is converted.
    """
    source = resolve_model_path(tokenizer_source, cache_dir=cache_dir)
    sizes = dict(
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        intermediate_size=intermediate_size,
        seed=seed,
    )
    manifest = {
        "kind": "tiny-causal-lm",
        "format": TINY_FORMAT,
        "tokenizer_source": os.fspath(tokenizer_source),
        "tokenizer_digest": _tokenizer_digest(source),
        **sizes,
    }
    key = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    target = root / f"tiny-llama-{key}"
    build_once(target, lambda tmp: _build(source, tmp, **sizes), manifest)
    return str(target)


def _build(
    source: str,
    out_dir: Path,
    *,
    num_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    intermediate_size: int,
    seed: int,
) -> None:
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(source)
    try:
        real = AutoConfig.from_pretrained(source)
    except (OSError, ValueError):
        real = None
    vocab_size = max(getattr(real, "vocab_size", 0) or 0, len(tokenizer))
    max_positions = getattr(real, "max_position_embeddings", None) or 2048
    special = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    }
    model_special = {**special, "pad_token_id": unused_pad_token_id(tokenizer)}
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=hidden_size // num_attention_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        **model_special,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(**special)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def unused_pad_token_id(tokenizer) -> int:
    """The lowest-id special token of ``tokenizer`` that is neither bos nor eos and that a chat-templated
    conversation (with a generation prompt) does not contain: a pad id whose embedding row no prompt or response
    uses. Raises ValueError when the tokenizer has no such token."""
    prompt = tokenizer.apply_chat_template(_SAMPLE_CONVERSATION, tokenize=False, add_generation_prompt=True)
    used = {*tokenizer(prompt)["input_ids"], tokenizer.bos_token_id, tokenizer.eos_token_id}
    candidates = sorted(set(tokenizer.all_special_ids) - used)
    if not candidates:
        raise ValueError(
            f"tokenizer {tokenizer.name_or_path!r} has no special token outside bos, eos and its chat template's "
            "tokens: no pad id for a tiny model that leaves the rows of real tokens trainable"
        )
    return candidates[0]


def _tokenizer_digest(source: str) -> str:
    """Hash of the tokenizer files in a local folder (so a changed tokenizer gets a new tiny model); for a hub id,
    the id itself."""
    folder = Path(source)
    if not folder.is_dir():
        return source
    digest = hashlib.sha256()
    for name in _TOKENIZER_FILES:
        path = folder / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
