"""``memfold serve`` over one Kafka broker: shard nodes routing reads, tenant-wide fan-out, API keys shared by replicas.

Every node is a real ``memfold serve`` subprocess; keys are created and
revoked with the real ``memfold keys`` command on the shared topic.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
from fixtures.memfold_service import MEMFOLD, LiveService

from memfold.core.partitioner import partition_for
from memfold.core.settings import POLICY_NAMES

pytestmark = pytest.mark.kafka

PARTITIONS = 4
WAIT_S = 60  # an upper bound for "every node sees it" on a loaded machine; never reached when all is well
# Conversation ids on both halves of a 4-partition topic (tenant "acme"): checked by the test below.
CONVERSATIONS = [f"chat-{i}" for i in range(8)]
WORDS = ["invoice", "refund", "booking", "router", "latency", "contract", "pricing", "kafka"]


def _env(topic: str) -> dict[str, str]:
    return {"MEMFOLD_TOPIC": topic, "MEMFOLD_PARTITIONS": str(PARTITIONS), "MEMFOLD_POLICIES": ",".join(POLICY_NAMES)}


def _keys(bootstrap: str, topic: str, data_dir: Path, *args: str) -> str:
    import os

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}, **_env(topic)}
    done = subprocess.run([MEMFOLD, "--data-dir", str(data_dir), "--log", f"kafka://{bootstrap}", "keys", *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _create_key(bootstrap: str, topic: str, data_dir: Path, tenant: str, role: str) -> str:
    return json.loads(_keys(bootstrap, topic, data_dir, "create", "--tenant", tenant, "--role", role, "--json"))["key"]


def _serve(bootstrap: str, topic: str, data_dir: Path, *flags: str) -> LiveService:
    return LiveService.start(data_dir, "--log", f"kafka://{bootstrap}", *flags, env=_env(topic))


def _eventually(check, what: str):
    deadline = time.monotonic() + WAIT_S
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def _status(url: str, key: str, path: str = "/v1/me") -> int:
    try:
        return httpx.get(url + path, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code
    except httpx.TransportError:
        return 0


@pytest.fixture
def topic() -> str:
    return f"memfold.serve.{uuid.uuid4().hex[:10]}"


def test_two_shard_nodes_route_reads_to_the_owner_and_fan_out_tenant_reads(kafka_bootstrap, tmp_path, topic):
    halves = {partition_for(f"acme/{c}", PARTITIONS) < 2 for c in CONVERSATIONS}
    assert halves == {True, False}, "the conversations must live on both nodes"
    key = _create_key(kafka_bootstrap, topic, tmp_path / "keys", "acme", "admin")
    a = _serve(kafka_bootstrap, topic, tmp_path / "a", "--partitions", "0,1")
    b = _serve(kafka_bootstrap, topic, tmp_path / "b", "--partitions", "2,3")
    try:
        with a.http(key) as via_a, b.http(key) as via_b:
            # Every append goes through node a; read-your-writes: wait=true answers once the OWNER holds them.
            for i, conversation in enumerate(CONVERSATIONS):
                turns = [{"role": "user", "content": f"question {n} about the {WORDS[i]} of {conversation}"}
                         for n in range(3)]
                r = via_a.post(f"/v1/conversations/{conversation}/messages?wait=true", json={"messages": turns})
                assert r.status_code == 201, r.text
                owned_by_b = partition_for(f"acme/{conversation}", PARTITIONS) >= 2
                assert (r.headers.get("x-memfold-served-by") == b.url) == owned_by_b
            for conversation in CONVERSATIONS:
                answers = [c.get(f"/v1/conversations/{conversation}/messages") for c in (via_a, via_b)]
                assert [r.status_code for r in answers] == [200, 200]
                assert answers[0].json() == answers[1].json()
                assert len(answers[0].json()["messages"]) == 3
                contexts = [c.get(f"/v1/conversations/{conversation}/context", params={"budget": 500})
                            for c in (via_a, via_b)]
                assert contexts[0].json() == contexts[1].json()
            listed = [c.get("/v1/conversations").json() for c in (via_a, via_b)]
            assert listed[0] == listed[1]
            assert sorted(r["conversation_id"] for r in listed[0]["conversations"]) == CONVERSATIONS
            paged = via_b.get("/v1/conversations", params={"limit": 3, "offset": 2}).json()
            assert paged["conversations"] == listed[0]["conversations"][2:5]
            searches = {}
            for body in ({"query": "refund invoice kafka", "limit": 20},
                         {"query": "question", "conversations": 3, "limit": 4},
                         {"query": "booking pricing", "conversation_ids": CONVERSATIONS}):
                pages = []
                for client in (via_a, via_b):
                    page, walked = dict(body), []
                    while True:
                        r = client.post("/v1/search", json=page)
                        assert r.status_code == 200, r.text
                        walked.append(r.json())
                        if not r.json()["next_cursor"]:
                            break
                        page["cursor"] = r.json()["next_cursor"]
                    pages.append(walked)
                assert pages[0] == pages[1]
                searches[json.dumps(body)] = pages[0]
            hits = {h["conversation_id"] for p in searches[json.dumps({"query": "refund invoice kafka", "limit": 20})]
                    for h in p["hits"]}
            assert {CONVERSATIONS[1], CONVERSATIONS[0], CONVERSATIONS[7]} <= hits
            walked = searches[json.dumps({"query": "question", "conversations": 3, "limit": 4})]
            assert [p["conversations"] for p in walked] == [3, 3, 2]
            # A node asked directly about a partition it does not serve refuses; it never answers from stale rows.
            other = next(c for c in CONVERSATIONS if partition_for(f"acme/{c}", PARTITIONS) >= 2)
            r = via_a.get(f"/v1/conversations/{other}/messages", headers={"X-Memfold-Forwarded": "test"})
            assert r.status_code == 421 and r.json()["error"]["type"] == "PartitionNotOwned"
    finally:
        a.stop()
        b.stop()
    # One full-replica node over the same topic gives the same tenant-wide answers the two shards merged.
    full = _serve(kafka_bootstrap, topic, tmp_path / "full")
    try:
        with full.http(key) as client:
            _eventually(lambda: client.get("/v1/conversations").json() == listed[0], "the full replica caught up")
            assert client.get("/v1/conversations", params={"limit": 3, "offset": 2}).json() == paged
            for body, walked in searches.items():
                page, alone = json.loads(body), []
                while True:
                    r = client.post("/v1/search", json=page).json()
                    alone.append(r)
                    if not r["next_cursor"]:
                        break
                    page["cursor"] = r["next_cursor"]
                assert alone == walked, body
    finally:
        full.stop()


def test_api_replicas_share_keys_and_a_revocation_reaches_every_replica(kafka_bootstrap, tmp_path, topic):
    replicas = [_serve(kafka_bootstrap, topic, tmp_path / name) for name in ("r1", "r2")]
    try:
        key = _create_key(kafka_bootstrap, topic, tmp_path / "ops", "acme", "writer")
        for replica in replicas:
            _eventually(lambda r=replica: _status(r.url, key) == 200, f"{replica.url} accepts the new key")
        key_id = key.split("_")[1]
        out = _keys(kafka_bootstrap, topic, tmp_path / "ops", "revoke", key_id)
        assert f"revoked key {key_id}" in out
        for replica in replicas:
            _eventually(lambda r=replica: _status(r.url, key) == 401, f"{replica.url} refuses the revoked key")
        listed = json.loads(_keys(kafka_bootstrap, topic, tmp_path / "other", "list", "--json"))
        assert [(k["key_id"], bool(k["revoked_at"])) for k in listed] == [(key_id, True)]
        # No replica keeps a key file of its own.
        assert not any((r.data_dir / "api_keys.sqlite").exists() for r in replicas)
    finally:
        for replica in replicas:
            replica.stop()


def test_a_group_node_takes_over_a_killed_nodes_partitions_and_no_read_is_stale(kafka_bootstrap, tmp_path, topic):
    key = _create_key(kafka_bootstrap, topic, tmp_path / "keys", "acme", "writer")
    group = ("--group", f"g-{topic}", "--session-timeout", "6")
    a = _serve(kafka_bootstrap, topic, tmp_path / "a", *group)
    b = _serve(kafka_bootstrap, topic, tmp_path / "b", *group)
    try:
        with a.http(key) as via_a:
            for conversation in CONVERSATIONS:
                turns = [{"role": "user", "content": f"turn {n} of {conversation}"} for n in range(3)]
                r = via_a.post(f"/v1/conversations/{conversation}/messages?wait=true", json={"messages": turns})
                assert r.status_code == 201, r.text

            def b_serves_some() -> bool:  # the group has split the partitions between the two
                served = {via_a.get(f"/v1/conversations/{c}/messages").headers.get("x-memfold-served-by")
                          for c in CONVERSATIONS}
                return b.url in served and None in served

            _eventually(b_serves_some, "both nodes serve partitions")
            b.proc.kill()
            b.proc.wait(30)
            statuses = set()
            for conversation in CONVERSATIONS:
                def read(c=conversation):
                    r = via_a.get(f"/v1/conversations/{c}/messages")
                    statuses.add(r.status_code)
                    if r.status_code == 200:
                        # Never an answer from a projection that has not caught up: all three turns or no answer.
                        assert [m["content"] for m in r.json()["messages"]] == [f"turn {n} of {c}" for n in range(3)]
                        return True
                    assert r.status_code == 503 and r.json()["error"]["type"] == "PartitionMoving", r.text
                    return False

                _eventually(read, f"{conversation} is served again")
            assert statuses <= {200, 503}
            for conversation in CONVERSATIONS:  # a takes b's partitions: appends and reads go on through it
                r = via_a.post(f"/v1/conversations/{conversation}/messages?wait=true",
                               json={"messages": [{"role": "user", "content": f"turn 3 of {conversation}"}]})
                assert r.status_code == 201 and "x-memfold-served-by" not in r.headers, r.text
                assert len(via_a.get(f"/v1/conversations/{conversation}/messages").json()["messages"]) == 4
            assert sorted(c["conversation_id"] for c in via_a.get("/v1/conversations").json()["conversations"]) \
                == CONVERSATIONS
    finally:
        a.stop()
        b.stop()


def test_forget_through_another_shard_node_leaves_no_readable_byte_on_either(kafka_bootstrap, tmp_path, topic):
    import uuid as uuid_

    from support.erasure_kit import files_with

    key = _create_key(kafka_bootstrap, topic, tmp_path / "keys", "acme", "admin")
    a = _serve(kafka_bootstrap, topic, tmp_path / "a", "--partitions", "0,1")
    b = _serve(kafka_bootstrap, topic, tmp_path / "b", "--partitions", "2,3")
    marker = f"zqshard{uuid_.uuid4().hex[:12]}"
    secret = next(c for c in CONVERSATIONS if partition_for(f"acme/{c}", PARTITIONS) >= 2)  # b's
    kept = next(c for c in CONVERSATIONS if partition_for(f"acme/{c}", PARTITIONS) < 2)  # a's
    try:
        with a.http(key) as via_a, b.http(key) as via_b:
            for conversation in (secret, kept):
                turns = [{"role": "user", "content": f"{marker} turn {n} of {conversation}"} for n in range(8)]
                r = via_a.post(f"/v1/conversations/{conversation}/messages?wait=true", json={"messages": turns})
                assert r.status_code == 201, r.text
            assert marker in via_b.get(f"/v1/conversations/{secret}/messages").text
            r = via_a.delete(f"/v1/conversations/{secret}")  # routed to b, which folds the partition
            assert r.status_code == 200 and r.headers.get("x-memfold-served-by") == b.url, r.text
            for client in (via_a, via_b):
                assert client.get(f"/v1/conversations/{secret}/messages").status_code == 404
                assert len(client.get(f"/v1/conversations/{kept}/messages").json()["messages"]) == 8
    finally:
        a.stop()
        b.stop()
    # Neither node's files hold the forgotten conversation's text; the kept one is still there (the search works).
    leftovers = files_with([a.data_dir, b.data_dir], {"content": f"{marker} turn 0 of {secret}"})
    assert leftovers == {}
    assert files_with([a.data_dir], {"content": f"{marker} turn 0 of {kept}"})
