"""The shared API key store over an in-memory compacted table: what replicas see, and what they refuse."""

from __future__ import annotations

import argparse

import pytest

from memfold.cli.main import shard_request
from memfold.core.errors import ConfigError, LogUnavailableError, ValidationError
from memfold.service.keys import SharedApiKeyStore


class Table:
    """An in-memory compacted topic shared by several readers; ``down`` makes reads fail like a lost broker."""

    topic = "memfold.test.apikeys"

    def __init__(self):
        self.records: list[tuple[str, dict]] = []
        self.down = False


class Reader:
    def __init__(self, table: Table):
        self.table, self.topic, self.next = table, table.topic, 0

    def write(self, records):
        self.table.records.extend(records)

    def read_new(self):
        if self.table.down:
            raise LogUnavailableError("broker down")
        out = self.table.records[self.next:]
        self.next = len(self.table.records)
        return out

    def close(self):
        pass


def test_a_key_made_on_one_replica_works_on_another_and_a_revocation_sticks():
    table = Table()
    one, two = SharedApiKeyStore(Reader(table), follow=False), SharedApiKeyStore(Reader(table), follow=False)
    key, secret = one.create("acme", "writer", "app")
    assert one.authenticate(secret) == key
    assert two.authenticate(secret) is None  # not read yet: its thread reads every second
    two._read()
    assert two.authenticate(secret) == key
    assert two.authenticate(secret[:-1] + ("x" if secret[-1] != "x" else "y")) is None
    two.revoke(key.key_id)
    one._read()
    assert one.authenticate(secret) is None and two.authenticate(secret) is None
    # A stray record bringing the id back unrevoked is ignored: a revoked id stays revoked.
    table.records.append((key.key_id, {**table.records[0][1], "revoked_at": None}))
    one._read()
    assert one.authenticate(secret) is None
    assert [k.revoked_at is not None for k in one.list()] == [True]
    with pytest.raises(ConfigError, match="no API key"):
        one.revoke("nope")


def test_a_replica_that_cannot_read_the_topic_refuses_keys_instead_of_missing_a_revocation():
    table = Table()
    store = SharedApiKeyStore(Reader(table), follow=False, stale_after=3600)
    _, secret = store.create("acme", "reader")
    assert store.authenticate(secret) is not None
    table.down = True
    with pytest.raises(LogUnavailableError):
        store._read()
    store.stale_after = 0.0  # as if 30 s had passed without a read
    with pytest.raises(LogUnavailableError, match="could not be read"):
        store.authenticate(secret)


def _args(partitions=None, group=None) -> argparse.Namespace:
    return argparse.Namespace(shard_partitions=partitions, shard_group=group)


def test_partition_slices_and_lists():
    assert shard_request(_args(), 8) is None
    assert shard_request(_args("1/4"), 8) == ([1, 5], None)
    assert shard_request(_args("0/2"), 8) == ([0, 2, 4, 6], None)
    assert shard_request(_args("3,1"), 8) == ([1, 3], None)
    assert shard_request(_args(group="default"), 8) == (None, None)
    assert shard_request(_args(group="g1"), 8) == (None, "g1")
    for bad in ("2/2", "0/9", "a/2"):
        with pytest.raises(ValidationError):
            shard_request(_args(bad), 8)
    with pytest.raises(ValidationError):
        shard_request(_args("0/2", "g1"), 8)
