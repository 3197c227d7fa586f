"""A record no event decodes from, produced straight to the topic as a bug would, is one UnreadableRecord, not a failed read."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from kafka import KafkaProducer

from memfold.core.events import MessageAppended, MessagePayload
from memfold.core.partitioner import partition_for
from memfold.core.unreadable import UnreadableRecord
from memfold.streams.kafka_log import KafkaEventLog

pytestmark = pytest.mark.kafka


def _message(n: int) -> MessageAppended:
    return MessageAppended(event_id=f"m-{n}-{uuid.uuid4().hex}", tenant_id="acme", conversation_id="c1",
                           occurred_at=datetime(2026, 3, 1, 9, 0, n, tzinfo=UTC),
                           payload=MessagePayload(role="user", content=f"turn {n}"))


def test_an_unreadable_record_is_read_in_place_and_the_rest_decodes(kafka_bootstrap):
    log = KafkaEventLog(kafka_bootstrap, topic=f"test.{uuid.uuid4().hex[:12]}", partitions=3, timeout=20)
    try:
        log.append([_message(0)])
        partition = partition_for("acme/c1", 3)
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        try:
            producer.send(log.topic, key=b"acme/c1", partition=partition, value=b'{"event_id": "poison", "type": "Mess',
                          headers=[("event_id", b"poison"), ("event_type", b"MessageAppended")]).get(timeout=20)
        finally:
            producer.close()
        log.append([_message(1)])
        records = log.read(partition, 0, 100)
        assert [type(r.event).__name__ for r in records] == ["MessageAppended", "UnreadableRecord", "MessageAppended"]
        bad = records[1].event
        assert isinstance(bad, UnreadableRecord) and bad.position == records[1].position
        assert (bad.event_id, bad.tenant_id, bad.conversation_id, bad.stored_type) == ("poison", "acme", "c1",
                                                                                      "MessageAppended")
        assert "not valid JSON" in bad.error
        assert [r.event.payload.content for r in (records[0], records[2])] == ["turn 0", "turn 1"]
        found, _after = log.scan(partition, 0, {"MessageAppended"})
        assert [type(r.event).__name__ for r in found] == ["MessageAppended", "UnreadableRecord", "MessageAppended"]
    finally:
        log.close()
