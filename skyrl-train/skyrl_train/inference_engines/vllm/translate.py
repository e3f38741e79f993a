"""The vLLM backend's edge: our `SamplingParams` in, vLLM's completion outputs back into `InferenceEngineOutput` fields.

Pure functions on plain values (no vLLM import), so the CPU suite tests them without vLLM installed.

Logprobs. The engine runs with vLLM's ``logprobs_mode="processed_logprobs"``: the logprob vLLM reports for a sampled
token is ``log_softmax`` of the logits after its sampler's processing (penalties, temperature with 0 counting as 1,
min-p, top-k, top-p). With no penalty and no truncation (``repetition_penalty=1``, ``top_k=-1``, ``top_p=1``,
``min_p=0``: the training defaults) that is exactly ``log_softmax(logits / T)``, the contract of
`InferenceEngineOutput.response_logprobs` and what the trainer recomputes. With truncation or a penalty on, vLLM's
value is the logprob under the truncated, renormalised (or penalised) distribution, which is >= the contract's for a
truncation; `logprobs_follow_contract` tells which case a request is in. (vLLM's default ``raw_logprobs`` would
ignore the temperature, and the full distribution needed to convert it is not returned.)

Unlike upstream SkyRL, ``min_tokens`` is not forced to 1: vLLM applies it by masking EOS, which would change the
first token's reported logprob away from the trainer's; an empty response is handled by the generator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_gym.common.stop_reasons import StopReason
from skyrl_train.types.sampling import VLLM_EXTRA_SAMPLING_KEYS, SamplingParams

__all__ = [
    "VLLM_EXTRA_SAMPLING_KEYS",
    "logprobs_follow_contract",
    "sampled_token_logprobs",
    "stop_reason",
    "vllm_sampling_kwargs",
]

_FINISH_REASONS = {"stop": StopReason.STOP, "length": StopReason.LENGTH, "abort": StopReason.ABORT}


def vllm_sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams` for one request with `params`.

    Raises:
        ValueError: an extra key vLLM is not known to read here (see `VLLM_EXTRA_SAMPLING_KEYS`).
    """
    unknown = sorted(set(params.additional_kwargs) - set(VLLM_EXTRA_SAMPLING_KEYS))
    if unknown:
        raise ValueError(
            f"sampling keys {unknown} are not passed to vLLM by this fork; known extra keys: "
            f"{', '.join(VLLM_EXTRA_SAMPLING_KEYS)}"
        )
    kwargs: dict[str, Any] = {
        "max_tokens": params.max_generate_length,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": max(params.top_k, 0),  # vLLM: 0 = off
        "min_p": params.min_p,
        "repetition_penalty": params.repetition_penalty,
        "seed": params.seed,
        "logprobs": params.logprobs,
        "stop": list(params.stop) if params.stop else None,
        "include_stop_str_in_output": True,
        "skip_special_tokens": True,
    }
    kwargs.update(params.additional_kwargs)
    return kwargs


def logprobs_follow_contract(params: SamplingParams) -> bool:
    """True when vLLM's processed logprobs equal ``log_softmax(logits / T)`` (no truncation, no penalty)."""
    extra = params.additional_kwargs
    return (
        params.top_k == -1
        and params.top_p == 1
        and params.min_p == 0
        and params.repetition_penalty == 1
        and not extra.get("frequency_penalty")
        and not extra.get("presence_penalty")
        and not extra.get("min_tokens")
    )


def stop_reason(finish_reason: str | None) -> str:
    """Our `StopReason` for vLLM's ``finish_reason`` (EOS, a stop string and a stop token id all give "stop")."""
    try:
        return _FINISH_REASONS[finish_reason]
    except KeyError:
        raise ValueError(f"vLLM finished a request with an unexpected finish_reason {finish_reason!r}") from None


def sampled_token_logprobs(token_ids: Sequence[int], logprobs: Sequence[Mapping[int, Any]] | None) -> list[float]:
    """The logprob of each sampled token from vLLM's per-position ``{token_id: Logprob}`` dicts (with ``logprobs=0``
    each holds the sampled token alone).

    Raises:
        ValueError: positions and tokens do not line up, or a position lacks its sampled token.
    """
    if logprobs is None:
        raise ValueError("vLLM returned no logprobs although they were requested")
    if len(logprobs) != len(token_ids):
        raise ValueError(f"vLLM returned {len(logprobs)} logprob positions for {len(token_ids)} tokens")
    out = []
    for position, (token, candidates) in enumerate(zip(token_ids, logprobs, strict=True)):
        entry = candidates.get(token)
        if entry is None:
            raise ValueError(f"vLLM's logprobs at position {position} lack the sampled token {token}")
        out.append(float(entry.logprob))
    return out
