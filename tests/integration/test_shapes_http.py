"""The shapes users already have, over HTTP: OpenAI chat, Anthropic Messages and Responses items in and out.

Every answer is checked against the SDKs' own request types (extra keys
refused at every level) and the OpenAI one is sent through the real
``openai`` client to the test server, which checks ``messages`` as strictly
as the API does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam
from pydantic import ConfigDict, TypeAdapter

from memfold.client import AsyncClient, Client, Context, Prompt
from memfold.core.errors import ValidationError

_STRICT = ConfigDict(extra="forbid")


def _materialized(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _materialized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":  # pydantic's lazy Iterable
        return [_materialized(v) for v in value]
    return value


def assert_valid(adapter_type: Any, value: Any) -> None:
    """Assert ``value`` is an instance of the SDK request type, no key unknown to it anywhere, nothing coerced."""
    adapter = TypeAdapter(adapter_type, config=_STRICT)
    assert _materialized(adapter.validate_python(value)) == value


def _completion_json() -> dict[str, Any]:
    """A chat completion whose assistant message calls a tool, as the API sends it."""
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None, "message": {
            "role": "assistant", "content": None, "refusal": None, "annotations": [],
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "lookup_order", "arguments": '{"order": "#4411"}'}}]}}],
    }


def _sdk_assistant_message() -> dict[str, Any]:
    """The assistant message as the openai SDK returns it: ``ChatCompletionMessage.model_dump()``."""
    completion = ChatCompletion.model_validate(_completion_json())
    dumped = completion.choices[0].message.model_dump()
    assert {"refusal", "audio", "function_call", "annotations"} <= dumped.keys()  # what a caller really sends
    return dumped


OPENAI_TURNS: list[dict[str, Any]] = [
    {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Where is order #4411?"}]},
    _sdk_assistant_message(),
    {"role": "tool", "tool_call_id": "call_1", "name": "lookup_order", "content": "shipped on Monday"},
    {"role": "assistant", "content": "Order #4411 shipped on Monday."},
    {"role": "user", "content": "And the parcel for #4412?"},
    # memfold's flat shape, the documented compact alias
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_2", "name": "track", "arguments": "{}"}]},
    {"role": "tool", "tool_call_id": "call_2", "content": "in transit"},
    {"role": "assistant", "content": "#4412 is in transit."},
]


@pytest.fixture(scope="module")
def writer(service) -> str:
    return service.key("shapes", "writer")


@pytest.fixture(scope="module")
def chat(service, writer) -> str:
    """A conversation appended in the openai format, exactly as the SDK's objects dump."""
    with service.http(writer) as http:
        r = http.post("/v1/conversations/chat-1/messages", params={"wait": "true"}, json={"messages": OPENAI_TURNS})
        assert r.status_code == 201, r.text
        assert len(r.json()["messages"]) == len(OPENAI_TURNS)
    return "chat-1"


def test_openai_chat_messages_are_stored_with_their_tool_calls_and_names(service, writer, chat):
    with service.http(writer) as http:
        stored = http.get(f"/v1/conversations/{chat}/messages").json()["messages"]
    assert [m["role"] for m in stored] == [m["role"] for m in OPENAI_TURNS]
    assert stored[0]["content"] == "Where is order #4411?" and stored[0]["name"] == "ann"
    assert stored[1]["tool_calls"] == [{"id": "call_1", "name": "lookup_order", "arguments": '{"order": "#4411"}'}]
    assert stored[1]["content"] == ""
    assert (stored[2]["tool_call_id"], stored[2]["name"]) == ("call_1", "lookup_order")
    assert stored[5]["tool_calls"] == [{"id": "call_2", "name": "track", "arguments": "{}"}]


def test_the_default_context_is_what_the_openai_sdk_takes_and_the_strict_server_accepts(service, writer, chat,
                                                                                       openai_server):
    with service.http(writer) as http:
        body = http.get(f"/v1/conversations/{chat}/context").json()
    assert body["format"] == "openai"
    messages, notes = body["messages"], body["memfold"]
    assert_valid(list[ChatCompletionMessageParam], messages)
    assert len(notes) == len(messages)
    calling = next(i for i, m in enumerate(messages) if m.get("tool_calls"))
    assert messages[calling] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order": "#4411"}'}}]}
    assert messages[calling + 1] == {"role": "tool", "content": "shipped on Monday", "tool_call_id": "call_1"}
    assert notes[calling + 1]["name"] == "lookup_order"  # the tool's name, which the chat shape has no place for
    assert {n["kind"] for n in notes} >= {"verbatim"} and all("tokens" in n for n in notes)
    assert {"role": "user", "name": "ann", "content": "Where is order #4411?"} in messages
    client = openai.OpenAI(base_url=openai_server.url, api_key="test", max_retries=0)
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert answer.choices[0].message.content
    assert openai_server.requests[-1].body["messages"] == messages


def test_the_strict_test_server_refuses_the_compact_form(service, writer, chat, openai_server):
    with service.http(writer) as http:
        compact = http.get(f"/v1/conversations/{chat}/context", params={"format": "compact"}).json()
    client = openai.OpenAI(base_url=openai_server.url, api_key="test", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="unrecognized key"):
        client.chat.completions.create(model="gpt-4o-mini", messages=compact["messages"])
    orphan = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]
    with pytest.raises(openai.BadRequestError, match="must be a response to a preceding message"):
        client.chat.completions.create(model="gpt-4o-mini", messages=orphan)


def test_compact_is_todays_annotated_form_with_the_tool_name(service, writer, chat):
    with service.http(writer) as http:
        body = http.get(f"/v1/conversations/{chat}/context", params={"format": "compact"}).json()
    assert {"conversation_id", "policy", "budget", "tokens", "messages"} <= body.keys() and "memfold" not in body
    assert all({"role", "content", "kind", "tokens"} <= m.keys() for m in body["messages"])
    calls = [m for m in body["messages"] if m.get("tool_calls")]
    assert calls[0]["tool_calls"] == [{"id": "call_1", "name": "lookup_order", "arguments": '{"order": "#4411"}'}]
    tool = next(m for m in body["messages"] if m.get("tool_call_id") == "call_1")
    assert tool["name"] == "lookup_order"


def test_the_anthropic_context_keeps_system_apart_and_uses_tool_blocks(service, writer):
    anthropic_types = pytest.importorskip("anthropic.types")
    with service.http(writer) as http:
        http.post("/v1/conversations/chat-sys/messages", params={"wait": "true"}, json={"messages": [
            {"role": "system", "content": "You are the shop's assistant."}, *OPENAI_TURNS]})
        body = http.get("/v1/conversations/chat-sys/context", params={"format": "anthropic"}).json()
    assert body["format"] == "anthropic"
    assert "You are the shop's assistant." in body["system"]
    assert all(m["role"] in ("user", "assistant") for m in body["messages"])
    assert_valid(list[anthropic_types.MessageParam], body["messages"])
    assert len(body["memfold"]) == len(body["messages"])
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    assert {"type": "tool_use", "id": "call_1", "name": "lookup_order", "input": {"order": "#4411"}} in blocks
    assert {"type": "tool_result", "tool_use_id": "call_1", "content": "shipped on Monday"} in blocks


def test_the_responses_context_is_input_items(service, writer, chat, openai_server):
    with service.http(writer) as http:
        body = http.get(f"/v1/conversations/{chat}/context", params={"format": "responses"}).json()
    items = body["messages"]
    assert_valid(ResponseInputParam, items)
    assert len(body["memfold"]) == len(items)
    assert {"type": "function_call", "call_id": "call_1", "name": "lookup_order",
            "arguments": '{"order": "#4411"}'} in items
    assert {"type": "function_call_output", "call_id": "call_1", "output": "shipped on Monday"} in items
    client = openai.OpenAI(base_url=openai_server.url, api_key="test", max_retries=0)
    client.responses.create(model="gpt-5-nano", input=items)
    assert openai_server.requests[-1].body["input"] == items


def test_anthropic_and_responses_items_are_appended(service, writer):
    anthropic_turns = [
        {"role": "user", "content": "Where is #5001?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                                          {"type": "tool_use", "id": "tu_1", "name": "lookup_order",
                                           "input": {"order": "#5001"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "delivered"}]},
        {"role": "assistant", "content": "#5001 was delivered."},
    ]
    responses_items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And #5002?"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c_7", "name": "lookup_order", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c_7", "output": "lost"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "#5002 is lost.",
                                                              "annotations": []}]},
    ]
    with service.http(writer) as http:
        r = http.post("/v1/conversations/multi-1/messages", params={"wait": "true"},
                      json={"format": "anthropic", "messages": anthropic_turns})
        assert r.status_code == 201, r.text
        r = http.post("/v1/conversations/multi-1/messages", params={"wait": "true"},
                      json={"format": "responses", "messages": responses_items})
        assert r.status_code == 201, r.text
        stored = http.get("/v1/conversations/multi-1/messages").json()["messages"]
        context = http.get("/v1/conversations/multi-1/context").json()["messages"]
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "Where is #5001?"), ("assistant", "Let me look."), ("tool", "delivered"),
        ("assistant", "#5001 was delivered."), ("user", "And #5002?"), ("assistant", ""), ("tool", "lost"),
        ("assistant", "#5002 is lost.")]
    assert stored[1]["tool_calls"] == [{"id": "tu_1", "name": "lookup_order", "arguments": '{"order": "#5001"}'}]
    assert stored[6]["name"] == "lookup_order" and stored[6]["tool_call_id"] == "c_7"
    assert_valid(list[ChatCompletionMessageParam], context)


def test_an_append_retried_in_any_format_stores_nothing_twice(service, writer):
    turn = {"id": "a-1", "role": "assistant", "content": [
        {"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "tu_9", "name": "f", "input": {}}]}
    result = {"id": "r-1", "role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_9", "content": "ok"}]}
    with service.http(writer) as http:
        first = http.post("/v1/conversations/retry-1/messages", params={"wait": "true"},
                          json={"format": "anthropic", "messages": [turn, result]}).json()
        again = http.post("/v1/conversations/retry-1/messages", params={"wait": "true"},
                          json={"format": "anthropic", "messages": [turn, result]}).json()
        stored = http.get("/v1/conversations/retry-1/messages").json()["messages"]
    assert [m["event_id"] for m in again["messages"]] == [m["event_id"] for m in first["messages"]]
    assert [m["id"] for m in first["messages"]] == ["a-1", "r-1"]
    assert len(stored) == 2


@pytest.mark.parametrize("body, field, line", [
    ({"format": "openai", "messages": [{"role": "user", "content": "hi"},
                                       {"role": "assistant", "content": "x", "refusal": "I can't"}]}, "refusal", 2),
    ({"format": "openai", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
     "content[0].type", 1),
    ({"format": "openai", "messages": [{"role": "user", "content": "hi", "tenant_id": "other"}]}, "tenant_id", 1),
    ({"format": "openai", "messages": [{"role": "user", "content": "hi", "kind": "verbatim"}]}, None, 1),
    ({"format": "anthropic", "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "content[0].type", 1),
    ({"format": "responses", "messages": [{"type": "reasoning", "summary": []}]}, "type", 1),
])
def test_what_cannot_be_stored_is_refused_naming_the_item_and_field(service, writer, body, field, line):
    with service.http(writer) as http:
        r = http.post("/v1/conversations/refused-1/messages", json=body)
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["line"] == line
        if field is not None:
            assert error["field"] == field
        assert http.get("/v1/conversations/refused-1/messages").status_code == 404  # nothing written


def test_an_unknown_format_is_refused(service, writer, chat):
    with service.http(writer) as http:
        r = http.get(f"/v1/conversations/{chat}/context", params={"format": "gemini"})
        assert r.status_code == 422 and r.json()["error"]["field"].endswith("format"), r.text
        r = http.post(f"/v1/conversations/{chat}/messages", json={"format": "compact", "messages": OPENAI_TURNS[:1]})
        assert r.status_code == 422 and r.json()["error"]["field"].endswith("format"), r.text


def test_every_format_follows_appends_through_the_cache(service, writer):
    formats = ("openai", "anthropic", "responses", "compact")
    with service.http(writer) as http:
        def said() -> dict[str, str]:
            out = {}
            for fmt in formats:
                for _ in range(2):  # the second read of a format is answered from the cache
                    r = http.get("/v1/conversations/cache-f/context", params={"budget": 2000, "format": fmt})
                    assert r.status_code == 200, r.text
                out[fmt] = r.text
            return out

        http.post("/v1/conversations/cache-f/messages", params={"wait": "true"},
                  json={"messages": [{"role": "user", "content": "first note about #7001"}]})
        before = said()
        assert all("#7001" in text for text in before.values())
        http.post("/v1/conversations/cache-f/messages", params={"wait": "true"},
                  json={"messages": [{"role": "user", "content": "second note about #7002"}]})
        after = said()
        assert all("#7002" in text for text in after.values()), after
        assert before["openai"] != before["compact"] and '"kind"' not in after["openai"].split('"memfold"')[0]


def test_the_client_prompts_in_each_format_and_keeps_context_compact(service, writer):
    with Client(service.url, api_key=writer) as mf:
        mf.append("client-1", OPENAI_TURNS[:1])
        sdk_message = ChatCompletion.model_validate(_completion_json()).choices[0].message
        mf.append("client-1", [sdk_message])  # the SDK's object itself, as a reply gives it
        mf.append("client-1", OPENAI_TURNS[2:])
        assert mf.messages("client-1")[1].tool_calls == [
            {"id": "call_1", "name": "lookup_order", "arguments": '{"order": "#4411"}'}]
        prompt = mf.prompt("client-1", budget=4000)
        assert isinstance(prompt, Prompt) and prompt.format == "openai" and prompt.policy
        assert_valid(list[ChatCompletionMessageParam], prompt.messages)
        assert len(prompt.memfold) == len(prompt.messages)
        context = mf.context("client-1", budget=4000)
        assert isinstance(context, Context) and context.messages[0].kind
        assert [m.as_openai() for m in context.messages] == prompt.messages
        assert mf.prompt("client-1", format="responses").format == "responses"
        with pytest.raises(ValidationError, match="context"):  # compact is what context() gives
            mf.prompt("client-1", format="compact")

    async def run() -> Prompt:
        async with AsyncClient(service.url, api_key=writer) as mf:
            await mf.append("client-2", [{"role": "user", "content": "Where is #8001?"},
                                         {"role": "assistant", "content": [
                                             {"type": "tool_use", "id": "tu_3", "name": "lookup_order", "input": {}}]},
                                         {"role": "user", "content": [
                                             {"type": "tool_result", "tool_use_id": "tu_3", "content": "packed"}]}],
                            format="anthropic")
            return await mf.prompt("client-2", format="anthropic")

    shaped = asyncio.run(run())
    assert shaped.format == "anthropic"
    assert shaped.messages[-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu_3", "content": "packed"}]}


def test_the_audit_page_shows_tool_calls_and_the_tools_name(service, writer, chat):
    from memfold.cli.audit_page import render

    with service.http(writer) as http:
        report = http.get(f"/v1/conversations/{chat}/audit").json()
        stored = {m["index"]: m for m in http.get(f"/v1/conversations/{chat}/messages").json()["messages"]}
    # The tool fields each audit message row needs (projections/audit.py reads them from the same table).
    for m in report["messages"]:
        m.update({k: stored[m["index"]][k] for k in ("name", "tool_calls", "tool_call_id")})
    page = render(report)
    assert "→ lookup_order({&quot;order&quot;: &quot;#4411&quot;})" in page
    assert "<td>tool (lookup_order)</td>" in page and "↳ answers call_1" in page
    assert "<td>user (ann)</td>" in page
