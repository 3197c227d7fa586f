"""How the search index gets a conversation: never loaded when it started live, loaded without blocking others."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from memfold.core.ports import MessageRecord
from memfold.projections import retrieval
from memfold.projections.retrieval import SearchIndex

T0 = datetime(2024, 3, 1, 9, 30, tzinfo=UTC)
WAIT = 60.0  # generous: a wait that times out means the index blocked, and the test says so


def msg(conversation: str, index: int, content: str) -> MessageRecord:
    return MessageRecord(tenant_id="t", conversation_id=conversation, index=index, seq=index + 1,
                         event_id=f"{conversation}-{index}", role="user", content=content, tokens=5,
                         occurred_at=T0 + timedelta(minutes=index))


def batch(messages: list[MessageRecord]) -> dict:
    """The ``search_docs`` columns the projector commits with ``messages``."""
    cols = retrieval.new_columns()
    for m in messages:
        retrieval.add_doc(cols, "t", m.conversation_id, "message", m.event_id, m.index, m.content)
    return cols


def rows(messages: list[MessageRecord]) -> list[tuple]:
    cols = batch(messages)
    return list(zip(*(cols[c] for c in retrieval.SEARCH_COLUMNS)))


class Store:
    """What the projection holds, per conversation; counts loads; a load of ``slow`` waits for ``release``."""

    def __init__(self, messages: dict[str, list[MessageRecord]]):
        self.messages = messages
        self.loads: list[str] = []
        self.loading = threading.Event()
        self.release = threading.Event()
        self.slow: str | None = None

    def load_rows(self, tenant: str, conversation: str) -> list[tuple]:
        self.loads.append(conversation)
        snapshot = list(self.messages.get(conversation, []))
        if conversation == self.slow:
            self.loading.set()
            assert self.release.wait(WAIT), "the test never released the load"
        return rows(snapshot)

    def load_messages(self, tenant: str, conversation: str) -> list[MessageRecord]:
        return list(self.messages.get(conversation, []))


def test_a_conversation_whose_first_message_was_committed_live_is_never_loaded():
    store = Store({})
    index = SearchIndex(store.load_rows, store.load_messages)
    first = [msg("new", i, f"message {i} about the parcel") for i in range(3)]
    index.extend(batch(first), first)
    later = [msg("new", 3, "the refund arrived"), msg("new", 4, "and the invoice")]
    index.extend(batch(later), later)
    assert index.count(("t", "new")) == 5
    assert [h.idx for h in index.rank(("t", "new"), "refund")] == [3]
    assert store.loads == []
    # A conversation already under way when the index first saw it is loaded from the store on first use.
    store.messages["old"] = [msg("old", i, f"old message {i}") for i in range(4)]
    more = [msg("old", 4, "the refund of the old one")]
    index.extend(batch(more), more)
    store.messages["old"] += more
    assert index.count(("t", "old")) == 5 and store.loads == ["old"]


def test_a_load_holds_no_lock_and_keeps_the_batches_committed_meanwhile():
    store = Store({"slow": [msg("slow", i, f"slow message {i}") for i in range(3)]})
    index = SearchIndex(store.load_rows, store.load_messages)
    fast = [msg("fast", 0, "the fast one talks about shipping")]
    index.extend(batch(fast), fast)
    store.slow = "slow"
    counted: list[int] = []
    reader = threading.Thread(target=lambda: counted.append(index.count(("t", "slow"))))
    reader.start()
    assert store.loading.wait(WAIT)
    # While the load waits: other conversations answer, and the projector's batches go in.
    assert [h.idx for h in index.rank(("t", "fast"), "shipping")] == [0]
    committed = [msg("slow", 2, "slow message 2"), msg("slow", 3, "the refund came"), msg("slow", 4, "parcel")]
    store.messages["slow"] = store.messages["slow"][:2] + committed  # index 2 was in the load's snapshot too
    extender = threading.Thread(target=index.extend, args=(batch(committed), committed))
    extender.start()
    extender.join(WAIT)
    assert not extender.is_alive(), "a committed batch waited for another conversation's load"
    store.release.set()
    reader.join(WAIT)
    assert counted == [5]
    assert [h.idx for h in index.rank(("t", "slow"), "refund")] == [3]
    assert [h.idx for h in index.rank(("t", "slow"), "slow message")].count(2) == 1  # once, not twice
    assert store.loads == ["slow"]


def test_a_conversation_dropped_during_its_load_is_loaded_again():
    store = Store({"gone": [msg("gone", i, f"secret {i}") for i in range(3)]})
    index = SearchIndex(store.load_rows, store.load_messages)
    store.slow = "gone"
    counted: list[int] = []
    reader = threading.Thread(target=lambda: counted.append(index.count(("t", "gone"))))
    reader.start()
    assert store.loading.wait(WAIT)
    store.messages["gone"] = []  # forgotten: the projection no longer holds it
    index.drop(("t", "gone"))
    store.slow = None
    store.release.set()
    reader.join(WAIT)
    assert counted == [0] and store.loads == ["gone", "gone"]
    assert index.rank(("t", "gone"), "secret") == []
