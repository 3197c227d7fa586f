"""After a forget, no string of the process holds the forgotten conversation's text: engine, service, caches.

The files are searched byte by byte elsewhere (test_erasure_proof); this
searches the memory of the process that served and forgot the conversation,
where caches kept for speed (plans, token counts, rendered contexts, the
appender's last group) would otherwise hold its text until they age out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from starlette.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.erasure_kit import SETTINGS, markers, plant, strings_with  # noqa: E402

from memfold.core.settings import Settings  # noqa: E402
from memfold.engine.engine import MemoryEngine  # noqa: E402
from memfold.projections.projector import ServingHooks  # noqa: E402
from memfold.service.app import close_app, create_app  # noqa: E402
from memfold.service.keys import ApiKeyStore  # noqa: E402


def _needles(tag: str) -> dict[str, bytes]:
    return {f: v.encode() for f, v in markers(tag).items()}


def _as_text(needles: dict[str, bytes]) -> dict[str, str]:
    """Fresh string copies of the markers for the writes: the test itself keeps only the bytes."""
    return {f: v.decode() for f, v in needles.items()}


def test_an_engine_keeps_no_string_of_a_forgotten_conversation(tmp_path):
    secret, kept = _needles("s"), _needles("k")
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data", **SETTINGS)) as engine:
        plant(engine, "kept", _as_text(kept))
        plant(engine, "secret", _as_text(secret))
        engine.wait_idle(120)
        for policy in SETTINGS["policies"]:
            for conversation in ("kept", "secret"):  # the secret read last: the last plan is its
                assert engine.context(conversation, budget=600, query="order late", policy=policy)
            engine.summaries("secret", policy=policy)
        engine.history("secret")
        before = strings_with(secret)
        assert {"content", "name", "callid"} <= set(before), before.keys()
        engine.forget("secret", reason="user request")
        engine.wait_idle(120)
        assert strings_with(secret) == {}
        assert {"content", "name", "callid"} <= set(strings_with(kept))  # the other conversation is all there


def _talk(http: TestClient, conversation: str, m: dict[str, str], turns: int = 8) -> None:
    for i in range(turns):
        call = f"{m['callid']}-{i}"
        body = {"messages": [
            {"role": "user", "content": f"{m['content']} order #{4100 + i} for Dana is late", "name": m["name"]},
            {"role": "assistant", "content": f"Checking ({m['content']})", "tool_calls": [
                {"id": call, "type": "function",
                 "function": {"name": m["callname"], "arguments": json.dumps({"email": m["callargs"]})}}]},
            {"role": "tool", "tool_call_id": call, "content": f"late: {m['content']}"},
            {"role": "assistant", "content": "I have asked the courier."},
        ]}
        assert http.post(f"/v1/conversations/{conversation}/messages?wait=true", json=body).status_code == 201


def test_the_service_keeps_no_string_of_a_conversation_forgotten_through_it(tmp_path):
    data = tmp_path / "data"
    secret = _needles("s")
    engine = MemoryEngine(Settings.load(None, data_dir=data, **SETTINGS), hooks=ServingHooks(relate_users=True))
    keys = ApiKeyStore(data)
    app = create_app(engine, keys)  # the service folding in its own process (memfold serve --fold-in-process)
    try:
        _, key = keys.create("default", "admin")
        with TestClient(app, headers={"Authorization": f"Bearer {key}"}) as http:
            _talk(http, "secret", _as_text(secret))
            engine.wait_idle(120)
            for policy in SETTINGS["policies"]:  # rendered contexts are cached, in two formats
                for params in ({"budget": 600}, {"budget": 600, "query": "order late", "format": "anthropic"}):
                    assert http.get("/v1/conversations/secret/context",
                                    params={**params, "policy": policy}).status_code == 200
            assert http.get("/v1/conversations/secret/messages").status_code == 200
            before = strings_with(secret)
            assert {"content", "name", "callid", "callname", "callargs"} <= set(before), before.keys()
            assert http.delete("/v1/conversations/secret").status_code == 200
            engine.wait_idle(120)
            assert strings_with(secret) == {}
    finally:
        close_app(app)
        keys.close()
        engine.close()


def test_an_engine_keeps_no_string_of_a_forgotten_user(tmp_path):
    secret, kept = _needles("s"), _needles("k")

    def talk(engine: MemoryEngine, conversation: str, m: dict[str, str], user: str) -> None:
        for i in range(8):
            engine.append_message(conversation, "user", f"{m['content']} order #{4100 + i} for Dana is late",
                                  name=m["name"], user_id=user)
            engine.append_message(conversation, "assistant", f"Noted ({m['content']}), I asked the courier.")

    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data", **SETTINGS)) as engine:
        talk(engine, "k1", _as_text(kept), "omar")
        talk(engine, "s1", _as_text(secret), "dana")
        talk(engine, "s2", _as_text(secret), "dana")
        engine.wait_idle(120)
        for policy in SETTINGS["policies"]:
            for conversation in ("k1", "s1", "s2"):
                assert engine.context(conversation, budget=800, query="order late", policy=policy)
        assert engine.context("s3", budget=800, user_id="dana")  # a new conversation of hers: her user memory
        assert engine.user_memory("dana")
        assert {"content", "name"} <= set(strings_with(secret))
        engine.forget_user("dana", reason="user request")
        engine.wait_idle(120)
        assert strings_with(secret) == {}
        assert {"content", "name"} <= set(strings_with(kept))
