"""``PromptDataset``: the prompts a run trains or evaluates on, in upstream SkyRL's row format.

A row is ``{prompt: [{role, content}, ...], env_class: str | None, ...}``; every other column (``data_source``,
``reward_spec``, ``extra_info``, custom ones such as ``db_id``) is passed to the env as ``extras``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

from skyrl_train.dataset.sources import load_rows
from skyrl_train.dataset.validation import validate_rows

logger = logging.getLogger(__name__)

FILTERED_IDS_LOGGED = 5

# (messages, env_class, extras, uid)
PromptItem = tuple[list[dict[str, Any]], str | None, dict[str, Any], str]


class PromptDataset:
    """Rows of ``datasets`` (concatenated in order), validated, with over-long prompts filtered out.

    ``datasets`` entries are local ``.parquet`` / ``.json`` / ``.jsonl`` paths (``~`` expanded) or, if the
    ``datasets`` package is installed, Hugging Face ids ``name`` or ``name:split`` (see ``sources.load_rows``).
    A row is dropped when its prompt, rendered by the tokenizer's chat template with the generation prompt, is
    longer than ``max_prompt_length`` tokens (``None`` keeps every row). The uid of a row is its index in this
    dataset, i.e. after concatenation and filtering, as a string (upstream's convention).

    ``num_workers`` is accepted for upstream's signature; the length check already batches the tokenizer calls
    (the fast tokenizer parallelises them itself), so no worker processes are started.
    """

    def __init__(
        self,
        datasets: Sequence[str],
        tokenizer: Any,
        max_prompt_length: int | None,
        prompt_key: str = "prompt",
        env_class_key: str = "env_class",
        num_workers: int = 8,
    ):
        if isinstance(datasets, str):
            datasets = [datasets]
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.prompt_key = prompt_key
        self.env_class_key = env_class_key
        self.num_workers = num_workers
        self._items: list[tuple[list[dict[str, Any]], str | None, dict[str, Any]]] = []
        self._origins: list[tuple[str, int]] = []
        for source in datasets:
            rows = load_rows(source)
            validate_rows(source, rows, prompt_key, env_class_key)
            self._add(source, rows)

    def _add(self, source: str, rows: list[dict[str, Any]]) -> None:
        keep = self._fits(source, rows)
        dropped = [i for i, ok in enumerate(keep) if not ok]
        if dropped:
            shown = ", ".join(f"{source}:{i}" for i in dropped[:FILTERED_IDS_LOGGED])
            more = f" (first {FILTERED_IDS_LOGGED})" if len(dropped) > FILTERED_IDS_LOGGED else ""
            logger.warning(
                "%s: dropped %d of %d rows whose templated prompt is longer than max_prompt_length=%d tokens: %s%s",
                source,
                len(dropped),
                len(rows),
                self.max_prompt_length,
                shown,
                more,
            )
        for row_index, (row, ok) in enumerate(zip(rows, keep, strict=True)):
            if ok:
                extras = {k: v for k, v in row.items() if k not in (self.prompt_key, self.env_class_key)}
                self._items.append((row[self.prompt_key], row.get(self.env_class_key), extras))
                self._origins.append((source, row_index))

    def _fits(self, source: str, rows: list[dict[str, Any]]) -> list[bool]:
        if self.max_prompt_length is None:
            return [True] * len(rows)
        lengths = templated_prompt_lengths(self.tokenizer, [row[self.prompt_key] for row in rows], source)
        return [length <= self.max_prompt_length for length in lengths]

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> PromptItem:
        """``(messages, env_class, extras, uid)``; messages and extras are fresh copies the caller may mutate."""
        messages, env_class, extras = self._items[index]
        uid = str(range(len(self._items))[index])  # a negative index gets its positive uid
        return copy.deepcopy(messages), env_class, copy.deepcopy(extras), uid

    def column(self, key: str) -> list[Any]:
        """Every row's value of column ``key`` (a column passed to the env, e.g. ``data_source``); a row without it
        raises ``ValueError`` naming its source file and row."""
        values = []
        for index, (_, _, extras) in enumerate(self._items):
            if key not in extras:
                source, row = self._origins[index]
                raise ValueError(f"{source}: row {row} has no column {key!r}")
            values.append(extras[key])
        return values

    def origin(self, index: int) -> tuple[str, int]:
        """Where item `index` comes from: its dataset source (as given) and its row index in that source."""
        return self._origins[index]

    @staticmethod
    def collate_fn(items: list[PromptItem]) -> dict[str, list[Any]]:
        """``{prompt, env_class, env_extras, uid}``, one list entry per item."""
        return {
            "prompt": [item[0] for item in items],
            "env_class": [item[1] for item in items],
            "env_extras": [item[2] for item in items],
            "uid": [item[3] for item in items],
        }


def templated_prompt_lengths(tokenizer: Any, prompts: list[list[dict[str, Any]]], source: str = "prompts") -> list[int]:
    """Token count of each prompt as the policy sees it: chat template applied with the generation prompt.

    Rendering to text and then tokenizing without special tokens is what ``apply_chat_template(tokenize=True)``
    does; doing the two steps here lets one batched tokenizer call cover all prompts. A prompt the template
    rejects raises ``ValueError`` naming ``source`` and the prompt's index.
    """
    if not prompts:
        return []
    texts = []
    for index, prompt in enumerate(prompts):
        try:
            texts.append(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False))
        except Exception as exc:
            raise ValueError(f"{source}: row {index}: the chat template rejects this prompt: {exc}") from exc
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
