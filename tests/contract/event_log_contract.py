"""The EventLog contract: one backend-independent suite every log (SQLite, Kafka) must pass.

Subclass :class:`EventLogContract` in a ``test_*.py`` module and provide a
``make_log`` fixture returning a factory ``make_log(partitions=4)`` that
creates a fresh, empty log (and closes it at teardown)::

    class TestSQLiteEventLog(EventLogContract):
        @pytest.fixture
        def make_log(self, tmp_path): ...

Only behaviour every backend can honour is tested here, with no concurrent
writers: a Kafka log may leave offset holes when two processes race to append
the same event id, which the backend's own tests cover. Example counts are
moderate because a Kafka append is a broker round trip.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfold.core.errors import ValidationError
from memfold.core.events import (
    EVENT_CLASSES,
    ClockTicked,
    ClockTickedPayload,
    ConversationDeleted,
    ConversationDeletedPayload,
    ConversationReopened,
    ConversationReopenedPayload,
    EncryptedContent,
    Event,
    Fact,
    MessageAppended,
    MessagePayload,
    MessageRetracted,
    MessageRetractedPayload,
    SettingsChanged,
    SettingsChangedPayload,
    SummaryFailed,
    SummaryFailedPayload,
    SummaryProduced,
    SummaryProducedPayload,
    SummaryRequested,
    SummaryRequestedPayload,
    ToolCall,
    TopicAssigned,
    TopicAssignedPayload,
    TopicCompacted,
    TopicCompactedPayload,
    TopicEvicted,
    TopicEvictedPayload,
    conversation_key,
)
from memfold.core.partitioner import partition_for
from memfold.core.ports import EventLog
from memfold.core.positions import LogRecord, Position

T0 = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
MakeLog = Callable[..., EventLog]


# --------------------------------------------------------------------------- event builders


def message(tenant: str, conversation: str, n: int, *, event_id: str | None = None, seq: int = 0) -> MessageAppended:
    """Return a small user/assistant message; ``n`` makes its id and content unique."""
    return MessageAppended(
        event_id=event_id or f"msg-{tenant}-{conversation}-{n}",
        tenant_id=tenant,
        conversation_id=conversation,
        seq=seq,
        occurred_at=T0 + timedelta(seconds=n),
        payload=MessagePayload(role="user" if n % 2 == 0 else "assistant", content=f"turn {n} of {conversation}"),
    )


def one_of_each_type(tenant: str, conversation: str, tag: str = "", *, presealed: bool = True) -> list[Event]:
    """Return one event of every type, with every optional payload field that matters filled in.

    ``presealed`` includes content sealed elsewhere (a key this log never
    saw); a log that seals and unseals itself (``SealedLog``) gets plain
    content in its place, which it seals on append.
    """
    env = lambda n: dict(  # noqa: E731 - the shared envelope, distinct per event
        event_id=f"{tag}{conversation}-{n}", tenant_id=tenant, conversation_id=conversation,
        occurred_at=T0 + timedelta(minutes=n, microseconds=n),
    )
    sealed = EncryptedContent(key_id="k-1", algorithm="AES-256-GCM", nonce_b64="bm9uY2U=", ciphertext_b64="Y2lwaGVy")
    events: list[Event] = [
        MessageAppended(
            **env(1),
            payload=MessagePayload(
                role="user", content="Order #1234 — ça coûte 12,50 € 🚚\nnew line \"quoted\"", name="ana",
                model_variant="gpt-x", metadata={"channel": "web", "nested": {"ids": [1, 2, 3], "ok": True}, "n": None},
                importance=0.75, embedding=(0.1, -0.25, 1e-7, 3.0),
            ),
        ),
        MessageAppended(
            **env(2),
            payload=MessagePayload(
                role="assistant", content="", tool_calls=(ToolCall(id="call-1", name="lookup", arguments='{"id": 1}'),),
            ),
        ),
        MessageAppended(**env(3), payload=MessagePayload(role="tool", content="{\"status\": \"shipped\"}", tool_call_id="call-1")),
        MessageAppended(**env(4), payload=MessagePayload(role="user", encrypted=sealed) if presealed
                        else MessagePayload(role="user", content="sealed by the log itself")),
        SettingsChanged(
            **env(5),
            payload=SettingsChangedPayload(policy="rolling", settings={"message_threshold": 20, "x": [1.5, "a"]}, settings_hash="h-1"),
        ),
        ClockTicked(**env(6), payload=ClockTickedPayload(now=T0 + timedelta(days=3, microseconds=7))),
        SummaryRequested(
            **env(7), causation_id=f"{tag}{conversation}-1",
            payload=SummaryRequestedPayload(
                request_id="req-1", policy="topics", settings_hash="h-1", covers_from=0, covers_to=9, input_from=0,
                input_to=9, base_summary_id="sum-0", window_start=2, input_indices=(0, 3, 5), topic_id="t-1",
                kind="facts", token_cap=500, char_cap=2000,
            ),
        ),
        SummaryProduced(
            **env(8), causation_id=f"{tag}{conversation}-7",
            payload=SummaryProducedPayload(
                summary_id="sum-1", request_id="req-1", policy="topics", settings_hash="h-1", covers_from=0, covers_to=9,
                base_summary_id="sum-0", topic_id="t-1", text="The customer wants a refund.",
                facts=(Fact(key="order_id", value="#1234", category="ENTITY"), Fact(key="refund", value="yes")),
                encrypted=sealed if presealed else None, summarizer="offline", model="extractive-v1", prompt_hash="p-1", tokens_in=120,
                tokens_out=30, latency_ms=5, cached=True,
            ),
        ),
        SummaryFailed(
            **env(9),
            payload=SummaryFailedPayload(
                request_id="req-2", policy="rolling", settings_hash="h-1", reason="timeout after 30s",
                error_type="SummarizerTimeoutError", retryable=True, summarizer="openai", model="gpt-x", latency_ms=30000,
            ),
        ),
        TopicAssigned(
            **env(10),
            payload=TopicAssignedPayload(settings_hash="h-1", topic_id="t-1", message_index=4, similarity=0.875, created=True, title="Refunds"),
        ),
        TopicCompacted(**env(11), payload=TopicCompactedPayload(settings_hash="h-1", topic_id="t-1", compacted_through=12, kept_recent=3)),
        TopicEvicted(**env(12), payload=TopicEvictedPayload(settings_hash="h-1", topic_id="t-1", priority=0.0625)),
        MessageRetracted(**env(13), causation_id=f"{tag}{conversation}-2",
                         payload=MessageRetractedPayload(retracted_event_id=f"{tag}{conversation}-2", reason="pop_item")),
        ConversationDeleted(**env(14), payload=ConversationDeletedPayload(reason="user asked")),
        ConversationReopened(**env(15), payload=ConversationReopenedPayload(reason="user came back")),
    ]
    assert {e.type for e in events} == set(EVENT_CLASSES), "a new event type needs a sample here"
    return events


# --------------------------------------------------------------------------- reading helpers


def read_partition(log: EventLog, partition: int, *, page: int = 1000) -> list[LogRecord]:
    """Return every record of ``partition``, reading page by page from offset 0."""
    records: list[LogRecord] = []
    start = 0
    while batch := log.read(partition, start, page):
        records.extend(batch)
        start = batch[-1].position.offset + 1
    return records


def read_all(log: EventLog, *, page: int = 1000) -> list[LogRecord]:
    """Return every record of every partition, partition by partition."""
    return [record for p in log.partitions() for record in read_partition(log, p, page=page)]


def by_conversation(records: Sequence[LogRecord]) -> dict[tuple[str, str], list[LogRecord]]:
    """Group records by (tenant, conversation), keeping their read order."""
    groups: dict[tuple[str, str], list[LogRecord]] = defaultdict(list)
    for record in records:
        groups[(record.event.tenant_id, record.event.conversation_id)].append(record)
    return dict(groups)


def assert_same_event(stored: Event, appended: Event) -> None:
    """Assert ``stored`` is ``appended`` plus a log-assigned seq: every other field equal."""
    assert type(stored) is type(appended)
    assert stored == appended.with_seq(stored.seq)
    assert stored.encode() == appended.with_seq(stored.seq).encode()


def method_signatures(cls: type) -> dict[str, list[tuple[str, object, object]]]:
    """Return, per method of the :class:`EventLog` port, ``cls``'s parameters (name, kind, default) after ``self``.

    Attributes of the port that are not plain functions (``partition_count``)
    are left out: their value is what a caller sees, and tests check it.
    """
    signatures = {}
    for name in (n for n in vars(EventLog) if not n.startswith("_")):
        if not inspect.isfunction(inspect.getattr_static(EventLog, name)):
            continue
        impl = inspect.getattr_static(cls, name, None)
        if not inspect.isfunction(impl):
            signatures[name] = [("<missing or not a method>", type(impl).__name__, None)]
            continue
        params = list(inspect.signature(impl).parameters.values())[1:]
        signatures[name] = [(p.name, p.kind, p.default) for p in params]
    return signatures


# --------------------------------------------------------------------------- the suite


class EventLogContract:
    """What every :class:`~memfold.core.ports.EventLog` backend guarantees. Subclasses provide ``make_log``."""

    PRESEALED = True  # False for a log that seals itself: it cannot read content sealed with keys it never held

    def samples(self, tenant: str, conversation: str, tag: str = "") -> list[Event]:
        return one_of_each_type(tenant, conversation, tag, presealed=self.PRESEALED)

    @pytest.fixture
    def make_log(self) -> MakeLog:  # pragma: no cover - always overridden
        raise NotImplementedError("a backend's test class provides make_log(partitions=4) -> fresh empty log")

    # ---------------------------------------------------------------- shape

    def test_is_an_event_log_with_the_requested_partitions(self, make_log: MakeLog) -> None:
        log = make_log(partitions=3)
        # isinstance() on the runtime-checkable port would only check the names exist; callers
        # pass arguments by name (limit=, types=), so each method must take the port's parameters.
        assert method_signatures(type(log)) == method_signatures(EventLog)
        assert log.partition_count == 3
        assert log.partitions() == [0, 1, 2]

    def test_a_new_log_is_empty(self, make_log: MakeLog) -> None:
        log = make_log(partitions=4)
        assert log.end_positions() == {0: 0, 1: 0, 2: 0, 3: 0}
        assert all(log.read(p, 0) == [] for p in log.partitions())

    def test_appending_nothing_returns_nothing(self, make_log: MakeLog) -> None:
        log = make_log(partitions=2)
        assert log.append([]) == []
        assert log.end_positions() == {0: 0, 1: 0}

    # ---------------------------------------------------------------- positions and offsets

    def test_append_returns_each_position_in_input_order(self, make_log: MakeLog) -> None:
        log = make_log(partitions=4)
        events = [message("acme", f"c{i % 5}", i) for i in range(30)]
        positions = log.append(events)
        assert len(positions) == len(events)
        for event, position in zip(events, positions):
            assert isinstance(position, Position)
            assert position.partition == partition_for(event.key, 4)
        per_partition: dict[int, list[int]] = defaultdict(list)
        for position in positions:
            per_partition[position.partition].append(position.offset)
        for offsets in per_partition.values():  # input order = offset order, from 0, no gaps
            assert offsets == list(range(len(offsets)))
        # the event at each returned position is the event appended there
        for event, position in zip(events, positions):
            (record,) = log.read(position.partition, position.offset, 1)
            assert record.position == position
            assert record.event.event_id == event.event_id

    def test_offsets_are_gapless_from_zero_across_appends(self, make_log: MakeLog) -> None:
        log = make_log(partitions=3)
        positions = []
        for batch in range(5):
            positions += log.append([message("acme", f"c{i}", batch * 10 + i) for i in range(7)])
        for partition in log.partitions():
            offsets = [r.position.offset for r in read_partition(log, partition)]
            assert offsets == list(range(len(offsets)))
            assert sorted(p.offset for p in positions if p.partition == partition) == offsets
        assert sum(log.end_positions().values()) == 35

    def test_read_starts_at_the_given_offset(self, make_log: MakeLog) -> None:
        log = make_log(partitions=1)
        events = [message("acme", "c1", i) for i in range(10)]
        log.append(events)
        records = log.read(0, 4)
        assert [r.position for r in records] == [Position(0, o) for o in range(4, 10)]
        assert [r.event.event_id for r in records] == [e.event_id for e in events[4:]]

    def test_read_with_limit_pages_through_in_order(self, make_log: MakeLog) -> None:
        log = make_log(partitions=1)
        events = [message("acme", "c1", i) for i in range(11)]
        log.append(events)
        pages = [log.read(0, start, 4) for start in (0, 4, 8)]
        assert [len(page) for page in pages] == [4, 4, 3]
        assert [r.event.event_id for page in pages for r in page] == [e.event_id for e in events]
        assert [len(log.read(0, 0, limit)) for limit in (1, 11, 50)] == [1, 11, 11]

    def test_reading_at_or_past_the_end_returns_nothing(self, make_log: MakeLog) -> None:
        log = make_log(partitions=1)
        log.append([message("acme", "c1", i) for i in range(3)])
        assert log.read(0, 3) == []
        assert log.read(0, 1000) == []

    def test_read_rejects_bad_arguments(self, make_log: MakeLog) -> None:
        log = make_log(partitions=2)
        with pytest.raises(ValidationError):
            log.read(2, 0)
        with pytest.raises(ValidationError):
            log.read(-1, 0)
        with pytest.raises(ValidationError):
            log.read(0, -1)
        with pytest.raises(ValidationError):
            log.read(0, 0, 0)

    def test_scan_returns_the_events_of_the_asked_types_as_read_does(self, make_log: MakeLog) -> None:
        log = make_log(partitions=1)
        events = [*self.samples("acme", "c1"), *self.samples("acme", "c2", tag="b-")]
        log.append(events)
        wanted = {"SettingsChanged", "SummaryFailed"}
        expected = [r for r in log.read(0, 0, 1000) if r.event.type in wanted]
        assert len(expected) == 4  # two of each: the comparison is not of empty lists
        found: list[LogRecord] = []
        offset, stops = 0, []
        while True:  # pages of 5 offsets, as the settings follower pages through a long partition
            records, after = log.scan(0, offset, wanted, 5)
            found.extend(records)
            if after == offset:
                break
            stops.append(after)
            offset = after
        assert found == expected
        assert stops == [min(o, len(events)) for o in range(5, len(events) + 5, 5)]
        assert log.scan(0, 0, set(), 100) == ([], len(events))  # no type asked: nothing decoded, still scanned
        assert log.scan(0, len(events), wanted) == ([], len(events))  # at the end

    def test_scan_rejects_bad_arguments(self, make_log: MakeLog) -> None:
        log = make_log(partitions=2)
        for args in ((2, 0), (-1, 0), (0, -1)):
            with pytest.raises(ValidationError):
                log.scan(*args, {"SettingsChanged"})
        with pytest.raises(ValidationError):
            log.scan(0, 0, {"SettingsChanged"}, 0)

    def test_end_positions_count_the_events_of_each_partition(self, make_log: MakeLog) -> None:
        log = make_log(partitions=4)
        positions = log.append([message("acme", f"c{i}", i) for i in range(25)])
        expected = {p: sum(1 for pos in positions if pos.partition == p) for p in range(4)}
        assert log.end_positions() == expected
        for partition, end in log.end_positions().items():  # the next append lands at the end
            conversation = next(f"x{i}" for i in range(1000) if partition_for(conversation_key("acme", f"x{i}"), 4) == partition)
            (position,) = log.append([message("acme", conversation, 1000 + partition)])
            assert position == Position(partition, end)

    # ---------------------------------------------------------------- partitioning and seq

    @pytest.mark.parametrize("partitions", [1, 3, 8])
    def test_a_conversation_lives_in_the_partition_kafka_would_pick(self, make_log: MakeLog, partitions: int) -> None:
        log = make_log(partitions=partitions)
        conversations = [(tenant, f"conv-{i}") for tenant in ("acme", "globex") for i in range(12)]
        log.append([message(t, c, n) for n in range(2) for t, c in conversations])
        for record in read_all(log):
            assert record.position.partition == partition_for(record.event.key, partitions)
        assert {(r.event.tenant_id, r.event.conversation_id) for r in read_all(log)} == set(conversations)

    def test_seq_starts_at_one_and_counts_every_event_type(self, make_log: MakeLog) -> None:
        log = make_log(partitions=4)
        first = self.samples("acme", "c1", tag="a-")
        second = [message("acme", "c1", 100 + i) for i in range(3)] + self.samples("acme", "c1", tag="b-")
        log.append(first)
        log.append(second)
        records = by_conversation(read_all(log))[("acme", "c1")]
        assert [r.event.seq for r in records] == list(range(1, len(first) + len(second) + 1))
        assert [r.event.event_id for r in records] == [e.event_id for e in first + second]

    def test_seq_is_per_conversation_and_ignores_the_callers_seq(self, make_log: MakeLog) -> None:
        log = make_log(partitions=2)
        log.append([message("acme", "a", 0, seq=99), message("acme", "b", 1, seq=5)])
        log.append([message("acme", "a", 2, seq=1), message("globex", "a", 3, seq=7), message("acme", "b", 4)])
        seqs = {k: [r.event.seq for r in v] for k, v in by_conversation(read_all(log)).items()}
        assert seqs == {("acme", "a"): [1, 2], ("acme", "b"): [1, 2], ("globex", "a"): [1]}

    def test_a_batch_mixing_conversations_keeps_each_conversations_order(self, make_log: MakeLog) -> None:
        log = make_log(partitions=2)
        events = [message("acme", f"c{n % 4}", n) for n in range(40)]
        positions = log.append(events)
        groups = by_conversation(read_all(log))
        for conversation, records in groups.items():
            expected = [e for e in events if (e.tenant_id, e.conversation_id) == conversation]
            assert [r.event.event_id for r in records] == [e.event_id for e in expected]
            assert [r.event.seq for r in records] == list(range(1, len(expected) + 1))
        for partition in log.partitions():  # within a partition: the batch's order
            read_ids = [r.event.event_id for r in read_partition(log, partition)]
            assert read_ids == [e.event_id for e, p in zip(events, positions) if p.partition == partition]

    # ---------------------------------------------------------------- payloads

    def test_every_event_type_round_trips_losslessly(self, make_log: MakeLog) -> None:
        log = make_log(partitions=4)
        events = self.samples("acme", "c1") + self.samples("tenant-β", "conv with spaces ✓")
        positions = log.append(events)
        for event, position in zip(events, positions):
            (record,) = log.read(position.partition, position.offset, 1)
            assert record.position == position
            assert_same_event(record.event, event)
            assert record.event.seq >= 1

    # ---------------------------------------------------------------- idempotency

    def test_reappending_stored_events_appends_nothing(self, make_log: MakeLog) -> None:
        log = make_log(partitions=2)
        events = [message("acme", f"c{i % 3}", i) for i in range(9)]
        positions = log.append(events)
        ends = log.end_positions()
        again = log.append(events[3:] + [message("acme", "c0", 50)])
        assert again[:-1] == positions[3:]
        assert log.end_positions() == {p: e + (p == again[-1].partition) for p, e in ends.items()}
        records = by_conversation(read_all(log))
        assert [r.event.seq for r in records[("acme", "c0")]] == [1, 2, 3, 4]
        assert len(read_all(log)) == 10

    def test_a_duplicate_inside_a_batch_is_stored_once(self, make_log: MakeLog) -> None:
        log = make_log(partitions=2)
        a, b = message("acme", "c1", 1), message("acme", "c1", 2)
        positions = log.append([a, b, a])
        assert positions[2] == positions[0]
        records = read_all(log)
        assert [r.event.event_id for r in records] == [a.event_id, b.event_id]
        assert [r.event.seq for r in records] == [1, 2]

    # ---------------------------------------------------------------- property

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(
        partitions=st.integers(min_value=1, max_value=5),
        batches=st.lists(
            st.lists(st.tuples(st.integers(0, 5), st.integers(0, 18)), min_size=1, max_size=25), min_size=1, max_size=5
        ),
        page=st.integers(min_value=1, max_value=40),
    )
    def test_reading_back_gives_each_conversations_events_in_order(
        self, make_log: MakeLog, partitions: int, batches: list[list[tuple[int, int]]], page: int
    ) -> None:
        """Random batches over random conversations: per conversation, exactly what was appended, seq 1..n."""
        conversations = [("acme", "c0"), ("acme", "c1"), ("globex", "c0"), ("globex", "long-" + "x" * 50), ("acme", "ü"), ("t", "c")]
        log = make_log(partitions=partitions)
        appended: dict[tuple[str, str], list[Event]] = defaultdict(list)
        returned: dict[str, Position] = {}
        n = 0
        for batch in batches:
            events = []
            for conversation_index, kind in batch:
                tenant, conversation = conversations[conversation_index]
                events.append(_event_of_kind(kind, tenant, conversation, n, self.PRESEALED))
                n += 1
            for event, position in zip(events, log.append(events)):
                appended[(event.tenant_id, event.conversation_id)].append(event)
                returned[event.event_id] = position
        records = read_all(log, page=page)
        assert len(records) == n
        assert log.end_positions() == {p: sum(1 for pos in returned.values() if pos.partition == p) for p in range(partitions)}
        groups = by_conversation(records)
        assert groups.keys() == appended.keys()
        for conversation, events in appended.items():
            stored = groups[conversation]
            assert [r.event.seq for r in stored] == list(range(1, len(events) + 1))
            for record, event in zip(stored, events, strict=True):
                assert_same_event(record.event, event)
                assert record.position == returned[event.event_id]

    # ------------------------------------------------------------------ the one fold path over this log

    def test_the_runner_folds_this_log_as_it_folds_a_plain_list(self, make_log: MakeLog, tmp_path) -> None:
        """Runner, projector, all five policies, summarizer pool and DuckDB store: same projection on every log."""
        from contract.fold_path import ListLog, fold_through_pipeline

        expected = fold_through_pipeline(ListLog(4), tmp_path / "list")
        assert len(expected["summaries"]) >= 5  # the scenario makes every policy decide something
        assert fold_through_pipeline(make_log(4), tmp_path / "log") == expected


def _event_of_kind(kind: int, tenant: str, conversation: str, n: int, presealed: bool = True) -> Event:
    """Return event number ``n``: a plain message for ``kind`` < 6, else sample ``kind - 6`` of every type."""
    if kind < 6:
        return message(tenant, conversation, n, event_id=f"e{n}")
    sample = one_of_each_type(tenant, conversation, presealed=presealed)[kind - 6]
    return sample.model_copy(update={"event_id": f"e{n}", "occurred_at": T0 + timedelta(seconds=n)})
