"""Keeping what a cold read fetched from the store, without racing the fold.

A process that restarts holds no conversation in memory; before this module,
each read of a conversation the fold had not touched since went to DuckDB
for its policy state and newest messages, read after read (about 5 ms of
two queries at 10,000 messages, more than the rest of the read). A reader
that misses now keeps what it fetched, but the fold may commit a newer
version of the same conversation while the reader is querying the store:
what it read is then stale and must not be kept.

:class:`Versions` decides: a counter per slot (conversations hashed over a
fixed number of slots, so it stays bounded however many conversations
pass), bumped whenever a conversation's cached entry changes or goes. A
reader notes the version before it queries the store and keeps the result
only when the version is unchanged afterwards; a collision of two
conversations on one slot only costs a fill refused.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

V = TypeVar("V")

Key = tuple[str, str]


class Versions:
    """Change counters for conversations, over ``slots`` slots (a power of two), plus one for everything."""

    def __init__(self, slots: int = 4096):
        assert slots & (slots - 1) == 0, "slots must be a power of two"
        self._mask = slots - 1
        self._slots = [0] * slots
        self._epoch = 0

    def of(self, key: Key) -> tuple[int, int]:
        """Return the version of ``key`` now: note it before reading the store, compare it before keeping."""
        return self._epoch, self._slots[hash(key) & self._mask]

    def bump(self, key: Key) -> None:
        """Note that ``key``'s cached entry changed or went (the caller holds its cache's lock)."""
        self._slots[hash(key) & self._mask] += 1

    def bump_all(self) -> None:
        """Note that every entry changed (a cache cleared)."""
        self._epoch += 1


class ColdReads(Generic[V]):
    """A bounded LRU of values a reader fetched from the store, each filed under its conversation.

    ``put`` keeps a value only when its conversation's version is the one
    noted before the store was read (:class:`Versions`). The fold calls
    :meth:`invalidate` for every conversation a committed batch touched,
    so what is kept is always the conversation's latest committed value.
    """

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[Key, V]] = OrderedDict()
        self._by_conversation: dict[Key, set[Hashable]] = {}
        self._versions = Versions()
        self._lock = threading.Lock()

    def __contains__(self, name: Hashable) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: Hashable) -> V | None:
        """Return the value kept under ``name``, or None."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                return None
            self._entries.move_to_end(name)
            return entry[1]

    def version(self, key: Key) -> tuple[int, int]:
        """Return ``key``'s version: note it before reading the store for a value of that conversation."""
        with self._lock:
            return self._versions.of(key)

    def put(self, name: Hashable, key: Key, value: V, version: tuple[int, int]) -> bool:
        """Keep ``value`` under ``name`` (a value of conversation ``key``) unless ``key`` changed since ``version``."""
        with self._lock:
            if self._versions.of(key) != version:
                return False
            self._entries[name] = (key, value)
            self._entries.move_to_end(name)
            self._by_conversation.setdefault(key, set()).add(name)
            while len(self._entries) > self.max_entries:
                gone, (gone_key, _) = self._entries.popitem(last=False)
                names = self._by_conversation.get(gone_key)
                if names is not None:
                    names.discard(gone)
                    if not names:
                        del self._by_conversation[gone_key]
            return True

    def invalidate(self, keys: Iterable[Key]) -> None:
        """Forget the values of conversations ``keys`` (a batch that touched them committed), refusing fills under way."""
        with self._lock:
            for key in keys:
                self._versions.bump(key)
                for name in self._by_conversation.pop(key, ()):
                    self._entries.pop(name, None)

    def clear(self) -> None:
        """Forget everything, refusing fills under way (the store was swapped, or a transaction failed)."""
        with self._lock:
            self._versions.bump_all()
            self._entries.clear()
            self._by_conversation.clear()

