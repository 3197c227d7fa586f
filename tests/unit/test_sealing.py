"""Sealing content with per-conversation keys: round trip, shredding, tampering, the wrong key store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memfold.engine.errors import EventDecodeError, KeyStoreError
from memfold.engine.events import Fact, MessageAppended, MessagePayload, SummaryProduced, SummaryProducedPayload, decode
from memfold.engine.keystore import SQLiteKeyStore
from memfold.engine.sealing import Sealer, is_shredded

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _message(conversation: str, text: str, n: int = 0) -> MessageAppended:
    return MessageAppended(event_id=f"m-{conversation}-{n}", conversation_id=conversation, occurred_at=T0,
                           payload=MessagePayload(role="user", content=text))


def _summary(conversation: str) -> SummaryProduced:
    return SummaryProduced(
        event_id="s1", conversation_id=conversation, occurred_at=T0,
        payload=SummaryProducedPayload(summary_id="s1", request_id="r1", policy="hierarchical", settings_hash="h",
                                       covers_from=0, covers_to=3, text="Dana asked for a refund",
                                       facts=(Fact(key="name", value="Dana"),), summarizer="offline", model="m",
                                       prompt_hash="p"),
    )


@pytest.fixture
def sealer(tmp_path):
    keys = SQLiteKeyStore(tmp_path / "keys.sqlite")
    yield Sealer(keys)
    keys.close()


def test_sealed_events_round_trip_through_their_stored_json(sealer):
    events = [_message("a", "my card ends 4242"), _summary("a"), _message("b", "hello", 1)]
    sealed = sealer.seal(events)
    for original, s in zip(events, sealed):
        stored = s.encode()
        assert "4242" not in stored and "Dana" not in stored and "hello" not in stored
        assert sealer.unseal(decode(stored)) == original
    assert sealed[0].payload.encrypted.key_id == sealed[1].payload.encrypted.key_id
    assert sealed[0].payload.encrypted.key_id != sealed[2].payload.encrypted.key_id  # one key per conversation


def test_destroying_a_key_shreds_that_conversation_only_and_a_new_key_follows(sealer):
    a1, b1 = sealer.seal([_message("a", "secret one"), _message("b", "kept")])
    assert sealer.keys.destroy("default/a") == 1
    assert sealer.keys.destroy("default/a") == 0  # idempotent
    sealer.forget()
    assert is_shredded(sealer.unseal(a1)) and sealer.unseal(a1).payload.content is None
    assert sealer.unseal(b1).payload.content == "kept"
    (a2,) = sealer.seal([_message("a", "after the forget", 2)])
    assert a2.payload.encrypted.key_id != a1.payload.encrypted.key_id
    assert sealer.unseal(a2).payload.content == "after the forget"


def test_tampered_or_moved_ciphertext_is_refused(sealer):
    a1, a2 = sealer.seal([_message("a", "one", 1), _message("a", "two", 2)])
    moved = a1.model_copy(update={"payload": a1.payload.model_copy(update={"encrypted": a2.payload.encrypted})})
    with pytest.raises(EventDecodeError, match="does not authenticate"):
        sealer.unseal(moved)


def test_a_key_the_store_never_held_is_an_error_not_an_erasure(sealer, tmp_path):
    (a1,) = sealer.seal([_message("a", "one")])
    other = Sealer(SQLiteKeyStore(tmp_path / "other.sqlite"))
    with pytest.raises(KeyStoreError, match="keystore"):
        other.unseal(a1)
    other.keys.close()


def test_a_destroyed_key_leaves_no_bytes_in_the_key_store_file(sealer, tmp_path):
    sealer.seal([_message("a", "one")])
    key = sealer.keys.active_keys(["default/a"])["default/a"][1]
    sealer.keys.destroy("default/a")
    for path in tmp_path.iterdir():
        assert key not in path.read_bytes(), path.name
