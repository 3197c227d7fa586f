"""User memory over HTTP: the live service (fold in its own process) and the Python client."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from memfold.client import AsyncClient, Client
from memfold.core.errors import UnknownUserError, UserConflictError

pytestmark = pytest.mark.timeout(180)

MARCH = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
APRIL = datetime(2024, 4, 10, 9, 0, tzinfo=UTC)


def _session(day: datetime, first: str, count: int = 22) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": first if i == 0 else ("Sounds good, thanks." if i % 2 == 0 else "Happy to help."),
             "occurred_at": day + timedelta(minutes=i)} for i in range(count)]


def _settled(client: Client, user: str, key: str, value: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            memory = client.user_memory(user)
            if {f["key"]: f["value"] for f in memory["facts"]}.get(key) == value:
                return memory
        except UnknownUserError:
            pass
        assert time.monotonic() < deadline, f"user memory of {user} never held {key}={value}"
        time.sleep(0.1)


def test_user_routes_append_read_search_audit_and_forget(service):
    admin = service.key("users-http", "admin")
    with Client(service.url, api_key=admin) as client:
        client.append("mon", _session(MARCH, "I live in Berlin and my order number is #4471."), user_id="dana")
        client.append("tue", _session(APRIL, "Big news: I moved to Munich last week."), user_id="dana")
        client.append("eve-1", _session(MARCH, "zqeve I live in Paris."), user_id="eve")
        memory = _settled(client, "dana", "lives_in", "Munich")
        assert {f["key"]: f["conversation_id"] for f in memory["facts"]} == {"lives_in": "tue", "order_id": "mon"}
        berlin = next(s for s in memory["statements"] if s["value"] == "Berlin")
        assert berlin["superseded_in"] == "tue" and not berlin["current"]
        then = client.user_memory("dana", as_of=MARCH + timedelta(days=1))
        assert {f["key"]: f["value"] for f in then["facts"]}["lives_in"] == "Berlin"
        with pytest.raises(UserConflictError):
            client.add("mon", "user", "I am Eve", user_id="eve")
        first = client.context("thu", budget=1500, query="where do I live?", user_id="dana")  # not started yet
        assert "Munich" in "\n".join(m.content for m in first.messages)
        assert {m.kind for m in first.messages} <= {"memory:user", "user_recalled"}
        with pytest.raises(UserConflictError):
            client.context("mon", budget=1500, user_id="eve")
        client.add("wed", "user", "Where do I live and what is my order number?", user_id="dana")
        context = client.context("wed", budget=2000)
        kinds = [m.kind for m in context.messages]
        assert "memory:user" in kinds and "user_recalled" in kinds and kinds[-1] == "current"
        text = "\n".join(m.content for m in context.messages)
        assert "Munich" in text and "#4471" in text and "zqeve" not in text and "Paris" not in text
        # A cached context of "wed" changes when another conversation of the user does (same read, same key).
        assert "pelican" not in "\n".join(m.content for m in client.context("wed", budget=2000, query="pelican").messages)
        client.append("tue", [{"role": "user", "content": "I adopted a pelican named Gus."}], wait=False)
        deadline = time.monotonic() + 30
        while "pelican named Gus" not in "\n".join(
                m.content for m in client.context("wed", budget=2000, query="pelican").messages):
            assert time.monotonic() < deadline, "the cached context of wed never saw what tue said"
            time.sleep(0.1)
        hits = client.search_user("dana", "order number")
        assert hits[0]["conversation_id"] == "mon" and all(h["conversation_id"] != "eve-1" for h in hits)
        trail = client.audit_user("dana")
        assert next(f for f in trail["facts"] if f["value"] == "Berlin")["superseded_by_value"] == "Munich"
        assert asyncio.run(_async_memory(service.url, admin))["facts"]
        answer = client.forget_user("dana")
        assert sorted(answer["conversations"]) == ["mon", "tue", "wed"]
        with pytest.raises(UnknownUserError):
            client.user_memory("dana")
        assert client.user_memory("eve")["conversations"][0]["conversation_id"] == "eve-1"


async def _async_memory(url: str, key: str) -> dict:
    async with AsyncClient(url, api_key=key) as client:
        return await client.user_memory("dana")
