"""Continuous batching over a transformers causal LM: the synchronous core of `HFInferenceEngine`.

One `step()` admits a group of waiting requests (one left-padded prefill forward; on the CPU several when their
uncached tails differ widely, `prefill_split`), then advances every running sequence by one token with a single decode
forward over the whole batch, and retires the sequences that finished. Requests therefore join and leave between steps
without waiting for each other; see `kv_buffer` for how their KV caches of different lengths share one left-padded
batch. A prefill takes what it can from the `PrefixCache` (the KV of finished sequences and of prefixes shared by a
group, computed by the current weights: every step reads the model's `WeightVersion` and uses the cache at that
version) and feeds only the rest of each prompt; identical prompts of one group (the n samples of a GRPO prompt) are
fed once and share the resulting KV. All torch work happens on the caller's thread (the engine's scheduler thread);
the only hand-off is `Request.on_finish`.

Device: the batcher works on the device of the model's parameters (`model_device`). Every tensor it builds (inputs,
masks, KV, the `seen` mask, sampling parameters) lives there; host-side lists are turned into one tensor each and
moved there before the forward pass that needs them. A decode step reads back from the device once, the sampled
tokens with their logprobs (for the stop checks); a step where sequences finish also reads their KV offsets.
Random numbers come from CPU generators (`Request.generator`, or the engine's), one uniform per sampled row per
step, moved to the device: a seeded request samples the same tokens whatever the device, as far as the logits agree.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import numpy as np
import torch
from transformers import DynamicCache

from skyrl_gym.common.stop_reasons import StopReason
from skyrl_train.inference_engines.base import SamplingParams
from skyrl_train.inference_engines.hf.kv_buffer import KVBuffer, compaction_plan
from skyrl_train.inference_engines.hf.prefill_split import split_by_tail_length
from skyrl_train.inference_engines.hf.prefix_attention import SHARED_PREFIX_ATTENTION
from skyrl_train.inference_engines.hf.prefix_cache import PrefixCache, PrefixEntry, common_prefix_length
from skyrl_train.inference_engines.hf.sampling import SamplingBatch, choose_tokens, sampled_logprobs
from skyrl_train.models.attention import attention_implementation
from skyrl_train.types.weight_version import WeightVersion

_Match = tuple[PrefixEntry | None, int]
"""A prompt's longest cached prefix: its entry and length (`PrefixCache.match`)."""


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of `model`'s (first) parameter: where the batcher builds its tensors."""
    return next(model.parameters()).device


@dataclasses.dataclass(eq=False)
class Request:
    """One prompt being generated. The scheduler thread appends to it; the caller reads it after `on_finish`."""

    prompt_ids: list[int]
    params: SamplingParams
    max_new_tokens: int
    on_finish: Callable[[Request, BaseException | None], None]
    """Called exactly once, on the scheduler thread, with the error if the request failed."""
    generator: torch.Generator | None = None
    """Set for seeded requests (a CPU generator): every random number this request uses comes from it."""
    ignore_eos: bool = False
    weight_version: int | None = None
    """The model's weight version when the request was prefilled (its KV is cached under that version)."""
    response_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    stop_reason: str | None = None
    matched_stop: str | None = None
    """The stop string that ended the generation, if one did."""
    cancelled: bool = False
    """Set (from any thread) when nobody waits for the result any more; the request is dropped at the next step."""
    notified: bool = False


@dataclasses.dataclass
class EngineStats:
    """Counters of the work done so far; `forward_passes` is what batching saves."""

    prefill_forward_passes: int = 0
    decode_forward_passes: int = 0
    max_batch_size: int = 0
    """Most sequences advanced by one decode forward pass."""
    shared_prefix_decode_passes: int = 0
    """Decode forward passes whose rows started with a shared prefix whose KV they read once (`prefix_attention`)."""
    prompt_tokens: int = 0
    """Tokens in the prompts of the requests admitted so far."""
    cached_prompt_tokens: int = 0
    """Of `prompt_tokens`, those whose KV came from the prefix cache, or from an identical prompt of the same prefill
    group, instead of a forward pass of their own."""
    prefilled_tokens: int = 0
    """Tokens run through prefill forward passes (uncached prompt tokens, shared prefixes prefilled once for a
    group, cached tokens fed again to line a group up), padding excluded: the prefill work actually done."""
    generated_tokens: int = 0
    finished_requests: int = 0

    @property
    def forward_passes(self) -> int:
        return self.prefill_forward_passes + self.decode_forward_passes


class ContinuousBatcher:
    """Schedules requests onto shared forward passes of `model` (see the module docstring). Not thread-safe."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        eos_token_ids: set[int],
        pad_token_id: int,
        max_num_seqs: int,
        max_prefill_tokens: int,
        generator: torch.Generator,
        prefix_cache_bytes: int = 0,
        shared_prefix_decode: bool = True,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.max_num_seqs = max_num_seqs
        self.max_prefill_tokens = max_prefill_tokens
        self.generator = generator
        self.device = model_device(model)
        self.stats = EngineStats()
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        """Row i of every per-row tensor below (and of the KV buffer) belongs to running[i]."""
        self.admitting: list[Request] = []
        """The group being prefilled: out of `waiting`, not yet in `running` (so a failure still reaches it)."""
        self.buffer = KVBuffer(max_num_seqs, share_prefix=shared_prefix_decode, device=self.device)
        self.prefix_cache = PrefixCache(prefix_cache_bytes)
        self.weight_version = WeightVersion.of(model)
        self._version = self.weight_version.value
        """The weight version of the current step."""
        self.last_tokens = torch.zeros(max_num_seqs, dtype=torch.long, device=self.device)
        """The token each running row feeds to the next decode step."""
        self.seen: torch.Tensor | None = None
        """[max_num_seqs, vocab] bool: tokens in each row's prompt or response (for the repetition penalty)."""
        self._sampling: SamplingBatch | None = None
        self._seeded_rows: list[tuple[int, torch.Generator]] = []
        self.cancel_pending = False

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def submit(self, requests: list[Request]) -> None:
        self.waiting.extend(requests)

    def step(self) -> None:
        """Admit at most one prefill group, then advance every running sequence by one token."""
        if self.cancel_pending:
            self._drop_cancelled()
        self._version = self.weight_version.value
        self.admitting = self._next_prefill_group()
        if self.admitting:
            self._cache_shared_prefix(self.admitting)
            # Each distinct prompt's longest cached prefix, looked up once for the split and the forwards (an entry
            # evicted by an earlier part's inserts still holds its KV).
            matches = {
                prompt: self.prefix_cache.match(list(prompt), self._version)
                for prompt in dict.fromkeys(tuple(r.prompt_ids) for r in self.admitting)
            }
            for part in self._prefill_parts(self.admitting, matches):
                self._prefill(part, matches)
            self.admitting = []
        if self.running:
            self._decode()

    def abort_all(self) -> None:
        """Finish every request now with stop reason "abort", keeping the tokens generated so far."""
        for request in [*self.admitting, *self.running, *self.waiting]:
            request.stop_reason = request.stop_reason or StopReason.ABORT
            self._notify(request, None)
        self._clear()

    def fail_all(self, error: BaseException) -> None:
        """Deliver `error` to every waiting and running request and start over with an empty batch."""
        for request in [*self.admitting, *self.running, *self.waiting]:
            self._notify(request, error)
        self._clear()

    # -- scheduling ---------------------------------------------------------------------------------------------

    def _next_prefill_group(self) -> list[Request]:
        """FIFO head of the queue, as many as fit in free rows and in `max_prefill_tokens` padded prompt tokens (at
        least one request, so a longer prompt is prefilled alone). Tokens taken from the prefix cache count too: the
        forward holds the KV of every prompt token of every row, cached or not."""
        group: list[Request] = []
        widest = 0
        free_rows = self.max_num_seqs - len(self.running)
        while self.waiting and len(group) < free_rows:
            padded = max(widest, len(self.waiting[0].prompt_ids))
            if group and padded * (len(group) + 1) > self.max_prefill_tokens:
                break
            group.append(self.waiting.popleft())
            widest = padded
        return group

    def _prefill_parts(self, group: list[Request], matches: dict[tuple[int, ...], _Match]) -> list[list[Request]]:
        """`group` in parts of one prefill forward each (`prefill_split`: on the CPU, so that prompts with short
        uncached tails do not feed as many tokens as the longest one). Identical prompts stay in one part."""
        if self.device.type != "cpu" or len(group) < 2:
            return [group]
        distinct = list(dict.fromkeys(tuple(r.prompt_ids) for r in group))
        parts = split_by_tail_length([len(p) - matches[p][1] for p in distinct])
        if len(parts) == 1:
            return [group]
        part_of = {distinct[index]: number for number, part in enumerate(parts) for index in part}
        return [[r for r in group if part_of[tuple(r.prompt_ids)] == number] for number in range(len(parts))]

    def _prefill(self, group: list[Request], matches: dict[tuple[int, ...], _Match]) -> None:
        """Prefill `group` in one forward; `matches`: each of its prompts' cached prefix (`PrefixCache.match`)."""
        n = len(group)
        # Identical prompts (the n samples of a GRPO prompt) are prefilled once; row i takes distinct[source[i]].
        distinct: dict[tuple[int, ...], int] = {}
        source = [distinct.setdefault(tuple(r.prompt_ids), len(distinct)) for r in group]
        prompts = [list(p) for p in distinct]
        prefixes = [matches[p] for p in distinct]
        # Everything built from host lists goes to the device before the forward pass (see `_uniforms`).
        source_rows = torch.tensor(source, dtype=torch.long, device=self.device)
        prompt_tokens = _prompt_token_index(group, self.device)
        sampling = SamplingBatch.from_params([r.params for r in group], self.device)
        seeded = [(i, r.generator) for i, r in enumerate(group) if r.generator is not None and r.params.temperature]
        uniforms = self._uniforms(sampling, seeded, n)
        logits, cache, reused = self._prefill_forward(prompts, prefixes)
        logits = logits[source_rows]
        total = sum(len(r.prompt_ids) for r in group)
        self.stats.prompt_tokens += total
        self.stats.cached_prompt_tokens += reused + total - sum(len(p) for p in prompts)

        self._ensure_seen(logits.shape[-1])
        seen = torch.zeros(n, logits.shape[-1], dtype=torch.bool, device=self.device)
        seen[prompt_tokens] = True
        for request in group:
            request.weight_version = self._version
        tokens, logprobs = self._sample(logits, sampling, seen, uniforms)
        seen[torch.arange(n, device=self.device), tokens] = True
        finished = set(self._record(group, tokens, logprobs))
        for i in finished:
            length = len(group[i].prompt_ids)
            self.prefix_cache.insert(
                group[i].prompt_ids,
                [layer.keys[source[i], :, -length:] for layer in cache.layers],
                [layer.values[source[i], :, -length:] for layer in cache.layers],
                self._version,
            )

        keep = [i for i in range(n) if i not in finished]
        if not keep:
            return
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        cache_rows = [source[i] for i in keep]
        self.buffer.add_rows(
            [(layer.keys, layer.values) for layer in cache.layers],
            [group[i].prompt_ids for i in keep],
            self._version,
            None if cache_rows == list(range(len(prompts))) else cache_rows,
            _columns_to_come([*self.running, *(group[i] for i in keep)]),
        )
        first = len(self.running)
        rows = slice(first, first + len(keep))
        self.seen[rows] = seen[index]
        self.last_tokens[rows] = tokens[index]
        self.running.extend(group[i] for i in keep)
        self._sampling = None

    def _prefill_forward(
        self, prompts: list[list[int]], prefixes: list[tuple[PrefixEntry | None, int]]
    ) -> tuple[torch.Tensor, DynamicCache, int]:
        """One forward over `prompts`, reusing prompt i's first `prefixes[i][1]` tokens' KV from its cache entry.
        Returns the last-position logits [n, V], the KV of all prompt tokens, row i left-padded with its prompt at
        the end (the layout `KVBuffer.add_rows` takes), and how many prompt tokens' KV was reused.

        Every row feeds the same number of tokens (the longest uncached suffix) and no row has padding in the
        middle: a row with a shorter uncached suffix feeds some of its cached tokens again instead of padding. The
        inputs are assembled on the host and moved to the model's device once each."""
        n, lengths = len(prompts), [len(p) for p in prompts]
        fed = max(length - hit for length, (_, hit) in zip(lengths, prefixes, strict=True))
        reused = [max(length - fed, 0) for length in lengths]  # <= hit, since fed >= length - hit
        past = max(reused)
        input_ids = torch.full((n, fed), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((n, past + fed), dtype=torch.long)
        for i, (prompt, length, start) in enumerate(zip(prompts, lengths, reused, strict=True)):
            input_ids[i, fed - (length - start) :] = torch.tensor(prompt[start:], dtype=torch.long)
            attention_mask[i, past + fed - length :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp_(min=0)[:, past:]
        cache = DynamicCache(config=self.model.config)
        if past:
            self._load_prefixes(cache, [entry for entry, _ in prefixes], reused, past)
        logits = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            position_ids=position_ids.to(self.device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        self.stats.prefill_forward_passes += 1
        self.stats.prefilled_tokens += sum(lengths) - sum(reused)
        return logits, cache, sum(reused)

    @staticmethod
    def _load_prefixes(cache: DynamicCache, entries: list[PrefixEntry | None], reused: list[int], past: int) -> None:
        """Fill `cache` with `past` left-padded columns per row: row i's last `reused[i]` columns from its entry."""
        donor = next(entry for entry, count in zip(entries, reused, strict=True) if count).tail_keys
        layers, heads, dim = donor.shape[0], donor.shape[1], donor.shape[3]
        for layer in range(layers):
            # Zeros, not empty: padding is masked, but 0 * NaN in the attention would still poison the row.
            keys = torch.zeros(len(entries), heads, past, dim, dtype=donor.dtype, device=donor.device)
            values = torch.zeros_like(keys)
            for row, (entry, count) in enumerate(zip(entries, reused, strict=True)):
                if count:
                    entry.copy_kv(layer, count, keys[row, :, past - count :], values[row, :, past - count :])
            cache.update(keys, values, layer)

    def _cache_shared_prefix(self, group: list[Request]) -> None:
        """Prefill the prompts' common prefix once (as its own cache entry) when the cache does not hold it yet, so
        that e.g. the n samples of a GRPO prompt, or prompts behind one system prompt, do not each prefill it."""
        if not self.prefix_cache.enabled or len(group) < 2:
            return
        first = np.asarray(group[0].prompt_ids, dtype=np.int64)
        shared = len(first) - 1
        for request in group[1:]:
            shared = common_prefix_length(first, np.asarray(request.prompt_ids, dtype=np.int64), shared)
        tokens = group[0].prompt_ids[:shared]
        if shared < _MIN_SHARED_PREFIX:
            return
        cached = self.prefix_cache.match(tokens, self._version)  # at most shared - 1 tokens
        if cached[1] >= shared - _MIN_SHARED_PREFIX:
            return
        _, cache, _ = self._prefill_forward([tokens], [cached])
        keys, values = [layer.keys[0] for layer in cache.layers], [layer.values[0] for layer in cache.layers]
        self.prefix_cache.insert(tokens, keys, values, self._version)

    def _decode(self) -> None:
        rows = len(self.running)
        if self._sampling is None:
            self._sampling = SamplingBatch.from_params([r.params for r in self.running], self.device)
            self._seeded_rows = [
                (i, r.generator) for i, r in enumerate(self.running) if r.generator is not None and r.params.temperature
            ]
        uniforms = self._uniforms(self._sampling, self._seeded_rows, rows)
        self.buffer.reserve_step(_columns_to_come(self.running))
        logits = self._decode_forward(rows)
        self.buffer.advance()
        self.stats.decode_forward_passes += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, rows)

        tokens, logprobs = self._sample(logits, self._sampling, self.seen[:rows], uniforms)
        self.last_tokens[:rows] = tokens
        self.seen[torch.arange(rows, device=self.device), tokens] = True
        finished = self._record(self.running, tokens, logprobs)
        if finished:
            for row, (keys, values) in zip(finished, self.buffer.rows_kv(finished), strict=True):
                request = self.running[row]
                tokens = request.prompt_ids + request.response_ids[:-1]
                self.prefix_cache.insert(tokens, keys, values, request.weight_version)
            self._remove_rows(finished)

    def _decode_forward(self, rows: int) -> torch.Tensor:
        """One token per running row through the model; the last-position logits [rows, V]. With a shared prefix in
        the buffer, attention reads its KV once for all rows (`prefix_attention`)."""
        attention_mask = self.buffer.attention_mask()
        shared_prefix = self.buffer.shared_prefix(attention_mask)
        inputs = dict(
            input_ids=self.last_tokens[:rows, None],
            attention_mask=attention_mask,
            position_ids=self.buffer.positions(),
            past_key_values=self.buffer.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        if shared_prefix is None:
            return self.model(**inputs).logits[:, -1]
        self.stats.shared_prefix_decode_passes += 1
        with attention_implementation(self.model, SHARED_PREFIX_ATTENTION):
            return self.model(**inputs, shared_prefix=shared_prefix).logits[:, -1]

    def _uniforms(
        self, sampling: SamplingBatch, seeded: list[tuple[int, torch.Generator]], rows: int
    ) -> torch.Tensor | None:
        """The uniforms [rows] a sampling step draws from, on the device (None when every row is greedy: greedy
        batches draw no random numbers). They come from the CPU generators, the engine's and a seeded row's own, so
        that they do not depend on the device. Drawn before the step's forward pass, so that their copy to the
        device (which waits for the work queued before it) does not wait for the forward pass."""
        if not sampling.any_sampled:
            return None
        uniforms = torch.rand(rows, generator=self.generator)
        for row, generator in seeded:
            uniforms[row] = torch.rand((), generator=generator)
        return uniforms.to(self.device)

    @staticmethod
    def _sample(
        logits: torch.Tensor, sampling: SamplingBatch, seen: torch.Tensor, uniforms: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens, logprobs) [B] for raw `logits` [B, V], with `_uniforms`' numbers."""
        logits = logits.float()
        tokens = choose_tokens(logits, sampling, seen, uniforms)
        return tokens, sampled_logprobs(logits, tokens, sampling.temperature)

    def _record(self, requests: list[Request], tokens: torch.Tensor, logprobs: torch.Tensor) -> list[int]:
        """Append each row's new token and logprob; finish and notify the rows that are done; return their rows."""
        finished = []
        self.stats.generated_tokens += len(requests)
        token_list, logprob_list = read_back(tokens, logprobs)
        for row, (request, token, logprob) in enumerate(zip(requests, token_list, logprob_list, strict=True)):
            request.response_ids.append(token)
            request.logprobs.append(logprob)
            eos = token in self.eos_token_ids and not request.ignore_eos
            if eos or (request.params.stop and self._matches_stop(request)):
                request.stop_reason = StopReason.STOP
            elif len(request.response_ids) >= request.max_new_tokens:
                request.stop_reason = StopReason.LENGTH
            else:
                continue
            finished.append(row)
            self._notify(request, None)
        return finished

    def _matches_stop(self, request: Request) -> bool:
        """Whether the newest token completed a stop string. Only a short tail is decoded: a stop string of c
        characters spans at most 4c tokens (a character is at most 4 bytes of a byte-level BPE)."""
        window = 4 * max(len(s) for s in request.params.stop) + 4
        tail = self.tokenizer.decode(request.response_ids[-window:], skip_special_tokens=True)
        for stop in request.params.stop:
            if stop and stop in tail:
                request.matched_stop = stop
                return True
        return False

    def _remove_rows(self, rows: list[int]) -> None:
        holes, sources, count = compaction_plan(len(self.running), rows)
        device_holes, device_sources = holes.to(self.device), sources.to(self.device)
        self.buffer.move_rows(device_holes, device_sources, count)
        if len(holes):
            self.seen[device_holes] = self.seen[device_sources]
            self.last_tokens[device_holes] = self.last_tokens[device_sources]
            for hole, source in zip(holes.tolist(), sources.tolist(), strict=True):
                self.running[hole] = self.running[source]
        del self.running[count:]
        self._sampling = None

    def _drop_cancelled(self) -> None:
        self.cancel_pending = False
        self.waiting = collections.deque(r for r in self.waiting if not r.cancelled)
        cancelled = [row for row, r in enumerate(self.running) if r.cancelled]
        if cancelled:
            self._remove_rows(cancelled)

    def _ensure_seen(self, vocab_size: int) -> None:
        if self.seen is None:
            self.seen = torch.zeros(self.max_num_seqs, vocab_size, dtype=torch.bool, device=self.device)

    def _notify(self, request: Request, error: BaseException | None) -> None:
        if request.notified:  # finished just before a failure later in the same step
            return
        request.notified = True
        if error is None:
            self.stats.finished_requests += 1
        request.on_finish(request, error)

    def _clear(self) -> None:
        self.waiting.clear()
        self.running.clear()
        self.admitting = []
        self.buffer.release()
        self._sampling = None


def read_back(tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[list[int], list[float]]:
    """A step's sampled tokens and their logprobs as Python lists: read in place on the CPU, in one copy from any
    other device (`read_back_together`)."""
    if tokens.device.type == "cpu":
        return tokens.tolist(), logprobs.tolist()
    return read_back_together(tokens, logprobs)


def read_back_together(tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[list[int], list[float]]:
    """`read_back` in one device-to-host copy: both stacked as float64, which holds every token id (< 2**53) and every
    float32 logprob exactly."""
    token_values, logprob_values = torch.stack([tokens.to(torch.float64), logprobs.to(torch.float64)]).tolist()
    return [int(token) for token in token_values], logprob_values


def _prompt_token_index(group: list[Request], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, token ids) of every prompt token of `group`, on `device`: the entries of the `seen` mask to set."""
    lengths = torch.tensor([len(r.prompt_ids) for r in group], dtype=torch.long)
    rows = torch.repeat_interleave(torch.arange(len(group)), lengths)
    token_ids = torch.tensor([token for r in group for token in r.prompt_ids], dtype=torch.long)
    return rows.to(device), token_ids.to(device)


def _columns_to_come(requests: list[Request]) -> int:
    """The most KV columns any of `requests` may still write: one per token it may still be fed."""
    return max((r.max_new_tokens - len(r.response_ids) for r in requests), default=0)


_MIN_SHARED_PREFIX = 16
"""Shortest common prefix (tokens) worth a prefill forward of its own."""
