"""Reusable pieces of the agent loop: chat-template tokenisation, rollout metrics and output post-processing.

`get_rollout_metrics` is the one definition of every rollout number the trainer logs; train and eval both
get it through `SkyRLGymGenerator.generate`, and custom generators should call it too.
"""

from __future__ import annotations

import asyncio
import logging
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skyrl_gym.common.config import to_plain
from skyrl_gym.common.progress import Progress
from skyrl_gym.common.stop_reasons import StopReason, TrajectoryStopReason
from skyrl_gym.envs.base_text_env import ConversationType
from skyrl_gym.metrics import aggregate_for_environment
from skyrl_train.inference_engines.base import SamplingParams

logger = logging.getLogger(__name__)

GENERATOR_COUNTERS: dict[str, str] = {
    "empty_responses": "empty_responses",
    "env_init_failed": "env_init_failures",
    "env_step_failed": "env_step_failures",
    "trajectory_timeout": "trajectory_timeouts",
    "tool_server_failed": "tool_server_failures",
    "user_simulator_failed": "user_simulator_failures",
    "engine_failed": "engine_failures",
    "retokenized_turns": "retokenized_turns",
    "special_token_messages": "special_token_messages",
}
"""Counters the generator adds to each trajectory's `env_metrics` -> the batch metric that sums them.
They are kept apart from the env's own `get_metrics()` keys, which go through the env's aggregator."""

FAILURE_COUNTERS: dict[str, str] = {
    TrajectoryStopReason.ENV_INIT_FAILED: "env_init_failed",
    TrajectoryStopReason.ENV_STEP_FAILED: "env_step_failed",
    TrajectoryStopReason.TIMEOUT: "trajectory_timeout",
    TrajectoryStopReason.TOOL_SERVER_FAILED: "tool_server_failed",
    TrajectoryStopReason.USER_SIMULATOR_FAILED: "user_simulator_failed",
    TrajectoryStopReason.ENGINE_FAILED: "engine_failed",
}
"""Infrastructure-failure stop reason -> its 0/1 counter in `env_metrics`."""

FIXED_BASE_CONVERSATION: ConversationType = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "I am a user."},
]
"""The conversation that observation messages are appended to for tokenisation. It has no assistant turn on
purpose: some templates (Qwen3) rewrite earlier assistant turns, which would make the diff unstable."""


def resolve_sampling_params(value: SamplingParams | Mapping[str, Any] | Any) -> SamplingParams:
    """`SamplingParams` from an engine-level object, a plain mapping or a `generator.sampling_params` block."""
    if isinstance(value, SamplingParams):
        return value
    return SamplingParams.from_mapping(to_plain(value))


def encode_chat(
    tokenizer,
    messages: ConversationType,
    add_generation_prompt: bool,
    *,
    content_as_text: bool = False,
    **template_kwargs,
) -> list[int]:
    """Token ids of `messages` rendered by the tokenizer's chat template.

    With `content_as_text`, a special token's string inside the messages (tool, web or user-simulator text) is
    tokenised as plain text, so only the template itself writes special tokens (transformers'
    `sanitize_control_tokens`, which also covers the non-special added tokens the template writes, such as Qwen's
    `<tool_call>`). Messages without such a string get exactly the ids they get without it.
    """
    return list(
        tokenizer.apply_chat_template(
            messages,
            tokenize=True,
            add_generation_prompt=add_generation_prompt,
            return_dict=False,
            sanitize_control_tokens=content_as_text,
            **template_kwargs,
        )
    )


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of `text` as plain text: no BOS/EOS added, and a special token's string stays text."""
    return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)


class SpecialTokenCounter:
    """Finds the strings of the tokenizer's special tokens (its added tokens marked special) in message text."""

    def __init__(self, tokenizer):
        strings = sorted({t.content for t in tokenizer.added_tokens_decoder.values() if t.special}, key=len)
        self._pattern = re.compile("|".join(re.escape(s) for s in reversed(strings))) if strings else None

    def count(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """How many of `messages` hold a special token's string in any of their text (content, tool-call
        arguments, names: every string value, however nested)."""
        return sum(self._holds(_strings_in(message, keys=False)) for message in messages)

    def in_keys(self, value: Any) -> bool:
        """Whether a mapping key nested in `value` holds a special token's string. Keys are not tokenised as text
        (transformers' `sanitize_control_tokens` leaves them), and a template can print them (tool-call argument
        names, a tool schema's property names)."""
        return self._holds(_strings_in(value, keys=True))

    def _holds(self, texts) -> bool:
        return self._pattern is not None and any(self._pattern.search(text) for text in texts)


def _strings_in(value: Any, keys: bool):
    """The string values (`keys=False`) or the mapping keys (`keys=True`) nested in `value`."""
    if isinstance(value, str):
        if not keys:
            yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if keys and isinstance(key, str):
                yield key
            yield from _strings_in(item, keys)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings_in(item, keys)


def row_hint(env_extras: Mapping[str, Any] | None) -> str | None:
    """The hint a row's question ends with (`extra_info.hint`), or None; a hint that is not a non-empty string
    raises ValueError."""
    hint = ((env_extras or {}).get("extra_info") or {}).get("hint")
    if hint is not None and (not isinstance(hint, str) or not hint.strip()):
        raise ValueError(f"extra_info.hint must be a non-empty string, got {hint!r}")
    return hint


def prompt_without_hint(messages: ConversationType, hint: str) -> ConversationType:
    """`messages` with `hint` cut from the end of the last user message (`generator.train_without_hints`).

    Raises ValueError when that message does not end with the hint: the row's `extra_info.hint` must be the text
    its question ends with.
    """
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    content = messages[users[-1]].get("content") if users else None
    if not isinstance(content, str) or not content.rstrip().endswith(hint.strip()):
        raise ValueError(f"extra_info.hint {hint!r} is not the end of the prompt's last user message {content!r}")
    trimmed = content.rstrip()[: -len(hint.strip())].rstrip()
    return [dict(m, content=trimmed) if i == users[-1] else m for i, m in enumerate(messages)]


def get_generation_prompt_ids(tokenizer, **template_kwargs) -> list[int]:
    """The ids `add_generation_prompt=True` appends (e.g. `<|im_start|>assistant\\n`), found by diffing."""
    turn = [{"role": "user", "content": ""}]
    without = encode_chat(tokenizer, turn, False, **template_kwargs)
    with_prompt = encode_chat(tokenizer, turn, True, **template_kwargs)
    if with_prompt[: len(without)] != without:
        raise ValueError("the chat template's generation prompt is not a suffix of the templated conversation")
    return with_prompt[len(without) :]


class ObservationEncoder:
    """Tokenises messages on their own, exactly as the chat template would render them mid-conversation.

    The fixed-base trick: template [fixed base + messages] and drop the base's tokens. The base is tokenised
    once and cut just after its last EOS, so the result starts with whatever the template puts between an
    end-of-turn token and the next message (SmolLM2/ChatML: "\\n<|im_start|>user\\n..."), which is what follows
    the EOS the model sampled to end its turn.

    Observations are tool, web and user-simulator text: their content is tokenised as text (`encode_chat`'s
    `content_as_text`), so a special token's string in them never becomes the special token.
    """

    def __init__(self, tokenizer, **template_kwargs):
        self._tokenizer = tokenizer
        self._template_kwargs = template_kwargs
        base = encode_chat(tokenizer, FIXED_BASE_CONVERSATION, False, **template_kwargs)
        eos_positions = [i for i, token in enumerate(base) if token == tokenizer.eos_token_id]
        self._base_ids = base[: eos_positions[-1] + 1] if eos_positions else base

    def encode(self, messages: ConversationType, add_generation_prompt: bool) -> list[int]:
        ids = encode_chat(
            self._tokenizer,
            FIXED_BASE_CONVERSATION + list(messages),
            add_generation_prompt,
            content_as_text=True,
            **self._template_kwargs,
        )
        if ids[: len(self._base_ids)] != self._base_ids:
            raise ValueError("the chat template renders the fixed base differently when messages follow it")
        return ids[len(self._base_ids) :]


def trajectory_counters(
    stop_reason: str, empty_responses: int, retokenized_turns: int = 0, special_token_messages: int = 0
) -> dict[str, int]:
    """The generator's counters for one trajectory (every key of `GENERATOR_COUNTERS`, always present).
    `retokenized_turns` counts turns whose token ids a text-only engine re-encoded from text;
    `special_token_messages` counts messages put into the policy's context (the prompt after the env's init, then
    observations) that held a special token's string, which was tokenised as text."""
    counters = {
        "empty_responses": empty_responses,
        "retokenized_turns": retokenized_turns,
        "special_token_messages": special_token_messages,
    }
    counters.update({name: int(reason == stop_reason) for reason, name in FAILURE_COUNTERS.items()})
    return counters


def apply_overlong_filtering(loss_masks: list[list[int]], stop_reasons: Sequence[str]) -> list[list[int]]:
    """Zero the whole loss mask of every row that did not end with stop reason "stop" (DAPO overlong filter)."""
    return [
        mask if reason == StopReason.STOP else [0] * len(mask)
        for mask, reason in zip(loss_masks, stop_reasons, strict=True)
    ]


def zero_rewards_on_non_stop(
    rewards: list[float] | list[list[float]], stop_reasons: Sequence[str]
) -> list[float] | list[list[float]]:
    """Reward 0 (scalar or every token) for rows whose stop reason is not "stop"."""

    def zeroed(reward):
        return [0.0] * len(reward) if isinstance(reward, list) else 0.0

    return [
        reward if reason == StopReason.STOP else zeroed(reward)
        for reward, reason in zip(rewards, stop_reasons, strict=True)
    ]


def get_rollout_metrics(
    response_ids: Sequence[Sequence[int]],
    stop_reasons: Sequence[str],
    env_classes: Sequence[str],
    env_metrics: Sequence[Mapping[str, Any]],
    is_last_step: Sequence[bool] | None = None,
    weight_versions: Sequence[int | None] | None = None,
) -> dict[str, float]:
    """Rollout metrics of one generated batch (all lists aligned with the output rows).

    - `generate/{min,max,avg,std}_num_tokens`: response lengths of every row (observation tokens included);
    - `generate/stop_reason/<reason>`: trajectories per stop reason;
    - `generate/<counter>` and `environment/<env_class>/<counter>` for each of `GENERATOR_COUNTERS`
      (empty_responses and retokenized_turns count turns; special_token_messages counts prompt and observation
      messages whose special-token strings were tokenised as text; the failure counters count trajectories);
    - `environment/<env_class>/<key>`: the env class's `aggregate_metrics` over the `get_metrics()` of its
      trajectories whose env ran (infrastructure failures excluded).

    - `generate/{min,max}_weight_version`: the oldest and newest weight version that generated a row (rows whose
      version is unknown left out; absent when none is known).

    In step-wise mode pass `is_last_step`: trajectory-level numbers then come from last-step rows only.
    """
    lengths = [len(ids) for ids in response_ids]
    metrics: dict[str, float] = {
        "generate/min_num_tokens": min(lengths),
        "generate/max_num_tokens": max(lengths),
        "generate/avg_num_tokens": statistics.fmean(lengths),
        "generate/std_num_tokens": statistics.pstdev(lengths),
    }
    known_versions = [v for v in weight_versions or [] if v is not None]
    if known_versions:
        metrics["generate/min_weight_version"] = min(known_versions)
        metrics["generate/max_weight_version"] = max(known_versions)
    rows = [i for i in range(len(lengths)) if is_last_step is None or is_last_step[i]]
    for reason, count in Counter(stop_reasons[i] for i in rows).items():
        metrics[f"generate/stop_reason/{reason}"] = count

    counters: dict[str, dict[str, int]] = defaultdict(dict)
    env_episodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for i in rows:
        per_class = counters[env_classes[i]]
        for key, name in GENERATOR_COUNTERS.items():
            per_class[name] = per_class.get(name, 0) + int(env_metrics[i].get(key, 0))
        if stop_reasons[i] not in TrajectoryStopReason.INFRA_FAILURES:
            env_episodes[env_classes[i]].append(
                {k: v for k, v in env_metrics[i].items() if k not in GENERATOR_COUNTERS}
            )

    for name in GENERATOR_COUNTERS.values():
        metrics[f"generate/{name}"] = sum(per_class[name] for per_class in counters.values())
    for env_class, per_class in counters.items():
        metrics.update({f"environment/{env_class}/{name}": value for name, value in per_class.items()})
    for env_class, episodes in env_episodes.items():
        aggregated = aggregate_for_environment(env_class, episodes)
        metrics.update({f"environment/{env_class}/{key}": value for key, value in aggregated.items()})
    return metrics


class GenerationProgress(Progress):
    """The trajectories of one `generate` call (rollouts or eval) as they finish, with the tokens they sampled: a bar
    on a terminal, else log lines at most every `interval_s` seconds and at the end (`skyrl_gym.common.progress`).

    ``tokens_of(result)`` counts the tokens a finished agent-loop task's result sampled."""

    def __init__(self, total: int, label: str, tokens_of: Callable[[Any], int] = lambda _: 0, **kwargs: Any):
        super().__init__(total, label, unit="trajectory", units="trajectories", logger=logger, **kwargs)
        self.tokens_of = tokens_of

    def finished_one(self, task: asyncio.Future) -> None:
        """A done-callback of an agent-loop task: one more trajectory (a failed or cancelled one samples none)."""
        ok = not task.cancelled() and task.exception() is None
        self.advance(1, tokens=self.tokens_of(task.result()) if ok else 0)
        if self.done >= self.total:
            self.close()
