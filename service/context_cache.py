"""Rendered context answers, reused until the conversation changes.

A context is a pure function of the projection at the time of the read, and
everything that changes a conversation's projection (a message, a summary
outcome, a retraction, a forget) is an event of that conversation. So an
answer stays right for as long as no new event of the conversation has been
projected. Each conversation has a version, bumped by a projector listener,
which runs after the projector's in-memory caches (hot tail, search index)
hold the committed batch; an answer is stored with the version read
*before* it was computed, so a batch landing meanwhile makes the stored
answer stale, never wrong. (Versions used to be per log partition: then
every append to any conversation of the partition, a few dozen under load,
threw away the answers of all the others.)

The listener may run a moment after a waiting writer is told its events are
projected, so a route that waited (``?wait=true``, retract, forget) also
bumps the partitions it wrote: a read after it never gets an answer from
before it. Replacing the whole projection (a promoted replay) calls
:meth:`clear`; so does a settings switch, which gives the engine a new
projector and tells the listeners it registered (``add_switch_listener``).

When the fold runs in a process of its own (:mod:`.fold_process`), the
versions are bumped from that process's note of each committed batch,
which also brings the reads it answered ahead; they are stored under the
version the note gives their conversation. The first hit on such an answer
is reported back (``answers_read``), so the fold process goes on answering
that conversation ahead; one nobody reads stops being answered after a few
batches.

It also remembers which conversations exist (:meth:`exists`), so a read
that misses the cache does not ask DuckDB for the conversation's row each
time: that point query waits behind the projector's write transactions, and
under a mixed load it was a large part of a read's latency. A conversation,
once it exists, exists until it is deleted; the listener learns of every
conversation a committed batch wrote and of every deletion, and the forget
route says so at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from memfold.core.events import conversation_key
from memfold.core.partitioner import partition_for
from memfold.core.positions import Position

Version = tuple[int, int, int]  # (epoch, partition bumps by routes, the conversation's projected batches)


def context_key(tenant_id: str, conversation_id: str, budget: int | None, query: str | None, policy: str,
                as_of: str | None = None) -> tuple:
    """Return the key a context answer is stored under (the route's reads and the fold process's answers ahead)."""
    return tenant_id, conversation_id, budget, query, policy, as_of


def touched_by(changes) -> dict[tuple[str, str], bool]:
    """Map each conversation a committed batch changed the context of to whether it is now deleted.

    That is each conversation it wrote, and the other conversations of their
    users (``Changes.related``: a user's memory and recall are in every one).
    """
    touched = dict.fromkeys(changes.related, False)
    touched.update((key, bool(row.get("deleted"))) for key, row in changes.conversations.items())
    return touched


def follow_projector(engine, listener: Callable, on_switch: Callable[[Any], None]) -> None:
    """Have ``listener`` hear every committed batch, and ``on_switch(projector)`` every settings switch.

    The engine must be built with ``ServingHooks(relate_users=True)``: each
    commit then names, for a conversation of a user, the user's other
    conversations as touched (their contexts hold the user's memory).
    """
    if not engine.projector.relate_users:
        raise ValueError("a context cache needs an engine built with hooks=ServingHooks(relate_users=True)")
    engine.add_batch_listener(listener)
    engine.add_switch_listener(on_switch)


class ContextCache:
    """Up to ``max_entries`` answers (bytes), least recently used out; thread-safe."""

    def __init__(self, engine, *, max_entries: int = 10_000):
        self.max_entries = max_entries
        self._partitions = engine.log.partition_count
        self._versions: dict[int, int] = {}
        self._conversations: dict[tuple[str, str], int] = {}
        self._epoch = 0
        # version, answer, ahead, the context's messages (compact entries: other formats are made from them)
        self._entries: OrderedDict[Hashable, tuple[Any, bytes, bool, tuple | None]] = OrderedDict()
        # (tenant, conversation, raw query string) -> the key its validated parameters made (see fastpath)
        self._aliases: dict[tuple[str, str, bytes], Hashable] = {}
        self._lock = threading.Lock()
        self._known: set[tuple[str, str]] = set()  # conversations seen to exist (not deleted)
        self._deletions = 0  # bumped by every committed deletion: a lookup racing one is not remembered
        self._ahead_read: Callable[[str, str], None] | None = None
        if engine.role == "service":  # the fold runs in another process (fold_process.RemoteEngine)
            engine.listen(self._answered, self.clear)
            self._ahead_read = engine.answers_read
            return
        follow_projector(engine, self._projected, lambda projector: self.clear())  # new policies: every answer

    def _projected(self, changes) -> None:
        """Projector listener: ``changes`` are committed and in the projector's caches."""
        self._touched(touched_by(changes), changes.deleted)

    def _touched(self, touched: dict[tuple[str, str], bool], deleted: set[tuple[str, str]]) -> None:
        """Note a committed batch: ``touched`` maps each conversation it wrote to whether it is now deleted."""
        with self._lock:
            versions = self._conversations
            if len(versions) >= self.max_entries * 10:  # bounded: start a new epoch rather than grow
                self._epoch += 1
                versions.clear()
                self._entries.clear()
                self._aliases.clear()
            known = self._known
            if len(known) >= self.max_entries * 10:
                known.clear()  # bounded; relearned from the next batches and reads
            dropped = set(deleted)
            for key, gone in touched.items():
                versions[key] = versions.get(key, 0) + 1
                if gone:
                    known.discard(key)
                    dropped.add(key)
                else:
                    known.add(key)  # its row is committed: a first read need not ask DuckDB
            if deleted:
                self._deletions += 1
                known.difference_update(deleted)
            if dropped:
                self._drop_answers(dropped)

    def _answered(self, touched: dict[tuple[str, str], bool], deleted: set[tuple[str, str]],
                  answers: dict[tuple[str, str], tuple]) -> None:
        """Note a batch committed by a fold process, and store the reads it answered ahead at the new versions.

        Its notes arrive in commit order on one thread, so no later batch of
        a conversation has bumped its version between the two steps.
        """
        self._touched(touched, deleted)
        for (tenant, conversation), ((budget, query, policy), body, messages) in answers.items():
            self.put(context_key(tenant, conversation, budget, query, policy), self.version(tenant, conversation), body,
                     ahead=True, messages=messages)

    def version(self, tenant_id: str, conversation_id: str) -> Version:
        """Return the conversation's current version (read it before computing an answer)."""
        partition = partition_for(conversation_key(tenant_id, conversation_id), self._partitions)
        return self._epoch, self._versions.get(partition, 0), self._conversations.get((tenant_id, conversation_id), 0)

    def get(self, key: Hashable, version: Version) -> bytes | None:
        """Return the answer stored under ``key`` at ``version``, else None."""
        entry = self._read(key, version)
        return None if entry is None else entry[1]

    def messages(self, key: Hashable, version: Version) -> tuple | None:
        """Return the context messages of the compact answer stored under ``key`` at ``version``, else None.

        Another format's answer is made from them (:func:`.schemas.shaped_body`)
        without computing the context again; a read this way counts as a
        read of the stored answer.
        """
        entry = self._read(key, version)
        return None if entry is None else entry[3]

    def _read(self, key: Hashable, version: Version) -> tuple | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != version:
                return None
            self._entries.move_to_end(key)
            if entry[2]:  # answered ahead, read for the first time: the fold process answers it ahead again
                self._entries[key] = (version, entry[1], False, entry[3])
        if entry[2] and self._ahead_read is not None:
            self._ahead_read(key[0], key[1])
        return entry

    def put(self, key: Hashable, version: Version, answer: bytes, *, ahead: bool = False,
            messages: tuple | None = None) -> None:
        """Store ``answer``, computed from the projection as it was at ``version`` (``ahead``: by the fold process).

        ``messages``: the context it renders, kept with a compact answer so other formats are made from it.
        """
        with self._lock:
            self._entries[key] = (version, answer, ahead, messages)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def alias(self, tenant_id: str, conversation_id: str, raw_query: bytes, key: Hashable) -> None:
        """Remember that this raw query string, once validated, read the answer stored under ``key``."""
        with self._lock:
            if len(self._aliases) >= self.max_entries:
                self._aliases.clear()  # rebuilt by the next reads; bounded whatever clients send
            self._aliases[(tenant_id, conversation_id, raw_query)] = key

    def lookup(self, tenant_id: str, conversation_id: str, raw_query: bytes) -> bytes | None:
        """Return the current answer to a read already validated with exactly this query string, else None."""
        key = self._aliases.get((tenant_id, conversation_id, raw_query))
        return None if key is None else self.get(key, self.version(tenant_id, conversation_id))

    def bump(self, written: Iterable[int | Position]) -> None:
        """Mark every answer of the partitions ``written`` (numbers or log positions) stale (routes that waited)."""
        partitions = {w.partition if isinstance(w, Position) else w for w in written}
        with self._lock:
            for partition in partitions:
                self._versions[partition] = self._versions.get(partition, 0) + 1

    def known(self, tenant_id: str, conversation_id: str) -> bool:
        """True when the conversation is known to exist (:meth:`exists` answers without asking the store)."""
        return (tenant_id, conversation_id) in self._known

    def exists(self, tenant_id: str, conversation_id: str, lookup: Callable[[], bool]) -> bool:
        """Return whether the conversation exists; ``lookup()`` asks the store when it is not known to.

        Only a positive answer is remembered (a missing conversation may be
        created by the next append), and not when a deletion was committed
        while ``lookup`` ran.
        """
        key = (tenant_id, conversation_id)
        if key in self._known:
            return True
        deletions = self._deletions
        if not lookup():
            return False
        with self._lock:
            if self._deletions == deletions:
                self._known.add(key)
        return True

    def deleted(self, keys: Iterable[tuple[str, str]]) -> None:
        """Forget that the conversations ``keys`` (tenant, conversation) exist, and their stored answers: they
        were deleted (forget route)."""
        keys = set(keys)
        with self._lock:
            self._deletions += 1
            self._known.difference_update(keys)
            self._drop_answers(keys)

    def _drop_answers(self, conversations: set[tuple[str, str]]) -> None:
        """Drop the stored answers and aliases of ``conversations`` (held under the lock).

        A deleted conversation's answers are stale anyway; dropped at once,
        no copy of its text stays in this process until they age out.
        """
        for key in [k for k in self._entries if isinstance(k, tuple) and (k[0], k[1]) in conversations]:
            del self._entries[key]
        for alias in [a for a in self._aliases if (a[0], a[1]) in conversations]:
            del self._aliases[alias]

    def clear(self) -> None:
        """Drop every answer and what is known to exist (the projection was replaced)."""
        with self._lock:
            self._epoch += 1
            self._deletions += 1
            self._entries.clear()
            self._aliases.clear()
            self._known.clear()
