"""KafkaEventLog passes the EventLog contract: a fresh topic per log on the session broker."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from contract.event_log_contract import EventLogContract
from memfold.streams.kafka_log import KafkaEventLog

pytestmark = pytest.mark.kafka


class TestKafkaEventLog(EventLogContract):
    @pytest.fixture
    def make_log(self, kafka_bootstrap: str) -> Iterator[Callable[..., KafkaEventLog]]:
        opened: list[KafkaEventLog] = []

        def make(partitions: int = 4) -> KafkaEventLog:
            log = KafkaEventLog(
                kafka_bootstrap, topic=f"contract.{uuid.uuid4().hex[:12]}", partitions=partitions, timeout=20
            )
            opened.append(log)
            return log

        yield make
        for log in opened:
            log.close()
