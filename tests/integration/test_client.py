"""memfold.client against a live service: typed results, errors, and retries that store nothing twice."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading

import httpx
import pytest
from fixtures.memfold_service import MEMFOLD, LiveService

from memfold.client import (
    AsyncClient,
    AuthenticationError,
    Client,
    ConflictError,
    Context,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
)
from memfold.core.errors import MemfoldError, ValidationError

pytestmark = pytest.mark.timeout(120)


class LoseFirstResponse(httpx.HTTPTransport):
    """Deliver each request to the real service, then drop the first response (as a broken connection would)."""

    def __init__(self):
        super().__init__()
        self.sent = 0

    def handle_request(self, request):
        response = super().handle_request(request)
        self.sent += 1
        if self.sent == 1:
            response.read()
            raise httpx.ReadError("connection reset after the server answered", request=request)
        return response


def test_client_round_trip_and_typed_errors(service):
    with Client(service.url, service.key("client-co", "writer")) as mf:
        done = mf.append("c-1", [{"role": "user", "content": "I live in Lisbon"},
                                 {"role": "assistant", "content": "Noted: Lisbon."}])
        assert [d.offset for d in done] == sorted(d.offset for d in done) and all(d.id for d in done)
        one = mf.add("c-1", "user", "and my email is eve@example.com", metadata={"channel": "chat"})
        assert one.event_id not in {d.event_id for d in done}
        context = mf.context("c-1", budget=200)
        assert isinstance(context, Context) and context.messages[-1].content == "and my email is eve@example.com"
        assert context.messages[-1].as_openai() == {"role": "user", "content": "and my email is eve@example.com"}
        earlier = mf.context("c-1", as_of=f"{done[0].partition}:{done[0].offset}")  # time travel: after the 1st
        assert [m.content for m in earlier.messages if m.role != "system"] == ["I live in Lisbon"]
        stored = mf.messages("c-1")
        assert [m.content for m in stored][:1] == ["I live in Lisbon"] and stored[2].metadata["channel"] == "chat"
        assert [c.conversation_id for c in mf.conversations()] == ["c-1"]
        assert mf.me().tenant_id == "client-co"
        with pytest.raises(NotFoundError):
            mf.context("no-such")
        with pytest.raises(InvalidRequestError) as bad:
            mf.add("c-1", "robot", "beep")
        assert isinstance(bad.value, ValidationError) and bad.value.field == "role" and bad.value.status == 422
        with pytest.raises(PermissionDeniedError):
            mf.sql("SELECT 1")
    with pytest.raises(AuthenticationError), Client(service.url, "mf_nope_nope") as stranger:
        stranger.me()


def test_a_lost_response_is_retried_and_stored_once(service):
    key = service.key("client-co", "writer")
    transport = LoseFirstResponse()
    with Client(service.url, key, transport=transport, backoff=0.01) as mf:
        done = mf.append("retry-c", [{"role": "user", "content": f"message {i}"} for i in range(3)])
        assert transport.sent == 2  # the first answer was lost, the retry answered
        assert len(mf.messages("retry-c")) == 3 == len(done)


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """A service allowing each key a burst of 3 requests, then one every 4 seconds."""
    svc = LiveService.start(tmp_path_factory.mktemp("slow"), "--rate", "0.25", "--burst", "3")
    yield svc
    svc.stop()


def test_request_rate_is_limited_per_key(slow):
    hasty, calm = slow.key("acme", "reader"), slow.key("acme", "reader")
    with slow.http(hasty) as http:
        statuses = [http.get("/v1/me").status_code for _ in range(3)]
        limited = http.get("/v1/me")
    assert statuses == [200] * 3
    assert limited.status_code == 429 and float(limited.headers["retry-after"]) >= 1
    assert "retry after" in limited.json()["error"]["message"]
    assert httpx.get(slow.url + "/v1/me", headers={"X-API-Key": calm}).status_code == 200  # per key
    with Client(slow.url, hasty, max_retries=0) as mf, pytest.raises(RateLimitedError) as err:
        mf.me()
    assert err.value.retry_after >= 1


def test_rate_limited_requests_are_retried_after_the_delay(slow):
    with Client(slow.url, slow.key("client-co", "reader"), max_retries=3) as mf:
        identities = [mf.me() for _ in range(4)]  # the 4th gets a 429 and waits for Retry-After
    assert {i.role for i in identities} == {"reader"}


def test_async_client_with_many_concurrent_appends(service):
    key = service.key("client-co", "writer")

    async def main():
        async with AsyncClient(service.url, key) as mf:
            await asyncio.gather(*[
                mf.append(f"async-{c}", [{"role": "user", "content": f"c{c} m{i}", "id": f"{c}-{i}"} for i in range(5)])
                for c in range(10)
            ])
            await mf.append("async-0", [{"role": "user", "content": "c0 m0", "id": "0-0"}])  # a retry: stored once
            with pytest.raises(ConflictError):  # the same id for other content is refused
                await mf.append("async-0", [{"role": "user", "content": "other", "id": "0-0"}])
            counts = [len(await mf.messages(f"async-{c}")) for c in range(10)]
            context = await mf.context("async-3", budget=500)
        return counts, context

    counts, context = asyncio.run(main())
    assert counts == [5] * 10
    assert [m.content for m in context.messages] == [f"c3 m{i}" for i in range(5)]


def test_cli_url_mode_reads_while_another_process_ingests(service, tmp_path):
    key = service.key("cli-co", "admin")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")},
           "MEMFOLD_URL": service.url, "MEMFOLD_API_KEY": key}
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"conversation_id": "cli-1", "role": "user", "content": f"line {i}"}) + "\n"
                           for i in range(1500)) + "{broken\n")
    ingest = subprocess.Popen([MEMFOLD, "ingest", str(big), "--batch-size", "50"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    reads = 0
    try:
        while ingest.poll() is None or reads == 0:
            r = subprocess.run([MEMFOLD, "history", "cli-1", "--json"], env=env, capture_output=True, text=True)
            assert "Traceback" not in r.stderr
            assert r.returncode == 0 or "no conversation" in r.stderr, r.stderr  # before the first batch lands
            reads += 1
    finally:
        out, err = ingest.communicate(timeout=60)
    assert ingest.returncode == 2 and "ingested 1500 messages" in out and "line 1501 rejected" in err
    appended = subprocess.run([MEMFOLD, "append", "cli-1", "assistant", "all read", "--json"], env=env,
                              capture_output=True, text=True, check=True)
    assert json.loads(appended.stdout)["offset"] >= 0
    context = json.loads(subprocess.run([MEMFOLD, "context", "cli-1", "--budget", "100", "--json"], env=env,
                                        capture_output=True, text=True, check=True).stdout)
    assert context["format"] == "openai" and context["messages"][-1] == {"role": "assistant", "content": "all read"}
    assert context["memfold"][-1]["kind"] == "verbatim" and len(context["memfold"]) == len(context["messages"])
    rows = json.loads(subprocess.run([MEMFOLD, "sql", "SELECT count(*) AS n FROM messages", "--json"], env=env,
                                     capture_output=True, text=True, check=True).stdout)
    assert rows == [{"n": 1501}]
    denied = subprocess.run([MEMFOLD, "--api-key", "mf_bad_key", "context", "cli-1"], env=env,
                            capture_output=True, text=True)
    assert denied.returncode == 1 and "401" in denied.stderr and "Traceback" not in denied.stderr
    assert threading.active_count() >= 1 and reads >= 1
    assert issubclass(NotFoundError, MemfoldError)


def test_search_pages_reach_every_conversation_of_the_tenant(service):
    from memfold.client import SearchPage

    with Client(service.url, service.key("client-search", "writer")) as mf:
        for c in range(5):
            mf.add(f"zs-{c}", "user", f"the zebra number {c} escaped the zoo")
        mf.add("zs-quiet", "user", "nothing to see here")
        first = mf.search_page("zebra", conversations=2)
        assert isinstance(first, SearchPage) and first.conversations == 2 and first.next_cursor is not None
        pages = list(mf.search_pages("zebra", conversations=2))
        assert [p.conversations for p in pages] == [2, 2, 2] and pages[-1].next_cursor is None
        found = mf.search_all("zebra", conversations=2, limit=10)
        assert sorted(h.conversation_id for h in found) == [f"zs-{c}" for c in range(5)]
        assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)
        assert [h.conversation_id for h in mf.search_all("zebra", conversations=2, limit=2)] == \
            [h.conversation_id for h in found[:2]]

        async def walk():
            async with AsyncClient(service.url, mf._headers["Authorization"].split()[1]) as amf:
                return [p.conversations async for p in amf.search_pages("zebra", conversations=2)], \
                    await amf.search_all("zebra", conversations=2)

        conversations, hits = asyncio.run(walk())
        assert conversations == [2, 2, 2] and len(hits) == 5


def test_an_append_to_a_forgotten_conversation_is_gone_until_reopened(service):
    from memfold.client import ConversationGoneError
    from memfold.core.errors import ConversationForgottenError

    with Client(service.url, service.key("client-gone", "admin")) as mf:
        mf.add("g-1", "user", "my card is 4111 1111 1111 1111")
        assert mf.forget("g-1")["forgotten"] is True
        with pytest.raises(ConversationGoneError) as gone:
            mf.add("g-1", "user", "hello again")
        assert gone.value.status == 410 and isinstance(gone.value, ConversationForgottenError)
        assert mf.reopen("g-1")["reopened"] is True
        mf.add("g-1", "user", "a fresh start")
        assert [m.content for m in mf.messages("g-1")] == ["a fresh start"]


def _cli(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([MEMFOLD, *args], env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _timeless(value):
    """``value`` without ``occurred_at`` at any depth: the two stores stamp their own arrival times."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k != "occurred_at"}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def test_cli_url_context_json_is_the_embedded_document_in_every_format(service, tmp_path):
    from fixtures.shaped_conversation import INPUTS

    remote = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")},
              "MEMFOLD_URL": service.url, "MEMFOLD_API_KEY": service.key("cli-shapes", "admin")}
    # The service reads hierarchical: so does the embedded data dir.
    embedded = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")},
                "MEMFOLD_DATA_DIR": str(tmp_path / "data"), "MEMFOLD_POLICY": "hierarchical",
                "MEMFOLD_POLICIES": "hierarchical"}
    for source, items in INPUTS.items():  # the same conversation, ingested both ways in each input shape
        path = tmp_path / f"{source}.jsonl"
        path.write_text("".join(json.dumps({**m, "conversation_id": f"shape-{source}"}) + "\n" for m in items))
        reports = [_cli(env, "ingest", str(path), "--quiet", "--format", source).stdout for env in (remote, embedded)]
        n = 8 if source == "responses" else 6  # line by line: each Responses function_call is its own message
        assert all(f"ingested {n} messages, duplicates 0, rejected 0" in r for r in reports), reports
    for source in INPUTS:
        for fmt in ("openai", "anthropic", "responses", "compact"):
            args = ("context", f"shape-{source}", "--json", "--format", fmt)
            there, here = (json.loads(_cli(env, *args).stdout) for env in (remote, embedded))
            where = (source, fmt)
            assert set(there) == set(here) and there["format"] == here["format"] == fmt, where
            # Roles, contents, tool calls and the calls tool results answer: every key a message holds.
            assert _timeless(there["messages"]) == _timeless(here["messages"]), where
            assert _timeless(there["memfold"]) == _timeless(here["memfold"]), where
            if fmt == "anthropic":
                assert there["system"] == here["system"], where
                assert [n["kind"] for n in there["system_memfold"]] == [n["kind"] for n in here["system_memfold"]]
            if fmt == "compact":
                assert there["memfold"] == [] and {m["kind"] for m in there["messages"]} >= {"verbatim"}
            else:
                assert len(there["memfold"]) == len(there["messages"]) and there["memfold"][0]["conversation"] == \
                    f"shape-{source}", where
    chat = json.loads(_cli(remote, "context", "shape-anthropic", "--json").stdout)
    assert chat["format"] == "openai" and chat["messages"][1]["tool_calls"][1] == {
        "id": "call_2", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}
    human = _cli(remote, "context", "shape-openai").stdout  # not --json: the table, as before
    assert "context for shape-openai" in human and "Only in Rome." in human


def test_cli_url_ingest_converts_responses_and_anthropic_lines(service, tmp_path):
    from fixtures.shaped_conversation import ANTHROPIC, RESPONSES

    from memfold.cli.ingest import line_key

    key = service.key("cli-ingest-shapes", "admin")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")},
           "MEMFOLD_URL": service.url, "MEMFOLD_API_KEY": key}
    lines = [json.dumps({**m, "conversation_id": "agent"}) for m in RESPONSES]
    lines.insert(3, json.dumps({"type": "reasoning", "summary": [], "conversation_id": "agent"}))  # not storable
    path = tmp_path / "session.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    first = _cli(env, "ingest", str(path), "--format", "responses", check=False)
    assert first.returncode == 2 and "ingested 8 messages, duplicates 0, rejected 1" in first.stdout
    assert "line 4 rejected: type: memfold stores message, function_call and function_call_output" in first.stderr
    again = _cli(env, "ingest", str(path), "--format", "responses", check=False)
    assert again.returncode == 2 and "ingested 0 messages, duplicates 8, rejected 1" in again.stdout
    with Client(service.url, key) as mf:
        stored = mf.messages("agent")
        # Each stored line is named by its line key, as embedded ingest names it: a re-run stores nothing twice.
        keys = [line_key(path.name, line.encode(), 1) for n, line in enumerate(lines) if n != 3]
        assert [m.id for m in stored] == keys
        assert [(m.role, m.content, [c["id"] for c in m.tool_calls], m.tool_call_id, m.name) for m in stored] == [
            ("user", "Weather in Paris and Rome?", [], None, None),
            ("assistant", "Checking both.", [], None, None),
            ("assistant", "", ["call_1"], None, None),
            ("assistant", "", ["call_2"], None, None),
            ("tool", "sunny", [], "call_1", None),
            ("tool", "rain", [], "call_2", None),
            ("user", "Thanks. Umbrella?", [], None, None),
            ("assistant", "Only in Rome.", [], None, None),
        ]
        prompt = mf.prompt("agent", format="responses")  # each result right after its call
        assert [(i.get("type", "message"), i.get("call_id")) for i in prompt.messages][-6:] == [
            ("function_call", "call_1"), ("function_call_output", "call_1"), ("function_call", "call_2"),
            ("function_call_output", "call_2"), ("message", None), ("message", None)]

    # An Anthropic line holding several messages is stored whole, the k-th keyed by the line key plus "#k";
    # one whose messages the service refuses (a tool result answering no call id) is rejected whole.
    bad = {"role": "user", "conversation_id": "claude", "content": [
        {"type": "text", "text": "this text must not be stored alone"}, {"type": "tool_result", "content": "x"}]}
    rows = [{**m, "conversation_id": "claude"} for m in ANTHROPIC]
    rows.insert(2, bad)
    path = tmp_path / "claude.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = _cli(env, "ingest", str(path), "--format", "anthropic", check=False)
    assert proc.returncode == 2 and "ingested 6 messages, duplicates 0, rejected 1" in proc.stdout
    assert "line 3 rejected" in proc.stderr
    with Client(service.url, key) as mf:
        stored = mf.messages("claude")
    text = [json.dumps(r) for r in rows]
    base = line_key(path.name, text[3].encode(), 1)  # the user line: two tool results and a text
    assert [m.id for m in stored][2:5] == [base, f"{base}#1", f"{base}#2"]
    assert [(m.role, m.tool_call_id) for m in stored][2:5] == [("tool", "call_1"), ("tool", "call_2"), ("user", None)]
    assert "this text must not be stored alone" not in {m.content for m in stored}
