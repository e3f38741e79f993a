"""Which metric keys the console line, the report plots and the report summary use: the one place to extend.

Names follow upstream SkyRL's metric contract (``reward/avg_raw_reward``, ``eval/<data_source>/avg_score``,
``policy/policy_kl``, ``timing/<phase>``, ...). Patterns are regular expressions matched against the whole key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class PlotSpec:
    """One report plot: every key matching ``include`` (and not ``exclude``) is one line on it.

    ``best`` says which direction is better, for the summary's "best" column (None: no best value).
    ``summarize`` puts the matched keys in the summary's main-metrics table.
    """

    name: str
    title: str
    ylabel: str
    include: str
    exclude: str | None = None
    best: Literal["max", "min"] | None = None
    summarize: bool = True

    def matches(self, key: str) -> bool:
        if not re.fullmatch(self.include, key):
            return False
        return self.exclude is None or not re.fullmatch(self.exclude, key)

    def select(self, keys: Iterable[str]) -> list[str]:
        """The matching keys, sorted."""
        return sorted(k for k in keys if self.matches(k))


_THROUGHPUT = r".*(tokens_per_s(ec(ond)?)?|tok_per_s|throughput).*"

PLOT_SPECS: tuple[PlotSpec, ...] = (
    PlotSpec(
        "reward",
        "Training reward",
        "reward",
        r"reward/(avg_raw_reward|avg_pass_at_\d+|mean_positive_reward)",
        best="max",
    ),
    PlotSpec("eval_score", "Eval score per data source", "avg score", r"eval/[^/]+/avg_score", best="max"),
    PlotSpec("eval_pass_at_n", "Eval pass@n per data source", "pass@n", r"eval/[^/]+/pass_at_\d+", best="max"),
    PlotSpec(
        "response_length",
        "Response length",
        "tokens",
        r"generate/(avg|min|max)_num_tokens|policy/response_length",
    ),
    PlotSpec("kl", "KL divergence", "KL", r"(.*[/_])?kl([/_].*)?", exclude=r".*coef.*"),
    PlotSpec("sft_loss", "SFT loss (assistant tokens)", "-log p", r"(eval/)?sft/loss", best="min"),
    PlotSpec(
        "sft_token_accuracy",
        "SFT token accuracy (assistant tokens)",
        "accuracy",
        r"(eval/)?sft/token_accuracy",
        best="max",
    ),
    PlotSpec("timing", "Time per phase", "seconds", r"timing/.+", exclude=_THROUGHPUT, summarize=False),
    PlotSpec("throughput", "Throughput", "tokens / s", _THROUGHPUT, best="max"),
    PlotSpec("memory", "Resident memory of the training process", "GB", r"memory/(peak_rss|rss)_gb", summarize=False),
)

# The summary's before/after table comes from these plots (eval/<data_source>/<metric> keys).
EVAL_SPEC_NAMES = ("eval_score", "eval_pass_at_n")

BASE_EVAL_PREFIX = "eval_base/"
"""Replaces ``eval/`` in the names of the eval of the model before a warm start (``trainer.warm_start``), logged at
step 0 beside the eval before RL; the summary's before/after table shows it as its ``base`` column."""

# Keys shown on the console's per-step line, in this order (any others are counted, not shown).
CONSOLE_KEYS: tuple[str, ...] = (
    r"reward/avg_raw_reward",
    r"reward/avg_pass_at_\d+",
    r"eval/all/avg_score",
    r"policy/policy_loss",
    r"sft/loss",
    r"eval/sft/loss",
    r"policy/policy_kl",
    r"policy/ptx_loss",
    r"generate/avg_num_tokens",
    r"timing/step",
)


def console_keys(keys: Iterable[str]) -> list[str]:
    """The keys of one step that the console line shows, in `CONSOLE_KEYS` order."""
    keys = sorted(keys)
    return [k for pattern in CONSOLE_KEYS for k in keys if re.fullmatch(pattern, k)]
