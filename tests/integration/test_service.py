"""memfold serve end to end: a live service on loopback, every endpoint, keys, roles and limits."""

from __future__ import annotations

import subprocess
import threading
import time

import httpx
import pytest
from fixtures.memfold_service import MEMFOLD

pytestmark = pytest.mark.timeout(180)


def _count(http: httpx.Client, conversation: str) -> int:
    r = http.get(f"/v1/conversations/{conversation}/messages", params={"limit": 10_000})
    return 0 if r.status_code == 404 else len(r.json()["messages"])


def _turns(n: int, start: int = 0) -> list[dict]:
    return [
        {"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant",
         "content": f"turn {i}: my order #{4400 + i} ships to ada@example.com on 2026-03-{1 + i % 28:02d}"}
        for i in range(start, start + n)
    ]


def test_health_docs_and_openapi_need_no_key(service):
    with service.http() as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert "swagger" in http.get("/docs").text.lower()
        paths = http.get("/openapi.json").json()["paths"]
    assert "/v1/conversations/{conversation_id}/messages" in paths
    assert "/v1/conversations/{conversation_id}/context" in paths


def test_append_then_read_every_view(service):
    key = service.key("acme", "writer")
    with service.http(key) as http:
        r = http.post("/v1/conversations/support-1/messages", params={"wait": "true"},
                      json={"messages": _turns(26)})
        assert r.status_code == 201, r.text
        appended = r.json()["messages"]
        assert [m["id"] for m in appended] == [f"t{i}" for i in range(26)]
        assert len({m["event_id"] for m in appended}) == 26

        stored = http.get("/v1/conversations/support-1/messages").json()["messages"]
        assert [m["id"] for m in stored] == [f"t{i}" for i in range(26)]
        assert stored[3]["content"].startswith("turn 3: my order #4403")
        assert [m["index"] for m in stored] == list(range(26))

        # 26 messages pass the hierarchical trigger (20): a summary is produced in the background.
        for _ in range(300):
            summaries = http.get("/v1/conversations/support-1/summaries").json()["summaries"]
            if summaries and all(s["status"] != "processing" for s in summaries):
                break
            threading.Event().wait(0.05)
        assert summaries and summaries[0]["status"] == "completed", summaries

        # The narrative may fill max_narrative_tokens (500); memory is never trimmed, so read with room for it.
        context = http.get("/v1/conversations/support-1/context", params={"budget": 1200, "format": "compact"}).json()
        assert context["policy"] == "hierarchical" and context["budget"] == 1200
        kinds = [m["kind"] for m in context["messages"]]
        assert any(k.startswith("memory:") for k in kinds), kinds
        assert context["messages"][-1]["content"].startswith("turn 25")
        assert context["tokens"] == sum(m["tokens"] for m in context["messages"]) <= 1200
        # The default (openai) answer: the same messages, the annotations beside them instead of inside.
        chat = http.get("/v1/conversations/support-1/context", params={"budget": 1200}).json()
        assert [(m["role"], m["content"]) for m in chat["messages"]] == [
            (m["role"], m["content"]) for m in context["messages"]]
        assert [n["kind"] for n in chat["memfold"]] == kinds and chat["tokens"] == context["tokens"]

        facts = http.get("/v1/conversations/support-1/facts").json()["facts"]
        assert any("ada@example.com" in f["value"] for f in facts), facts
        assert all(f["introduced_by"] and f["learned_seq"] and f["stated_at"] for f in facts)

        trail = http.get("/v1/conversations/support-1/audit").json()
        assert trail["conversation"]["status"] == "active" and trail["conversation"]["message_count"] == 26
        assert trail["summaries"][0]["summary_id"] == summaries[0]["summary_id"]

        listed = http.get("/v1/conversations").json()["conversations"]
        assert {"conversation_id": "support-1", "message_count": 26}.items() <= listed[0].items()

        me = http.get("/v1/me").json()
        assert me["tenant_id"] == "acme" and me["role"] == "writer"


def test_context_recalls_by_query_and_forget_erases(service):
    admin, writer = service.key("acme", "admin"), service.key("acme", "writer")
    turns = [{"role": "user", "content": f"note {i}: the weather is mild today"} for i in range(30)]
    turns[4]["content"] = "note 4: my locker code is 7713 at the harbour gym"
    with service.http(admin) as a, service.http(writer) as w:
        w.post("/v1/conversations/recall-1/messages", params={"wait": "true"}, json={"messages": turns})
        recalled = w.get("/v1/conversations/recall-1/context",
                         params={"budget": 400, "query": "harbour gym locker code"}).json()["messages"]
        assert any("7713" in m["content"] for m in recalled), recalled
        w.post("/v1/conversations/recall-2/messages", params={"wait": "true"},
               json={"messages": [{"role": "user", "content": "the harbour gym opens at six"}]})
        hits = w.post("/v1/search", json={"query": "harbour gym locker", "limit": 3}).json()["hits"]
        assert [(h["conversation_id"], h["index"]) for h in hits][:2] == [("recall-1", 4), ("recall-2", 0)]
        only = w.post("/v1/search", json={"query": "harbour", "conversation_ids": ["recall-2", "nowhere"]}).json()
        assert [h["conversation_id"] for h in only["hits"]] == ["recall-2"]
        assert w.delete("/v1/conversations/recall-1").status_code == 403  # forgetting needs an admin key
        gone = a.delete("/v1/conversations/recall-1", params={"reason": "user asked"})
        assert gone.status_code == 200 and gone.json()["forgotten"] is True
        assert w.get("/v1/conversations/recall-1/messages").status_code == 404
        assert w.get("/v1/conversations/recall-1/context").status_code == 404
        again = a.delete("/v1/conversations/recall-1")  # idempotent: finishes what the first could not, never 404
        assert again.status_code == 200 and again.json()["forgotten"] is True, again.text
        assert a.delete("/v1/conversations/never-was").status_code == 404
        erased = w.get("/v1/conversations/recall-1/audit").json()  # the trail keeps that it existed
        assert erased["conversation"]["status"] == "erased" and erased["erasure"]["reason"] == "user asked"
        rows = a.post("/v1/sql", json={"query": "SELECT count(*) FROM messages WHERE content LIKE '%7713%'"}).json()
        assert rows["rows"] == [[0]]


def test_context_as_of_a_time_or_a_position(service):
    key = service.key("acme", "writer")
    said = [("2026-03-02T09:00:00+00:00", "I live in Lisbon"), ("2026-03-02T10:00:00+00:00", "Now I moved to Porto"),
            ("2026-03-02T11:00:00+00:00", "And my cat is Miso")]
    with service.http(key) as http:
        done = http.post("/v1/conversations/travel-1/messages", params={"wait": "true"}, json={"messages": [
            {"role": "user", "content": text, "occurred_at": when} for when, text in said]}).json()["messages"]

        def shown(as_of):
            r = http.get("/v1/conversations/travel-1/context", params={"as_of": as_of})
            assert r.status_code == 200, r.text
            return [m["content"] for m in r.json()["messages"] if m["role"] == "user"]

        assert shown("2026-03-02T10:30:00Z") == ["I live in Lisbon", "Now I moved to Porto"]
        assert shown(f"{done[0]['partition']}:{done[0]['offset']}") == ["I live in Lisbon"]
        assert shown("2026-03-02T12:00:00+00:00") == [text for _, text in said]
        for bad in ("yesterday", "2026-03-02T10:30:00"):  # not a time; a time without a timezone
            r = http.get("/v1/conversations/travel-1/context", params={"as_of": bad})
            assert r.status_code == 422 and r.json()["error"]["field"] == "as_of", r.text


def test_a_retried_append_with_the_same_id_is_stored_once(service):
    key = service.key("acme", "writer")
    body = {"messages": [{"id": "q-1", "role": "user", "content": "Is my refund through?"}]}
    with service.http(key) as http:
        first = http.post("/v1/conversations/retry-1/messages", params={"wait": "true"}, json=body).json()
        again = http.post("/v1/conversations/retry-1/messages", params={"wait": "true"}, json=body).json()
        assert first["messages"][0]["event_id"] == again["messages"][0]["event_id"]
        assert _count(http, "retry-1") == 1
        reused = http.post("/v1/conversations/retry-1/messages", json={"messages": [
            {"id": "q-2", "role": "user", "content": "new"}, {"id": "q-1", "role": "user", "content": "Other text"}]})
        assert reused.status_code == 409 and reused.json()["error"]["line"] == 2, reused.text
        assert _count(http, "retry-1") == 1  # all or nothing: q-2 was not stored either
        # The same id in another conversation is another message.
        http.post("/v1/conversations/retry-2/messages", params={"wait": "true"}, json=body)
        assert _count(http, "retry-2") == 1 and _count(http, "retry-1") == 1


def test_keys_roles_and_revocation(service, tmp_path):
    writer, reader = service.key("acme", "writer"), service.key("acme", "reader")
    with service.http(writer) as w, service.http(reader) as r, service.http() as anonymous:
        w.post("/v1/conversations/roles-1/messages", params={"wait": "true"},
               json={"messages": [{"role": "user", "content": "hello"}]})
        denied = r.post("/v1/conversations/roles-1/messages", json={"messages": [{"role": "user", "content": "x"}]})
        assert denied.status_code == 403 and denied.json()["error"]["type"] == "Forbidden"
        assert r.get("/v1/conversations/roles-1/messages").status_code == 200
        assert _count(r, "roles-1") == 1

        missing = anonymous.get("/v1/conversations/roles-1/messages")
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        wrong = httpx.get(service.url + "/v1/conversations/roles-1/messages", headers={"X-API-Key": writer + "x"})
        assert wrong.status_code == 401
        assert httpx.get(service.url + "/v1/me", headers={"X-API-Key": writer}).status_code == 200

        key_id = writer.split("_")[1]
        listed = subprocess.run([MEMFOLD, "--data-dir", str(service.data_dir), "keys", "list", "--json"],
                                capture_output=True, text=True, check=True).stdout
        assert key_id in listed and writer.split("_", 2)[2] not in listed  # secrets are never listed
        subprocess.run([MEMFOLD, "--data-dir", str(service.data_dir), "keys", "revoke", key_id],
                       capture_output=True, text=True, check=True)
        revoked = w.get("/v1/conversations/roles-1/messages")
        assert revoked.status_code == 401, revoked.text


def test_writers_cannot_run_sql_and_admin_sql_sees_only_its_tenant(service):
    acme_admin, acme_writer = service.key("acme", "admin"), service.key("acme", "writer")
    other = service.key("globex", "writer")
    with service.http(acme_writer) as w, service.http(acme_admin) as a, service.http(other) as g:
        w.post("/v1/conversations/sql-1/messages", params={"wait": "true"},
               json={"messages": [{"role": "user", "content": "acme secret plan"}]})
        g.post("/v1/conversations/sql-g/messages", params={"wait": "true"},
               json={"messages": [{"role": "user", "content": "globex secret plan"}]})
        assert w.post("/v1/sql", json={"query": "SELECT 1"}).status_code == 403
        body = a.post("/v1/sql", json={"query": "SELECT DISTINCT tenant_id, conversation_id FROM messages "
                                                "WHERE content LIKE '%secret plan%'"}).json()
        assert body["rows"] == [["acme", "sql-1"]]
        events = a.post("/v1/sql", json={"query": "SELECT DISTINCT tenant_id FROM events"}).json()["rows"]
        assert events == [["acme"]]
        for bad in ("DELETE FROM messages", "SELECT 1; SELECT 2", "SELECT * FROM read_csv('/etc/hostname')",
                    "SELECT * FROM main.positions"):
            r = a.post("/v1/sql", json={"query": bad})
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["error"]["field"] == "query"
        assert _count(w, "sql-1") == 1


def test_bad_requests_get_413_or_422_and_write_nothing(service):
    key = service.key("acme", "writer")
    url = "/v1/conversations/limits-1/messages"
    with service.http(key) as http:
        http.post(url, params={"wait": "true"}, json={"messages": [{"role": "user", "content": "first"}]})
        cases = {
            "body over --max-body-bytes": (413, {"messages": [{"role": "user", "content": "x" * 70_000}]}),
            "batch over --max-batch": (413, {"messages": [{"role": "user", "content": "hi"}] * 51}),
            "unknown role": (422, {"messages": [{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}]}),
            "empty content": (422, {"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": " "}]}),
            "no messages": (422, {"messages": []}),
            "unknown field": (422, {"messages": [{"role": "user", "content": "ok", "colour": "red"}]}),
            "wrong type": (422, {"messages": [{"role": "user", "content": 42}]}),
        }
        for name, (status, body) in cases.items():
            r = http.post(url, json=body)
            assert r.status_code == status, (name, r.text)
            assert r.json()["error"]["message"], name
        garbled = http.post(url, content=b'{"messages": [', headers={"content-type": "application/json"})
        assert garbled.status_code == 422 and "malformed" in garbled.json()["error"]["message"]
        role = http.post(url, json=cases["unknown role"][1]).json()["error"]
        assert role["field"] == "role" and role["line"] == 2 and role["type"] == "UnknownRoleError"
        assert http.get("/v1/conversations/limits-1/context", params={"budget": 0}).status_code == 422
        assert _count(http, "limits-1") == 1


def test_reads_answer_while_an_ingest_runs(service):
    key = service.key("acme", "writer")
    errors: list[str] = []
    done = threading.Event()

    def ingest() -> None:
        with service.http(key) as http:
            for batch in range(30):
                r = http.post("/v1/conversations/busy-1/messages", json={"messages": _turns(40, batch * 40)})
                if r.status_code != 201:
                    errors.append(r.text)
        done.set()

    with service.http(key) as http:
        http.post("/v1/conversations/busy-1/messages", params={"wait": "true"}, json={"messages": _turns(1)})
        writer = threading.Thread(target=ingest)
        writer.start()
        reads = 0
        while not done.is_set():
            r = http.get("/v1/conversations/busy-1/context", params={"budget": 300})
            assert r.status_code == 200, r.text
            reads += 1
            time.sleep(0.02)  # an agent's pace, under the key's rate limit (100/s): reads from memory answer faster
        writer.join()
        assert not errors and reads >= 3
        http.post("/v1/conversations/busy-1/messages", params={"wait": "true"}, json={"messages": _turns(1, 5000)})
        assert _count(http, "busy-1") == 1201  # t0 was sent twice (before and in the first batch): stored once


def test_metrics_expose_ingest_lag_summaries_and_latency(service):
    key = service.key("acme", "writer")
    with service.http(key) as http:
        http.post("/v1/conversations/metrics-1/messages", params={"wait": "true"}, json={"messages": _turns(2)})
        http.get("/v1/conversations/metrics-1/context")
        text = http.get("/metrics").text
    for name in ("memfold_messages_appended_total", "memfold_projector_lag_events", "memfold_summary_queue",
                 'memfold_summaries_total{status="failed"}', "memfold_summarizer_latency_seconds_total",
                 "memfold_context_seconds_count",
                 'memfold_http_request_seconds_count{method="GET",route="/v1/conversations/{conversation_id}/context"'):
        assert name in text, name
    assert "metrics-1" not in text  # conversation ids never become labels
