"""The inference-engine contract shared by every backend.

Token ids in; token ids, text, stop reason and per-token logprobs out. Sampling parameters travel as
one `SamplingParams` object from the config to the engine untouched; each backend translates it at
its own edge (the way transformers passes a `GenerationConfig` through `generate`).
"""

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, NotRequired, TypedDict

from skyrl_train.types.sampling import SamplingParams

if TYPE_CHECKING:
    from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
    from skyrl_train.types.weight_sync_requests import WeightUpdateRequest

__all__ = [
    "InferenceEngineInput",
    "InferenceEngineInterface",
    "InferenceEngineOutput",
    "SamplingParams",
    "prompt_token_ids",
]


class InferenceEngineInput(TypedDict, total=False):
    prompt_token_ids: list[list[int]]
    """Token ids of each prompt (token-in). Exactly one of `prompt_token_ids` / `prompts` is set."""
    prompts: list[list[dict[str, str]]]
    """Chat conversations; the engine applies the chat template with a generation prompt."""
    sampling_params: SamplingParams | None
    session_ids: list[str] | None
    """Sticky-routing keys (one per prompt), e.g. the trajectory id, for prefix-cache reuse."""


class InferenceEngineOutput(TypedDict):
    responses: list[str]
    """Decoded text of each response (special tokens skipped)."""
    response_ids: list[list[int]]
    """Exactly the sampled token ids (token-out); never re-encoded from text."""
    stop_reasons: list[str]
    response_logprobs: list[list[float]] | None
    """Per sampled token: log_softmax(logits / temperature) at that token (temperature 0 counts as 1), i.e.
    exactly what the trainer recomputes; top-k/top-p/min-p truncation is not applied. None if not requested."""
    weight_versions: NotRequired[list[int | None] | None]
    """Per response: the weight version that generated it (`WeightUpdateRequest.weight_version`: the trainer's
    global step whose update produced the weights, 0 = the starting weights); None where the engine cannot tell."""
    retokenized: NotRequired[list[bool] | None]
    """Per response: True if its `response_ids` were re-encoded from text (a remote server that returns no token
    ids), so they may differ from the sampled tokens. Absent or None: never."""


def prompt_token_ids(input_batch: InferenceEngineInput, tokenizer) -> list[list[int]]:
    """The prompts of `input_batch` as token ids: `prompt_token_ids` as given, or each of `prompts` through the
    tokenizer's chat template with a generation prompt.

    Raises:
        ValueError: not exactly one of the two is given, or a prompt is empty.
    """
    token_ids, conversations = input_batch.get("prompt_token_ids"), input_batch.get("prompts")
    if (token_ids is None) == (conversations is None):
        raise ValueError("exactly one of prompt_token_ids and prompts must be given")
    if conversations is not None:
        token_ids = [
            tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
            for conversation in conversations
        ]
    if any(len(ids) == 0 for ids in token_ids):
        raise ValueError("empty prompt: at least one prompt token is needed")
    return [list(ids) for ids in token_ids]


class InferenceEngineInterface(ABC):
    """An inference engine. Backends implement `generate`; the rest defaults to no-ops where meaningful."""

    @abstractmethod
    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        """Generate one response per prompt, in input order."""

    async def abort_generation(self) -> None:
        """Finish every request in flight now, each with stop reason "abort" and the tokens generated so far."""
        raise NotImplementedError(f"{type(self).__name__} cannot abort generation")

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Re-acquire memory released by `sleep`: `tags` names which, ``["weights"]`` or ``["kv_cache"]`` (None:
        both). The trainer wakes the weights alone before a weight sync and the KV cache before generating
        (`skyrl_train.trainer.EngineTurns`, upstream's order); an engine that cannot wake them apart wakes both."""
        return None

    async def sleep(self) -> None:
        """Release accelerator memory while the trainer runs (colocated mode)."""
        return None

    async def reset_prefix_cache(self) -> None:
        """Drop cached prefixes, e.g. after a weight update."""
        return None

    async def teardown(self) -> None:
        """Stop background work and free resources."""
        return None

    # -- weight sync (see `skyrl_train.weight_sync` for the contract) ----------------------------------------------

    async def init_weight_update_communicator(self, info: "WeightSyncInitInfo") -> None:
        """Join the trainer's weight-update group, as ranks `info.rank_offset ..` (one per engine worker)."""
        raise NotImplementedError(f"{type(self).__name__} cannot join a weight-update group")

    async def update_named_weights(self, request: "WeightUpdateRequest") -> None:
        """Apply a weight update; responses generated afterwards report `request.weight_version`."""
        raise NotImplementedError(f"{type(self).__name__} cannot receive weights")

    async def destroy_weights_update_group(self) -> None:
        """Leave the weight-update group (a no-op when not in one)."""
        return None

    def weight_sync_ranks(self) -> int:
        """Ranks this engine takes in the weight-update group: one per worker."""
        return self.tp_size() * self.pp_size() * self.dp_size()

    def tp_size(self) -> int:
        return 1

    def pp_size(self) -> int:
        return 1

    def dp_size(self) -> int:
        return 1
