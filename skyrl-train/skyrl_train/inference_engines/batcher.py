"""Continuous batching over a transformers causal LM: the synchronous core of `HFInferenceEngine`.

One `step()` admits a group of waiting requests (one left-padded prefill forward), then advances every running
sequence by one token with a single decode forward over the whole batch, and retires the sequences that finished.
Requests therefore join and leave between steps without waiting for each other; see `kv_buffer` for how their KV
caches of different lengths share one left-padded batch. All torch work happens on the caller's thread (the
engine's scheduler thread); the only hand-off is `Request.on_finish`.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import torch
from transformers import DynamicCache

from skyrl_train.inference_engines.base import SamplingParams, StopReason
from skyrl_train.inference_engines.kv_buffer import KVBuffer, compaction_plan
from skyrl_train.inference_engines.sampling import SamplingBatch, choose_tokens, sampled_logprobs


@dataclasses.dataclass(eq=False)
class Request:
    """One prompt being generated. The scheduler thread appends to it; the caller reads it after `on_finish`."""

    prompt_ids: list[int]
    params: SamplingParams
    max_new_tokens: int
    on_finish: Callable[[Request, BaseException | None], None]
    """Called exactly once, on the scheduler thread, with the error if the request failed."""
    generator: torch.Generator | None = None
    """Set for seeded requests: every random number this request uses comes from it."""
    ignore_eos: bool = False
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
    prompt_tokens: int = 0
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
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.max_num_seqs = max_num_seqs
        self.max_prefill_tokens = max_prefill_tokens
        self.generator = generator
        self.stats = EngineStats()
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        """Row i of every per-row tensor below (and of the KV buffer) belongs to running[i]."""
        self.admitting: list[Request] = []
        """The group being prefilled: out of `waiting`, not yet in `running` (so a failure still reaches it)."""
        self.buffer = KVBuffer(max_num_seqs)
        self.last_tokens = torch.zeros(max_num_seqs, dtype=torch.long)
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
        self.admitting = self._next_prefill_group()
        if self.admitting:
            self._prefill(self.admitting)
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
        """FIFO head of the queue, as many as fit in free rows and in `max_prefill_tokens` padded prompt tokens
        (at least one, so a prompt longer than the budget is prefilled alone)."""
        group: list[Request] = []
        longest = 0
        free_rows = self.max_num_seqs - len(self.running)
        while self.waiting and len(group) < free_rows:
            padded = max(longest, len(self.waiting[0].prompt_ids))
            if group and padded * (len(group) + 1) > self.max_prefill_tokens:
                break
            group.append(self.waiting.popleft())
            longest = padded
        return group

    def _prefill(self, group: list[Request]) -> None:
        n, length = len(group), max(len(r.prompt_ids) for r in group)
        input_ids = torch.full((n, length), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((n, length), dtype=torch.long)
        for i, request in enumerate(group):
            ids = request.prompt_ids
            input_ids[i, length - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[i, length - len(ids) :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp_(min=0)
        cache = DynamicCache(config=self.model.config)
        logits = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        self.stats.prefill_forward_passes += 1
        self.stats.prompt_tokens += int(attention_mask.sum())

        self._ensure_seen(logits.shape[-1])
        seen = torch.zeros(n, logits.shape[-1], dtype=torch.bool)
        for i, request in enumerate(group):
            seen[i, request.prompt_ids] = True
        sampling = SamplingBatch.from_params([r.params for r in group])
        seeded = [(i, r.generator) for i, r in enumerate(group) if r.generator is not None and r.params.temperature]
        tokens, logprobs = self._sample(logits, sampling, seen, seeded)
        seen[torch.arange(n), tokens] = True
        finished = set(self._record(group, tokens, logprobs))

        keep = [i for i in range(n) if i not in finished]
        if not keep:
            return
        index = torch.tensor(keep, dtype=torch.long)
        layer_kv = [(layer.keys[index], layer.values[index]) for layer in cache.layers]
        self.buffer.add_rows(layer_kv, [len(group[i].prompt_ids) for i in keep])
        first = len(self.running)
        rows = slice(first, first + len(keep))
        self.seen[rows] = seen[index]
        self.last_tokens[rows] = tokens[index]
        self.running.extend(group[i] for i in keep)
        self._sampling = None

    def _decode(self) -> None:
        rows = len(self.running)
        if self._sampling is None:
            self._sampling = SamplingBatch.from_params([r.params for r in self.running])
            self._seeded_rows = [
                (i, r.generator) for i, r in enumerate(self.running) if r.generator is not None and r.params.temperature
            ]
        self.buffer.reserve_step()
        logits = self.model(
            input_ids=self.last_tokens[:rows, None],
            attention_mask=self.buffer.attention_mask(),
            position_ids=self.buffer.positions(),
            past_key_values=self.buffer.cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        self.buffer.advance()
        self.stats.decode_forward_passes += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, rows)

        tokens, logprobs = self._sample(logits, self._sampling, self.seen[:rows], self._seeded_rows)
        self.last_tokens[:rows] = tokens
        self.seen[torch.arange(rows), tokens] = True
        finished = self._record(self.running, tokens, logprobs)
        if finished:
            self._remove_rows(finished)

    def _sample(
        self,
        logits: torch.Tensor,
        sampling: SamplingBatch,
        seen: torch.Tensor,
        seeded: list[tuple[int, torch.Generator]],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens, logprobs) [B] for raw `logits` [B, V]; greedy rows draw no random numbers."""
        logits = logits.float()
        uniforms = None
        if sampling.any_sampled:
            uniforms = torch.rand(logits.shape[0], generator=self.generator)
            for row, generator in seeded:
                uniforms[row] = torch.rand((), generator=generator)
        tokens = choose_tokens(logits, sampling, seen, uniforms)
        return tokens, sampled_logprobs(logits, tokens, sampling.temperature)

    def _record(self, requests: list[Request], tokens: torch.Tensor, logprobs: torch.Tensor) -> list[int]:
        """Append each row's new token and logprob; finish and notify the rows that are done; return their rows."""
        finished = []
        self.stats.generated_tokens += len(requests)
        for row, (request, token, logprob) in enumerate(zip(requests, tokens.tolist(), logprobs.tolist(), strict=True)):
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
        self.buffer.move_rows(holes, sources, count)
        if len(holes):
            self.seen[holes] = self.seen[sources]
            self.last_tokens[holes] = self.last_tokens[sources]
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
            self.seen = torch.zeros(self.max_num_seqs, vocab_size, dtype=torch.bool)

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
