"""Seal and unseal event content with per-conversation data keys (AES-256-GCM, ``cryptography``).

What is sealed: every field of :data:`~memfold.core.events.PRIVATE_FIELDS`,
what a user supplied or a policy derived from it (a message's content, name,
metadata, tool calls and their ids, embedding; a summary's text and facts; a
topic's title; the reasons of retractions and failed summaries). The sealed
form keeps the envelope readable (ids, roles, seq, ranges, model, token
counts), so the log still shows *that* things happened after the key is
gone. The additional authenticated data binds a ciphertext to its
conversation and event id: it cannot be moved onto another event.

Unsealing an event whose key was destroyed returns it still sealed (content
None, ``encrypted`` set): :func:`is_shredded` tells readers it was erased.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memfold.core.errors import ConversationForgottenError, EventDecodeError
from memfold.core.events import (
    EVENT_CLASSES,
    PRIVATE_FIELDS,
    EncryptedContent,
    Event,
    Fact,
    MessageAppended,
    MessageRetracted,
    SummaryProduced,
    ToolCall,
    replaced,
    sealed_content,
    unchecked,
)
from memfold.core.ports import KeyStore

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ALGORITHM = "AES-256-GCM"
NONCE_BYTES = 12


class Sealer:
    """Seal events before they are appended and unseal them after they are read."""

    def __init__(self, keys: KeyStore):
        self.keys = keys
        self._ciphers: dict[str, AESGCM] = {}

    def _cipher(self, key_id: str, key: bytes) -> AESGCM:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            # ~9 ms to import: loaded by the first process that seals or unseals, never by a read with nothing to fold
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            cipher = self._ciphers[key_id] = AESGCM(key)
        return cipher

    def forget(self, key_ids: Sequence[str] = ()) -> None:
        """Drop cached ciphers (all, or those of ``key_ids``) after keys were destroyed."""
        if not key_ids:
            self._ciphers.clear()
        for key_id in key_ids:
            self._ciphers.pop(key_id, None)

    def keyed_id(self, scope: str, name: str) -> str:
        """Return a 32-hex id for ``name`` in conversation ``scope``: an HMAC under its data key.

        Stable while the conversation's key lives (a writer that names a
        message the same way twice gets the same id), and no oracle for
        ``name`` once the key is destroyed. Creates the key if the
        conversation has none yet.
        """
        found = self.keys.active_keys([scope]).get(scope)
        if found is None:
            raise _forgotten(scope)
        subkey = hmac.digest(found[1], b"memfold event ids", hashlib.sha256)
        return hmac.new(subkey, name.encode("utf-8"), hashlib.sha256).hexdigest()[:32]

    def seal(self, events: Sequence[Event]) -> list[Event]:
        """Return ``events`` with their private fields sealed; events with nothing private, or sealed, pass as is.

        Keys for conversations new to the key store are created first, in one
        durable write, so no ciphertext can reach the log before its key.
        """
        todo = [e for e in events if _sealable(e)]
        if not todo:
            return list(events)
        scopes = {id(e): seal_scope(e) for e in todo}
        keys = self.keys.active_keys(list(dict.fromkeys(scopes.values())))
        if len(keys) < len(set(scopes.values())):
            for e in todo:
                if scopes[id(e)] not in keys and e.type in WRITER_TYPES:
                    raise _forgotten(e.key)
        # One read of the OS random source for the whole batch: os.urandom releases the GIL,
        # and a call per event let the projector thread stall the appender each time.
        randomness = os.urandom(NONCE_BYTES * len(todo))
        nonces = (randomness[i : i + NONCE_BYTES] for i in range(0, len(randomness), NONCE_BYTES))
        out = []
        for e in events:
            scope = scopes.get(id(e)) if _sealable(e) else None
            if scope is None:
                out.append(e)
            elif scope in keys and not self._covers_forgotten(e):
                out.append(self._seal(e, keys[scope], next(nonces)))
            else:  # derived from a conversation forgotten meanwhile (a summary in flight): its text goes
                out.append(replaced(e, payload=replaced(e.payload, **_fresh_blanks(e.type))))
        return out

    def _covers_forgotten(self, event: Event) -> bool:
        """True when ``event`` is a user summary made from a conversation forgotten meanwhile."""
        covers = event.payload.covers_conversations if isinstance(event, SummaryProduced) else ()
        return any(self.keys.status(f"{event.tenant_id}/{c}") == "forgotten" for c in covers)

    def _seal(self, event: Event, key: tuple[str, bytes], nonce: bytes) -> Event:
        p = event.payload
        fields = PRIVATE_FIELDS[event.type]
        plain = type(p).__pydantic_serializer__.to_json(p, include=set(fields))
        sealed = self._encrypt(event, plain, key, nonce, fields)
        return replaced(event, payload=replaced(p, encrypted=sealed, **_fresh_blanks(event.type)))

    def _encrypt(
        self, event: Event, plain: bytes, key: tuple[str, bytes], nonce: bytes, fields: tuple[str, ...]
    ) -> EncryptedContent:
        ciphertext = self._cipher(*key).encrypt(nonce, plain, _aad(event))
        # Built from values made right here: validation would only cost time on the append path.
        values = {
            "key_id": key[0], "algorithm": ALGORITHM,
            "nonce_b64": base64.b64encode(nonce).decode("ascii"),
            "ciphertext_b64": base64.b64encode(ciphertext).decode("ascii"),
            "fields": fields,
        }
        return unchecked(EncryptedContent, values)

    def unseal(self, event: Event) -> Event:
        """Return ``event`` with its private fields readable; still sealed when its key was destroyed.

        Raises :class:`EventDecodeError` when the key exists but the
        ciphertext does not authenticate (tampered or misplaced content), or
        the plaintext is not what the sealed form says it holds.
        """
        sealed = sealed_content(event)
        if sealed is None:
            return event
        if sealed.algorithm != ALGORITHM:
            raise EventDecodeError(f"event {event.event_id} is sealed with unknown algorithm {sealed.algorithm!r}")
        key = self.keys.key(sealed.key_id)
        if key is None:
            return event  # shredded: the conversation was forgotten
        cipher = self._cipher(sealed.key_id, key)
        from cryptography.exceptions import InvalidTag  # loaded with the cipher

        try:
            plain = cipher.decrypt(
                base64.b64decode(sealed.nonce_b64), base64.b64decode(sealed.ciphertext_b64), _aad(event)
            )
        except (InvalidTag, ValueError) as exc:
            raise EventDecodeError(
                f"event {event.event_id}: sealed content does not authenticate with key {sealed.key_id}"
            ) from exc
        p = event.payload
        try:
            if sealed.fields is None:
                payload = _unseal_first_form(event, plain)
            else:
                payload = replaced(p, encrypted=None, **_restored(json.loads(plain), sealed.fields))
        except (ValueError, TypeError, KeyError) as exc:
            raise EventDecodeError(f"event {event.event_id}: sealed content is not a {event.type} payload: {exc}") from exc
        return replaced(event, payload=payload)


def _unseal_first_form(event: Event, plain: bytes):
    """The payload of an event sealed before every private field was: only message content or summary text."""
    p = event.payload
    if isinstance(event, MessageAppended):
        return replaced(p, content=plain.decode("utf-8"), encrypted=None)
    data = json.loads(plain)
    return replaced(p, text=data["text"], facts=tuple(Fact(**f) for f in data["facts"]), encrypted=None)


def _restored(data: dict, fields: tuple[str, ...]) -> dict:
    """The sealed fields' values as the payload holds them (tuples and models, not JSON lists and objects).

    The plaintext authenticated and was serialized from a validated payload,
    so only the JSON forms are turned back; facts are validated (their times are text in JSON).
    """
    out = {f: data[f] for f in fields}
    if "tool_calls" in out:
        out["tool_calls"] = tuple(unchecked(ToolCall, {"id": t["id"], "name": t["name"], "arguments": t["arguments"]})
                                  for t in out["tool_calls"])
    if out.get("embedding") is not None:
        out["embedding"] = tuple(out["embedding"])
    if "facts" in out:
        out["facts"] = tuple(Fact(**f) for f in out["facts"])
    for name in ("covers_summaries", "covers_conversations"):
        if name in out:
            out[name] = tuple(out[name])
    return out


def user_summary_scope(tenant_id: str, summary_id: str) -> str:
    """Return the key scope a user summary is sealed in: a key of its own, destroyed when any conversation it
    was made from is forgotten (or its user is). No "/" in it, so it is never a conversation's scope."""
    return f"user-summary:{tenant_id}:{summary_id}"


def seal_scope(event: Event) -> str:
    """Return the key scope ``event``'s content is sealed in: its conversation's, or a user summary's own."""
    p = event.payload
    if isinstance(event, SummaryProduced) and p.scope == "user":
        return user_summary_scope(event.tenant_id, p.summary_id)
    return event.key


def is_shredded(event: Event) -> bool:
    """True when ``event`` still carries sealed content after unsealing: its key was destroyed."""
    return sealed_content(event) is not None


def _blanks() -> dict[str, dict[str, object]]:
    """Each private field's empty value (its default; "" for a required text): what a sealed event holds."""
    out = {}
    for name, fields in PRIVATE_FIELDS.items():
        model = EVENT_CLASSES[name].model_fields["payload"].annotation
        out[name] = {}
        for f in fields:
            info = model.model_fields[f]
            out[name][f] = "" if info.is_required() else info.get_default(call_default_factory=True)
    return out


_BLANKS = _blanks()
# What writers append (refused in a forgotten conversation); every other sealable type is derived.
WRITER_TYPES = frozenset({MessageAppended.TYPE, MessageRetracted.TYPE})


def _fresh_blanks(event_type: str) -> dict[str, object]:
    return {f: (dict(v) if isinstance(v, dict) else v) for f, v in _BLANKS[event_type].items()}


def _forgotten(scope: str) -> ConversationForgottenError:
    tenant, _, conversation = scope.partition("/")
    return ConversationForgottenError(
        f"conversation {conversation!r} (tenant {tenant!r}) was forgotten; nothing was appended. "
        "Reopen it to start it again, empty (memfold reopen, MemoryEngine.reopen, POST .../reopen)",
        field="conversation_id",
    )


def _sealable(event: Event) -> bool:
    fields = PRIVATE_FIELDS.get(event.type)
    if fields is None or event.payload.encrypted is not None:
        return False
    blank = _BLANKS[event.type]
    values = event.payload.__dict__
    return any(values[f] != blank[f] for f in fields)


def _aad(event: Event) -> bytes:
    return f"{event.key}\x00{event.event_id}".encode()
