"""Group commit: append requests arriving together become one log transaction.

Every append to the log is durable when it returns (SQLite: one write lock
and one fsync per transaction), so fifty clients appending at once used to
queue fifty lock waits and fifty fsyncs. Here one writer thread takes every
request queued while the previous transaction was committing and appends
them as one batch: one lock, one fsync per group; the busier the service,
the bigger the groups.

Each request stays all or nothing on its own. Before the group is written,
every request is checked for conflicts against the log and against the
requests ahead of it in the group (the same message id with other content:
:class:`EventConflictError`, that request only). If the group's transaction
fails, each request is appended again on its own, so a failure answers only
the request it belongs to.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from memfold.core.errors import EventConflictError
from memfold.core.events import MessageAppended, same_message
from memfold.core.positions import Position

log = logging.getLogger("memfold.service")

_STOP = object()


@dataclass
class _Request:
    events: Sequence[MessageAppended]
    future: Future = field(default_factory=Future)


class GroupAppender:
    """One writer thread appending queued requests in groups of at most ``max_events`` events."""

    def __init__(self, engine, *, max_events: int = 10_000, on_group=lambda: None):
        """``on_group`` is called after each transaction written (the service counts them in /metrics)."""
        self.engine = engine
        self.max_events = max_events
        self.on_group = on_group
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="memfold-appender", daemon=True)
        self._thread.start()

    def submit(self, events: Sequence[MessageAppended]) -> Future:
        """Queue one request's validated events; the future gives their positions, in order."""
        request = _Request(events)
        self._queue.put(request)
        return request.future

    async def append(self, events: Sequence[MessageAppended]) -> list[Position]:
        """Append one request's events with whatever else is queued; return their positions.

        Cancelling (a client that went away) before the group is written
        withdraws the request: nothing of it is appended.
        """
        return await asyncio.wrap_future(self.submit(events))

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the writer thread."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            group, stopping = self._next_group()
            if not group:
                return
            try:
                self._write(group)
            except BaseException as exc:  # never leave a caller waiting
                log.exception("group append failed")
                for request in group:
                    if not request.future.done():
                        request.future.set_exception(exc)
            # Nothing of the group stays referenced while this thread waits for the next one: its messages are
            # in the log, and a conversation forgotten meanwhile must leave no copy of them in this process.
            del group

    def _next_group(self) -> tuple[list[_Request], bool]:
        """Wait for a request; return it with every one queued behind it (up to ``max_events`` events), and
        whether the appender is asked to stop after them. An empty group: stop now."""
        first = self._queue.get()
        if first is _STOP:
            return [], True
        group, size = [first], len(first.events)
        while size < self.max_events:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return group, True
            group.append(item)
            size += len(item.events)
        return group, False

    def _write(self, group: list[_Request]) -> None:
        accepted: list[_Request] = []
        claimed: dict[str, MessageAppended] = {}  # event ids taken by requests ahead in this group
        for request in group:
            if not request.future.set_running_or_notify_cancel():
                continue  # the caller went away before anything was written
            try:
                self._check(request.events, claimed)
            except BaseException as exc:
                request.future.set_exception(exc)
                continue
            for event in request.events:
                claimed.setdefault(event.event_id, event)
            accepted.append(request)
        if not accepted:
            return
        try:
            positions = self.engine.append_events([e for r in accepted for e in r.events])
        except BaseException:
            if len(accepted) == 1:
                raise
            for request in accepted:  # each on its own: an error reaches only its own request
                try:
                    request.future.set_result(self.engine.append_events(request.events))
                    self.on_group()
                except BaseException as exc:
                    request.future.set_exception(exc)
            return
        self.on_group()
        at = 0
        for request in accepted:
            request.future.set_result(positions[at : at + len(request.events)])
            at += len(request.events)

    def _check(self, events: Sequence[MessageAppended], claimed: dict[str, MessageAppended]) -> None:
        lines = list(range(1, len(events) + 1))
        self.engine.check_conflicts(events, lines=lines)  # against the log: a reused id with new content
        for line, event in zip(lines, events):
            earlier = claimed.get(event.event_id)
            if earlier is not None and not same_message(earlier, event):
                raise EventConflictError(
                    f"event_id {event.event_id!r} is being appended by another request with different content; "
                    "use a new id for a new message", field="event_id", line=line, event_id=event.event_id,
                )
