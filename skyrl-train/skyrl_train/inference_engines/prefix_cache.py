"""Prefix KV cache of the `hf` engine: reuse the keys and values of tokens an earlier sequence already went through.

Why: an agent loop resends its whole conversation every turn, and GRPO sends every prompt n times behind one shared
system prompt, so without reuse each turn re-prefills everything before it; on CPU, prefill is most of the
generation time. A causal model's KV for the first m tokens depends only on those m tokens, so a new prompt can take
the KV of its longest common prefix with any cached sequence and prefill only the rest.

Entries are finished sequences (prompt + response) and shared prefixes the batcher prefilled once for a group.
An entry that is a prefix of a newer one is dropped (the newer one serves both); the least recently used entries go
when the byte budget is exceeded.

KV is only valid for the weights that computed it, so the cache is keyed by the weight version (`weight_version`):
every lookup and insert names the version of the weights in use. Versions only grow, so the first call with a newer
version drops every entry (none can ever match again), and a call with an older one (a request that started before
a weight change) neither matches nor inserts anything.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import torch


@dataclasses.dataclass(eq=False)
class PrefixEntry:
    tokens: np.ndarray
    """[length] int64 token ids."""
    keys: list[torch.Tensor]
    """Per layer [kv_heads, length, head_dim]."""
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class PrefixCache:
    """Longest-common-prefix KV reuse within a byte budget (see the module docstring). Not thread-safe."""

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0 (0 disables the prefix cache)")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: collections.OrderedDict[int, PrefixEntry] = collections.OrderedDict()
        self._next_key = 0
        self.version: int | None = None
        """The weight version of the entries (None before the first call)."""

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def match(
        self, prompt_ids: list[int], version: int, max_length: int | None = None
    ) -> tuple[PrefixEntry | None, int]:
        """The entry computed by weights `version` sharing the longest prefix with `prompt_ids`, and that length, at
        most `max_length` (default len(prompt_ids) - 1: the last prompt token must still be fed to get the next-token
        logits). (None, 0) when nothing is shared."""
        if not self._at_version(version) or not self._entries:
            return None, 0
        prompt = np.asarray(prompt_ids, dtype=np.int64)
        limit = len(prompt) - 1 if max_length is None else max_length
        best_key, best_length = None, 0
        for key, entry in self._entries.items():
            length = common_prefix_length(entry.tokens, prompt, limit)
            if length > best_length:
                best_key, best_length = key, length
        if best_key is None:
            return None, 0
        self._entries.move_to_end(best_key)
        return self._entries[best_key], best_length

    def insert(self, token_ids: list[int], keys: list[torch.Tensor], values: list[torch.Tensor], version: int) -> None:
        """Cache the KV of `token_ids` (per layer [kv_heads, len(token_ids), head_dim]; copied, so the caller may
        reuse its storage), computed by weights `version`. Skipped when an entry already covers these tokens, the
        entry alone exceeds the budget, or `version` is older than the cache's."""
        if not self.enabled or not token_ids or not self._at_version(version):
            return
        tokens = np.asarray(token_ids, dtype=np.int64)
        if any(layer.shape[1] != len(tokens) for layer in (*keys, *values)):
            raise ValueError(f"KV length does not match the {len(tokens)} tokens being cached")
        for key, entry in list(self._entries.items()):
            shared = common_prefix_length(entry.tokens, tokens, len(tokens))
            if shared == len(tokens):  # already covered by an entry at least as long
                self._entries.move_to_end(key)
                return
            if shared == len(entry.tokens):  # the new entry covers this one
                self._remove(key)
        entry = PrefixEntry(tokens, [k.clone() for k in keys], [v.clone() for v in values])
        if entry.nbytes > self.max_bytes:
            return
        self._entries[self._next_key] = entry
        self._next_key += 1
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            self._remove(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def _at_version(self, version: int) -> bool:
        """Move the cache to `version` if it is newer (dropping every entry); False if it is older."""
        if self.version is not None and version < self.version:
            return False
        if version != self.version:
            self.clear()
            self.version = version
        return True

    def _remove(self, key: int) -> None:
        self.nbytes -= self._entries.pop(key).nbytes


def common_prefix_length(a: np.ndarray, b: np.ndarray, limit: int) -> int:
    """Length of the common prefix of two int arrays, capped at `limit`."""
    n = min(len(a), len(b), limit)
    if n <= 0:
        return 0
    differs = a[:n] != b[:n]
    return int(np.argmax(differs)) if differs.any() else n
