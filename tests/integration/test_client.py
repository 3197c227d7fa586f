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
from memfold.engine.errors import MemfoldError, ValidationError

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
    assert {"role": "assistant", "content": "all read", "kind": "verbatim"}.items() <= context[-1].items()
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
    from memfold.engine.errors import ConversationForgottenError

    with Client(service.url, service.key("client-gone", "admin")) as mf:
        mf.add("g-1", "user", "my card is 4111 1111 1111 1111")
        assert mf.forget("g-1")["forgotten"] is True
        with pytest.raises(ConversationGoneError) as gone:
            mf.add("g-1", "user", "hello again")
        assert gone.value.status == 410 and isinstance(gone.value, ConversationForgottenError)
        assert mf.reopen("g-1")["reopened"] is True
        mf.add("g-1", "user", "a fresh start")
        assert [m.content for m in mf.messages("g-1")] == ["a fresh start"]
