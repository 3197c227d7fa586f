"""SealedLog: the EventLog contract over the wrapper production uses (SQLite inside), plus what sealing adds."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest

from contract.event_log_contract import EventLogContract, message
from memfold.core.sealing import Sealer
from memfold.core.unreadable import UnreadableRecord
from memfold.streams.keystore import SQLiteKeyStore
from memfold.streams.sealed_log import SealedLog
from memfold.streams.sqlite_log import SQLiteEventLog


class TestSealedLog(EventLogContract):
    PRESEALED = False

    @pytest.fixture
    def make_log(self, tmp_path: Path):
        counter = itertools.count()
        opened: list[SealedLog] = []

        def make(partitions: int = 4) -> SealedLog:
            n = next(counter)
            log = SealedLog(SQLiteEventLog(tmp_path / f"log-{n}.sqlite", partitions=partitions),
                            Sealer(SQLiteKeyStore(tmp_path / f"keys-{n}.sqlite")))
            opened.append(log)
            return log

        yield make
        for log in opened:
            log.close()


def test_a_record_whose_ciphertext_was_tampered_with_is_read_as_unreadable_not_a_failed_read(tmp_path: Path):
    inner = SQLiteEventLog(tmp_path / "log.sqlite", partitions=1)
    log = SealedLog(inner, Sealer(SQLiteKeyStore(tmp_path / "keys.sqlite")))
    try:
        log.append([message("acme", "c1", i) for i in range(3)])
        with sqlite3.connect(tmp_path / "log.sqlite") as db:  # a bit flipped on disk, under the append-only guard
            body = db.execute("SELECT body FROM events WHERE offset_no = 1").fetchone()[0]
            flipped = body.replace('"ciphertext_b64":"', '"ciphertext_b64":"AAAA', 1)
            db.execute("DROP TRIGGER events_no_update")
            db.execute("UPDATE events SET body = ? WHERE offset_no = 1", [flipped])
        records = log.read(0, 0)
        assert [r.position.offset for r in records] == [0, 1, 2]
        bad = records[1].event
        assert isinstance(bad, UnreadableRecord) and "authenticate" in bad.error
        assert records[0].event.payload.content and records[2].event.payload.content  # the others read as ever
    finally:
        log.close()
