"""Data-key stores shared by several processes or nodes: a key destroyed on one stops being used on the others.

Each store caches keys in memory. Before these tests, a second process (or
Kafka node) that had sealed content of a conversation kept sealing new
content with that conversation's key after another one destroyed it: every
later message was shredded on arrival, for as long as the process ran.
"""

from __future__ import annotations

import uuid

import pytest
from support.waiting import wait_until

from memfold.streams.keystore import KEY_RECHECK_S, SQLiteKeyStore

SCOPE = "acme/support-4711"


def test_sqlite_a_key_destroyed_by_another_connection_is_not_used_to_seal_and_reopen_makes_a_new_one(tmp_path):
    a, b = SQLiteKeyStore(tmp_path / "keys.sqlite"), SQLiteKeyStore(tmp_path / "keys.sqlite")  # two processes' views
    try:
        (old_id, old_key), = b.active_keys([SCOPE]).values()
        assert b.key(old_id) == old_key
        assert a.destroy(SCOPE) == 1
        assert b.active_keys([SCOPE]) == {}  # forgotten: nothing new is sealed in it, on either view
        assert b.status(SCOPE) == "forgotten" and b.status("acme/never") == "unknown"
        assert a.reopen(SCOPE)
        (new_id, new_key), = b.active_keys([SCOPE]).values()
        assert new_id != old_id and new_key != old_key  # reopened: new content gets a live key
        assert b.key(old_id) is None  # and the old content reads as shredded
        assert a.key(new_id) == new_key  # the new key is shared, as any key is
    finally:
        a.close()
        b.close()


def test_sqlite_a_key_destroyed_by_another_connection_stops_unsealing_soon(tmp_path):
    a, b = SQLiteKeyStore(tmp_path / "keys.sqlite"), SQLiteKeyStore(tmp_path / "keys.sqlite")
    try:
        (key_id, key), = a.active_keys([SCOPE]).values()
        other = a.active_keys(["acme/other"])["acme/other"]
        assert b.key(key_id) == key and b.key(other[0]) == other[1]  # cached in b now
        a.destroy(SCOPE)
        # b rechecks its cache every KEY_RECHECK_S seconds; the deadline only bounds a stalled machine
        wait_until(lambda: b.key(key_id) is None, timeout=max(100 * KEY_RECHECK_S, 10.0),
                   message="b to drop the destroyed key from its cache")
        assert b.key(other[0]) == other[1]  # the other conversation's key is intact
    finally:
        a.close()
        b.close()


@pytest.mark.kafka
def test_kafka_a_key_destroyed_on_another_node_is_not_used_to_seal(kafka_bootstrap):
    from memfold.streams.kafka_keystore import KafkaKeyStore

    topic = f"memfold.keys.{uuid.uuid4().hex[:8]}"
    a = KafkaKeyStore(kafka_bootstrap, topic, refresh=0.2)
    b = KafkaKeyStore(kafka_bootstrap, topic, refresh=0.2)
    try:
        (old_id, old_key), = b.active_keys([SCOPE]).values()
        assert a.key(old_id) == old_key
        assert a.destroy(SCOPE) == 1
        # b serves its cached key until its refresh (0.2 s) is past; it never makes a key for a scope
        # it holds, live or forgotten, so asking again and again changes nothing on the topic
        wait_until(lambda: b.active_keys([SCOPE]) == {}, timeout=30.0, message="b to stop offering the destroyed key")
        assert b.status(SCOPE) == "forgotten"
        assert a.reopen(SCOPE) and not a.reopen(SCOPE)
        (new_id, new_key), = wait_until(lambda: b.active_keys([SCOPE]), timeout=30.0,
                                        message="b to see the key a made on reopen").values()
        assert new_id != old_id and new_key != old_key
        assert b.key(old_id) is None
        assert a.key(new_id) == new_key
    finally:
        a.close()
        b.close()


def _records_a_destroyed_key_it_never_held(store) -> None:
    """What an import of a forgotten conversation relies on: the id reads as erased, the scope as forgotten."""
    store.record_destroyed("dk-imported", SCOPE)
    store.record_destroyed("dk-imported", SCOPE)  # idempotent
    assert store.key("dk-imported") is None
    assert store.status(SCOPE) == "forgotten" and store.active_keys([SCOPE]) == {}
    assert store.reopen(SCOPE)
    (live_id, live_key), = store.active_keys([SCOPE]).values()
    store.record_destroyed(live_id, SCOPE)  # a live key of that id stays live
    assert store.key(live_id) == live_key


def test_sqlite_records_a_destroyed_key_it_never_held(tmp_path):
    store = SQLiteKeyStore(tmp_path / "keys.sqlite")
    try:
        _records_a_destroyed_key_it_never_held(store)
    finally:
        store.close()


@pytest.mark.kafka
def test_kafka_records_a_destroyed_key_it_never_held(kafka_bootstrap):
    from memfold.streams.kafka_keystore import KafkaKeyStore

    store = KafkaKeyStore(kafka_bootstrap, f"memfold.keys.{uuid.uuid4().hex[:8]}", refresh=0.2)
    try:
        _records_a_destroyed_key_it_never_held(store)
    finally:
        store.close()
