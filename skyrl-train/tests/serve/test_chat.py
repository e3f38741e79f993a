"""`POST /v1/chat/completions`: the prompt is the chat template's, tools reach the prompt, tool-call parsing."""

from __future__ import annotations

import dataclasses
import json

import pytest

from skyrl_train.serve import create_app
from skyrl_train.serve.prompting import ChatRenderer, render_tools_block

from .conftest import CONTEXT, MODEL_NAME, stop_string_at

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def chat(**fields) -> dict:
    return {
        "model": MODEL_NAME,
        "max_tokens": 5,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
        **fields,
    }


def templated(tokenizer, messages, **kwargs) -> list[int]:
    return list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True, **kwargs)[
            "input_ids"
        ]
    )


async def test_response_has_the_openai_chat_shape(client):
    response = await client.post("/v1/chat/completions", json=chat(messages=MESSAGES))
    body = response.json()
    assert response.status_code == 200
    assert body["object"] == "chat.completion" and body["model"] == MODEL_NAME and body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert (choice["index"], choice["message"]["role"], choice["finish_reason"]) == (0, "assistant", "length")
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 5


async def test_prompt_is_the_chat_template_with_a_generation_prompt(client, tiny_tokenizer):
    body = (await client.post("/v1/chat/completions", json=chat(messages=MESSAGES))).json()
    assert body["choices"][0]["prompt_token_ids"] == templated(tiny_tokenizer, MESSAGES)
    assert body["usage"]["prompt_tokens"] == len(templated(tiny_tokenizer, MESSAGES))


async def test_text_parts_and_the_developer_role_are_rendered_as_plain_system_and_user_text(client, tiny_tokenizer):
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "2 + 2?"}]},
    ]
    body = (await client.post("/v1/chat/completions", json=chat(messages=messages))).json()
    expected = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is\n2 + 2?"}]
    assert body["choices"][0]["prompt_token_ids"] == templated(tiny_tokenizer, expected)


def test_smollm2_template_ignores_tools_so_they_go_to_the_system_message(tiny_tokenizer):
    assert ChatRenderer(tiny_tokenizer).tool_mode == "system_message"


async def test_tools_are_appended_to_the_system_message_when_the_template_ignores_them(client, tiny_tokenizer):
    body = (await client.post("/v1/chat/completions", json=chat(messages=MESSAGES, tools=[WEATHER_TOOL]))).json()
    system = {"role": "system", "content": "Be brief.\n\n" + render_tools_block([WEATHER_TOOL])}
    assert body["choices"][0]["prompt_token_ids"] == templated(tiny_tokenizer, [system, MESSAGES[1]])


def test_the_tools_block_names_each_tool_schema_and_the_call_format():
    block = render_tools_block([WEATHER_TOOL])
    assert json.dumps(WEATHER_TOOL) in block
    assert '<tool_call>\n{"name": "<tool name>", "arguments": {<arguments as JSON>}}\n</tool_call>' in block


def test_a_system_message_is_inserted_for_tools_when_there_is_none(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer)
    ids = renderer.render([{"role": "user", "content": "hi"}], [WEATHER_TOOL])
    system = {"role": "system", "content": render_tools_block([WEATHER_TOOL])}
    assert ids == templated(tiny_tokenizer, [system, {"role": "user", "content": "hi"}])


def test_earlier_assistant_tool_calls_are_written_as_tool_call_blocks_when_the_template_ignores_tools(tiny_tokenizer):
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    conversation = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
    ]
    ids = ChatRenderer(tiny_tokenizer).render(conversation, [WEATHER_TOOL])
    expected = [
        {"role": "system", "content": render_tools_block([WEATHER_TOOL])},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
    ]
    assert ids == templated(tiny_tokenizer, expected)


TOOLS_TEMPLATE = (
    "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}|{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}|{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


@pytest.fixture
def tools_tokenizer(tiny_model):
    """The tiny model's tokenizer with a chat template that renders tools."""
    from skyrl_train.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    tokenizer.chat_template = TOOLS_TEMPLATE
    return tokenizer


def test_a_template_that_renders_tools_gets_them_through_apply_chat_template(tools_tokenizer):
    renderer = ChatRenderer(tools_tokenizer)
    ids = renderer.render([{"role": "user", "content": "hi"}], [WEATHER_TOOL])
    assert renderer.tool_mode == "chat_template"
    assert tools_tokenizer.decode(ids) == "TOOLS:get_weather;|user: hi|assistant:"


@dataclasses.dataclass
class Call:
    name: str
    arguments: dict


@dataclasses.dataclass
class Parsed:
    calls: list[Call]
    text: str


def city_parser(text: str, tools: list[dict]) -> Parsed:
    """A parser for the test: every generation 'calls' the first tool with the generated text as the city."""
    return Parsed(calls=[Call(tools[0]["function"]["name"], {"city": text})], text="")


async def test_a_tool_call_parser_turns_generated_text_into_structured_tool_calls(engine, tiny_tokenizer):
    import httpx

    app = create_app(
        engine, tiny_tokenizer, served_model_name=MODEL_NAME, max_model_len=CONTEXT, tool_call_parser=city_parser
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        plain = (await client.post("/v1/chat/completions", json=chat(messages=MESSAGES))).json()["choices"][0]
        request = chat(messages=MESSAGES, tools=[WEATHER_TOOL], max_tokens=3)
        with_tools = (await client.post("/v1/chat/completions", json=request)).json()["choices"][0]
    assert "tool_calls" not in plain["message"]  # no tools in the request: the parser is not consulted
    text = tiny_tokenizer.decode(with_tools["token_ids"], skip_special_tokens=True)
    (call,) = with_tools["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call-")
    assert call["function"] == {"name": "get_weather", "arguments": json.dumps({"city": text})}
    assert with_tools["message"]["content"] is None
    assert with_tools["finish_reason"] == "length"  # a truncated generation stays "length"


async def test_finish_reason_is_tool_calls_when_a_call_was_parsed_from_a_stopped_generation(engine, tiny_tokenizer):
    import httpx

    app = create_app(
        engine, tiny_tokenizer, served_model_name=MODEL_NAME, max_model_len=CONTEXT, tool_call_parser=city_parser
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        request = chat(messages=MESSAGES, tools=[WEATHER_TOOL], max_tokens=8, temperature=1.0, seed=5)
        free = (await client.post("/v1/chat/completions", json=request)).json()
        _, stop = stop_string_at(tiny_tokenizer, free["choices"][0]["token_ids"])
        request["stop"] = [stop]
        choice = (await client.post("/v1/chat/completions", json=request)).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"


async def test_chat_logprobs_list_each_sampled_token(client, tiny_tokenizer):
    body = (await client.post("/v1/chat/completions", json=chat(messages=MESSAGES, logprobs=True))).json()
    choice = body["choices"][0]
    content = choice["logprobs"]["content"]
    assert [entry["token"] for entry in content] == [tiny_tokenizer.decode([t]) for t in choice["token_ids"]]
    assert all(entry["logprob"] <= 0 and entry["top_logprobs"] == [] for entry in content)


def test_without_max_tokens_a_chat_may_fill_the_rest_of_the_context(app, tiny_tokenizer):
    from skyrl_train.serve.protocol import ChatCompletionRequest

    request = ChatCompletionRequest(model=MODEL_NAME, messages=MESSAGES)
    prompt_ids, params = app.state.serving.prepare_chat(request)
    assert params.max_generate_length == CONTEXT - len(templated(tiny_tokenizer, MESSAGES))
