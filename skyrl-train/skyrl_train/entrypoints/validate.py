"""Check a run's setup without training: `python -m skyrl_train.entrypoints.validate <same overrides as training>`.

Checks, in order, and reports every failure (exit status 1 if any):
1. the config (unknown keys, types, cross-key rules);
2. the dataset files (every row's columns; prompts within `trainer.max_prompt_length` after templating);
3. the tokenizer and model config of `trainer.policy.model.path` (weights are not loaded);
4. each env class in the data: built from its first row, `init` on that prompt, one `step` with an empty action,
   `close`.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any

import skyrl_gym
from skyrl_train.config import ConfigError, load_config
from skyrl_train.dataset import PromptDataset


class Checks:
    """Runs named checks, printing one line each; remembers whether any failed."""

    def __init__(self, out=sys.stdout):
        self.out = out
        self.failed = 0

    def run(self, name: str, check: Callable[[], Any], describe: Callable[[Any], str] = str) -> Any:
        """Run `check`; print `ok <name>: <describe(result)>` or `FAIL <name>: <error>`. Returns the result or None."""
        try:
            result = check()
        except Exception as exc:  # a validation tool reports every failure instead of stopping at the first
            self.failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", file=self.out)
            return None
        print(f"ok   {name}: {describe(result)}", file=self.out)
        return result


def _env_smoke_test(dataset: PromptDataset, index: int, cfg) -> str:
    messages, env_class, extras, _ = dataset[index]
    env_class = env_class or cfg.environment.env_class
    extras = {**extras, "max_turns": cfg.generator.max_turns}
    env = skyrl_gym.make(env_class, env_config=cfg.environment.skyrl_gym.get_env_config(env_class), extras=extras)
    with env:
        prompt, _ = env.init(messages)
        step = env.step("")
    return f"init -> {len(prompt)} messages; step('') -> reward={step['reward']}, done={step['done']}"


def validate(overrides: list[str], out=sys.stdout) -> int:
    checks = Checks(out)
    try:
        cfg = load_config(overrides)
    except ConfigError as exc:
        print(f"FAIL config:\n{exc}", file=out)
        return 1
    print("ok   config", file=out)

    from transformers import AutoConfig

    from skyrl_train.models import load_tokenizer, resolve_model_path

    model = cfg.trainer.policy.model.path
    tokenizer = checks.run(f"tokenizer of {model}", lambda: load_tokenizer(model), lambda t: f"vocab {len(t)}")
    checks.run(
        f"model config of {model}",
        lambda: AutoConfig.from_pretrained(resolve_model_path(model)),
        lambda c: f"{c.model_type}, {getattr(c, 'num_hidden_layers', '?')} layers",
    )
    if tokenizer is None:
        return 1
    for split, files in (("train", cfg.data.train_data), ("val", cfg.data.val_data)):
        if not files:
            continue
        dataset = checks.run(
            f"{split} data {list(files)}",
            lambda files=files: PromptDataset(files, tokenizer, cfg.trainer.max_prompt_length),
            lambda d: f"{len(d)} rows",
        )
        if dataset is None:
            continue
        first_row_of: dict[str, int] = {}
        for i in range(len(dataset)):
            first_row_of.setdefault(dataset[i][1] or cfg.environment.env_class, i)
        for env_class, index in first_row_of.items():
            checks.run(
                f"{split} env {env_class!r} (row {index})", lambda i=index, d=dataset: _env_smoke_test(d, i, cfg)
            )
    print(f"{checks.failed} check(s) failed" if checks.failed else "all checks passed", file=out)
    return 1 if checks.failed else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    try:
        return validate(args)
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
