"""The hot tail: each conversation's most recent committed messages, kept in memory for context reads.

Most reads want the newest messages within a budget. A long-running engine
answers them from here instead of DuckDB; the tail only ever holds a
contiguous, committed suffix of a conversation, so an answer from it is
exactly what the store would return. Anything it cannot answer exactly
returns None and goes to the store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from memfold.core.ports import MessageRecord
from memfold.projections.read_cache import Versions

Key = tuple[str, str]


class TailCache:
    """Bounded per-conversation suffixes of committed messages; thread-safe, LRU over conversations.

    Bounded three ways, so a long-running engine's memory does not grow with
    history: at most ``max_messages`` per conversation, ``max_conversations``
    conversations, and ``max_total`` messages in all (the least recently
    extended conversations go first).
    """

    def __init__(self, max_messages: int = 256, max_conversations: int = 10_000, max_total: int = 50_000):
        self.max_messages = max_messages
        self.max_conversations = max_conversations
        self.max_total = max_total
        self._tails: OrderedDict[Key, tuple[MessageRecord, ...]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()
        self._versions = Versions()  # bumped when a conversation's tail changes or goes: see seed()

    def __len__(self) -> int:
        """Return how many messages the tail holds, over every conversation."""
        return self._total

    def extend(self, records: Iterable[MessageRecord]) -> None:
        """Append committed messages (index order per conversation). A gap restarts that tail."""
        grouped: dict[Key, list[MessageRecord]] = {}
        for r in records:
            grouped.setdefault((r.tenant_id, r.conversation_id), []).append(r)
        with self._lock:
            for key, new in grouped.items():
                self._versions.bump(key)
                tail = self._tails.pop(key, ())
                self._total -= len(tail)
                if tail and tail[-1].index + 1 != new[0].index:
                    tail = ()  # not contiguous (a restart in between): keep only what is known to be a suffix
                tail = (tail + tuple(new))[-self.max_messages :]
                self._tails[key] = tail
                self._total += len(tail)
            self._evict()

    def _evict(self) -> None:
        while len(self._tails) > self.max_conversations or (self._total > self.max_total and len(self._tails) > 1):
            key, gone = self._tails.popitem(last=False)
            self._total -= len(gone)
            self._versions.bump(key)

    def version(self, key: Key) -> tuple[int, int]:
        """Return the version of ``key``'s tail: note it before reading the store's newest messages for :meth:`seed`."""
        with self._lock:
            return self._versions.of(key)

    def seed(self, key: Key, records: Sequence[MessageRecord], version: tuple[int, int]) -> bool:
        """Keep ``records``, the store's newest messages of a conversation the tail did not hold, as its tail.

        ``records`` must end with the conversation's newest committed message
        (:meth:`DuckDBProjectionStore.recent_messages` does) and ``version``
        be :meth:`version` noted before the store was read. Nothing is kept
        when the tail changed since (a batch committed messages of it, it was
        dropped or evicted: what was read may be stale), when it holds the
        conversation already, or when the indices have a gap (a retracted
        message): the tail only ever holds a contiguous suffix. Returns
        whether it kept them.
        """
        if not records or records[-1].index - records[0].index != len(records) - 1:
            return False
        with self._lock:
            if key in self._tails or self._versions.of(key) != version:
                return False
            tail = tuple(records[-self.max_messages :])
            self._tails[key] = tail
            self._total += len(tail)
            self._evict()
            return True

    def drop(self, key: Key) -> None:
        """Forget a conversation (deleted)."""
        with self._lock:
            self._versions.bump(key)
            self._total -= len(self._tails.pop(key, ()))

    def clear(self) -> None:
        """Forget everything (after a failed transaction or a rebuild)."""
        with self._lock:
            self._versions.bump_all()
            self._tails.clear()
            self._total = 0

    def holds(self, key: Key) -> bool:
        """True when the conversation's newest messages are here (a window may still reach before them)."""
        return bool(self._tails.get(key))

    def window(self, key: Key, start: int, budget: int | None) -> list[MessageRecord] | None:
        """Return messages from index ``start`` whose suffix fits ``budget`` (newest always), or None.

        None means the tail cannot answer exactly (cold conversation, or the
        answer reaches before the tail) and the caller must ask the store.
        """
        tail = self._tails.get(key)
        if not tail:
            return None
        first = tail[0].index
        if start > tail[-1].index:
            return []
        candidates = tail[max(0, start - first) :]
        if budget is None:
            return list(candidates) if start >= first else None
        used = 0
        for i in range(len(candidates) - 1, -1, -1):
            used += candidates[i].tokens
            if used > budget and i < len(candidates) - 1:
                return list(candidates[i + 1 :])
        return list(candidates) if start >= first else None
