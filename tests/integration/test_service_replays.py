"""Replays, promote and verify through a live ``memfold serve`` (their own service: promote changes its settings)."""

from __future__ import annotations

import pytest
from fixtures.memfold_service import LiveService, settled

from memfold.client import Client, InvalidRequestError, NotFoundError, PermissionDeniedError

pytestmark = pytest.mark.timeout(180)

ENV = {"MEMFOLD_POLICY": "hierarchical", "MEMFOLD_POLICIES": "hierarchical",
       "MEMFOLD_HIERARCHICAL__TRIGGER_MESSAGE_COUNT": "6", "MEMFOLD_HIERARCHICAL__RECENT_MESSAGE_COUNT": "2",
       "MEMFOLD_HIERARCHICAL__RESUMMARIZE_EVERY": "3", "MEMFOLD_HIERARCHICAL__LAZY_TIMEOUT_MS": "0"}


@pytest.fixture(scope="module")
def replaying(tmp_path_factory):
    svc = LiveService.start(tmp_path_factory.mktemp("replays"), "--rate", "0", env=ENV)
    with Client(svc.url, svc.key("acme", "admin")) as acme:
        acme.append("c1", [{"role": "user" if i % 2 == 0 else "assistant",
                            "content": f"turn {i}: order #{900 + i} ships from Leeds"} for i in range(14)])
        settled(acme, "c1")  # the replays below target the log's end: no summary may still be on its way
    yield svc
    svc.stop()


def test_replay_routes_need_an_operator_and_an_admin_verifies_its_own_conversations(replaying):
    with Client(replaying.url, replaying.key("acme", "admin")) as admin, \
            Client(replaying.url, replaying.key("globex", "admin")) as other:
        for call in (lambda: admin.replay("x"), admin.replays, lambda: admin.replay_status("x"),
                     lambda: admin.drop_replay("x"), lambda: admin.promote("x"), admin.verify,
                     lambda: admin.diff("x")):
            with pytest.raises(PermissionDeniedError):
                call()
        assert admin.verify("c1") == {"conversation_id": "c1", "identical": True, "differences": []}
        with pytest.raises(NotFoundError):
            other.verify("c1")  # another tenant's conversation: not found, as a missing one


def test_replay_follow_list_drop_and_promote(replaying):
    with Client(replaying.url, replaying.key("ops", "operator")) as ops, \
            Client(replaying.url, replaying.key("acme", "reader")) as reader:
        before = reader.context("c1")
        assert before.policy == "hierarchical"
        started = ops.replay("wide", overrides={"hierarchical.trigger_message_count": 12})
        assert started["job"]["state"] == "running"
        wide = ops.wait_replay("wide", timeout=120)
        assert wide["job"]["state"] == "done" and wide["status"] == "ready", wide
        assert wide["settings"]["hierarchical.trigger_message_count"] == 12
        assert wide["job"]["report"]["run"]["folded"] >= 14 and wide["job"]["report"]["lag"] == 0
        assert ops.verify() == {"identical": True, "differences": []}  # the replay left live untouched
        diff = ops.diff("wide", budget=500)
        (c1,) = [c for c in diff["conversations"] if (c["tenant_id"], c["conversation_id"]) == ("acme", "c1")]
        assert c1["live"]["messages"] == c1["replay"]["messages"] == 14 and c1["replay"]["versions"] >= 1, c1
        assert c1["live"]["latest"] != c1["replay"]["latest"]  # each side reads the summary of its own settings
        assert diff["budget"] == 500 and diff["totals"]["conversations"] == len(diff["conversations"])
        with pytest.raises(NotFoundError):
            ops.diff("wide", conversation_id="c1")  # one conversation is the key's tenant's: ops has no c1

        assert ops.wait_replay(ops.replay("roll", policy="rolling")["name"])["job"]["state"] == "done"
        assert [r["name"] for r in ops.replays()] == ["roll", "wide"]
        ops.drop_replay("wide")
        assert [r["name"] for r in ops.replays()] == ["roll"]
        for call in (lambda: ops.replay_status("wide"), lambda: ops.drop_replay("nowhere"),
                     lambda: ops.promote("nowhere")):
            with pytest.raises(NotFoundError):
                call()
        with pytest.raises(InvalidRequestError):
            ops.replay("../escape")

        promoted = ops.promote("roll")
        assert promoted["promoted"] is True and promoted["policy"] == "rolling"
        assert ops.replay_status("roll")["status"] == "promoted"
        after = reader.context("c1")  # reads use the promoted settings at once
        assert after.policy == "rolling" and after != before
        assert ops.verify()["identical"] is True  # the swapped-in projection is what the log folds to now


def test_diff_with_a_question_set_scores_each_side_and_rejects_bad_questions(replaying):
    op = replaying.key("acme", "operator")  # questions are asked in the key's tenant's conversations
    with Client(replaying.url, op) as ops, replaying.http(op) as raw:
        assert ops.wait_replay(ops.replay("asked", overrides={"hierarchical.recent_message_count": 4})["name"],
                               timeout=120)["job"]["state"] == "done"
        asked = [{"question": "Where do the orders ship from?", "answer": "Leeds"},
                 {"question": "Which port?", "answer": "Zanzibar harbour", "conversation_id": "c1"}]
        diff = ops.diff("asked", conversation_id="c1", budget=500, questions=asked)
        (c1,) = diff["conversations"]
        # Every message names Leeds and none names Zanzibar: each side holds 1 of 2 answers' words.
        assert c1["questions"] == 2 and c1["live"]["recall"] == c1["replay"]["recall"] == 0.5, c1
        assert diff["totals"]["live"]["recall"] == 0.5 and diff["budget"] == 500
        plain = ops.diff("asked", conversation_id="c1", budget=500)  # GET: the same diff without recall
        assert plain["conversations"][0]["live"]["recall"] is None
        assert plain["conversations"][0]["live"]["context_tokens"] == c1["live"]["context_tokens"]

        everywhere = ops.diff("asked", questions=[{"conversation_id": "c1", "question": "q", "answer": "Leeds"}])
        scored = {(c["tenant_id"], c["conversation_id"]): c for c in everywhere["conversations"]}
        assert scored[("acme", "c1")]["live"]["recall"] == 1.0
        assert all(c["questions"] == 0 and c["live"]["recall"] is None for k, c in scored.items() if k != ("acme", "c1"))

        url = "/v1/replays/asked/diff"
        bad = {
            "no conversation": {"questions": [{"question": "q", "answer": "a"}]},
            "another conversation": {"conversation_id": "c1", "questions": [
                {"conversation_id": "c2", "question": "q", "answer": "a"}]},
            "blank answer": {"conversation_id": "c1", "questions": [{"question": "q", "answer": "  "}]},
            "no answer": {"conversation_id": "c1", "questions": [{"question": "q"}]},
            "unknown field": {"conversation_id": "c1", "questions": [{"question": "q", "answer": "a", "x": 1}]},
            "empty set": {"conversation_id": "c1", "questions": []},
            "too many": {"conversation_id": "c1", "questions": [{"question": "q", "answer": "a"}] * 501},
            "not a list": {"conversation_id": "c1", "questions": {"question": "q", "answer": "a"}},
        }
        for why, body in bad.items():
            r = raw.post(url, json=body)
            assert r.status_code == 422 and r.json()["error"]["type"] == "ValidationError", (why, r.status_code, r.text)
            assert "questions" in r.json()["error"]["message"], (why, r.json())
        missing = raw.post(url, json={"questions": [{"conversation_id": "nowhere", "question": "q", "answer": "a"}]})
        assert missing.status_code == 404 and "nowhere" in missing.json()["error"]["message"], missing.text
        with Client(replaying.url, replaying.key("acme", "admin")) as admin, pytest.raises(PermissionDeniedError):
            admin.diff("asked", conversation_id="c1", questions=asked)
        ops.drop_replay("asked")
