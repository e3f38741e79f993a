"""Prefix KV cache of the `hf` engine: reuse the keys and values of tokens an earlier sequence already went through.

Why: an agent loop resends its whole conversation every turn, and GRPO sends every prompt n times behind one shared
system prompt, so without reuse each turn re-prefills everything before it; on CPU, prefill is most of the
generation time. A causal model's KV for the first m tokens depends only on those m tokens, so a new prompt can take
the KV of its longest common prefix with any cached sequence and prefill only the rest.

Entries are finished sequences (prompt + response) and shared prefixes the batcher prefilled once for a group.
An entry that is a prefix of a newer one is dropped (the newer one serves both); the least recently used entries go
when the byte budget is exceeded.

Storage is shared between entries in blocks of `BLOCK_TOKENS` tokens: a block holds the KV of one run of tokens
that follows one exact prefix, so entries that start alike (every conversation behind the same system prompt and
demonstrations, the turns of one conversation) hold their common blocks once and each keeps only the blocks after
the point where they differ (plus its last, partial block). The byte budget counts every block once; a block is freed
when the last entry using it goes.

KV is only valid for the weights that computed it, so the cache is keyed by the weight version (`weight_version`):
every lookup and insert names the version of the weights in use. Versions only grow, so the first call with a newer
version drops every entry (none can ever match again), and a call with an older one (a request that started before
a weight change) neither matches nor inserts anything.

Entries live on the device of the KV they are given (the model's: on a GPU the cache is GPU memory). There the byte
budget is also capped by the free device memory (`prefix_cache_budget`).
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import torch

from skyrl_train.utils.memory import mapped_zeros

BLOCK_TOKENS = 64
"""Tokens per shared storage block."""

FREE_DEVICE_MEMORY_FRACTION = 0.5
"""Most of a GPU's free memory (when the engine starts) the prefix cache may hold: the rest stays for the running
batch's KV buffer, the activations of the forward passes and, colocated, the trainer."""


def prefix_cache_budget(requested_bytes: int, free_device_bytes: int | None) -> int:
    """The prefix cache's byte budget: `requested_bytes`, but at most `FREE_DEVICE_MEMORY_FRACTION` of
    `free_device_bytes` where the cache lives on a GPU (None: on the CPU, where the request stands)."""
    if free_device_bytes is None:
        return requested_bytes
    return min(requested_bytes, int(free_device_bytes * FREE_DEVICE_MEMORY_FRACTION))


@dataclasses.dataclass(eq=False)
class _Block:
    """The KV of `BLOCK_TOKENS` tokens following one exact prefix: [layers, kv_heads, BLOCK_TOKENS, head_dim]."""

    key: tuple[int, bytes]
    """(id of the block before it, or -1 for a sequence's first block; its token ids as bytes)."""
    id: int
    keys: torch.Tensor
    values: torch.Tensor
    users: int = 0
    """Entries holding this block."""

    @property
    def nbytes(self) -> int:
        return 2 * self.keys.numel() * self.keys.element_size()


@dataclasses.dataclass(eq=False)
class PrefixEntry:
    tokens: np.ndarray
    """[length] int64 token ids."""
    blocks: list[_Block]
    """The KV of the first ``len(blocks) * BLOCK_TOKENS`` tokens, possibly shared with other entries."""
    tail_keys: torch.Tensor
    """[layers, kv_heads, length - len(blocks) * BLOCK_TOKENS, head_dim]: the KV of the remaining tokens, own."""
    tail_values: torch.Tensor

    @property
    def tail_nbytes(self) -> int:
        return 2 * self.tail_keys.numel() * self.tail_keys.element_size()

    @property
    def nbytes(self) -> int:
        """Bytes of everything this entry reads, shared blocks included."""
        return sum(block.nbytes for block in self.blocks) + self.tail_nbytes

    def copy_kv(self, layer: int, length: int, keys_out: torch.Tensor, values_out: torch.Tensor) -> None:
        """Write the keys and values of the first `length` tokens of `layer` into `keys_out` / `values_out`
        ([kv_heads, length, head_dim])."""
        for index, block in enumerate(self.blocks):
            start = index * BLOCK_TOKENS
            if start >= length:
                return
            count = min(BLOCK_TOKENS, length - start)
            keys_out[:, start : start + count] = block.keys[layer, :, :count]
            values_out[:, start : start + count] = block.values[layer, :, :count]
        start = len(self.blocks) * BLOCK_TOKENS
        if length > start:
            keys_out[:, start:length] = self.tail_keys[layer, :, : length - start]
            values_out[:, start:length] = self.tail_values[layer, :, : length - start]

    def kv(self, layer: int, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A copy of the keys and values ([kv_heads, length, head_dim]) of the first `length` tokens (default: all)
        of `layer`."""
        length = len(self.tokens) if length is None else length
        shape = (self.tail_keys.shape[1], length, self.tail_keys.shape[3])
        keys = self.tail_keys.new_empty(shape)
        values = self.tail_values.new_empty(shape)
        self.copy_kv(layer, length, keys, values)
        return keys, values


class PrefixCache:
    """Longest-common-prefix KV reuse within a byte budget (see the module docstring). Not thread-safe."""

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0 (0 disables the prefix cache)")
        self.max_bytes = max_bytes
        self.nbytes = 0
        """Bytes held: every block once, plus each entry's tail."""
        self._entries: collections.OrderedDict[int, PrefixEntry] = collections.OrderedDict()
        self._blocks: dict[tuple[int, bytes], _Block] = {}
        self._next_key = 0
        self._next_block_id = 0
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
        covered = []
        for key, entry in self._entries.items():
            shared = common_prefix_length(entry.tokens, tokens, len(tokens))
            if shared == len(tokens):  # already covered by an entry at least as long
                self._entries.move_to_end(key)
                return
            if shared == len(entry.tokens):  # the new entry covers this one
                covered.append(key)
        entry = self._new_entry(tokens, keys, values)
        if entry.nbytes > self.max_bytes:
            self._release(entry)
            return
        for key in covered:  # after the new entry took their blocks, so that shared blocks are kept, not re-copied
            self._remove(key)
        self._entries[self._next_key] = entry
        self._next_key += 1
        while self.nbytes > self.max_bytes:
            self._remove(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self._blocks.clear()
        self.nbytes = 0

    def _new_entry(self, tokens: np.ndarray, keys: list[torch.Tensor], values: list[torch.Tensor]) -> PrefixEntry:
        """An entry for `tokens` holding the existing blocks of its prefix and new copies of the rest (counted in
        `nbytes`)."""
        blocks, previous = [], -1
        for start in range(0, len(tokens) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
            end = start + BLOCK_TOKENS
            key = (previous, tokens[start:end].tobytes())
            block = self._blocks.get(key)
            if block is None:
                block = _Block(key, self._next_block_id, *_stack(keys, values, start, end))
                self._next_block_id += 1
                self._blocks[key] = block
                self.nbytes += block.nbytes
            block.users += 1
            blocks.append(block)
            previous = block.id
        entry = PrefixEntry(tokens, blocks, *_stack(keys, values, len(blocks) * BLOCK_TOKENS, len(tokens)))
        self.nbytes += entry.tail_nbytes
        return entry

    def _release(self, entry: PrefixEntry) -> None:
        """Give back what `entry` holds: its tail, and each block no other entry uses."""
        self.nbytes -= entry.tail_nbytes
        for block in entry.blocks:
            block.users -= 1
            if block.users == 0:
                del self._blocks[block.key]
                self.nbytes -= block.nbytes

    def _at_version(self, version: int) -> bool:
        """Move the cache to `version` if it is newer (dropping every entry); False if it is older."""
        if self.version is not None and version < self.version:
            return False
        if version != self.version:
            self.clear()
            self.version = version
        return True

    def _remove(self, key: int) -> None:
        self._release(self._entries.pop(key))


def _stack(
    keys: list[torch.Tensor], values: list[torch.Tensor], start: int, end: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of tokens [start, end) of every layer: ([layers, kv_heads, end - start, head_dim]) x 2, each in a mapping
    of its own on the CPU (long-lived: `utils.memory.mapped_zeros`)."""
    return _stacked([k[:, start:end] for k in keys]), _stacked([v[:, start:end] for v in values])


def _stacked(layers: list[torch.Tensor]) -> torch.Tensor:
    out = mapped_zeros((len(layers), *layers[0].shape), layers[0].dtype, layers[0].device)
    return torch.stack(layers, out=out)


def common_prefix_length(a: np.ndarray, b: np.ndarray, limit: int) -> int:
    """Length of the common prefix of two int arrays, capped at `limit`."""
    n = min(len(a), len(b), limit)
    if n <= 0:
        return 0
    differs = a[:n] != b[:n]
    return int(np.argmax(differs)) if differs.any() else n
