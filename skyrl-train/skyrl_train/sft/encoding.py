"""Conversations -> training rows, tokenised exactly as the generator tokenises a multi-turn episode.

The generator (`skyrl_train.generators.skyrl_gym_generator`, multi-turn mode) builds an episode's tokens as:

- the prompt: the conversation's prompt messages (`Conversation.prompt_length`: those before the first assistant turn,
  or a prompt-completion row's whole ``prompt``), through the chat template with the generation prompt
  (`generators.utils.encode_chat`);
- each assistant turn: the tokens the model sampled, ending with its end-of-turn token (EOS), loss mask 1;
- each block of observations between two assistant turns: those messages tokenised on their own with the fixed-base
  trick (`generators.utils.ObservationEncoder`, generation prompt included), loss mask 0; an assistant turn that
  directly follows another gets the generation prompt alone (`generators.utils.get_generation_prompt_ids`), as the
  generator does after an env step with no observation;
- nothing after the last assistant turn (the generator drops the final observation).

`ConversationEncoder` builds the same from a conversation, with an assistant turn's tokens being the tokenizer's
encoding of its text plus EOS: what a model that had written that text would have sampled. The encoding functions are
the generator's own, called, not copied, so any change to how the generator tokenises reaches SFT too. With
``train_on="last_assistant_message"`` only the last assistant turn of weight 1 has loss mask 1; an assistant turn of ``weight`` 0
has loss mask 0 either way.

`SFTDataset` encodes every conversation of its sources once and refuses, naming the file and row, any row longer than
``max_length`` tokens (prompt and response), unless ``truncation="truncate"``: the row is then cut to its first
``max_length`` tokens and counted (`SFTExample.truncated`), and only a row with no loss token left is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch

from skyrl_train.dataset import DatasetValidationError, RowProblem, convert_prompts_responses_to_batch_tensors
from skyrl_train.dataset.validation import MAX_REPORTED_ROWS
from skyrl_train.generators.utils import ObservationEncoder, encode_chat, get_generation_prompt_ids
from skyrl_train.serve.prompting import ChatRenderer
from skyrl_train.sft.conversations import Conversation, read_conversations
from skyrl_train.training_batch import TrainingInputBatch

__all__ = ["ConversationEncoder", "SFTDataset", "SFTExample", "TrainOn", "Truncation", "collate", "sft_datasets"]


class TrainOn(StrEnum):
    """``sft.train_on_what``: which assistant turns have loss mask 1 (upstream SkyRL's names)."""

    ALL_ASSISTANT_MESSAGES = "all_assistant_messages"
    LAST_ASSISTANT_MESSAGE = "last_assistant_message"


class Truncation(StrEnum):
    """``sft.truncation``: what a row longer than ``sft.max_length`` gets."""

    ERROR = "error"
    TRUNCATE = "truncate"


@dataclass(frozen=True)
class SFTExample:
    """One encoded conversation: ``prompt_ids`` then ``response_ids`` (everything from the first assistant turn on),
    with ``loss_mask`` over the response."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    truncated: bool = False


class ConversationEncoder:
    """Encodes conversations as the generator encodes an episode (module docstring), with the tokenizer's chat template
    and ``chat_template_kwargs`` (``generator.chat_template_kwargs``)."""

    def __init__(self, tokenizer, chat_template_kwargs: Mapping[str, Any] | None = None):
        self.tokenizer = tokenizer
        self.template_kwargs = dict(chat_template_kwargs or {})
        self.observations = ObservationEncoder(tokenizer, **self.template_kwargs)
        self.generation_prompt_ids = get_generation_prompt_ids(tokenizer, **self.template_kwargs)
        self.renders_tools = ChatRenderer(tokenizer).tool_mode == "chat_template"
        """Whether the chat template puts tool schemas into the prompt (a row's ``tools`` need it)."""

    def encode(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        train_on: TrainOn | str = TrainOn.ALL_ASSISTANT_MESSAGES,
        prompt_length: int | None = None,
    ) -> SFTExample:
        """The example of ``messages`` (checked by `read_conversations`), whose first ``prompt_length`` messages are
        the prompt (None: those before the first assistant message); ``tools`` go to the chat template with the
        prompt (a template that ignores them raises ValueError). An assistant message with ``weight`` 0 stays out of
        the loss."""
        if tools and not self.renders_tools:
            raise ValueError(
                "the row has tools, but this tokenizer's chat template does not render tool schemas: put them into "
                "the system message, as the env's prompt does"
            )
        if prompt_length is None:
            prompt_length = next(i for i, message in enumerate(messages) if message.get("role") == "assistant")
        assistant = [i for i in range(prompt_length, len(messages)) if messages[i].get("role") == "assistant"]
        weighted = [i for i in assistant if messages[i].get("weight", 1) == 1]
        trained = set(weighted) if TrainOn(train_on) is TrainOn.ALL_ASSISTANT_MESSAGES else {weighted[-1]}
        extra = {"tools": tools} if tools else {}
        prompt_ids = encode_chat(self.tokenizer, list(messages[:prompt_length]), True, **self.template_kwargs, **extra)
        response: list[int] = []
        loss_mask: list[int] = []
        for turn, index in enumerate(assistant):
            if turn > 0:  # the observations since the previous assistant turn
                between = list(messages[assistant[turn - 1] + 1 : index])
                observation = self.observations.encode(between, True) if between else list(self.generation_prompt_ids)
                response += observation
                loss_mask += [0] * len(observation)
            sampled = self.tokenizer.encode(messages[index]["content"], add_special_tokens=False)
            sampled.append(self.tokenizer.eos_token_id)
            response += sampled
            loss_mask += [int(index in trained)] * len(sampled)
        return SFTExample(prompt_ids, response, loss_mask)


class SFTDataset(Sequence[SFTExample]):
    """The encoded conversations of ``sources`` (concatenated in order); see the module docstring.

    Raises:
        DatasetValidationError: bad rows (`read_conversations`), rows the template cannot render, over-long rows
            (naming each file, row and length).
    """

    def __init__(
        self,
        sources: Sequence[str],
        encoder: ConversationEncoder,
        *,
        max_length: int,
        truncation: Truncation | str = Truncation.ERROR,
        train_on: TrainOn | str = TrainOn.ALL_ASSISTANT_MESSAGES,
        messages_key: str = "messages",
        tools_key: str = "tools",
    ):
        self.examples: list[SFTExample] = []
        for source in sources:
            conversations = read_conversations(source, messages_key, tools_key)
            problems: list[RowProblem] = []
            for conversation in conversations:
                example = self._example(conversation, encoder, max_length, Truncation(truncation), train_on, problems)
                if example is not None:
                    self.examples.append(example)
            if problems:
                rows = sorted({p.row for p in problems})
                shown = [p for p in problems if p.row in rows[:MAX_REPORTED_ROWS]]
                raise DatasetValidationError(source, shown, len(rows))

    @staticmethod
    def _example(
        conversation: Conversation,
        encoder: ConversationEncoder,
        max_length: int,
        truncation: Truncation,
        train_on: TrainOn | str,
        problems: list[RowProblem],
    ) -> SFTExample | None:
        def problem(field: str, message: str) -> None:
            problems.append(RowProblem(conversation.source, conversation.row, field, message))

        try:
            example = encoder.encode(conversation.messages, conversation.tools, train_on, conversation.prompt_length)
        except Exception as error:  # the chat template raising on a message it cannot render (jinja, TypeError, ...)
            problem("<template>", str(error))
            return None
        length = len(example.prompt_ids) + len(example.response_ids)
        if length <= max_length:
            return example
        if truncation is Truncation.ERROR:
            problem(
                "<length>", f"{length} tokens, more than sft.max_length={max_length} (sft.truncation=truncate cuts it)"
            )
            return None
        kept = max_length - len(example.prompt_ids)
        if kept <= 0 or not any(example.loss_mask[:kept]):
            problem(
                "<length>",
                f"cut to sft.max_length={max_length} tokens it has no assistant token left to train on (the prompt "
                f"alone is {len(example.prompt_ids)} tokens)",
            )
            return None
        return SFTExample(example.prompt_ids, example.response_ids[:kept], example.loss_mask[:kept], truncated=True)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> SFTExample:  # type: ignore[override]
        return self.examples[index]

    @property
    def truncated_rows(self) -> int:
        return sum(example.truncated for example in self.examples)


def collate(examples: Sequence[SFTExample], pad_token_id: int) -> TrainingInputBatch:
    """The batch of ``examples``: ``sequences`` (prompts left-padded, responses right-padded), ``attention_mask``,
    ``response_mask``, ``loss_mask`` (as `convert_prompts_responses_to_batch_tensors` lays out an RL batch) and
    ``truncated`` ``[B]`` (bool)."""
    batch = convert_prompts_responses_to_batch_tensors(
        pad_token_id,
        [example.prompt_ids for example in examples],
        [example.response_ids for example in examples],
        [[0.0] * len(example.response_ids) for example in examples],
        [example.loss_mask for example in examples],
    )
    del batch["rewards"], batch["rollout_logprobs"]
    batch["truncated"] = torch.tensor([example.truncated for example in examples])
    return batch


def sft_datasets(cfg, tokenizer) -> tuple[SFTDataset, SFTDataset | None]:
    """``sft.train_data`` and ``sft.eval_data`` (None when empty), encoded as the ``sft`` block says with the
    generator's chat template kwargs (``generator.chat_template_kwargs``), so that they match the RL episodes."""
    s = cfg.sft
    encoder = ConversationEncoder(tokenizer, cfg.generator.chat_template_kwargs)

    def dataset(sources: list[str]) -> SFTDataset:
        return SFTDataset(
            sources,
            encoder,
            max_length=s.max_length,
            truncation=s.truncation,
            train_on=s.train_on_what,
            messages_key=s.messages_key,
            tools_key=s.tools_key,
        )

    return dataset(s.train_data), (dataset(s.eval_data) if s.eval_data else None)
