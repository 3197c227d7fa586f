"""Replays, promote and verify through a live ``memfold serve`` (their own service: promote changes its settings)."""

from __future__ import annotations

import pytest

from fixtures.memfold_service import LiveService
from memfold.client import Client, NotFoundError, PermissionDeniedError
from memfold.client import InvalidRequestError

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
