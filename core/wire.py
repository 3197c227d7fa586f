"""msgspec mirrors of the stored ``MessageAppended`` (v2): the read path's fast decoder.

Nearly every event a projector reads is a message, and validating one with
pydantic costs several times what msgspec needs to parse it into typed
structs. :func:`memfold.core.events.decode` tries these first and builds
the pydantic event from the result without validating it again; anything
they reject (another type or version, a value outside a constraint, a
form pydantic accepts in lax mode) takes the pydantic path, which decides.
So the mirrors must be at least as strict as the models in ``events``:
same fields, no unknown ones, the same constraints.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta


class Encrypted(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    key_id: str
    algorithm: str
    nonce_b64: str
    ciphertext_b64: str
    fields: tuple[str, ...] | None = None


class ToolCallWire(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: str
    name: str
    arguments: str = "{}"


class MessagePayloadWire(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    role: Literal["user", "assistant", "system", "tool"]
    content: str | None = None
    encrypted: Encrypted | None = None
    name: str | None = None
    model_variant: str | None = None
    metadata: dict[str, Any] = {}
    importance: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    tool_calls: tuple[ToolCallWire, ...] = ()
    tool_call_id: str | None = None
    embedding: tuple[float, ...] | None = None
    tokens: dict[str, Annotated[int, Meta(ge=0)]] = {}
    user_id: Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^[^/]+$")] | None = None


class MessageAppendedWire(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    event_id: Annotated[str, Meta(min_length=1, max_length=200)]
    type: Literal["MessageAppended"]
    schema_version: Literal[2]
    tenant_id: Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^[^/]+$")] = "default"
    conversation_id: Annotated[str, Meta(min_length=1, max_length=400)]
    seq: Annotated[int, Meta(ge=0)] = 0
    occurred_at: datetime
    causation_id: str | None = None
    payload: MessagePayloadWire


MESSAGE_DECODER = msgspec.json.Decoder(MessageAppendedWire)
WireError = (msgspec.ValidationError, msgspec.DecodeError)
