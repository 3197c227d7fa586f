"""Policy fold state: frozen msgspec structs, cheap to copy, and the one JSON codec the projector stores them with.

Every policy's ``State`` (and the parts it holds) derives from
:class:`FrozenState`. A fold copies state on every item, so it must be cheap:
``replace`` on a struct costs a fraction of a pydantic ``model_copy``, and
encoding or decoding a struct skips validation it does not need (the fold
made the state; only the projector reads it back). Pydantic values a state
carries (a :class:`~memfold.core.events.Fact`, a settings model) are
encoded as their JSON form and validated back on decode. The projector uses
only :func:`encode` and :func:`decode`, whatever the policy.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from pydantic import BaseModel

T = TypeVar("T")


class FrozenState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Base of fold states and their parts: immutable, compared by value, every change a :func:`replace`.

    Subclasses pass ``kw_only=True`` (msgspec applies it per class): fields are named, defaults in any order.
    """


def replace(state: T, **changes: Any) -> T:
    """Return a copy of ``state`` with ``changes`` applied (fields not validated: folds build them)."""
    return msgspec.structs.replace(state, **changes)


def to_builtins(value: Any) -> Any:
    """Return ``value`` as JSON-ready builtins (dicts, lists, ISO dates): what a policy's rows are made of."""
    return msgspec.to_builtins(value, enc_hook=_enc_hook)


def from_builtins(cls: type[T], value: Any) -> T:
    """Return the ``cls`` state that :func:`to_builtins` (then JSON, possibly) made ``value`` of."""
    return msgspec.convert(value, cls, dec_hook=_dec_hook)


def encode(state: Any) -> str:
    """Return the JSON text of ``state``, deterministic for equal states (field order, no whitespace)."""
    return _ENCODER.encode(state).decode()


def decode(cls: type[T], raw: str | bytes) -> T:
    """Return the ``cls`` state encoded in ``raw``; raises ``msgspec.ValidationError`` if it is not one."""
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _DECODERS[cls] = msgspec.json.Decoder(cls, dec_hook=_dec_hook)
    return decoder.decode(raw)


def _enc_hook(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise NotImplementedError(f"cannot encode {type(value).__name__} in a policy state")


def _dec_hook(cls: type, value: Any) -> Any:
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return cls.model_validate(value)
    raise NotImplementedError(f"cannot decode {cls!r} in a policy state")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)
_DECODERS: dict[type, msgspec.json.Decoder] = {}
