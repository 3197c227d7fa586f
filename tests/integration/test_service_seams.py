"""The service's promises at its seams: search reaches every conversation, limits, ids with '/', /docs offline,
SQL isolation and timeout, what callers see of stored messages, forgotten conversations over HTTP."""

from __future__ import annotations

import re
import time

import pytest
from fixtures.memfold_service import LiveService

pytestmark = pytest.mark.timeout(180)


def _wait_for(check, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not reached within {timeout:.0f} s"
        time.sleep(0.05)


def test_search_pages_reach_the_25th_of_30_conversations(service):
    key = service.key("seams-search", "writer")
    with service.http(key) as http:
        for i in range(30):
            content = "the lighthouse keeper hid the brass key" if i == 24 else f"weather report number {i}: mild"
            r = http.post(f"/v1/conversations/c{i:02d}/messages", params={"wait": "true"},
                          json={"messages": [{"role": "user", "content": content}]})
            assert r.status_code == 201, r.text
        first = http.post("/v1/search", json={"query": "lighthouse brass key", "conversations": 20}).json()
        assert first["hits"] == [] and first["conversations"] == 20 and first["next_cursor"]  # c24 is on page 2
        found, pages, cursor = [], 0, None
        while True:
            body = {"query": "lighthouse brass key", "conversations": 7}
            if cursor:
                body["cursor"] = cursor
            page = http.post("/v1/search", json=body).json()
            pages += 1
            found += [h["conversation_id"] for h in page["hits"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert found == ["c24"] and pages == 5  # 30 conversations, 7 a page
        bad = http.post("/v1/search", json={"query": "x", "cursor": "!!not a cursor"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "cursor", bad.text


def test_a_chunked_body_over_the_limit_gets_413(service):
    key = service.key("seams-limits", "writer")

    def chunks():
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * 8192  # 160 KiB in all: over the fixture's 64 KiB
        yield b'"}]}'

    with service.http(key) as http:
        r = http.post("/v1/conversations/chunked-1/messages", content=chunks(),
                      headers={"content-type": "application/json"})
        assert "content-length" not in r.request.headers
        assert r.status_code == 413, r.text
        assert r.json()["error"]["type"] == "PayloadTooLarge" and "--max-body-bytes" in r.json()["error"]["message"]

        def small():
            yield b'{"messages": [{"role": "user", '
            yield b'"content": "a chunked body under the limit"}]}'

        ok = http.post("/v1/conversations/chunked-1/messages", params={"wait": "true"}, content=small(),
                       headers={"content-type": "application/json"})
        assert ok.status_code == 201, ok.text


def test_conversation_ids_with_a_slash_work_on_every_route(service):
    admin, writer = service.key("seams-slash", "admin"), service.key("seams-slash", "writer")
    with service.http(writer) as w, service.http(admin) as a:
        for path in ("team/alpha", "team%2Fbeta"):  # as is, and percent-encoded (what the client sends)
            cid = path.replace("%2F", "/")
            r = w.post(f"/v1/conversations/{path}/messages", params={"wait": "true"}, json={"messages": [
                {"id": "m-1", "role": "user", "content": f"hello from {cid}"},
                {"id": "m-2", "role": "assistant", "content": "noted"}]})
            assert r.status_code == 201 and r.json()["conversation_id"] == cid, r.text
            messages = w.get(f"/v1/conversations/{path}/messages").json()
            assert messages["conversation_id"] == cid and [m["id"] for m in messages["messages"]] == ["m-1", "m-2"]
            context = w.get(f"/v1/conversations/{path}/context")
            assert context.status_code == 200 and context.json()["messages"][0]["content"] == f"hello from {cid}"
            for suffix in ("summaries", "facts", "audit"):
                assert w.get(f"/v1/conversations/{path}/{suffix}").status_code == 200, suffix
            retracted = w.delete(f"/v1/conversations/{path}/messages/m-2")
            assert retracted.status_code == 200 and retracted.json()["conversation_id"] == cid, retracted.text
            assert [m["id"] for m in w.get(f"/v1/conversations/{path}/messages").json()["messages"]] == ["m-1"]
            assert a.post(f"/v1/conversations/{path}/verify").json()["identical"] is True
        listed = {c["conversation_id"] for c in w.get("/v1/conversations").json()["conversations"]}
        assert {"team/alpha", "team/beta"} <= listed
        assert a.delete("/v1/conversations/team/alpha").json()["conversation_id"] == "team/alpha"
        assert w.get("/v1/conversations/team/alpha/messages").status_code == 404
        assert w.get("/v1/conversations/team/beta/messages").status_code == 200  # its neighbour is untouched
        ambiguous = w.post("/v1/conversations/x/messages/y/messages", json={"messages": [{"role": "user", "content": "hi"}]})
        assert ambiguous.status_code == 422 and "/messages/" in ambiguous.json()["error"]["message"], ambiguous.text


def test_docs_work_offline_and_the_schema_declares_keys_and_names(service):
    with service.http() as http:
        page = http.get("/docs")
        assert page.status_code == 200
        assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page.text)
        assets += re.findall(r"""url:\s*["']([^"']+)["']""", page.text)
        assert assets and all(a.startswith("/") for a in assets), assets  # nothing from a CDN
        for asset in assets:
            assert http.get(asset).status_code == 200, asset
        assert any(a.endswith("swagger-ui-bundle.js") for a in assets)
        schema = http.get("/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert {"type": "http", "scheme": "bearer"}.items() <= schemes["bearer"].items()
    assert {"type": "apiKey", "in": "header", "name": "X-API-Key"}.items() <= schemes["apiKey"].items()
    ops = {(path, method): op for path, item in schema["paths"].items() for method, op in item.items()}
    context = ops[("/v1/conversations/{conversation_id}/context", "get")]
    assert context["operationId"] == "getContext"
    assert {"bearer": []} in context["security"] and {"apiKey": []} in context["security"]
    assert ops[("/v1/conversations/{conversation_id}/messages", "post")]["operationId"] == "appendMessages"
    ids = [op["operationId"] for op in ops.values()]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", i) for i in ids), ids  # none generated from the path


def test_sql_sees_only_its_tenant_and_no_withdrawn_content(service):
    acme, globex = service.key("seams-sql-a", "admin"), service.key("seams-sql-b", "admin")
    with service.http(acme) as a, service.http(globex) as g:
        a.post("/v1/conversations/s-1/messages", params={"wait": "true"}, json={"messages": [
            {"id": "keep", "role": "user", "content": "acme plan alpha"},
            {"id": "drop", "role": "user", "content": "acme withdrawn zebra"}]})
        g.post("/v1/conversations/s-2/messages", params={"wait": "true"},
               json={"messages": [{"role": "user", "content": "globex plan omega"}]})
        assert a.delete("/v1/conversations/s-1/messages/drop").status_code == 200
        for table in ("conversations", "messages", "summaries", "facts", "events"):
            r = a.post("/v1/sql", json={"query": f"SELECT DISTINCT tenant_id FROM {table}"})
            assert r.status_code == 200, (table, r.text)
            assert r.json()["rows"] in ([], [["seams-sql-a"]]), (table, r.json())
        rows = a.post("/v1/sql", json={"query": "SELECT content FROM messages ORDER BY idx"}).json()["rows"]
        assert rows == [["acme plan alpha"]]
        leaked = a.post("/v1/sql", json={"query": "SELECT count(*) FROM events WHERE CAST(payload AS VARCHAR) "
                                                  "LIKE '%zebra%' OR CAST(payload AS VARCHAR) LIKE '%omega%'"}).json()
        assert leaked["rows"] == [[0]]
        for hidden in ("llm_cache", "policy_state", "positions"):
            r = a.post("/v1/sql", json={"query": f"SELECT * FROM {hidden}"})
            assert r.status_code == 422 and r.json()["error"]["field"] == "query", (hidden, r.text)


def test_sql_statement_timeout(tmp_path):
    svc = LiveService.start(tmp_path / "sql-timeout", env={"MEMFOLD_SQL_TIMEOUT_S": "1"})
    try:
        key = svc.key("slow", "admin")
        with svc.http(key) as http:
            r = http.post("/v1/sql", json={"query": "SELECT count(*) FROM range(1000000000) a, range(1000000000) b"})
            assert r.status_code == 408, r.text
            assert r.json()["error"]["field"] == "query" and "1 s" in r.json()["error"]["message"]
            assert http.post("/v1/sql", json={"query": "SELECT 42"}).json()["rows"] == [[42]]  # the service goes on
    finally:
        svc.stop()


def test_what_callers_see_of_messages_summaries_and_counts(service):
    key = service.key("seams-views", "writer")
    turns = [{"id": f"u{i}", "role": "user" if i % 2 == 0 else "assistant",
              "content": f"turn {i}: my order #{5500 + i} ships to grace@example.com", "metadata": {"n": i}}
             for i in range(24)]
    with service.http(key) as http:
        http.post("/v1/conversations/views-1/messages", params={"wait": "true"}, json={"messages": turns})
        stored = http.get("/v1/conversations/views-1/messages").json()["messages"]
        assert [m["id"] for m in stored] == [f"u{i}" for i in range(24)]
        assert all(m["metadata"] == {"n": m["index"]} for m in stored), stored[0]["metadata"]
        assert http.delete("/v1/conversations/views-1/messages/u3").status_code == 200
        listed = {c["conversation_id"]: c for c in http.get("/v1/conversations").json()["conversations"]}
        assert listed["views-1"]["message_count"] == 23

        def completed():
            rows = http.get("/v1/conversations/views-1/summaries").json()["summaries"]
            return [s for s in rows if s["status"] == "completed"]

        from memfold.cli.audit_page import render

        page = render(http.get("/v1/conversations/views-1/audit").json())
        row = re.search(r"<tr><td class='num'>3</td>.*?</tr>", page).group(0)
        assert "<td>retracted</td>" in row and "#5503" not in row, row  # marked, its content not shown
        assert "#5504" in page
        summary = _wait_for(completed, what="a completed summary")[0]
        assert isinstance(summary["facts"], list) and summary["facts"], summary["facts"]
        reader = service.key("seams-views", "reader")
        with service.http(reader) as r:
            denied = r.post("/v1/conversations/views-1/messages", json={"messages": [{"role": "user", "content": "x"}]})
        message = denied.json()["error"]["message"]
        assert denied.status_code == 403 and "role (reader) may not write" in message and "a writer key" in message
        assert " a admin " not in message


def test_forgotten_conversations_refuse_appends_and_forget_again(service):
    admin, writer = service.key("seams-forget", "admin"), service.key("seams-forget", "writer")
    body = {"messages": [{"role": "user", "content": "my passport number is X1234567"}]}
    with service.http(writer) as w, service.http(admin) as a:
        assert w.post("/v1/conversations/gone-1/messages", params={"wait": "true"}, json=body).status_code == 201
        assert a.delete("/v1/conversations/gone-1").status_code == 200
        again = w.post("/v1/conversations/gone-1/messages", json=body)
        assert again.status_code == 410, again.text
        assert again.json()["error"]["type"] == "ConversationForgottenError"
        with_id = w.post("/v1/conversations/gone-1/messages", json={"messages": [{"id": "p-1", **body["messages"][0]}]})
        assert with_id.status_code == 410, with_id.text
        second = a.delete("/v1/conversations/gone-1")
        assert second.status_code == 200 and second.json()["forgotten"] is True, second.text
        assert a.delete("/v1/conversations/never-existed").status_code == 404
        assert w.post("/v1/conversations/gone-1/reopen").status_code == 403  # reopening needs an admin key
        reopened = a.post("/v1/conversations/gone-1/reopen")
        assert reopened.status_code == 200 and reopened.json()["reopened"] is True, reopened.text
        assert w.post("/v1/conversations/gone-1/messages", params={"wait": "true"},
                      json={"messages": [{"role": "user", "content": "starting over"}]}).status_code == 201
        assert [m["content"] for m in w.get("/v1/conversations/gone-1/messages").json()["messages"]] == ["starting over"]


def test_stored_event_ids_of_caller_ids_are_keyed(service):
    from memfold.core.ids import content_hash

    key = service.key("seams-ids", "writer")
    with service.http(key) as http:
        done = http.post("/v1/conversations/ids-1/messages", params={"wait": "true"},
                         json={"messages": [{"id": "line-hash-abc", "role": "user", "content": "hello"}]}).json()
        event_id = done["messages"][0]["event_id"]
        assert event_id != "m" + content_hash("seams-ids", "ids-1", "line-hash-abc", length=31)  # the old oracle
        retry = http.post("/v1/conversations/ids-1/messages", params={"wait": "true"},
                          json={"messages": [{"id": "line-hash-abc", "role": "user", "content": "hello"}]}).json()
        assert retry["messages"][0]["event_id"] == event_id  # still idempotent
        assert http.delete("/v1/conversations/ids-1/messages/line-hash-abc").status_code == 200  # by the caller's id
        assert http.get("/v1/conversations/ids-1/messages").json()["messages"] == []
    # The same caller id in another tenant's conversation of the same name gets another id.
    with service.http(service.key("seams-ids-2", "writer")) as other:
        theirs = other.post("/v1/conversations/ids-1/messages", params={"wait": "true"}, json={
            "messages": [{"id": "line-hash-abc", "role": "user", "content": "hello"}]}).json()
    assert theirs["messages"][0]["event_id"] != event_id

