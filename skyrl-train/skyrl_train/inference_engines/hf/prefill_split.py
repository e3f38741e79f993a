"""Which prompts of a prefill group share a forward pass, so that short uncached tails do not pay for long ones.

A prefill forward feeds every row the same number of tokens, the longest uncached tail among its rows (a row with a
shorter tail feeds some of its cached tokens again; see `ContinuousBatcher._prefill_forward`). In an agent's
conversations the tails differ widely: a question's first turn has ~30 uncached tokens behind the cached system
prompt, the turn after a month of price history ~500. The main job's eval (80 conversations, 32 at once, CPU) fed
27% of its prefill tokens again this way; a group of tails [35, 35, 496, 35, 497] fed 5 x 497 tokens where 2 x 497 and
3 x 35 in two forwards cost less than half.

On the CPU a forward's cost is about a fixed part (reading every weight once) plus one part per fed token, so the
split minimises ``sum(FORWARD_COST_TOKENS + rows * longest tail)`` over forwards. Measured on the 2-core AMD EPYC
(SmolLM2-135M, fp32): a one-row prefill of 28 tokens behind 637 cached ones took 0.18-0.22 s and each further fed
token ~3 ms, so the fixed part is worth ~40-70 tokens. On a GPU the fixed part is not measured, and a forward's tokens
cost little until the device is busy, so the batcher splits only on the CPU.
"""

from __future__ import annotations

__all__ = ["FORWARD_COST_TOKENS", "split_by_tail_length"]

FORWARD_COST_TOKENS = 64
"""A CPU prefill forward's fixed cost, in fed tokens' worth."""


def split_by_tail_length(tails: list[int], forward_cost_tokens: int = FORWARD_COST_TOKENS) -> list[list[int]]:
    """Indices of `tails` (each prompt's uncached token count) in parts, one forward each, minimising the total of
    ``forward_cost_tokens + len(part) * max(tails of part)``. Parts hold tails of neighbouring lengths, longest part
    first; equal tails always share a part; indices keep their order within a part."""
    if not tails:
        return []
    if any(tail < 1 for tail in tails):
        raise ValueError(f"every prompt feeds at least one token, got tails {tails}")
    lengths = sorted(set(tails), reverse=True)
    counts = [tails.count(length) for length in lengths]
    # best[j]: least cost of the lengths before j; a part spans lengths[i:j], fed lengths[i] tokens a row.
    best, cut = [0] * (len(lengths) + 1), [0] * (len(lengths) + 1)
    for j in range(1, len(lengths) + 1):
        options = ((best[i] + forward_cost_tokens + sum(counts[i:j]) * lengths[i], i) for i in range(j))
        best[j], cut[j] = min(options)
    bounds, j = [], len(lengths)
    while j:
        bounds.append((cut[j], j))
        j = cut[j]
    parts = []
    for i, j in reversed(bounds):
        members = set(lengths[i:j])
        parts.append([index for index, tail in enumerate(tails) if tail in members])
    return parts
