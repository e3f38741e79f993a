"""SFT rows are tokenised exactly as the generator tokenises a multi-turn episode, with loss mask 1 on the assistant's
tokens only (SmolLM2's real template; literal ids checked against the tokenizer in the first test).

Literal ids below:
    PROMPT  "<|im_start|>system\\nUse the tools.<|im_end|>\\n<|im_start|>user\\nPrice of AAPL?<|im_end|>\\n"
            "<|im_start|>assistant\\n"
    CALL    '<tool_call>{"name": "get_price", "arguments": {"ticker": "AAPL"}}</tool_call>'
    OBS     "\\n<|im_start|>tool\\n187.5<|im_end|>\\n<|im_start|>assistant\\n"
    ANSWER  "It is 187.5."
    EOS = 2 (<|im_end|>)      GENERATION_PROMPT "<|im_start|>assistant\\n"
"""

from __future__ import annotations

import copy

from skyrl_train.sft.conversations import Conversation, read_conversations, tool_call_text
from skyrl_train.sft.encoding import ConversationEncoder

from .conftest import TOOL_CONVERSATION, write_jsonl

PROMPT = [1, 9690, 198, 9801, 260, 2549, 30, 2, 198, 1, 4093, 198, 27148, 282, 48006, 60, 47, 2, 198, 1, 520, 9531, 198]
CALL = [44, 19324, 79, 4350, 46, 39428, 1245, 1799, 476, 726, 79, 17517, 1002, 476, 24370, 1799, 9583, 47083, 1799]
CALL += [476, 49, 3872, 60, 18, 17859, 9617, 19324, 79, 4350, 46]
OBS = [198, 1, 19324, 198, 33, 40, 39, 30, 37, 2, 198, 1, 520, 9531, 198]
ANSWER = [1589, 314, 216, 33, 40, 39, 30, 37, 30]
EOS = 2
GENERATION_PROMPT = [1, 520, 9531, 198]


def conversation(tmp_path, messages) -> Conversation:
    (row,) = read_conversations(str(write_jsonl(tmp_path / "rows.jsonl", [{"messages": messages}])))
    return row


def test_literal_ids_are_the_tokenizers_encoding(tokenizer):
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    prompt = "<|im_start|>system\nUse the tools.<|im_end|>\n<|im_start|>user\nPrice of AAPL?<|im_end|>\n"
    assert encode(prompt + "<|im_start|>assistant\n") == PROMPT
    assert encode('<tool_call>{"name": "get_price", "arguments": {"ticker": "AAPL"}}</tool_call>') == CALL
    assert encode("\n<|im_start|>tool\n187.5<|im_end|>\n<|im_start|>assistant\n") == OBS
    assert encode("It is 187.5.") == ANSWER
    assert encode("<|im_start|>assistant\n") == GENERATION_PROMPT


def test_a_tool_call_is_rendered_in_the_envs_call_format(tmp_path):
    row = conversation(tmp_path, TOOL_CONVERSATION)
    assert row.messages[2] == {
        "role": "assistant",
        "content": '<tool_call>{"name": "get_price", "arguments": {"ticker": "AAPL"}}</tool_call>',
    }
    assert tool_call_text("search", {"query": "Zürich"}) == (
        '<tool_call>{"name": "search", "arguments": {"query": "Zürich"}}</tool_call>'
    )


def test_content_before_tool_calls_comes_first_then_one_call_per_line(tmp_path):
    messages = copy.deepcopy(TOOL_CONVERSATION)
    messages[2]["content"] = "Let me look."
    messages[2]["tool_calls"].append({"type": "function", "function": {"name": "get_time", "arguments": {}}})
    assert conversation(tmp_path, messages).messages[2]["content"] == (
        "Let me look.\n"
        '<tool_call>{"name": "get_price", "arguments": {"ticker": "AAPL"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )


def test_a_multi_turn_tool_conversation_trains_on_the_assistant_tokens_only(tmp_path, tokenizer):
    example = ConversationEncoder(tokenizer).encode(conversation(tmp_path, TOOL_CONVERSATION).messages)
    assert example.prompt_ids == PROMPT
    assert example.response_ids == CALL + [EOS] + OBS + ANSWER + [EOS]
    assert example.loss_mask == [1] * (len(CALL) + 1) + [0] * len(OBS) + [1] * (len(ANSWER) + 1)


def test_last_assistant_message_only_trains_the_final_reply(tmp_path, tokenizer):
    messages = conversation(tmp_path, TOOL_CONVERSATION).messages
    example = ConversationEncoder(tokenizer).encode(messages, train_on="last_assistant_message")
    assert example.response_ids == CALL + [EOS] + OBS + ANSWER + [EOS]
    assert example.loss_mask == [0] * (len(CALL) + 1 + len(OBS)) + [1] * (len(ANSWER) + 1)


def test_messages_after_the_last_reply_are_dropped_as_the_generator_drops_the_final_observation(tmp_path, tokenizer):
    messages = [*TOOL_CONVERSATION, {"role": "user", "content": "Thanks!"}]
    example = ConversationEncoder(tokenizer).encode(conversation(tmp_path, messages).messages)
    assert example.response_ids == CALL + [EOS] + OBS + ANSWER + [EOS]


def test_a_reply_right_after_a_reply_follows_the_generation_prompt_alone(tmp_path, tokenizer):
    """As the generator continues after an env step that returned no observation."""
    messages = [*TOOL_CONVERSATION[:2], {"role": "assistant", "content": "It is 187.5."}, TOOL_CONVERSATION[4]]
    example = ConversationEncoder(tokenizer).encode(conversation(tmp_path, messages).messages)
    assert example.response_ids == ANSWER + [EOS] + GENERATION_PROMPT + ANSWER + [EOS]
    assert example.loss_mask == [1] * (len(ANSWER) + 1) + [0] * 4 + [1] * (len(ANSWER) + 1)


def test_a_prompt_completion_row_keeps_the_prompts_worked_example_in_the_prompt(tmp_path, tokenizer):
    """TRL's prompt-completion form: an assistant message inside ``prompt`` (a worked example of an env's opening) is
    rendered by the chat template as prompt; training starts at the completion."""
    example_turn = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    prompt = [TOOL_CONVERSATION[0], *example_turn, TOOL_CONVERSATION[1]]
    path = write_jsonl(tmp_path / "rows.jsonl", [{"prompt": prompt, "completion": TOOL_CONVERSATION[2:]}])
    (row,) = read_conversations(str(path))
    assert row.prompt_length == 4
    example = ConversationEncoder(tokenizer).encode(row.messages, prompt_length=row.prompt_length)
    worked = tokenizer.encode(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n", add_special_tokens=False
    )
    assert example.prompt_ids == PROMPT[:9] + worked + PROMPT[9:]
    assert example.response_ids == CALL + [EOS] + OBS + ANSWER + [EOS]
    assert example.loss_mask == [1] * (len(CALL) + 1) + [0] * len(OBS) + [1] * (len(ANSWER) + 1)


def test_an_assistant_turn_of_weight_0_stays_in_the_context_out_of_the_loss(tmp_path, tokenizer):
    """OpenAI's fine-tuning ``weight``: a deliberate mistake the conversation recovers from is not trained on."""
    messages = copy.deepcopy(TOOL_CONVERSATION)
    messages[2]["weight"] = 0
    row = conversation(tmp_path, messages)
    assert "weight" in row.messages[2]
    example = ConversationEncoder(tokenizer).encode(row.messages, prompt_length=row.prompt_length)
    assert example.response_ids == CALL + [EOS] + OBS + ANSWER + [EOS]
    assert example.loss_mask == [0] * (len(CALL) + 1 + len(OBS)) + [1] * (len(ANSWER) + 1)
