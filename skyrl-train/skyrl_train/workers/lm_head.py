"""Response-token logprobs (and entropy) from the final hidden states, the LM head applied a chunk of rows at a time.

Taking them from the model's logits materialises ``[tokens, vocab]`` tensors: the logits, their temperature-scaled
copy, the exponentials inside ``logsumexp`` and, in the backward, a gradient for each. At a 49k vocabulary that is
~200 KB per token apiece, above glibc's mmap threshold for any real micro-batch, so each is mapped and page-faulted
anew at every use, and the peak grows with the micro-batch. Here the forward keeps two floats per token (the
logsumexp and the entropy) and the backward recomputes each chunk's logits: one more LM-head matmul, in exchange for
vocabulary-sized tensors of at most `CHUNK_BYTES`.

Only for models whose logits are exactly ``lm_head(final hidden states)`` with a bias-free linear head
(`chunkable_head`); others (logit soft-capping or scaling, a LoRA-adapted or saved head, an FSDP-sharded root) get
their logits from the model as before.

The head's matmul runs in the weight's dtype even under autocast: over fp32 weights (bf16 autocast on the CPU) the
logits, and so the logprobs, are those of an fp32 head on the decoder's output, and the backward, which runs outside
autocast, recomputes exactly the forward's logits. The logsumexp, logprobs and entropy are float32 in every case. A
worker under autocast keeps its model's own LM head out of autocast too (`head_outside_autocast`), so the logits of
the other models are fp32 as well.
"""

from __future__ import annotations

import types

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

CHUNK_BYTES = 16 * 2**20
"""Largest float32 logits block per chunk; below glibc's 32 MiB mmap-threshold ceiling, so freed chunks are reused
from the heap instead of mapped again."""

PLAIN_HEAD_MODELS = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Phi3ForCausalLM",
        "SmolLM3ForCausalLM",
        "Olmo2ForCausalLM",
    }
)
"""transformers causal LMs whose ``forward`` computes ``logits = lm_head(last_hidden_state[:, kept])`` and nothing
more (checked against transformers 5.24)."""

__all__ = ["CHUNK_BYTES", "chunkable_head", "head_outputs", "head_logprobs", "head_outside_autocast"]


def chunkable_head(model: nn.Module) -> nn.Linear | None:
    """``model``'s LM head when its logits can be computed here from the final hidden states, else None."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if type(base).__name__ not in PLAIN_HEAD_MODELS or isinstance(model, FSDPModule) or isinstance(base, FSDPModule):
        return None
    head = base.get_output_embeddings()
    return head if type(head) is nn.Linear and head.bias is None else None


def head_outside_autocast(model: nn.Module) -> None:
    """From now on run ``model``'s LM head outside autocast, in its weight's dtype: under bf16 autocast over fp32
    weights, the logits of a model whose logits come from its own forward (those `chunkable_head` does not serve,
    FSDP-sharded ones included) are then fp32 as `head_logprobs`' are. A deep copy of the model keeps it."""
    head = model.get_output_embeddings()
    head.forward = types.MethodType(_forward_outside_autocast, head)


def _forward_outside_autocast(self: nn.Module, hidden: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    with torch.autocast(hidden.device.type, enabled=False):
        return type(self).forward(self, hidden.to(self.weight.dtype), *args, **kwargs)


def head_outputs(model: nn.Module, keep: int | torch.Tensor, *, hidden: bool, **inputs) -> torch.Tensor:
    """``model(**inputs, logits_to_keep=keep).logits``; with ``hidden``, the final hidden states its LM head would
    turn into those logits instead (the last ``keep`` positions for an int, the listed positions for a tensor)."""
    if not hidden:
        return model(**inputs, logits_to_keep=keep).logits
    states = model.get_decoder()(**inputs).last_hidden_state
    return states[:, -keep:, :] if isinstance(keep, int) else states[:, keep, :]


def head_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    with_top1: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``log_softmax(hidden @ weight.T / temperature)`` at ``targets`` ``[M]`` for hidden states ``[M, H]``, as float32
    ``[M]``; with ``with_entropy`` also the entropy of each of those distributions (differentiable with
    ``entropy_grad``; a metric otherwise). Gradients reach ``hidden`` and, when it requires grad, ``weight``.
    With ``with_top1`` a third value: float32 ``[M]``, 1.0 where the target is a most likely token (no gradient)."""
    logprobs, entropy, top1 = _ChunkedHeadLogprobs.apply(
        hidden, weight, targets, temperature, with_entropy, entropy_grad
    )
    if with_top1:
        return logprobs, (entropy if with_entropy else None), top1
    return logprobs, (entropy if with_entropy else None)


def _chunks(rows: int, vocab_size: int) -> list[slice]:
    step = max(1, CHUNK_BYTES // (4 * vocab_size))
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


def _scaled_logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    with torch.autocast(hidden.device.type, enabled=False):  # the weight's dtype under autocast too (module docstring)
        logits = (hidden.to(weight.dtype) @ weight.T).float()
    return logits.div_(temperature) if temperature != 1.0 else logits


class _ChunkedHeadLogprobs(torch.autograd.Function):
    """Forward: per chunk, logits → logsumexp → logprob at the target (and entropy, and whether the target is a most
    likely token). Backward: per chunk, the logits again, ``p = softmax``; d logprob / d z = onehot − p and d entropy /
    d z = −p (log p + entropy), both over the temperature."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, with_entropy, entropy_grad):
        rows = hidden.shape[0]
        logsumexp = hidden.new_empty(rows, dtype=torch.float32)
        logprobs = torch.empty_like(logsumexp)
        entropy = torch.zeros_like(logsumexp)
        top1 = torch.empty_like(logsumexp)
        for chunk in _chunks(rows, weight.shape[0]):
            logits = _scaled_logits(hidden[chunk], weight, temperature)
            logsumexp[chunk] = torch.logsumexp(logits, dim=-1)
            log_p = logits.sub_(logsumexp[chunk, None])
            logprobs[chunk] = log_p.gather(-1, targets[chunk, None]).squeeze(-1)
            top1[chunk] = (logprobs[chunk] >= log_p.amax(dim=-1)).float()
            if with_entropy:
                entropy[chunk] = -(log_p.exp().mul_(log_p)).sum(dim=-1)
        ctx.set_materialize_grads(False)
        # One call: a second would replace the first's tensors.
        ctx.mark_non_differentiable(top1, *(() if with_entropy and entropy_grad else (entropy,)))
        ctx.save_for_backward(hidden, weight, targets, logsumexp, entropy)
        ctx.temperature = temperature
        return logprobs, entropy, top1

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy, grad_top1):
        hidden, weight, targets, logsumexp, entropy = ctx.saved_tensors
        if grad_logprobs is None and grad_entropy is None:
            return None, None, None, None, None, None
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        for chunk in _chunks(hidden.shape[0], weight.shape[0]):
            log_p = _scaled_logits(hidden[chunk], weight, ctx.temperature).sub_(logsumexp[chunk, None])
            p = log_p.exp()
            if grad_entropy is not None:  # p (log p + H), in log_p's storage
                weighted = log_p.add_(entropy[chunk, None]).mul_(p)
            if grad_logprobs is None:
                grad_logits = weighted.mul_(-grad_entropy[chunk, None])
            else:
                grad_logits = p.mul_(-grad_logprobs[chunk, None])
                grad_logits.scatter_add_(-1, targets[chunk, None], grad_logprobs[chunk, None])
                if grad_entropy is not None:
                    grad_logits.addcmul_(weighted, grad_entropy[chunk, None], value=-1.0)
            if ctx.temperature != 1.0:
                grad_logits.div_(ctx.temperature)
            grad_logits = grad_logits.to(weight.dtype)
            if grad_hidden is not None:
                grad_hidden[chunk] = grad_logits @ weight
            if grad_weight is not None:
                grad_weight.addmm_(grad_logits.T.float(), hidden[chunk].float())
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None, None
