"""The shapes against the real SDKs: a real engine in tmp_path, every output checked against the openai and anthropic
SDK types (no unknown key at any depth), and sent through the real ``openai`` client to the loopback server."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from anthropic.types import MessageParam
from fixtures.shaped_conversation import INPUTS, RESPONSES, check_sdk_type
from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam

from memfold.core.errors import ValidationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

SDK_TYPES = {"openai": ChatCompletionMessageParam, "anthropic": MessageParam, "responses": ResponseInputItemParam}


@pytest.fixture()
def engine(tmp_path):
    # A window wider than the conversation: every message stays verbatim, so a round trip shows all of it.
    settings = Settings.load(None, data_dir=tmp_path / "data", system_prompt="Be brief.",
                             sliding_window={"rolling_window_size": 50, "summarize_after_seq": 40})
    with MemoryEngine(settings) as eng:
        yield eng


def _essence(shaped) -> list:
    """Roles, texts, tool calls (arguments as JSON values) and pairing ids, read back through memfold's own input."""
    from memfold.core.shapes import messages_from

    items = shaped.messages if shaped.format != "compact" else [
        {k: v for k, v in m.items() if k not in ("kind", "tokens", "index", "occurred_at")} for m in shaped.messages]
    back = messages_from("openai" if shaped.format == "compact" else shaped.format, items)
    system = [shaped.system] if shaped.system else [m["content"] for m in back if m["role"] == "system"]
    out = []
    for m in back:
        if m["role"] != "system":  # Anthropic holds them apart, joined: compared joined in every shape
            calls = tuple((c["id"], c["name"], json.loads(c["arguments"])) for c in m.get("tool_calls") or ())
            out.append((m["role"], m["content"] or "", calls, m.get("tool_call_id")))
    return "\n\n".join(system), out


def test_a_conversation_appended_in_each_shape_reads_back_in_each_shape(engine):
    expected = None
    for source, items in INPUTS.items():
        engine.append_many([{**m, "conversation_id": source} for m in items], format=source)
    engine.wait_idle(60)
    for source in INPUTS:
        for target in ("openai", "anthropic", "responses", "compact"):
            out = engine.prompt(source, format=target)
            if target in SDK_TYPES:
                for message in out.messages:
                    check_sdk_type(message, SDK_TYPES[target])
            if target != "compact":  # compact carries its annotations inside each message
                assert len(out.memfold) == len(out.messages)
                assert all(n["conversation"] == source for n in out.memfold)
            got = _essence(out)
            expected = expected or got
            assert got == expected, (source, target)
    system, messages = expected
    assert system.startswith("Be brief.")
    assert messages[1] == ("assistant", "Checking both.", (("call_1", "weather", {"city": "Paris"}),
                                                           ("call_2", "weather", {"city": "Rome"})), None)
    assert [m[0] for m in messages] == ["user", "assistant", "tool", "tool", "user", "assistant"]


def test_the_sdk_assistant_message_appends_as_returned(engine):
    reply = ChatCompletionMessage.model_validate({
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_7", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}],
    })
    engine.append_message("sdk", "user", [{"type": "text", "text": "look it up"}])
    engine.append_many([{**reply.model_dump(), "conversation_id": "sdk"},
                        {"role": "tool", "tool_call_id": "call_7", "content": "found", "conversation_id": "sdk"}])
    engine.wait_idle(60)
    out = engine.prompt("sdk")
    assert out.messages[1:] == [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None, "tool_calls": [reply.tool_calls[0].model_dump()]},
        {"role": "tool", "content": "found", "tool_call_id": "call_7"},
    ]


def test_the_openai_shape_goes_straight_into_a_chat_call(engine, openai_server):
    engine.append_many([{**m, "conversation_id": "c"} for m in INPUTS["anthropic"]], format="anthropic")
    engine.wait_idle(60)
    messages = engine.prompt("c").messages
    client = openai.OpenAI(base_url=openai_server.url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(model="gpt-test", messages=messages)
    assert reply.choices[0].message.content  # the server checks the messages as strictly as OpenAI's API
    assert openai_server.requests[-1].body["messages"] == messages


def test_the_responses_shape_goes_straight_into_a_responses_call(engine, openai_server):
    engine.append_many([{**m, "conversation_id": "c"} for m in INPUTS["openai"]])
    engine.wait_idle(60)
    items = engine.prompt("c", format="responses").messages
    client = openai.OpenAI(base_url=openai_server.url, api_key="sk-test", max_retries=0)
    client.responses.create(model="gpt-test", input=items)
    assert openai_server.requests[-1].body["input"] == items


def test_an_agents_sdk_session_appends_as_it_stores_its_items(engine, tmp_path):
    from agents import SQLiteSession

    session = SQLiteSession("s1", db_path=tmp_path / "agents.sqlite")

    async def stored() -> list:
        await session.add_items(RESPONSES)
        return await session.get_items()

    items = asyncio.run(stored())
    engine.append_many([{**item, "conversation_id": "agent"} for item in items], format="responses")
    engine.wait_idle(60)
    out = engine.prompt("agent", format="responses")
    assert [m.get("type", "message") for m in out.messages[1:]] == [
        "message", "message", "function_call", "function_call", "function_call_output", "function_call_output",
        "message", "message"]
    assert out.memfold[3]["index"] == out.memfold[4]["index"] == 1  # both calls came from one stored message


def test_format_arguments_are_checked(engine):
    with pytest.raises(ValidationError) as err:
        engine.append_many([{"role": "user", "content": "x", "conversation_id": "c"}], format="gemini")
    assert err.value.field == "format"
    with pytest.raises(ValidationError) as err:
        engine.prompt("c", format=3)
    assert err.value.field == "format"
