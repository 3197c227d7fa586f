"""The summarizer pool: takes ``SummaryRequested`` events, calls the summarizer, appends the outcome.

The model is called here and only here, outside every fold. Each request
gets exactly one outcome event with a deterministic id: ``SummaryProduced``
or ``SummaryFailed`` (a summarizer error, a crash in the adapter, or a newer
request for the same policy/conversation/topic superseding it while queued).
The log de-duplicates outcome ids, so a request answered twice (restart,
duplicate delivery) still yields one summary.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import msgspec

from memfold.core.errors import MemfoldError, SummarizerError, SummarizerTimeoutError
from memfold.core.events import Event, Fact, SummaryRequested, conversation_key
from memfold.core.partitioner import partition_for
from memfold.core.ports import (
    CachedSummarizer,
    EventLog,
    MessageRecord,
    MessageSource,
    ProjectionStore,
    Summarizer,
    SummaryInput,
    SummaryOutput,
)
from memfold.core.settings import Settings
from memfold.projections.fold import failed, produced
from memfold.projections.user_memory import (
    fold_user_facts,
    stated_before,
    user_summary_covers,
    user_summary_input,
)

log = logging.getLogger("memfold.worker")


class SummaryLookup:
    """What the worker needs from a projection besides messages: base summaries and outcomes."""

    def summary(self, summary_id: str) -> dict | None: ...

    def outcome(self, request_id: str) -> str | None: ...

    def outcomes(self, request_ids: list[str]) -> dict[str, str]: ...

    def user_input(self, tenant_id: str, conversation_id: str, policy: str, as_of: Any) -> tuple[list, list]: ...


def build_input(request: SummaryRequested, messages: MessageSource, summaries: SummaryLookup, settings: Settings) -> SummaryInput:
    """Return the :class:`SummaryInput` for ``request``: original messages + base summary + policy knobs.

    A request of scope "user" (the user's summary) is given the user's notes
    and current facts as they stood at the request's time (event time: what
    a replay folding the same log has folded by then too).
    """
    p = request.payload
    if p.scope == "user":
        notes, facts = summaries.user_input(request.tenant_id, request.conversation_id, p.policy, request.occurred_at)
        return user_summary_input(request.tenant_id, request.conversation_id, notes, facts, token_cap=p.token_cap)
    if p.input_indices is not None:
        fetch_at = messages.messages_at
        msgs = fetch_at(request.tenant_id, request.conversation_id, list(p.input_indices))
    else:
        msgs = messages.messages(request.tenant_id, request.conversation_id, p.input_from, p.input_to)
    base_text, base_facts = None, ()
    if p.base_summary_id:
        base = summaries.summary(p.base_summary_id)
        if base is not None:
            base_text = base.get("text") or None
            base_facts = tuple(Fact(**f) for f in _json_list(base.get("facts")))
    prompt_id = prompt_version = None
    prompt_format = "default"
    if p.policy == "chunked":
        prompt_format = "chunked"
        prompt_id = settings.chunked.prompt_id
        prompt_version = settings.chunked.prompt_version
    keep_facts = p.window_start is not None and p.policy == "sliding_window" and settings.sliding_window.keep_facts
    return SummaryInput(
        policy=p.policy, kind=p.kind, messages=tuple(msgs), existing_summary=base_text, existing_facts=base_facts,
        window_start=p.window_start, keep_facts=keep_facts, token_cap=p.token_cap, char_cap=p.char_cap, prompt_format=prompt_format,
        model=policy_model(settings, p.policy), prompt_id=prompt_id, prompt_version=prompt_version,
    )


class FoldedSource:
    """Messages and base summaries for :func:`build_input` from what a projector committed, else from the store.

    A summary input built here equals one built from ``store`` (so the
    summary cache key is the same): messages come from the projector's hot
    tail only when it holds the whole asked range (a contiguous committed
    suffix that never holds a retracted message), in their stored form (no
    embedding: the store keeps none); base summaries from the outcomes this
    source saw committed (:meth:`committed`, a projector listener), forgotten
    when a batch erased a conversation. Anything else is read from ``store``.
    Saves a DuckDB query or two per request, which dominated cached replays.
    """

    def __init__(self, tail: Any, store: ProjectionStore, *, partition_count: int, max_summaries: int = 50_000):
        self.tail = tail
        self.store = store
        self.partition_count = partition_count  # the log's: a user summary reads its request's partition only
        self.max_summaries = max_summaries
        self._summaries: dict[str, dict[str, Any]] = {}

    def committed(self, changes: Any) -> None:
        """Remember the produced summaries of a durable batch (call after each commit)."""
        if changes.deleted:
            self._summaries.clear()  # an erased conversation's summaries must come from the store (gone)
        for row in changes.summary_results:
            if row.get("summary_id") is not None:
                if len(self._summaries) >= self.max_summaries:
                    self._summaries.clear()  # bounded; misses go to the store
                self._summaries[row["summary_id"]] = {"text": row["text"], "facts": row["facts"]}

    def messages(self, tenant_id: str, conversation_id: str, start: int, end: int) -> list[MessageRecord]:
        got = self.tail.window((tenant_id, conversation_id), start, None)
        if got is None or not got or got[-1].index < end:
            return self.store.messages(tenant_id, conversation_id, start, end)
        return [_stored_form(m) for m in got if m.index <= end]

    def messages_at(self, tenant_id: str, conversation_id: str, indices: list[int]) -> list[MessageRecord]:
        if not indices:
            return []
        got = self.tail.window((tenant_id, conversation_id), min(indices), None)
        if got is None or not got or got[-1].index < max(indices):
            return self.store.messages_at(tenant_id, conversation_id, indices)
        wanted = set(indices)
        return [_stored_form(m) for m in got if m.index in wanted]

    def summary(self, summary_id: str) -> dict | None:
        found = self._summaries.get(summary_id)
        return found if found is not None else self.store.summary(summary_id)

    def outcome(self, request_id: str) -> str | None:
        return self.store.outcome(request_id)

    def outcomes(self, request_ids: list[str]) -> dict[str, str]:
        return self.store.outcomes(request_ids)

    def user_input(self, tenant_id: str, conversation_id: str, policy: str, as_of: Any) -> tuple[list, list]:
        return user_input(self.store, tenant_id, conversation_id, policy, as_of, self.partition_count)


def user_input(
    store: ProjectionStore, tenant_id: str, conversation_id: str, policy: str, as_of: Any, partition_count: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (notes, user_facts rows) of the user of ``conversation_id`` as of ``as_of``, of ``policy``.

    Notes: each conversation's newest summary dated by then; facts: the user
    fold over the statements made by then. Only the user's conversations on
    the request's partition (of ``partition_count``): every node answering the
    request has folded that partition up to it, whatever else it folds, so
    the input, and the summary, are the same embedded, on any worker after a
    rebalance, and in a replay. Empty when the conversation has no user
    (forgotten since the request was asked).
    """
    user_id = store.conversation_owner(tenant_id, conversation_id)[1]
    if user_id is None:
        return [], []
    home = partition_for(conversation_key(tenant_id, conversation_id), partition_count)

    def here(conversation: str) -> bool:
        return partition_for(conversation_key(tenant_id, conversation), partition_count) == home

    notes = [n for n in store.user_notes_as_of(tenant_id, user_id, policy, as_of) if here(n["conversation_id"])]
    stated = [f for f in stated_before(store.stated_facts(tenant_id, user_id), as_of)
              if f.policy == policy and here(f.conversation_id)]
    return notes, fold_user_facts(tenant_id, user_id, stated)


def _stored_form(record: MessageRecord) -> MessageRecord:
    """Return ``record`` as the store returns it (embeddings are not stored)."""
    return record if record.embedding is None else msgspec.structs.replace(record, embedding=None)


_MODEL_FIELDS = {"hierarchical": "llm_model", "chunked": "summarizer_model", "sliding_window": "memory_model"}


def policy_model(settings: Settings, policy: str) -> str | None:
    """Return the model a policy's settings name, if set explicitly; else None (the summarizer's own model).

    The seeds' defaults (gemini-2.0-flash, gpt-5.1-nano, gpt-4.1-mini) are
    recorded but only override ``[summarizer] model`` when a deployment sets
    them, so a plain OpenAI endpoint works out of the box.
    """
    name = _MODEL_FIELDS.get(policy)
    knobs = settings.policy_settings(policy)
    return getattr(knobs, name) if name and name in knobs.model_fields_set else None


def _json_list(value) -> list:
    if not value:
        return []
    return json.loads(value) if isinstance(value, str) else list(value)


def answer(request: SummaryRequested, summary_input: SummaryInput, summarizer: Summarizer) -> Event:
    """Call ``summarizer`` for ``request`` and return its outcome event; never raises for model failures."""
    started = time.perf_counter()
    try:
        out = summarizer.summarize(summary_input)
    except SummarizerError as exc:
        latency = int((time.perf_counter() - started) * 1000)
        log.warning("summary failed request=%s policy=%s reason=%s", request.event_id, request.payload.policy, exc)
        return failed(
            request, reason=str(exc) or type(exc).__name__, error_type=type(exc).__name__,
            retryable=isinstance(exc, SummarizerTimeoutError) or exc.retry_after is not None,
            summarizer=summarizer.name, latency_ms=latency,
        )
    except Exception as exc:  # a bug in an adapter must cost one summary, not the worker
        latency = int((time.perf_counter() - started) * 1000)
        log.exception("summarizer crashed on request %s", request.event_id)
        return failed(
            request, reason=f"summarizer crashed: {exc!r}", error_type=type(exc).__name__,
            summarizer=summarizer.name, latency_ms=latency,
        )
    latency = int((time.perf_counter() - started) * 1000)
    # Policies do not log (a replay would repeat it); a summarization is logged here, where it runs.
    turns = sum(m.role == "user" for m in summary_input.messages)
    log.info(
        "summary produced request=%s policy=%s messages=%d user_turns=%d tokens_in=%d tokens_out=%d cached=%s",
        request.event_id, request.payload.policy, len(summary_input.messages), turns, out.tokens_in, out.tokens_out,
        out.cached,
        extra={"request_id": request.event_id, "policy": request.payload.policy,
               "conversation_id": request.conversation_id, "covers_to": request.payload.covers_to,
               "messages": len(summary_input.messages), "user_turns": turns,
               "tokens_in": out.tokens_in, "tokens_out": out.tokens_out, "cached": out.cached},
    )
    covers = user_summary_covers(summary_input) if request.payload.scope == "user" else {}
    return produced(
        request, text=out.text, facts=tuple(out.facts), summarizer=summarizer.name, **covers,
        model=out.model, prompt_hash=out.prompt_hash, tokens_in=out.tokens_in, tokens_out=out.tokens_out,
        latency_ms=0 if out.cached else latency, cached=out.cached,
    )


class Known:
    """A summarizer that returns an output already read from the summary cache (named as the real one)."""

    def __init__(self, name: str, output: SummaryOutput):
        self.name = name
        self._output = output

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        return self._output


class _Missed:
    """The summary cache for a request its lookup just missed: calls the model, caches the output (no second read)."""

    def __init__(self, cache: Any, key: str):
        self.name = cache.name
        self._cache = cache
        self._key = key

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        return self._cache.call(request, self._key)


def answerers(summarizer: Summarizer, inputs: list[SummaryInput]) -> list[Summarizer]:
    """Return who answers each input: with the summary cache, every hit read in one query; else ``summarizer``."""
    if not isinstance(summarizer, CachedSummarizer):
        return [summarizer] * len(inputs)
    return [_Missed(summarizer, key) if hit is None else Known(summarizer.name, hit)
            for key, hit in summarizer.lookup(inputs)]


def batched(summarizer: Summarizer) -> contextlib.AbstractContextManager[None]:
    """Return a block in which ``summarizer``'s new cache entries are written in one transaction (if it caches)."""
    return summarizer.batched() if isinstance(summarizer, CachedSummarizer) else contextlib.nullcontext()


class SummarizerWorker:
    """A bounded summarizer pool: answers summary requests off the fold's critical path.

    One dispatcher thread takes what is queued, keeps the newest request per
    (policy, conversation, topic) lane (older ones are recorded as
    superseded), and runs up to ``concurrency`` summarizer calls at a time;
    outcomes are appended in request order, so the log does not depend on
    which call finishes first. At most ``max_pending`` requests wait: beyond
    that :meth:`submit` blocks (backpressure on the fold that decided them,
    never an unbounded queue). Nothing here waits for a projection: the
    outcome is an event like any other, folded when the runner reads it.
    """

    def __init__(
        self,
        log_: EventLog,
        messages: MessageSource,
        summaries: SummaryLookup,
        summarizer: Summarizer,
        settings: Settings,
        on_appended: Callable[[], None] = lambda: None,
        *,
        concurrency: int = 1,
        max_pending: int = 10_000,
        flush_after_s: float = 0.05,
    ):
        self.log = log_
        self.messages = messages
        self.summaries = summaries
        self.summarizer = summarizer
        self.settings = settings
        self.on_appended = on_appended
        self.concurrency = max(1, concurrency)
        self.max_pending = max(1, max_pending)
        self.flush_after_s = max(0.0, flush_after_s)
        self._queue: OrderedDict[str, SummaryRequested] = OrderedDict()
        self._cond = threading.Condition()
        self._busy = False
        self._stop = False
        self._owned: set[int] | None = None  # None: every partition
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.calls = 0
        self.errors: list[str] = []

    def submit(self, requests: list[SummaryRequested]) -> None:
        """Queue requests (duplicates by id are ignored); block while ``max_pending`` are waiting."""
        if not requests:
            return
        with self._cond:
            for r in requests:
                while len(self._queue) >= self.max_pending and not self._stop:
                    self._cond.wait(0.5)
                if self._stop:
                    return  # not answered now: the request stays open in the log for the next run
                if self._mine(r):
                    self._queue.setdefault(r.event_id, r)
                    self._cond.notify_all()

    def retain(self, partitions: set[int], timeout: float = 60.0) -> None:
        """Answer only requests of ``partitions`` from now on; wait for calls on the others to be recorded.

        Queued requests of other partitions are dropped (they stay open in
        the log for their new owner). Returns once no call for a released
        partition is in flight and its outcome, if any, is appended, or after
        ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            released = self._owned is None or bool(self._owned - partitions)
            self._owned = set(partitions)
            for key in [k for k, r in self._queue.items() if not self._mine(r)]:
                del self._queue[key]
            self._cond.notify_all()
            while released and self._busy and time.monotonic() < deadline:
                self._cond.wait(0.05)

    def _mine(self, request: SummaryRequested) -> bool:
        owned = self._owned
        return owned is None or partition_for(request.key, self.log.partition_count) in owned

    def pending(self) -> int:
        """Return how many requests wait (not counting the batch in progress)."""
        with self._cond:
            return len(self._queue)

    def idle(self) -> bool:
        """True when nothing is queued or running."""
        with self._cond:
            return not self._queue and not self._busy

    def use(self, inputs: Any, settings: Settings) -> None:
        """Build later summary inputs from ``inputs`` (messages and base summaries) under ``settings``."""
        self.messages = self.summaries = inputs
        self.settings = settings

    def start(self) -> None:
        """Start the dispatcher thread (and the call pool when ``concurrency`` > 1)."""
        if self.concurrency > 1:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="memfold-summarize")
        self._thread = threading.Thread(target=self._run, name="memfold-summarizer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the calls in progress; queued requests stay open in the log for next time."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _take(self) -> list[SummaryRequested] | None:
        """Wait for work; return everything queued (oldest first), or None when stopping."""
        with self._cond:
            while not self._queue and not self._stop:
                self._cond.wait(0.5)
            if self._stop:
                return None
            batch = list(self._queue.values())
            self._queue.clear()
            self._busy = True
            self._cond.notify_all()
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._handle(batch)
            except MemfoldError as exc:  # log unavailable etc.: the requests stay open in the log
                self.errors.append(f"{len(batch)} request(s): {exc}")
                log.error("could not record summary outcomes: %s", exc)
            except Exception as exc:  # a closed store at shutdown, a driver error: never kill the thread
                if not self._stop:
                    self.errors.append(f"{len(batch)} request(s): {exc!r}")
                    log.exception("summarizer worker step failed; the requests stay open in the log")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _handle(self, batch: list[SummaryRequested], max_calls: int = 16) -> None:
        """Answer a batch: newest request per lane runs, older ones are superseded; outcomes in request order.

        Steps: (1) drop requests already answered or no longer owned; (2) per
        (policy, conversation, topic) lane keep the newest, record the others
        as superseded; (3) summarize the survivors ``max_calls`` at a time
        (ownership is checked again before each chunk), ``concurrency`` calls
        at once, appending each answer as soon as every answer before it is
        in (see :meth:`_answer_all`).
        """
        known = self.summaries.outcomes([r.payload.request_id for r in batch])
        open_ = [r for r in batch if known.get(r.payload.request_id, "processing") == "processing" and self._mine(r)]
        newest: dict[tuple[str, str, str, str | None, str], SummaryRequested] = {}
        for r in open_:
            newest[_lane(r)] = r
        self._record([
            failed(r, reason=f"superseded by {newest[_lane(r)].payload.request_id}", error_type="Superseded",
                   summarizer=self.summarizer.name)
            for r in open_ if newest[_lane(r)] is not r
        ])
        todo = list(newest.values())
        for i in range(0, len(todo), max_calls):
            self._answer_all([r for r in todo[i : i + max_calls] if self._mine(r)])
            if self._stop:  # shutting down: what is not answered stays open in the log for next time
                break

    def _answer_all(self, requests: list[SummaryRequested]) -> None:
        """Answer ``requests`` and append their outcomes in request order, each as soon as those before it are in.

        Answers are held back only while they come fast: an answer waits at
        most ``flush_after_s`` (``[summarizer] flush_after_s``, 50 ms) for the ones after it, so a fast summarizer
        (offline, cache hits) appends a chunk in one log transaction while a
        slow model's first summary reaches readers after its own call, not
        after the chunk's slowest. Cache hits are read in one query; with the
        summary cache, its new entries are written in one transaction once
        the chunk is answered (a commit per entry cost more than an offline summary).
        """
        if self._stop or not requests:
            return
        inputs = [build_input(r, self.messages, self.summaries, self.settings) for r in requests]
        jobs = list(zip(requests, inputs, answerers(self.summarizer, inputs)))
        with self._cond:
            self.calls += len(requests)

        def one(job: tuple[SummaryRequested, SummaryInput, Summarizer]) -> Event | None:
            return None if self._stop else answer(*job)

        ready = _InOrder(self._record, self.flush_after_s)
        with batched(self.summarizer):
            if self._pool is not None and sum(not isinstance(j[2], Known) for j in jobs) > 1:
                for future in [self._pool.submit(one, job) for job in jobs]:
                    try:
                        ready.add(future.result(timeout=ready.patience()))
                    except FutureTimeout:  # the next answer keeps us waiting: hand out those before it
                        ready.flush()
                        ready.add(future.result())
            else:
                for job in jobs:
                    if ready.patience() == 0:
                        ready.flush()
                    ready.add(one(job))
        ready.flush()

    def _record(self, outcomes: list[Event]) -> None:
        if outcomes:
            self.log.append(outcomes)
            self.on_appended()


class _InOrder:
    """Answers collected in request order, appended together unless the oldest has waited ``wait`` seconds."""

    def __init__(self, record: Callable[[list[Event]], None], wait: float):
        self._record = record
        self._wait = wait
        self._events: list[Event] = []
        self._since = 0.0

    def add(self, event: Event | None) -> None:
        if event is not None:
            if not self._events:
                self._since = time.monotonic()
            self._events.append(event)

    def patience(self) -> float | None:
        """Seconds the held answers may still wait (None: none held, wait as long as it takes)."""
        if not self._events:
            return None
        return max(0.0, self._wait - (time.monotonic() - self._since))

    def flush(self) -> None:
        events, self._events = self._events, []
        self._record(events)


def _lane(request: SummaryRequested) -> tuple[str, str, str, str | None, str]:
    p = request.payload
    return (p.policy, request.tenant_id, request.conversation_id, p.topic_id, p.scope)
