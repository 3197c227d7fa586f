"""Sealing content with per-conversation keys: round trip, shredding, tampering, the wrong key store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memfold.core.errors import ConversationForgottenError, EventDecodeError, KeyStoreError
from memfold.core.events import (
    PRIVATE_FIELDS,
    Fact,
    MessageAppended,
    MessagePayload,
    MessageRetracted,
    MessageRetractedPayload,
    SummaryFailed,
    SummaryFailedPayload,
    SummaryProduced,
    SummaryProducedPayload,
    ToolCall,
    TopicAssigned,
    TopicAssignedPayload,
    decode,
)
from memfold.core.sealing import Sealer, is_shredded
from memfold.streams.keystore import SQLiteKeyStore

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


def test_destroying_a_key_shreds_that_conversation_only_and_refuses_new_content_until_reopened(sealer):
    a1, b1 = sealer.seal([_message("a", "secret one"), _message("b", "kept")])
    assert sealer.keys.destroy("default/a") == 1
    assert sealer.keys.destroy("default/a") == 0  # idempotent
    sealer.forget()
    assert is_shredded(sealer.unseal(a1)) and sealer.unseal(a1).payload.content is None
    assert sealer.unseal(b1).payload.content == "kept"
    with pytest.raises(ConversationForgottenError, match="reopen"):
        sealer.seal([_message("a", "after the forget", 2)])  # nothing new in a forgotten conversation
    assert sealer.keys.status("default/a") == "forgotten" and sealer.keys.status("default/b") == "live"
    assert sealer.keys.reopen("default/a") and not sealer.keys.reopen("default/a")
    (a2,) = sealer.seal([_message("a", "after the reopen", 2)])
    assert a2.payload.encrypted.key_id != a1.payload.encrypted.key_id
    assert sealer.unseal(a2).payload.content == "after the reopen"
    assert is_shredded(sealer.unseal(a1))  # what came before stays shredded


def test_a_summary_derived_after_the_forget_is_appended_without_its_text(sealer):
    sealer.seal([_message("a", "one")])
    sealer.keys.destroy("default/a")
    (late,) = sealer.seal([_summary("a")])
    assert late.payload.encrypted is None and late.payload.text == "" and late.payload.facts == ()
    assert "Dana" not in late.encode()


def test_every_private_field_is_sealed_and_comes_back(sealer):
    """Markers in every field a message, a tool call, a topic, a retraction and a failed summary carry."""
    marked = MessageAppended(
        event_id="m1", conversation_id="a", occurred_at=T0,
        payload=MessagePayload(
            role="assistant", content="zqcontent", name="zqname", model_variant="zqvariant",
            metadata={"zqmetakey": {"nested": "zqmetaval"}}, importance=0.25,
            tool_calls=(ToolCall(id="zqcallid", name="zqcallname", arguments='{"q": "zqargs"}'),),
            tool_call_id="zqtoolcallid", embedding=(0.5, 0.25), tokens={"cl100k_base": 3},
        ),
    )
    topic = TopicAssigned(event_id="t1", conversation_id="a", occurred_at=T0, payload=TopicAssignedPayload(
        settings_hash="h", topic_id="t", message_index=0, created=True, title="zqtitle"))
    retraction = MessageRetracted(event_id="r1", conversation_id="a", occurred_at=T0, payload=MessageRetractedPayload(
        retracted_event_id="m1", reason="zqreason"))
    failed = SummaryFailed(event_id="f1", conversation_id="a", occurred_at=T0, payload=SummaryFailedPayload(
        request_id="q", policy="rolling", settings_hash="h", reason="zqfailed", error_type="SummarizerOutputError"))
    events = [marked, topic, retraction, failed, _summary("a")]
    assert {e.type for e in events} == set(PRIVATE_FIELDS)  # a new private type needs a marker here
    sealed = sealer.seal(events)
    for original, s in zip(events, sealed):
        stored = s.encode()
        planted = ("zqcontent", "zqname", "zqvariant", "zqmetakey", "zqmetaval", "zqcallid", "zqcallname", "zqargs",
                   "zqtoolcallid", "zqtitle", "zqreason", "zqfailed", "Dana")
        assert not [m for m in planted if m in stored], stored
        assert s.payload.encrypted.fields == PRIVATE_FIELDS[s.type]
        assert s.payload.tokens == original.payload.tokens if s.type == "MessageAppended" else True
        assert sealer.unseal(decode(stored)) == original
    sealer.keys.destroy("default/a")
    sealer.forget()
    shredded = sealer.unseal(decode(sealed[0].encode()))
    assert is_shredded(shredded) and shredded.payload.metadata == {} and shredded.payload.tool_calls == ()


def test_content_sealed_in_the_first_form_still_reads(sealer):
    """Logs written before every private field was sealed hold only content (or text and facts) sealed."""
    import base64
    import json

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from memfold.core.events import EncryptedContent
    from memfold.core.sealing import ALGORITHM, _aad

    message, summary = _message("a", "first form"), _summary("a")
    key_id, key = sealer.keys.active_keys(["default/a"])["default/a"]
    old = []
    for event, plain in ((message, b"first form"),
                         (summary, json.dumps({"text": summary.payload.text,
                                               "facts": [f.model_dump(mode="json") for f in summary.payload.facts]}).encode())):
        nonce = bytes(12)
        sealed = EncryptedContent(key_id=key_id, algorithm=ALGORITHM, nonce_b64=base64.b64encode(nonce).decode(),
                                  ciphertext_b64=base64.b64encode(AESGCM(key).encrypt(nonce, plain, _aad(event))).decode())
        blank = {"content": None} if event.type == "MessageAppended" else {"text": "", "facts": ()}
        old.append(event.model_copy(update={"payload": event.payload.model_copy(update={**blank, "encrypted": sealed})}))
    assert [sealer.unseal(decode(e.encode())) for e in old] == [message, summary]


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


def test_exactly_the_event_types_with_private_fields_can_carry_sealed_content():
    from memfold.core.events import EVENT_CLASSES, PRIVATE_FIELDS

    payloads = {name: cls.model_fields["payload"].annotation for name, cls in EVENT_CLASSES.items()}
    sealable = {name for name, payload in payloads.items() if "encrypted" in payload.model_fields}
    assert sealable == set(PRIVATE_FIELDS)  # what sealed_content reads, by type
