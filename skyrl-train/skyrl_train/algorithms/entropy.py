"""Token entropy of the policy, for the entropy bonus (``use_entropy_loss``)."""

from __future__ import annotations

import torch

__all__ = ["compute_entropy"]


def compute_entropy(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy of the next-token distribution at each position, ``[B, T]`` from logits ``[B, T, V]``.

    ``H = −Σ_v p_v log p_v = logsumexp(z) − Σ_v softmax(z)_v · z_v``, multiplied by ``mask`` if given.
    The bonus enters the loss as ``− entropy_loss_coef · reduce_loss(H, loss_mask, reduction, normalizer=Z)``.
    Pass logits already divided by the sampling temperature if the log-probs are.
    """
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    probs = torch.softmax(z, dim=-1)
    entropy = torch.logsumexp(z, dim=-1) - (probs * z).sum(dim=-1)
    if mask is not None:
        entropy = entropy * mask.to(entropy.dtype)
    return entropy
