"""Seal and unseal event content with per-conversation data keys (AES-256-GCM, ``cryptography``).

What is sealed: a message's ``content``, a summary's ``text`` and ``facts``.
The sealed form keeps every other field readable (ids, roles, seq, ranges,
model, tokens), so the log still shows *that* things happened after the key
is gone. The additional authenticated data binds a ciphertext to its
conversation and event id: it cannot be moved onto another event.

Unsealing an event whose key was destroyed returns it still sealed (content
None, ``encrypted`` set): :func:`is_shredded` tells readers it was erased.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import EventDecodeError
from .events import EncryptedContent, Event, Fact, MessageAppended, SummaryProduced
from .keystore import KeyStore

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
            cipher = self._ciphers[key_id] = AESGCM(key)
        return cipher

    def forget(self, key_ids: Sequence[str] = ()) -> None:
        """Drop cached ciphers (all, or those of ``key_ids``) after keys were destroyed."""
        if not key_ids:
            self._ciphers.clear()
        for key_id in key_ids:
            self._ciphers.pop(key_id, None)

    def seal(self, events: Sequence[Event]) -> list[Event]:
        """Return ``events`` with their content sealed; events without content, or already sealed, pass as is."""
        return [self._seal(e) for e in events]

    def _seal(self, event: Event) -> Event:
        p = event.payload
        if isinstance(event, MessageAppended):
            if p.encrypted is not None or p.content is None:
                return event
            plain = p.content.encode("utf-8")
            sealed = self._encrypt(event, plain)
            return event.model_copy(update={"payload": p.model_copy(update={"content": None, "encrypted": sealed})})
        if isinstance(event, SummaryProduced):
            if p.encrypted is not None:
                return event
            plain = json.dumps({"text": p.text, "facts": [f.model_dump() for f in p.facts]}).encode("utf-8")
            sealed = self._encrypt(event, plain)
            return event.model_copy(
                update={"payload": p.model_copy(update={"text": "", "facts": (), "encrypted": sealed})}
            )
        return event

    def _encrypt(self, event: Event, plain: bytes) -> EncryptedContent:
        key_id, key = self.keys.active_key(event.key)
        nonce = os.urandom(NONCE_BYTES)
        ciphertext = self._cipher(key_id, key).encrypt(nonce, plain, _aad(event))
        return EncryptedContent(
            key_id=key_id, algorithm=ALGORITHM,
            nonce_b64=base64.b64encode(nonce).decode("ascii"),
            ciphertext_b64=base64.b64encode(ciphertext).decode("ascii"),
        )

    def unseal(self, event: Event) -> Event:
        """Return ``event`` with its content readable; still sealed when its key was destroyed.

        Raises :class:`EventDecodeError` when the key exists but the
        ciphertext does not authenticate (tampered or misplaced content).
        """
        sealed = getattr(event.payload, "encrypted", None)
        if sealed is None:
            return event
        if sealed.algorithm != ALGORITHM:
            raise EventDecodeError(f"event {event.event_id} is sealed with unknown algorithm {sealed.algorithm!r}")
        key = self.keys.key(sealed.key_id)
        if key is None:
            return event  # shredded: the conversation was forgotten
        try:
            plain = self._cipher(sealed.key_id, key).decrypt(
                base64.b64decode(sealed.nonce_b64), base64.b64decode(sealed.ciphertext_b64), _aad(event)
            )
        except (InvalidTag, ValueError) as exc:
            raise EventDecodeError(
                f"event {event.event_id}: sealed content does not authenticate with key {sealed.key_id}"
            ) from exc
        p = event.payload
        if isinstance(event, MessageAppended):
            payload = p.model_copy(update={"content": plain.decode("utf-8"), "encrypted": None})
        else:
            data = json.loads(plain)
            payload = p.model_copy(
                update={"text": data["text"], "facts": tuple(Fact(**f) for f in data["facts"]), "encrypted": None}
            )
        return event.model_copy(update={"payload": payload})


def is_shredded(event: Event) -> bool:
    """True when ``event`` still carries sealed content after unsealing: its key was destroyed."""
    return getattr(event.payload, "encrypted", None) is not None


def _aad(event: Event) -> bytes:
    return f"{event.key}\x00{event.event_id}".encode("utf-8")
