"""The OpenAI summarizer and embedder: the real ``openai`` client over HTTP to a loopback compatible server."""

from __future__ import annotations

import json
import math
import socket
from datetime import UTC, datetime

import msgspec
import pytest
from fixtures.openai_server import hang, model_says, rate_limited, reset, server_error

from memfold.core.errors import (
    EmbedderError,
    MemfoldError,
    SummarizerError,
    SummarizerOutputError,
    SummarizerTimeoutError,
)
from memfold.core.events import Fact, ToolCall
from memfold.core.ports import MessageRecord, SummaryInput
from memfold.core.settings import EmbedderSettings, Settings, SummarizerSettings
from memfold.projections.embedders import OpenAIEmbedder
from memfold.projections.openai_summarizer import FACTS_SCHEMA, OpenAISummarizer, backoff_delay
from memfold.projections.prompts import prompt_hash
from memfold.projections.summarizers import build_embedder, build_summarizer

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
PROMPT_ID = "pmpt_6917ebe9367c819396fe4840cf0f0e050c18a965a3366120"


def conversation(*items: tuple, start: int = 0) -> tuple[MessageRecord, ...]:
    out = []
    for i, item in enumerate(items, start=start):
        role, content, *extra = item
        out.append(
            MessageRecord(
                tenant_id="t", conversation_id="c", index=i, seq=i + 1, event_id=f"e{i}", role=role,
                content=content, tokens=0, occurred_at=T0, **(extra[0] if extra else {}),
            )
        )
    return tuple(out)


CHAT = conversation(
    ("user", "I'd like to cancel order #1234"),
    ("assistant", "I can help with that. Your order totals $50."),
    ("user", "Please refund it to my card."),
    ("assistant", "Done: a refund of $50 is on its way."),
)


class Sleeps(list):
    """An injectable clock: records the delays instead of waiting them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make(server, sleeps=None, **overrides) -> OpenAISummarizer:
    fields = {"kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "sk-test",
              "timeout_s": 5.0, "max_retries": 3, "backoff_base_s": 0.25, "backoff_max_s": 1.0}
    fields.update(overrides)
    return OpenAISummarizer(SummarizerSettings(**fields), sleep=sleeps if sleeps is not None else Sleeps())


def facts_request(**kw) -> SummaryInput:
    return SummaryInput(policy="hierarchical", kind="facts", messages=CHAT, **kw)


# --------------------------------------------------------------------------- happy paths


def test_facts_path_sends_a_strict_json_schema_and_parses_facts(openai_server):
    s = make(openai_server)
    out = s.summarize(facts_request(existing_facts=(Fact(key="customer_name", value="Ann", category="ENTITY"),)))
    assert [(f.key, f.value, f.category) for f in out.facts] == [("order_id", "#1234", "ENTITY"), ("amount", "$50", "NUMERIC")]
    assert out.text.startswith("The conversation has 4 lines.")
    assert out.model == "gpt-test" and out.prompt_hash == prompt_hash("facts")
    [req] = openai_server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-test"
    assert req.body["model"] == "gpt-test"
    assert req.body["response_format"] == {"type": "json_schema", "json_schema": FACTS_SCHEMA}
    schema = req.body["response_format"]["json_schema"]
    assert schema["strict"] is True
    assert schema["schema"]["properties"]["facts"]["items"]["properties"]["category"]["enum"] == [
        "ENTITY", "DECISION", "CONDITION", "STATE", "NUMERIC", "GENERAL"]
    user = req.body["messages"][-1]["content"]
    assert "## Existing facts (merge, update, or remove as needed):\n- customer_name: Ann\n" in user
    assert "[user]: I'd like to cancel order #1234\n[assistant]: I can help with that." in user


def test_a_prompt_over_max_input_tokens_leaves_out_its_oldest_messages(openai_server):
    # An import's first sliding-window catch-up is fed every message since memory 1: far more than a model takes.
    long_chat = conversation(*[("user" if i % 2 == 0 else "assistant", f"turn {i}: " + "lorem ipsum " * 40)
                               for i in range(200)], start=6)
    request = SummaryInput(policy="sliding_window", kind="text", messages=long_chat, existing_summary="Key facts:\n- x: 1",
                           window_start=192, keep_facts=True)
    out = make(openai_server, max_input_tokens=3_000).summarize(request)
    assert out.text
    user = openai_server.requests[-1].body["messages"][-1]["content"]
    from memfold.core.tokens import counter

    assert counter().count(user) <= 3_000 and "## Previous summary:\nKey facts:\n- x: 1" in user
    assert "[205][assistant]: turn 199" in user and "[6][user]: turn 0:" not in user  # newest kept, oldest left out
    assert "keep every key fact of the previous summary" in user


def test_a_single_message_over_max_input_tokens_fails_the_summary_plainly(openai_server):
    huge = conversation(("user", "word " * 5_000))
    with pytest.raises(SummarizerError, match="max_input_tokens"):
        make(openai_server, max_input_tokens=1_000).summarize(SummaryInput(policy="rolling", kind="text", messages=huge))
    assert openai_server.requests == []  # nothing sent


def test_usage_from_the_server_is_recorded(openai_server):
    openai_server.script(model_says('{"facts": [], "narrative": "' + "n" * 400 + '"}'))
    out = make(openai_server).summarize(facts_request())
    prompt = "\n".join(m["content"] for m in openai_server.requests[0].body["messages"])
    assert out.tokens_in == len(prompt) // 4  # the server's usage.prompt_tokens, not our own count
    assert out.tokens_out == len('{"facts": [], "narrative": "' + "n" * 400 + '"}') // 4


def test_narrative_is_cut_to_the_token_cap(openai_server):
    openai_server.script(model_says(json.dumps({"facts": [], "narrative": "word " * 300})))
    out = make(openai_server).summarize(facts_request(token_cap=20))
    from memfold.core.tokens import counter

    assert 0 < counter().count(out.text) <= 20


def test_text_path_returns_the_model_text(openai_server):
    s = make(openai_server)
    out = s.summarize(SummaryInput(policy="rolling", kind="text", messages=CHAT, existing_summary="S1", char_cap=2000))
    [req] = openai_server.requests
    assert "response_format" not in req.body
    assert req.body["messages"][0] == {"role": "system", "content": "You are a conversation summarizer."}
    assert "## Previous summary:\nS1" in req.body["messages"][1]["content"]
    assert "\nSummary " in out.text and "4 messages" in out.text
    assert out.text.startswith("Key facts:\n- order_id: #1234 (msg 0)")  # the prompt asks for them first
    assert [(f.key, f.value, f.stated_in) for f in out.facts] == [("order_id", "#1234", 0), ("amount", "$50", 3)]
    assert out.prompt_hash == prompt_hash("rolling")


def test_a_sliding_window_text_summary_returns_its_key_facts_carried_and_dated(openai_server):
    """The model lists the key facts as the prompt asks; they come back structured, merged with those it was given."""
    T1 = datetime(2024, 3, 2, 9, 0, tzinfo=UTC)
    chat = conversation(
        ("user", "I'd like to cancel order #1234"),
        ("assistant", "I can help with that. Your order totals $50."),
        ("user", "Actually it was $60 with shipping."),
        ("assistant", "Right: a refund of $60 is on its way."),
        start=10,
    )
    chat = (*chat[:3], msgspec.structs.replace(chat[3], occurred_at=T1))
    existing = (
        Fact(key="phone", value="+1 720-555-0100", category="ENTITY", stated_in=2),
        Fact(key="refund_amount", value="$50", category="NUMERIC", stated_in=4),
    )
    openai_server.script(model_says(
        "**Key facts:**\n"
        "- **Order number**: #1234 (msg 10)\n"
        "- refund_amount: $60 (msg 13)\n"
        "- no colon in this line\n"
        "\n"
        "Summary: the customer cancelled the order and is being refunded."))
    request = SummaryInput(policy="sliding_window", kind="text", messages=chat, existing_summary="S1",
                           existing_facts=existing, window_start=10, keep_facts=True, token_cap=400)
    out = make(openai_server).summarize(request)
    assert [(f.key, f.value, f.category, f.stated_in, f.superseded_by) for f in out.facts] == [
        ("phone", "+1 720-555-0100", "ENTITY", 2, None),  # not listed again: carried
        ("order_number", "#1234", "ENTITY", 10, None),
        ("refund_amount", "$50", "NUMERIC", 4, "$60"),  # changed: the old value kept, superseded
        ("refund_amount", "$60", "NUMERIC", 13, None),
    ]
    assert out.facts[-1].stated_at == T1 and out.facts[1].stated_at == T0
    assert out.text.startswith("**Key facts:**")  # the memory text is the model's, as it wrote it
    [req] = openai_server.requests
    assert '"- key: value (msg N)"' in req.body["messages"][1]["content"]
    assert "[13][assistant]: Right: a refund of $60 is on its way." in req.body["messages"][1]["content"]
    assert out.prompt_hash == prompt_hash("sliding_window_facts")


def test_a_text_summary_without_key_facts_returns_none(openai_server):
    openai_server.script(model_says("Summary: the customer cancelled order #1234 and was refunded $50."))
    out = make(openai_server).summarize(SummaryInput(policy="rolling", kind="text", messages=CHAT, existing_facts=(
        Fact(key="order_id", value="#1234"),)))
    assert out.facts == ()  # only a window that keeps facts carries the ones it was given


def test_chunked_goes_to_the_responses_api_with_the_hosted_prompt_and_exact_input(openai_server):
    s = make(openai_server)
    request = SummaryInput(
        policy="chunked", kind="text", prompt_format="chunked", messages=CHAT, existing_summary=None,
        prompt_id=PROMPT_ID, prompt_version="7", token_cap=500,
    )
    out = s.summarize(request)
    [req] = openai_server.requests
    assert req.path == "/v1/responses"
    assert req.body["prompt"] == {"id": PROMPT_ID, "version": "7"}
    assert "model" not in req.body  # the hosted prompt names the model
    assert req.body["input"] == (
        "=== EXISTING_SUMMARY ===\nNONE\n=== END_EXISTING_SUMMARY ===\n\n"
        "=== NEW_TURNS ===\n"
        "Turn 1:\nUser: I'd like to cancel order #1234\nAssistant: I can help with that. Your order totals $50.\n\n"
        "Turn 2:\nUser: Please refund it to my card.\nAssistant: Done: a refund of $50 is on its way.\n"
        "=== END_NEW_TURNS ==="
    )
    assert out.text.startswith(f"Global summary (prompt {PROMPT_ID} v7):")
    assert out.model == "gpt-5-nano" and out.tokens_in == len(req.body["input"]) // 4
    assert out.prompt_hash != prompt_hash("chunked")


def test_responses_api_without_version_and_chat_fallback_when_disabled(openai_server):
    request = SummaryInput(policy="chunked", kind="text", prompt_format="chunked", messages=CHAT[:2],
                           existing_summary="Earlier: greeting.", prompt_id=PROMPT_ID)
    make(openai_server).summarize(request)
    assert openai_server.requests[-1].body["prompt"] == {"id": PROMPT_ID}
    assert openai_server.requests[-1].body["input"].startswith("=== EXISTING_SUMMARY ===\nEarlier: greeting.\n")
    make(openai_server, chunked_use_responses=False).summarize(request)
    last = openai_server.requests[-1]
    assert last.path == "/v1/chat/completions"
    assert last.body["messages"][1]["content"].startswith("=== EXISTING_SUMMARY ===\nEarlier: greeting.\n")
    assert "NEW_TURNS" in last.body["messages"][0]["content"]


def test_tool_calls_reach_the_prompt_as_such(openai_server):
    msgs = conversation(
        ("user", "Where is #55?"),
        ("assistant", "", {"tool_calls": (ToolCall(id="k1", name="track", arguments='{"id": 55}'),)}),
        ("tool", "in transit", {"tool_call_id": "k1"}),
    )
    make(openai_server).summarize(SummaryInput(policy="hierarchical", kind="facts", messages=msgs))
    user = openai_server.requests[0].body["messages"][-1]["content"]
    assert '[assistant]: [tool call track({"id": 55})]\n[tool]: [tool result track] in transit' in user


# --------------------------------------------------------------------------- retries


def test_retries_429_and_500_then_succeeds_honouring_retry_after(openai_server):
    openai_server.script(rate_limited(retry_after="2"), server_error(500), server_error(503))
    sleeps = Sleeps()
    out = make(openai_server, sleeps).summarize(facts_request())
    assert out.facts and len(openai_server.requests) == 4
    # Retry-After wins for the 429; then the deterministic schedule base*2**n, capped at max.
    assert sleeps == [2.0, backoff_delay(1, 0.25, 1.0), backoff_delay(2, 0.25, 1.0)] == [2.0, 0.5, 1.0]


def test_gives_up_after_max_retries_with_the_reason(openai_server):
    openai_server.script(*[rate_limited(retry_after="1")] * 3)
    sleeps = Sleeps()
    with pytest.raises(SummarizerError, match="HTTP 429.*after 3 attempts") as info:
        make(openai_server, sleeps, max_retries=2).summarize(facts_request())
    assert type(info.value) is SummarizerError and info.value.retry_after == 1.0
    assert len(openai_server.requests) == 3 and sleeps == [1.0, 1.0]


def test_a_retry_after_beyond_the_ceiling_is_not_waited_for(openai_server):
    openai_server.script(rate_limited(retry_after="3600"))
    sleeps = Sleeps()
    with pytest.raises(SummarizerError) as info:
        make(openai_server, sleeps).summarize(facts_request())
    assert info.value.retry_after == 3600.0 and sleeps == [] and len(openai_server.requests) == 1


def test_connection_reset_is_retried(openai_server):
    openai_server.script(reset())
    sleeps = Sleeps()
    out = make(openai_server, sleeps).summarize(facts_request())
    assert out.facts and len(openai_server.requests) == 2 and sleeps == [0.25]


def test_client_errors_are_not_retried(openai_server):
    openai_server.script(server_error(400))
    with pytest.raises(SummarizerError, match="HTTP 400: scripted 400"):
        make(openai_server).summarize(facts_request())
    assert len(openai_server.requests) == 1


def test_unreachable_server_is_a_summarizer_error():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now: connection refused
    sleeps = Sleeps()
    s = OpenAISummarizer(
        SummarizerSettings(kind="openai", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=1),
        sleep=sleeps,
    )
    with pytest.raises(SummarizerError, match="cannot reach .* after 2 attempts") as info:
        s.summarize(facts_request())
    assert not isinstance(info.value, SummarizerTimeoutError) and sleeps == [0.5]


# --------------------------------------------------------------------------- failures


def test_timeout_raises_summarizer_timeout_error(openai_server):
    openai_server.script(hang(seconds=30))
    with pytest.raises(SummarizerTimeoutError, match="did not answer within 0.3s"):
        make(openai_server, timeout_s=0.3).summarize(facts_request())
    assert len(openai_server.requests) == 1  # a timeout is not retried


@pytest.mark.parametrize(
    "content, reason",
    [
        ('{"facts": [{"key": "order_id", "value": "#1', "not JSON"),
        ("[1, 2, 3]", "JSON list, not an object"),
        ('{"facts": "order_id=#1234", "narrative": "x"}', "no 'facts' list"),
        ('{"facts": []}', "no 'narrative' string"),
        ('{"facts": [{"value": "#1234"}], "narrative": "x"}', r"facts\[0\] has no 'key'"),
        ('{"facts": [], "narrative": "   "}', "no facts and an empty narrative"),
        ("", "empty answer"),
    ],
)
def test_unusable_answers_raise_output_errors_with_the_reason(openai_server, content, reason):
    openai_server.script(model_says(content))
    with pytest.raises(SummarizerOutputError, match=reason):
        make(openai_server).summarize(facts_request())
    assert len(openai_server.requests) == 1


def test_lenient_answers_are_normalised(openai_server):
    openai_server.script(model_says(json.dumps({
        "facts": [{"key": "amount", "value": 50, "category": "numeric"},
                  {"key": "note", "value": "x", "category": "OTHER"},
                  {"key": "amount", "value": "$55", "category": "NUMERIC"}],
        "narrative": "ok",
    })))
    out = make(openai_server).summarize(facts_request())
    assert [(f.key, f.value, f.category) for f in out.facts] == [("amount", "$55", "NUMERIC"), ("note", "x", "GENERAL")]


def test_empty_text_summary_is_an_output_error(openai_server):
    openai_server.script(model_says("  "))
    with pytest.raises(SummarizerOutputError):
        make(openai_server).summarize(SummaryInput(policy="rolling", kind="text", messages=CHAT))


def test_errors_are_memfold_errors_only(openai_server):
    openai_server.script(server_error(401), model_says("nope"), hang(30))
    s = make(openai_server, timeout_s=0.3)
    for _ in range(3):
        with pytest.raises(MemfoldError) as info:
            s.summarize(facts_request())
        assert "openai" not in type(info.value).__module__


# --------------------------------------------------------------------------- factories and embeddings


def test_build_summarizer_openai_without_key_on_a_custom_base_url(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings(summarizer=SummarizerSettings(kind="openai", base_url=openai_server.url))
    s = build_summarizer(settings)
    assert s.name == "openai" and s.summarize(facts_request()).facts
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    build_summarizer(settings).summarize(facts_request())
    assert openai_server.requests[-1].headers["authorization"] == "Bearer sk-from-env"


def test_openai_embedder_returns_unit_vectors_in_order(openai_server):
    settings = Settings(embedder=EmbedderSettings(kind="openai", base_url=openai_server.url, api_key="k", dimensions=32))
    embedder = build_embedder(settings)
    assert isinstance(embedder, OpenAIEmbedder) and embedder.dimensions == 32
    texts = ["cancel my order", "refund please", "cancel my order"]
    vectors = embedder.embed(texts)
    [req] = openai_server.requests
    assert req.path == "/v1/embeddings" and req.body["input"] == texts and req.body["dimensions"] == 32
    assert len(vectors) == 3 and all(len(v) == 32 for v in vectors)
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-6) for v in vectors)
    assert vectors[0] == vectors[2] and vectors[0] != vectors[1]


def test_openai_embedder_errors_are_translated(openai_server):
    embedder = OpenAIEmbedder(
        EmbedderSettings(kind="openai", base_url=openai_server.url, api_key="k", dimensions=16),
        max_retries=1, sleep=Sleeps(),
    )
    openai_server.script(server_error(500), server_error(500))
    with pytest.raises(EmbedderError, match="HTTP 500"):
        embedder.embed(["x"])
    assert len(openai_server.requests) == 2


def test_openai_embedder_checks_dimensions_of_models_that_cannot_shorten(openai_server):
    def embedder(dimensions: int) -> OpenAIEmbedder:
        return OpenAIEmbedder(EmbedderSettings(kind="openai", model="local-embed", base_url=openai_server.url,
                                               api_key="k", dimensions=dimensions))

    assert len(embedder(16).embed(["x"])[0]) == 16  # the server's native size when no dimensions are sent
    assert "dimensions" not in openai_server.requests[-1].body
    with pytest.raises(EmbedderError, match="returned 16 dimensions, settings say 24; set embedder.dimensions"):
        embedder(24).embed(["x"])
