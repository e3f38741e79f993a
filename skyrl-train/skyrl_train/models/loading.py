"""Load a tokenizer or a causal LM from any name ``resolve_model_path`` accepts (alias, local folder, hub id)."""

from __future__ import annotations

import logging
import os
from typing import Any, Literal

import torch

from skyrl_train.models.resolve import resolve_model_path

logger = logging.getLogger(__name__)

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def to_torch_dtype(dtype: str | torch.dtype) -> torch.dtype | Literal["auto"]:
    """``"float32"``/``"bfloat16"``/``"float16"`` (or fp32/bf16/fp16), a torch.dtype, or ``"auto"`` (the dtype
    recorded in the model's config)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return "auto"
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)} or 'auto'") from None


def load_tokenizer(name_or_path: str | os.PathLike[str], **kwargs: Any):
    """``AutoTokenizer.from_pretrained`` on the resolved path, with a pad token guaranteed.

    A tokenizer without a pad token gets its eos token as pad token (logged), so batches can be padded; the
    attention mask, not the pad id, tells real tokens from padding. ``padding_side`` is left as loaded: callers
    set ``"left"`` for generation and ``"right"`` for training. ``kwargs`` go to ``from_pretrained``.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path), **kwargs)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer of {os.fspath(name_or_path)!r} has neither a pad nor an eos token")
        logger.info("tokenizer of %s has no pad token; using eos %r", os.fspath(name_or_path), tokenizer.eos_token)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(
    name_or_path: str | os.PathLike[str],
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    **kwargs: Any,
):
    """``AutoModelForCausalLM.from_pretrained`` on the resolved path, in ``dtype``, moved to ``device``.

    float32 is the default because on CPUs without AMX bf16 matmuls are about 4x slower than fp32. The model comes
    back in eval mode (as ``from_pretrained`` returns it). If its generation config has no pad token id, the eos id
    is used, matching ``load_tokenizer``. ``kwargs`` go to ``from_pretrained`` (e.g. ``attn_implementation``).

    Raises:
        ValueError: the folder's weights leave some of the model's parameters missing or of another shape (e.g. a
            training checkpoint's peft-wrapped state dict, or another architecture's weights), which
            ``from_pretrained`` would fill with random values.
    """
    from transformers import AutoModelForCausalLM

    model = _from_pretrained(AutoModelForCausalLM, name_or_path, dtype, **kwargs)
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None and generation_config.pad_token_id is None:
        eos = generation_config.eos_token_id
        generation_config.pad_token_id = eos[0] if isinstance(eos, list | tuple) and eos else eos
    return model.to(device)


def load_backbone(
    name_or_path: str | os.PathLike[str],
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    **kwargs: Any,
):
    """``AutoModel.from_pretrained`` (the model without its LM head, e.g. a critic's backbone) on the resolved path,
    in ``dtype``, moved to ``device``; a causal LM's folder serves (its head's weights are left out).

    Raises:
        ValueError: as `load_causal_lm`, when the folder's weights would leave backbone parameters random.
    """
    from transformers import AutoModel

    return _from_pretrained(AutoModel, name_or_path, dtype, **kwargs).to(device)


def _from_pretrained(auto_class, name_or_path: str | os.PathLike[str], dtype: str | torch.dtype, **kwargs: Any):
    """``auto_class.from_pretrained`` on the resolved path in ``dtype``; raises when its loading info has parameters
    the checkpoint did not provide (missing, or stored with another shape): the model would run with random weights
    there."""
    path = resolve_model_path(name_or_path)
    model, info = auto_class.from_pretrained(path, dtype=to_torch_dtype(dtype), output_loading_info=True, **kwargs)
    missing = sorted(info.get("missing_keys") or ())
    mismatched = sorted(str(entry[0]) for entry in info.get("mismatched_keys") or ())
    if not missing and not mismatched:
        return model
    unexpected = sorted(info.get("unexpected_keys") or ())
    problems = [
        f"{len(keys)} {what} (e.g. {', '.join(keys[:3])})"
        for what, keys in (("missing", missing), ("of another shape", mismatched), ("unexpected", unexpected))
        if keys
    ]
    raise ValueError(
        f"{os.fspath(path)}: its weights do not fit the model its config.json describes: parameters "
        + "; ".join(problems)
        + ". Loaded as it is, the model would compute with random weights there. A training checkpoint's folder "
        "(under trainer.ckpt_path) is not a model folder: evaluate or serve a run's HF export "
        "(`<export_path>/global_step_N/policy`)."
    )
