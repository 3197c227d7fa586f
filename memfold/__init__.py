"""memfold: conversation memory as an event-sourced engine.

``from memfold import MemoryEngine`` for the embedded engine, ``from memfold import Client`` (or
``AsyncClient``) to talk to ``memfold serve``. The names load on first use, so ``import memfold``
stays cheap for the command line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["AsyncClient", "Client", "MemoryEngine"]

_HOMES = {"MemoryEngine": "memfold.engine.engine", "Client": "memfold.client", "AsyncClient": "memfold.client"}

if TYPE_CHECKING:
    from memfold.client import AsyncClient, Client
    from memfold.engine.engine import MemoryEngine


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'memfold' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
