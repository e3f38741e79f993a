"""Logits processing and sampling for a batch whose rows have different sampling parameters.

Every function works on a whole batch at once (one tensor op per feature, not one per row), so the cost per decode
step does not grow with Python work per request. The processing order is: repetition penalty, temperature, top-k,
top-p, min-p; each truncation renormalises what is left before the next one looks at it.

The logprob a row reports is NOT taken from the processed distribution: it is `log_softmax(logits / T)` of the raw
model logits at the sampled token (T = 0 counts as 1), which is exactly what the trainer recomputes with a forward
pass (see `InferenceEngineOutput.response_logprobs`).

Device: the functions work on whatever device their tensors are on, and off the CPU none reads a value back to the
host, so a sampling step on a GPU queues its work without waiting for it. The uniforms come from the caller (the
batcher draws them from CPU generators), so the same logits and uniforms pick the same tokens on every device.
"""

from __future__ import annotations

import dataclasses

import torch

from skyrl_train.inference_engines.base import SamplingParams


@dataclasses.dataclass
class SamplingBatch:
    """The sampling parameters of the rows of one batch, as tensors, plus flags that let a step skip unused work."""

    temperature: torch.Tensor
    """[B] float; 0 marks a greedy row."""
    top_k: torch.Tensor
    """[B] long; 0 means off."""
    top_p: torch.Tensor
    """[B] float in (0, 1]."""
    min_p: torch.Tensor
    """[B] float in [0, 1)."""
    repetition_penalty: torch.Tensor
    """[B] float; 1 means off."""
    any_sampled: bool
    all_sampled: bool
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    any_penalty: bool

    @classmethod
    def from_params(cls, params: list[SamplingParams], device: torch.device | str = "cpu") -> SamplingBatch:
        """The batch of `params` (one per row), its tensors on `device`."""

        def column(values, dtype):
            return torch.tensor(values, dtype=dtype, device=device)

        sampled = [p.temperature > 0 for p in params]
        return cls(
            temperature=column([p.temperature for p in params], torch.float32),
            top_k=column([max(p.top_k, 0) for p in params], torch.long),
            top_p=column([p.top_p for p in params], torch.float32),
            min_p=column([p.min_p for p in params], torch.float32),
            repetition_penalty=column([p.repetition_penalty for p in params], torch.float32),
            any_sampled=any(sampled),
            all_sampled=all(sampled),
            any_top_k=any(p.top_k > 0 for p in params),
            any_top_p=any(p.top_p < 1 for p in params),
            any_min_p=any(p.min_p > 0 for p in params),
            any_penalty=any(p.repetition_penalty != 1 for p in params),
        )


def apply_repetition_penalty(logits: torch.Tensor, penalty: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """Penalise every token already seen in the row (prompt or response): a positive logit is divided by the
    penalty, a negative one multiplied by it. `logits` [B, V], `penalty` [B], `seen` [B, V] bool."""
    penalty = penalty[:, None]
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def warp_probs(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    *,
    use_top_k: bool = True,
    use_top_p: bool = True,
    use_min_p: bool = True,
) -> torch.Tensor:
    """The distribution each row samples from, [B, V], rows summing to 1, in vocabulary order.

    softmax(logits / T) (T = 0 counts as 1); then top-k keeps the k most likely tokens (k = 0: all); top-p keeps
    the smallest most-likely-first prefix whose mass reaches p (a token is kept while the mass *before* it is < p,
    so the most likely token always stays); min-p drops tokens whose probability is below min_p times the largest.
    The `use_*` flags let a caller that knows no row uses a feature skip its cost (the sort, mainly).
    """
    safe_t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    probs = torch.softmax(logits / safe_t[:, None], dim=-1)
    if use_top_k or use_top_p:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        if use_top_k:
            rank = torch.arange(probs.shape[-1], device=probs.device)
            k = torch.where(top_k > 0, top_k, probs.shape[-1])
            sorted_probs = sorted_probs * (rank[None, :] < k[:, None])
            sorted_probs = sorted_probs / sorted_probs.sum(dim=-1, keepdim=True)
        if use_top_p:
            mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
            keep = (mass_before < top_p[:, None]) | (top_p[:, None] >= 1)
            sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    if use_min_p:
        threshold = min_p[:, None] * probs.amax(dim=-1, keepdim=True)
        probs = probs * (probs >= threshold)
    return probs / probs.sum(dim=-1, keepdim=True)


def sample_from_probs(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: one uniform in [0, 1) per row picks the token whose CDF interval contains it.

    One random number per row (instead of one per vocabulary entry) keeps per-request generators cheap: a seeded
    row draws exactly one number from its own generator per step, whatever else is in the batch.
    """
    cdf = probs.cumsum(dim=-1)
    targets = uniforms[:, None].to(cdf.dtype) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, targets, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)
    return replace_zero_probability_tokens(probs, tokens)


def replace_zero_probability_tokens(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """`tokens` [B], except that a row whose token has zero probability in `probs` [B, V] takes its most likely one.

    Inverse-CDF sampling finds such a token only through rounding: the CPU's cumsum accumulates each row in order
    (in float64), so a zero-probability token's CDF entry equals the one before it; a GPU's parallel scan adds in
    another order and can leave a gap there for a uniform to land in. Off the CPU the replacement is computed for
    every row, so that nothing is read back to the host; on the CPU, where reading back is free, only when needed.
    """
    bad = probs.gather(-1, tokens[:, None]).squeeze(-1) <= 0
    if probs.device.type != "cpu":
        return torch.where(bad, probs.argmax(dim=-1), tokens)
    if bool(bad.any()):
        tokens[bad] = probs[bad].argmax(dim=-1)
    return tokens


def sampled_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits / T)[token] per row, from the raw logits (T = 0 counts as 1), [B]."""
    safe_t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))[:, None]
    scaled = logits / safe_t
    return scaled.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(scaled, dim=-1)


def choose_tokens(
    logits: torch.Tensor, batch: SamplingBatch, seen: torch.Tensor | None, uniforms: torch.Tensor | None
) -> torch.Tensor:
    """Next token of every row: argmax for greedy rows, a sample from `warp_probs` for the others.

    `logits` [B, V] float32 raw logits; `seen` [B, V] bool (needed when `batch.any_penalty`); `uniforms` [B] (needed
    when `batch.any_sampled`; ignored for greedy rows).
    """
    if batch.any_penalty:
        logits = apply_repetition_penalty(logits, batch.repetition_penalty, seen)
    if not batch.any_sampled:
        return logits.argmax(dim=-1)
    probs = warp_probs(
        logits,
        batch.temperature,
        batch.top_k,
        batch.top_p,
        batch.min_p,
        use_top_k=batch.any_top_k,
        use_top_p=batch.any_top_p,
        use_min_p=batch.any_min_p,
    )
    sampled = sample_from_probs(probs, uniforms)
    if batch.all_sampled:
        return sampled
    return torch.where(batch.temperature > 0, sampled, logits.argmax(dim=-1))
