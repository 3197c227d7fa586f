"""MessageRetracted: a message withdrawn by an appended event, left out of every read; rebuilds fold it the same."""

from __future__ import annotations

import itertools

import pytest

from memfold.core.errors import AlreadyRetractedError, UnknownMessageError, ValidationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

SETTINGS = {"policy": "hierarchical", "policies": ("hierarchical",),
            "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 3}}


_IDS = itertools.count()


def _say(engine: MemoryEngine, conversation: str, texts: list[str], **kw) -> list[str]:
    ids = [f"{conversation}-m{next(_IDS)}" for _ in texts]
    for event_id, text in zip(ids, texts):
        engine.append_message(conversation, "user", text, event_id=event_id, **kw)
    engine.wait_idle(60)
    return ids


def _texts(messages) -> str:
    return "\n".join(m.content for m in messages)


def test_retracted_message_leaves_every_read_and_later_summaries(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **SETTINGS)) as engine:
        early = _say(engine, "c1", [f"turn {i}: order #{900 + i} ships from Leeds" for i in range(7)])
        produced = [s for s in engine.summaries("c1") if s["status"] == "completed"]
        assert produced and "#902" in produced[0]["facts"]  # summarized before the retraction
        ids = _say(engine, "c1", ["my locker code is 4471, order #5550 ships from Oslo", "thanks, that is all for the Leeds depot"])

        position = engine.retract("c1", ids[0], reason="said by mistake")
        engine.retract("c1", early[2])
        assert engine.store.has_reached(position)
        history = engine.history("c1")
        assert [m.index for m in history] == [0, 1, 3, 4, 5, 6, 8]  # indices do not shift: gaps
        assert "4471" not in _texts(history) and "#902" not in _texts(history)
        assert "4471" not in _texts(engine.context("c1"))
        assert "4471" not in _texts(engine.context("c1", budget=400, query="locker code 4471 Oslo"))
        assert not [h for h in engine.search("c1", "locker 4471", kinds=("message",))]
        _, rows = engine.sql("SELECT event_id FROM messages WHERE conversation_id = 'c1' AND retracted ORDER BY idx")
        assert [r[0] for r in rows] == [early[2], ids[0]]
        _, rows = engine.sql("SELECT payload->>'retracted_event_id' FROM events WHERE type = 'MessageRetracted'")
        assert sorted(r[0] for r in rows) == sorted([ids[0], early[2]])
        audit = engine.audit("c1")
        assert [m["index"] for m in audit["messages"] if m["retracted"]] == [2, 7]  # the audit shows what was withdrawn
        assert audit["events"]["MessageRetracted"] == 2

        _say(engine, "c1", [f"later turn {i}: parcel #{700 + i}" for i in range(6)])
        later = [s for s in engine.summaries("c1") if s["status"] == "completed" and s["covers_to"] >= 8]
        assert later and all("4471" not in s["text"] + s["facts"] for s in later)  # never given to the summarizer
        # Its neighbour was (a bare "thanks, that is all" would say too little for a summary to keep).
        assert any("that is all for the Leeds depot" in s["text"] for s in later)
        assert "#902" in engine.store.summary(produced[0]["summary_id"])["facts"]  # an earlier summary keeps its content

        before = engine.store.dump()
        assert engine.verify() == []
        engine.rebuild()
        assert engine.store.dump() == before  # a rebuild folds the retractions to the same projection


def test_retract_refuses_what_it_cannot_retract_and_writes_nothing(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **SETTINGS)) as engine:
        [mine] = _say(engine, "c1", ["hello"])
        [theirs] = _say(engine, "c2", ["other"], tenant_id="t2")
        end = engine.log.end_positions()
        with pytest.raises(UnknownMessageError, match="holds no message 'nope'"):
            engine.retract("c1", "nope")
        with pytest.raises(UnknownMessageError):
            engine.retract("c1", theirs)  # another tenant's message
        with pytest.raises(UnknownMessageError):
            engine.retract("c9", mine)  # another conversation
        with pytest.raises(ValidationError, match="event_id is required"):
            engine.retract("c1", "  ")
        assert engine.log.end_positions() == end
        engine.retract("c1", mine)
        with pytest.raises(AlreadyRetractedError, match="already retracted"):
            engine.retract("c1", mine)
        assert engine.history("c1") == [] and len(engine.history("c2", tenant_id="t2")) == 1
