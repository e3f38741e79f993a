"""Render `ppo_base_config.yaml` and `docs/config_reference.md` from the schema.

    python -m skyrl_train.config.render_yaml           # rewrite both files
    python -m skyrl_train.config.render_yaml --check   # exit 1 if either file is stale

Never edit the two files by hand: change `schema.py` and re-run this. Tests fail when they drift.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

from skyrl_train.config.loader import BASE_CONFIG_PATH, type_name
from skyrl_train.config.schema import SkyRLConfig, extra_keys_field, help_of
from skyrl_train.config.support import NOT_IMPLEMENTED, conditional_mark

__all__ = ["render_yaml", "render_docs", "DOCS_PATH", "UPSTREAM_DEVIATIONS", "NOT_IMPLEMENTED_MARK", "main"]

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "config_reference.md"

# (key, upstream default, our default, reason): every default that differs from upstream SkyRL v0.4.
UPSTREAM_DEVIATIONS = [
    (
        "trainer.policy.model.path",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "smollm2-135m-instruct",
        "CPU-first and offline: the built-in alias is converted from a PyPI package, nothing loads from a hub.",
    ),
    (
        "trainer.strategy",
        "fsdp2",
        "single",
        "CPU-first: one machine trains in one process with no process group.",
    ),
    (
        "generator.backend",
        "vllm",
        "hf",
        "CPU-first: the transformers engine runs everywhere and generates with the policy's own weights.",
    ),
    (
        "trainer.logger",
        "wandb",
        "console",
        "The default run needs no account, network or API key.",
    ),
    (
        "trainer.use_sample_packing",
        "true",
        "false",
        "Off until it is measured on more than the CPU default model: packed and padded forwards agree only up to "
        "float rounding.",
    ),
    (
        "trainer.flash_attn",
        "true",
        "false",
        "flash-attn is not wired in (true is refused): a default must not claim a feature the code lacks.",
    ),
    (
        "trainer.policy.optimizer_config.offload_after_step",
        "true",
        "false",
        "Optimizer offload is not implemented (true is refused): a default must not claim a feature the code lacks.",
    ),
    (
        "trainer.critic.optimizer_config.offload_after_step",
        "true",
        "false",
        "Optimizer offload is not implemented (true is refused): a default must not claim a feature the code lacks.",
    ),
    (
        "trainer.fully_async.max_staleness_steps",
        "4",
        "0",
        "The default run stays the synchronous loop: asynchronous training needs remote engines "
        "(generator.run_engines_locally=false), which the default config does not have.",
    ),
    (
        "sft.train_on_what",
        "last_assistant_message",
        "all_assistant_messages",
        "Upstream's SFTConfig (HEAD, not v0.4): tool-use demonstrations teach every call of an episode, not only its "
        "final answer, as TRL's assistant-only loss does.",
    ),
]

NOT_IMPLEMENTED_MARK = "[not implemented: refused unless default]"
"""Appended to the help of every key in `support.NOT_IMPLEMENTED`, in the YAML comments and the docs."""

_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./+-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "none"}
_HEADER = """\
# SkyRL training config: the Hydra root config (`ppo_base_config`).
# GENERATED from skyrl_train/config/schema.py by `python -m skyrl_train.config.render_yaml`.
# Do not edit by hand; change the schema and re-render. Reference: skyrl-train/docs/config_reference.md
# Override any key on the command line, Hydra style, after any preset files (YAML with this nesting):
#   python -m skyrl_train.entrypoints.main_base --config examples/gsm8k/grpo.yaml trainer.epochs=2 generator.max_turns=3
# Keys marked "[not implemented: refused unless default]" are kept for upstream compatibility
# and refused with any other value (skyrl_train/config/support.py).
"""


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
            return value
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {value!r}")


def _default_instance(f: dataclasses.Field) -> Any:
    # Sections are built from their own factories: the root's __post_init__ would resolve interpolations.
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _help(key: str, f: dataclasses.Field) -> str:
    """The help text of a key, marked if the key is not implemented or takes effect only in some configs."""
    if key in NOT_IMPLEMENTED:
        return f"{help_of(f)} {NOT_IMPLEMENTED_MARK}"
    mark = conditional_mark(key)
    return f"{help_of(f)} [{mark}: refused unless default elsewhere]" if mark else help_of(f)


def _yaml_block(obj: Any, prefix: str, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    extra = extra_keys_field(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        out.append(f"{pad}# {_help(prefix + f.name, f)}")
        if f.name == extra:
            for name, block in value.items():
                _yaml_value(name, block, indent, out)
        elif dataclasses.is_dataclass(value):
            out.append(f"{pad}{f.name}:")
            _yaml_block(value, f"{prefix}{f.name}.", indent + 1, out)
        else:
            _yaml_value(f.name, value, indent, out)


def _yaml_value(name: str, value: Any, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(value, dict) and value:
        out.append(f"{pad}{name}:")
        for k, v in value.items():
            _yaml_value(k, v, indent + 1, out)
    else:
        out.append(f"{pad}{name}: {_scalar(value)}")


def render_yaml() -> str:
    """The text of `ppo_base_config.yaml`: every key with its default and its help as a comment above it."""
    out = [_HEADER]
    for f in dataclasses.fields(SkyRLConfig):
        out.append(f"# {help_of(f)}")
        out.append(f"{f.name}:")
        _yaml_block(_default_instance(f), f"{f.name}.", 1, out)
        out.append("")
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _docs_tables(obj: Any, prefix: str, out: list[str], heading: list[str] | None = None) -> None:
    rows = []
    nested = []
    extra = extra_keys_field(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            rows.append((f"{prefix}.{f.name}", "block", "", f"{help_of(f)} See below."))
            nested.append((f"{prefix}.{f.name}", value))
        elif f.name == extra:
            value_type = type_name(f.type.__args__[1])
            for name, block in value.items():
                rows.append((f"{prefix}.{name}", value_type, _scalar(block), "Default block (upstream)."))
            rows.append((f"{prefix}.<any other key>", value_type, "", help_of(f)))
        else:
            rows.append((f"{prefix}.{f.name}", type_name(f.type), _scalar(value), _help(f"{prefix}.{f.name}", f)))
    out += heading or [f"### `{prefix}`", ""]
    out += ["| key | type | default | help |", "|---|---|---|---|"]
    for key, typ, default, text in rows:
        default_cell = f"`{_cell(default)}`" if default else ""
        out.append(f"| `{key}` | {_cell(typ)} | {default_cell} | {_cell(text)} |")
    out.append("")
    for sub_prefix, value in nested:
        _docs_tables(value, sub_prefix, out)


def render_docs() -> str:
    """The text of `docs/config_reference.md`: one table per block of keys."""
    out = [
        "# Config reference",
        "",
        "<!-- GENERATED by `python -m skyrl_train.config.render_yaml` from skyrl_train/config/schema.py."
        " Do not edit by hand. -->",
        "",
        "Every key of `skyrl_train/config/ppo_base_config.yaml`, the Hydra root config. Set any of them on the",
        "command line: `python -m skyrl_train.entrypoints.main_base trainer.epochs=2 +generator.sampling_params.ignore_eos=true`",
        "(`key=value` changes a key, `+key=value` adds a free-form one, `~key` resets a key to its default).",
        "Preset files (`--config preset.yaml`, repeatable; YAML with this file's nesting, e.g. `examples/gsm8k/grpo.yaml`)",
        "apply first, in order; `examples/README.md` describes them.",
        "Unknown keys and wrong types are errors that name the key; the cross-key rules live in",
        "`skyrl_train/config/validate.py` (`validate_cfg`).",
        "",
        "Names and defaults follow upstream SkyRL. Not supported in this fork (rejected with a clear error):",
        "`trainer.strategy=megatron` / `fsdp` and every `megatron_config` key, `generator.backend=sglang` and the",
        "new inference-server path (`generator.external_*`).",
        "",
        f"Keys marked **{NOT_IMPLEMENTED_MARK}** are declared for upstream compatibility but nothing in this fork",
        "reads them yet (sample packing, flash-attn, expert parallelism, ...): any value other",
        "than the default is refused with an error naming the key and the reason (`skyrl_train/config/support.py`).",
        "Keys marked **[... : refused unless default elsewhere]** take effect only in some configs (fsdp2-only",
        "placement and sharding, vLLM-only engine keys, critic-only keys, the reference model's own keys, the",
        "KL-in-reward controller, the cap or bounds of an off-policy correction rule that is off, the KL and entropy",
        "coefficients without their term, LoRA settings at rank 0, keys only some estimators or losses read, eval",
        "settings without eval data, the HTTP endpoint's address while it is off, ...: `support.CONDITIONAL`);",
        "elsewhere they would do nothing, so a value other than the default is refused the same way.",
        "Extra keys of `generator.sampling_params` / `eval_sampling_params` go to the inference engine; only those",
        "the configured backend reads are accepted (`support.ENGINE_EXTRA_SAMPLING_KEYS`). A block of",
        "`environment.skyrl_gym` must be named after a registered env, and hold only the keys that env declares.",
        "Names (LR schedulers, `generator.model_dtype`, estimators, losses, reductions, LoRA inits) are checked",
        "against what exists.",
        "",
        "## Defaults that differ from upstream",
        "",
        "| key | upstream | here | why |",
        "|---|---|---|---|",
    ]
    for key, upstream, ours, why in UPSTREAM_DEVIATIONS:
        out.append(f"| `{key}` | `{upstream}` | `{ours}` | {_cell(why)} |")
    out.append("")
    for f in dataclasses.fields(SkyRLConfig):
        _docs_tables(_default_instance(f), f.name, out, heading=[f"## `{f.name}`", "", help_of(f), ""])
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the files are up to date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in ((BASE_CONFIG_PATH, render_yaml()), (DOCS_PATH, render_docs())):
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if args.check and stale:
        print("stale (run `python -m skyrl_train.config.render_yaml`): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
