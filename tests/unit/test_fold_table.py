"""PolicyFolder, the faust policy agent's fold over a table: re-delivery, crashes between writes, repeated ids.

A dict stands in for the faust table and a list for the topic: the
properties hold for any store that keeps the last value per key.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from memfold.engine.engine import fold_contexts
from memfold.engine.events import Event, MessageAppended, MessagePayload, SummaryRequested
from memfold.engine.settings import Settings
from memfold.engine.tokens import counter
from memfold.projections.fold import ConversationCounters, fold_event, produced
from memfold.streams.fold_table import PolicyFolder, conversation_key, partition_key, state_key

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=timezone.utc)
SETTINGS = Settings.load(
    None,
    policies=("hierarchical", "rolling", "sliding_window"),
    hierarchical={"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 2},
    rolling={"message_threshold": 5, "recent_messages_to_keep": 2, "regeneration_threshold": 3},
    sliding_window={"rolling_window_size": 4, "summarize_after_seq": 2},
)
POLICIES = fold_contexts(SETTINGS)


def message(conversation: str, n: int, *, event_id: str | None = None) -> MessageAppended:
    role = "user" if n % 2 == 0 else "assistant"
    return MessageAppended(
        event_id=event_id or f"{conversation}-{n}", tenant_id="acme", conversation_id=conversation,
        occurred_at=T0 + timedelta(minutes=n),
        payload=MessagePayload(role=role, content=f"{role} turn {n}: order #{1000 + n} ships on day {n % 7}"),
    )


class Topic:
    """One partition: append-only, an append of a stored event id is skipped (as KafkaEventLog does)."""

    def __init__(self, events: list[Event]):
        self.records: list[Event] = []
        self.append(events)

    def append(self, events: list[Event]) -> None:
        stored = {e.event_id for e in self.records}
        for e in events:
            if e.event_id not in stored:
                stored.add(e.event_id)
                self.records.append(e)


def answered(derived: list[Event]) -> list[Event]:
    """The derived events plus, after each request, its summary (what the summarizer appends)."""
    out: list[Event] = []
    for e in derived:
        out.append(e)
        if isinstance(e, SummaryRequested):
            p = e.payload
            out.append(produced(e, text=f"summary of {p.covers_from}..{p.covers_to}", summarizer="t", model="m",
                                prompt_hash="h"))
    return out


def fold_all(table: dict[str, Any], topic: Topic, start: int = 0) -> None:
    """Fold every record from ``start`` like the agent: plan, append what is decided, then write."""
    folder = PolicyFolder(table, POLICIES, counter())
    offset = start
    while offset < len(topic.records):
        assert folder.position(0) == offset - 1
        derived, writes = folder.plan(0, offset, topic.records[offset])
        topic.append(answered(derived))
        table.update(writes)
        offset += 1


def uninterrupted(events: list[Event]) -> tuple[dict[str, Any], Topic]:
    table: dict[str, Any] = {}
    topic = Topic(events)
    fold_all(table, topic)
    return table, topic


def conversation_events() -> list[Event]:
    return [message(c, n) for n in range(14) for c in ("a", "b")]


def test_the_table_holds_what_fold_event_gives_over_the_same_topic():
    table, topic = uninterrupted(conversation_events())
    assert sum(isinstance(e, SummaryRequested) for e in topic.records) >= 6
    for conv in ("a", "b"):
        counters, states = ConversationCounters(), {}
        for e in topic.records:
            if e.conversation_id == conv:
                tokens = counter().count_message(e.payload.content) if isinstance(e, MessageAppended) else 0
                fold = fold_event(e, counters, POLICIES, lambda name: states.get(name) or POLICIES[name][0].initial("acme", conv),
                                  tokens=tokens)
                counters = fold.counters
                states.update(fold.states)
        for name, state in states.items():
            assert table[state_key(name, f"acme/{conv}")]["state"] == state.model_dump_json()
        assert table[conversation_key(f"acme/{conv}")]["message_count"] == counters.message_count == 14


def test_seq_counts_the_conversation_events_as_the_log_numbers_them():
    table, topic = uninterrupted(conversation_events())
    for conv in ("a", "b"):
        assert table[conversation_key(f"acme/{conv}")]["seq"] == sum(e.conversation_id == conv for e in topic.records)
    assert table[partition_key(0)] == len(topic.records) - 1


def test_a_redelivered_record_changes_nothing_and_decides_nothing():
    table, topic = uninterrupted(conversation_events())
    folder = PolicyFolder(dict(table), POLICIES, counter())
    for offset, event in enumerate(topic.records):
        derived, writes = folder.plan(0, offset, event)
        assert derived == [] and writes == {partition_key(0): offset}


@pytest.mark.parametrize("crash_at", range(0, 40, 3))
def test_a_crash_between_any_two_writes_then_refolding_gives_the_uninterrupted_table(crash_at):
    expected_table, expected_topic = uninterrupted(conversation_events())
    for kept in range(0, 6):
        table: dict[str, Any] = {}
        topic = Topic(conversation_events())
        folder = PolicyFolder(table, POLICIES, counter())
        for offset in range(crash_at):
            derived, writes = folder.plan(0, offset, topic.records[offset])
            topic.append(answered(derived))
            table.update(writes)
        # Record `crash_at`: its events reach the log, then the process dies after `kept` table writes.
        derived, writes = folder.plan(0, crash_at, topic.records[crash_at])
        topic.append(answered(derived))
        table.update(dict(list(writes.items())[:kept]))
        # A restart re-delivers from the last position the table records.
        fold_all(table, topic, PolicyFolder(table, POLICIES, counter()).position(0) + 1)
        assert table == expected_table, f"crash after {kept} writes of record {crash_at}"
        assert [e.event_id for e in topic.records] == [e.event_id for e in expected_topic.records]


def test_an_event_id_stored_twice_is_folded_once_like_the_log_reads_it():
    events = conversation_events()
    repeated = events[:9] + [events[4]] + events[9:]
    table, topic = uninterrupted(events)
    table_r: dict[str, Any] = {}
    topic_r = Topic([])
    topic_r.records = list(repeated)  # stored twice, as racing appenders can leave it in Kafka
    fold_all(table_r, topic_r)
    assert table_r["part|0"] == table["part|0"] + 1
    assert without_offsets(table_r) == without_offsets(table)


def without_offsets(table: dict[str, Any]) -> dict[str, Any]:
    """The table's content minus the offsets it records (they shift when a record is inserted)."""
    return {
        k: {f: x for f, x in v.items() if f != "offset"} for k, v in table.items() if isinstance(v, dict)
    }
