"""KV storage of the running batch: preallocated, left-padded, rows joining and leaving between decode steps.

Layout: per layer one key and one value tensor of shape [row_capacity, kv_heads, col_capacity, head_dim]. All live
rows write their next token at the same column `width`; row r's real tokens are columns [start[r], width), the
columns before start[r] are padding that the attention mask hides. So a decode step is one forward over
`rows` x 1 tokens against the views [:rows, :, :width + 1], with position id `width - start[r]` per row.

Why not transformers' DynamicCache for decoding: it concatenates the whole cache with each new token, i.e. copies
every layer's KV once per generated token. Here a step writes one column in place, and copies happen only when the
shape changes: a row leaving moves one surviving row into its slot; a row joining copies its prefilled KV in; the
tensors are reallocated (with headroom, so amortised O(1) per token) only when rows or columns run out, and that
reallocation also drops the padding columns no live row needs any more.

Device: every tensor (the KV, `start`, the masks and positions a decode step reads) lives on the buffer's `device`,
the model's. A decode step reads nothing back to the host, except when the buffer is reallocated (amortised, as
above) or rows leave (their first columns, once for all of them).

Shared prefix: when the rows joining an empty batch start with the same tokens (the system prompt, tool list and
demonstrations of an agent's conversations), those tokens' KV is kept once (`prefix_keys`, `prefix_values`) and each
row's columns hold only what follows it; decode steps then attend to it with `prefix_attention` (read once per step,
not once per row). A row that joins later sharing less of it narrows the prefix (the dropped part is copied back into
every live row), so every live row always starts with the whole prefix; a row admitted under other weights, or sharing
fewer than `MIN_SHARED_PREFIX` tokens, ends the sharing for this batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from skyrl_train.inference_engines.hf.prefix_attention import SharedPrefixKV
from skyrl_train.inference_engines.hf.prefix_cache import common_prefix_length
from skyrl_train.utils.memory import mapped_zeros

_COLUMN_ALIGN = 64
MIN_SHARED_PREFIX = 64
"""Fewest tokens worth keeping as a shared prefix (shorter ones stay in every row)."""


class KVBuffer:
    """The running batch's KV cache (see the module docstring). Not thread-safe: one scheduler thread owns it."""

    def __init__(self, max_rows: int, share_prefix: bool = True, device: torch.device | str = "cpu"):
        self.max_rows = max_rows
        self.share_prefix = share_prefix
        """Whether rows joining an empty batch keep the prefix they share once (see the module docstring)."""
        self.device = torch.device(device)
        """Where the KV and every per-row tensor live (the model's device)."""
        self.rows = 0
        """Live rows; row i of every tensor belongs to the i-th running sequence."""
        self.width = 0
        """Columns in use; the next token of every row is written at this column."""
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.start = torch.zeros(0, dtype=torch.long, device=self.device)
        """[row_capacity] first real column of each row."""
        self.prefix_tokens = np.zeros(0, dtype=np.int64)
        """The tokens every live row starts with whose KV is kept once (empty: no shared prefix)."""
        self.prefix_keys: list[torch.Tensor] = []
        """Per layer [kv_heads, prefix_length, head_dim]."""
        self.prefix_values: list[torch.Tensor] = []
        self.prefix_version: int | None = None
        """The weight version that computed the prefix's KV."""
        self.cache = _BufferCache(self)
        """The object to pass as `past_key_values` for a decode step (it writes column `width` of each layer)."""

    @property
    def row_capacity(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    @property
    def col_capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    @property
    def prefix_length(self) -> int:
        return len(self.prefix_tokens)

    def attention_mask(self) -> torch.Tensor:
        """[rows, width + 1] 1 on each row's own real columns, for a decode step (the last column is the token
        being fed); the shared prefix, if any, is not part of it."""
        columns = torch.arange(self.width + 1, device=self.device)
        return (columns[None, :] >= self.start[: self.rows, None]).long()

    def positions(self) -> torch.Tensor:
        """[rows, 1] position id of the token each row feeds next (= its number of real tokens so far)."""
        return (self.width - self.start[: self.rows] + self.prefix_length)[:, None]

    def shared_prefix(self, attention_mask: torch.Tensor) -> SharedPrefixKV | None:
        """What a decode step's `prefix_attention` reads besides the rows' own columns (`attention_mask` as from
        `attention_mask()`); None without a shared prefix."""
        if not self.prefix_length:
            return None
        bias = torch.zeros(attention_mask.shape, dtype=self.prefix_keys[0].dtype, device=self.device).masked_fill_(
            attention_mask == 0, float("-inf")
        )
        return SharedPrefixKV(self.prefix_keys, self.prefix_values, bias[:, None, None, :])

    def add_rows(
        self,
        layer_kv: list[tuple[torch.Tensor, torch.Tensor]],
        tokens: list[list[int]],
        version: int,
        source_rows: list[int] | None = None,
        columns_to_come: int | None = None,
    ) -> None:
        """Append rows prefilled together: per layer (keys, values) [m, heads, group_len, dim] on the buffer's
        device, the new row i taking row `source_rows[i]` of them (default: row i), left-padded with the KV of its
        `tokens[i]` at the end, computed by weights `version`. They take rows [rows, rows + len(tokens)). Rows are
        picked one layer at a time (no copy of every layer). `columns_to_come`: the most columns any live row may
        still write (None: unknown), to size the headroom."""
        self._share_prefix(layer_kv, tokens, version, source_rows, columns_to_come)
        skip = self.prefix_length
        layer_kv = [(k[:, :, skip:], v[:, :, skip:]) for k, v in layer_kv]
        lengths = [len(t) - skip for t in tokens]
        n, group_len = len(lengths), layer_kv[0][0].shape[2]
        if (
            not self.keys
            or self.rows + n > self.row_capacity
            or group_len > self.width
            or self.width + 1 > self.col_capacity
        ):
            self._relayout(layer_kv, self.rows + n, group_len, columns_to_come)
        first, last = self.rows, self.rows + n
        columns = slice(self.width - group_len, self.width)
        picked = None if source_rows is None else torch.tensor(source_rows, dtype=torch.long, device=self.device)
        for layer, (k, v) in enumerate(layer_kv):
            self.keys[layer][first:last, :, columns] = k if picked is None else k[picked]
            self.values[layer][first:last, :, columns] = v if picked is None else v[picked]
        self.start[first:last] = self.width - torch.tensor(lengths, dtype=torch.long, device=self.device)
        self.rows = last

    def reserve_step(self, columns_to_come: int | None = None) -> None:
        """Make room for one more column (call before each decode step); `columns_to_come` as in `add_rows`."""
        if self.width + 1 > self.col_capacity:
            self._relayout(None, self.rows, 0, columns_to_come)

    def write(self, layer: int, key_states: torch.Tensor, value_states: torch.Tensor):
        """Store a decode step's new KV at column `width` and return the layer's live views (keys, values)."""
        end = self.width + key_states.shape[2]
        keys, values = self.keys[layer], self.values[layer]
        keys[: self.rows, :, self.width : end] = key_states
        values[: self.rows, :, self.width : end] = value_states
        return keys[: self.rows, :, :end], values[: self.rows, :, :end]

    def advance(self) -> None:
        """Account for the column written by the decode step that just ran."""
        self.width += 1

    def rows_kv(self, rows: list[int]) -> Iterator[tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """The KV of each of `rows` in turn, shared prefix included: per layer (keys, values) [kv_heads, tokens,
        head_dim] (views of its columns, or new tensors when there is a shared prefix, so one row at a time). Reads
        the rows' starts back to the host once for all of them."""
        for row, start in zip(rows, self.start[rows].tolist(), strict=True):
            yield self._row_kv(row, start)

    def _row_kv(self, row: int, start: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        columns = slice(start, self.width)
        keys, values = [k[row, :, columns] for k in self.keys], [v[row, :, columns] for v in self.values]
        if self.prefix_length:
            keys = [torch.cat([p, k], dim=1) for p, k in zip(self.prefix_keys, keys, strict=True)]
            values = [torch.cat([p, v], dim=1) for p, v in zip(self.prefix_values, values, strict=True)]
        return keys, values

    def move_rows(self, holes: torch.Tensor, sources: torch.Tensor, rows: int) -> None:
        """Copy rows `sources` into rows `holes` and keep the first `rows` rows (see `compaction_plan`; the index
        tensors on the buffer's device)."""
        if rows == 0:
            self.release()
            return
        if len(holes):
            for tensor in (*self.keys, *self.values):
                live = tensor[:, :, : self.width]
                live[holes] = live[sources]
            self.start[holes] = self.start[sources]
        self.rows = rows

    def release(self) -> None:
        """Drop all storage (the batch is empty)."""
        self.keys, self.values = [], []
        self.start = torch.zeros(0, dtype=torch.long, device=self.device)
        self.rows = self.width = 0
        self._set_prefix(0)

    def _share_prefix(
        self,
        layer_kv: list[tuple[torch.Tensor, torch.Tensor]],
        tokens: list[list[int]],
        version: int,
        source_rows: list[int] | None,
        columns_to_come: int | None,
    ) -> None:
        """Before rows join: into an empty batch, keep the tokens they all start with as the shared prefix; into a
        running one, narrow the prefix to what the joining rows share of it (see the module docstring)."""
        arrays = [np.asarray(t, dtype=np.int64) for t in tokens]
        if self.rows == 0:
            shared = len(arrays[0]) if self.share_prefix else 0
            for other in arrays[1:]:
                shared = common_prefix_length(arrays[0], other, shared)
            if shared < MIN_SHARED_PREFIX:
                self._set_prefix(0)
                return
            donor = 0 if source_rows is None else source_rows[0]
            first = layer_kv[0][0].shape[2] - len(arrays[0])
            columns = slice(first, first + shared)
            self.prefix_tokens = arrays[0][:shared]
            self.prefix_keys = [k[donor, :, columns].clone() for k, _ in layer_kv]
            self.prefix_values = [v[donor, :, columns].clone() for _, v in layer_kv]
            self.prefix_version = version
            return
        if not self.prefix_length:
            return
        shared = self.prefix_length if version == self.prefix_version else 0
        for other in arrays:
            shared = common_prefix_length(self.prefix_tokens, other, shared)
        if shared < self.prefix_length:
            self._narrow_prefix(shared if shared >= MIN_SHARED_PREFIX else 0, columns_to_come)

    def _narrow_prefix(self, length: int, columns_to_come: int | None) -> None:
        """Keep only the first `length` tokens shared: copy the rest of the prefix's KV into the columns just before
        every live row's own ones (relayouting first so that every row has that room)."""
        dropped = self.prefix_length - length
        oldest = int(self.start[: self.rows].min())
        self._relayout(None, self.rows, self.width - oldest + dropped, columns_to_come)
        columns = slice(length, self.prefix_length)
        starts = self.start[: self.rows].tolist()
        for tensors, prefix in ((self.keys, self.prefix_keys), (self.values, self.prefix_values)):
            for layer, tensor in enumerate(tensors):
                for row, start in enumerate(starts):
                    tensor[row, :, start - dropped : start] = prefix[layer][:, columns]
        self.start[: self.rows] -= dropped
        self._set_prefix(length)

    def _set_prefix(self, length: int) -> None:
        """Keep the first `length` tokens of the shared prefix (0: none)."""
        self.prefix_tokens = self.prefix_tokens[:length]
        self.prefix_keys = [k[:, :length].clone() for k in self.prefix_keys] if length else []
        self.prefix_values = [v[:, :length].clone() for v in self.prefix_values] if length else []
        if not length:
            self.prefix_version = None

    def _relayout(
        self,
        like: list[tuple[torch.Tensor, torch.Tensor]] | None,
        rows_needed: int,
        min_width: int,
        columns_to_come: int | None,
    ):
        """Reallocate with headroom, moving live columns to the front and right-aligning them at the new width. The
        headroom is half the width (amortised growth), but no more than the live rows can still write when that is
        known (at least one alignment step): rows that stop within a few dozen tokens need no 50% spare."""
        oldest = int(self.start[: self.rows].min()) if self.rows else self.width
        live_width = self.width - oldest
        width = max(live_width, min_width)
        offset = width - live_width
        row_capacity = max(rows_needed, min(self.max_rows, 2 * self.row_capacity))
        headroom = width // 2 if columns_to_come is None else min(width // 2, columns_to_come)
        col_capacity = -(-(width + max(_COLUMN_ALIGN, headroom)) // _COLUMN_ALIGN) * _COLUMN_ALIGN

        def fresh(like_tensor: torch.Tensor) -> torch.Tensor:
            # Zeros, not empty: padding columns are masked, but must hold finite numbers, because a masked attention
            # weight is exactly 0 and 0 * NaN would still poison the row.
            # A mapping of its own on the CPU: long-lived, so not in the malloc arenas (`utils.memory.mapped_zeros`).
            heads, dim = like_tensor.shape[1], like_tensor.shape[3]
            return mapped_zeros((row_capacity, heads, col_capacity, dim), like_tensor.dtype, like_tensor.device)

        if not self.keys:
            self.keys, self.values = [fresh(k) for k, _ in like], [fresh(v) for _, v in like]
        else:
            # One layer at a time, the old tensor dropped as soon as it is copied: the move holds one extra layer,
            # not a second buffer.
            for tensors in (self.keys, self.values):
                for layer, old in enumerate(tensors):
                    new = fresh(old)
                    new[: self.rows, :, offset:width] = old[: self.rows, :, oldest : self.width]
                    tensors[layer] = new
                    del old, new
        start = torch.zeros(row_capacity, dtype=torch.long, device=self.device)
        start[: self.rows] = self.start[: self.rows] - oldest + offset
        self.start = start
        self.width = width


def compaction_plan(rows: int, removed: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """How to close the gaps left by `removed` rows without moving the others: each removed row below the new row
    count is filled by one surviving row from above it. Returns (holes, sources, new_rows); the same plan is applied
    to every per-row tensor so that row i keeps meaning the same sequence everywhere."""
    gone = set(removed)
    new_rows = rows - len(gone)
    holes = [r for r in sorted(gone) if r < new_rows]
    sources = [r for r in range(new_rows, rows) if r not in gone]
    return torch.tensor(holes, dtype=torch.long), torch.tensor(sources, dtype=torch.long), new_rows


class _BufferLayer(CacheLayerMixin):
    """One layer of `_BufferCache`: forwards transformers' cache calls to the shared `KVBuffer`."""

    is_sliding = False

    def __init__(self, buffer: KVBuffer, index: int):
        super().__init__()
        self.buffer, self.index = buffer, index
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self.buffer.write(self.index, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.buffer.width + query_length, 0

    def get_seq_length(self) -> int:
        return self.buffer.width

    def get_max_length(self) -> int:
        return -1


class _BufferCache(Cache):
    """A transformers `Cache` view of a `KVBuffer`; its layers are created on first use (the buffer learns the
    layer count from the first prefill)."""

    def __init__(self, buffer: KVBuffer):
        self.buffer = buffer
        super().__init__(layers=[])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        while len(self.layers) <= layer_idx:
            self.layers.append(_BufferLayer(self.buffer, len(self.layers)))
        return self.layers[layer_idx].update(key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.buffer.width

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        return self.buffer.width + query_length, 0
