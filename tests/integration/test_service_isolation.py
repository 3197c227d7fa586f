"""Tenant isolation, walked over the live service's whole route table (from its own /openapi.json).

Every route that names a conversation is called with tenant A's admin key on
tenant B's conversation and on a conversation that exists nowhere: the two
answers must be identical (a 404 for reads; for an append, A's own new
conversation), and B's data must be unchanged. Routes that name no
conversation must appear in TENANT_SCOPED with a check of their own. A new
route that fits neither fails this test, so no route can skip the check.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time

import pytest

pytestmark = pytest.mark.timeout(120)

# Routes naming a conversation that create it for the caller's tenant (everything else must 404).
CREATES = {("POST", "/v1/conversations/{conversation_id}/messages")}
# Example bodies and query parameters, so a route is exercised past its validation.
BODIES = {("POST", "/v1/conversations/{conversation_id}/messages"): {"messages": [{"role": "user", "content": "probe"}]}}
UNSCOPED = {"/healthz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}


def _checked_conversations(a, b_conv):
    ids = [c["conversation_id"] for c in a.get("/v1/conversations", params={"limit": 1000}).json()["conversations"]]
    assert b_conv not in ids


def _checked_sql(a, b_conv):
    rows = a.post("/v1/sql", json={"query": "SELECT DISTINCT tenant_id FROM messages UNION ALL "
                                            "SELECT DISTINCT tenant_id FROM events"}).json()["rows"]
    assert {r[0] for r in rows} <= {"tenant-a"}


def _checked_search(a, b_conv):
    for body in ({"query": "b secret"}, {"query": "b secret", "conversation_ids": [b_conv, "a-own"]}):
        hits = a.post("/v1/search", json=body).json()["hits"]
        assert all(h["conversation_id"] != b_conv and "b secret" not in h["content"] for h in hits), hits


def _checked_me(a, b_conv):
    assert a.get("/v1/me").json()["tenant_id"] == "tenant-a"


def _checked_export(a, b_conv):
    """An admin key exports its own tenant's events only, and cannot ask for another tenant's."""
    refused = a.post("/v1/admin/export", params={"tenant": "tenant-b", "format": "jsonl"})
    assert refused.status_code == 422, refused.text
    archive = a.post("/v1/admin/export", params={"format": "jsonl", "plaintext": "true"})
    assert archive.status_code == 200, archive.text
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        events = tar.extractfile("events.jsonl").read().decode()
    tenants = {json.loads(line)["tenant_id"] for line in events.splitlines() if line}
    assert tenants == {"tenant-a"} and b_conv not in events and "b secret" not in events


def _operator_only(method: str, template: str):
    """Routes acting on the whole data dir (every tenant): a tenant's admin key is refused outright."""

    def check(a, b_conv):
        r = a.request(method, template.replace("{name}", "any"), json={"name": "any"} if method == "POST" else None)
        assert r.status_code == 403 and r.json()["error"]["type"] == "Forbidden", r.text

    return check


# Routes naming no conversation: each has its own proof that B's data stays out.
TENANT_SCOPED = {
    ("GET", "/v1/conversations"): _checked_conversations,
    ("POST", "/v1/sql"): _checked_sql,
    ("POST", "/v1/search"): _checked_search,
    ("GET", "/v1/me"): _checked_me,
    ("POST", "/v1/admin/export"): _checked_export,
    **{route: _operator_only(*route) for route in (
        ("POST", "/v1/replays"), ("GET", "/v1/replays"), ("GET", "/v1/replays/{name}"),
        ("DELETE", "/v1/replays/{name}"), ("POST", "/v1/replays/{name}/promote"), ("GET", "/v1/replays/{name}/diff"),
        ("POST", "/v1/replays/{name}/diff"),
        ("POST", "/v1/verify"))},
}


def _b_state(b) -> tuple:
    """B's messages and summaries once B's own summarizing has settled (its summaries, then its user's summary asked
    after them, are not changes A made): nothing processing, and the same answer a moment later."""
    last = None
    for _ in range(200):
        summaries = b.get("/v1/conversations/b-private/summaries").json()
        if summaries == last and all(s["status"] != "processing" for s in summaries["summaries"]):
            break
        last = summaries
        time.sleep(0.25)
    return (b.get("/v1/conversations/b-private/messages").json(), b.get("/v1/conversations/b-private/summaries").json())


def test_every_route_hides_other_tenants(service):
    a_key, b_key = service.key("tenant-a", "admin"), service.key("tenant-b", "admin")
    with service.http(a_key) as a, service.http(b_key) as b:
        b.post("/v1/conversations/b-private/messages", params={"wait": "true"},
               json={"user_id": "b-user", "messages": [{"role": "user", "content": f"b secret {i}"} for i in range(25)]})
        a.post("/v1/conversations/a-own/messages", params={"wait": "true"},
               json={"messages": [{"role": "user", "content": "a's message"}]})
        before = _b_state(b)
        b_message = before[0]["messages"][0]["event_id"]  # routes naming a message get one of B's
        paths = a.get("/openapi.json").json()["paths"]
        walked, scoped = 0, set()
        routes = [(m.upper(), t) for t, ops in paths.items() for m in ops]
        # Reads first: an append by A to "b-private" creates A's own conversation of that name.
        for method, template in sorted(routes, key=lambda r: r in CREATES):
            if template in UNSCOPED:
                continue
            if "{user_id}" in template:  # B's user answers as a user that exists nowhere: 404
                answers = []
                for user in ("b-user", f"nowhere-{walked}"):
                    r = a.request(method, template.replace("{user_id}", user), params={"conversation_id": "b-private"},
                                  json={"query": "b secret"} if method == "POST" else None)
                    answers.append((r.status_code, r.text.replace(user, "<user>")))
                assert answers[0] == answers[1] and answers[0][0] == 404, f"{method} {template}: {answers}"
                walked += 1
                continue
            if "{conversation_id}" not in template:
                assert (method, template) in TENANT_SCOPED, f"{method} {template} has no tenant check"
                TENANT_SCOPED[(method, template)](a, "b-private")
                scoped.add((method, template))
                continue
            body = BODIES.get((method, template))
            answers = []
            for conv in ("b-private", f"nowhere-{walked}"):
                path = template.replace("{conversation_id}", conv).replace("{message_id}", b_message)
                r = a.request(method, path, json=body)
                text = r.text.replace(conv, "<conv>")
                answers.append((r.status_code, re.sub(r'"(event_id|offset|partition)":("?)[^,}"]*\2', "", text)))
            assert answers[0] == answers[1], f"{method} {template}: B's conversation differs from a missing one"
            expected = 201 if (method, template) in CREATES else 404
            assert answers[0][0] == expected, f"{method} {template}: {answers[0]}"
            walked += 1
        assert walked >= 5 and scoped == set(TENANT_SCOPED)
        assert a.delete(f"/v1/conversations/a-own/messages/{b_message}").status_code == 404  # not through A's own
        assert _b_state(b) == before
