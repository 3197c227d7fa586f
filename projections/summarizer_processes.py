"""The offline summarizer in worker processes, so summarizing never holds the serving process's interpreter lock.

The offline summarizer is pure Python and CPU-bound (about 0.6 ms a
message). Run on threads of the process that also folds the log and answers
HTTP reads, it holds the interpreter lock a switch interval at a time, and a
context read waits behind it: under a paced mixed load the reads' p99 was
hundreds of milliseconds while each took well under one of CPU. Here each
call is shipped to a pool of worker processes (``[summarizer] processes``),
started with ``spawn`` (never ``fork``: the parent runs DuckDB and SQLite
threads) and lowered in CPU priority (``[summarizer] process_nice``), so the
operating system, not the interpreter lock, shares the cores, and the reads
come first.

The answers are the same: the offline summarizer is a pure function of its
input, whichever process runs it (a test compares a worker's answers with
this process's on every summary input of the sample, all policies). A worker
process that dies costs the calls in flight a retryable
:class:`SummarizerError`; the next call starts a new pool.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from memfold.core.errors import SummarizerError
from memfold.core.ports import SummaryInput, SummaryOutput
from memfold.projections.offline_summarizer import OfflineSummarizer

_CHILD: OfflineSummarizer | None = None


def _start_child(encoding: str, niceness: int, parent: int, started) -> None:
    """Initializer of a worker process: report its pid on ``started``, lower its priority, outlive no parent."""
    global _CHILD
    started.put(os.getpid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent stops us
    if niceness:
        try:
            os.nice(niceness)
        except OSError:  # not permitted here: run at the same priority
            pass
    threading.Thread(target=_exit_with, args=(parent,), name="memfold-orphan-watch", daemon=True).start()
    _CHILD = OfflineSummarizer(encoding=encoding)


def _exit_with(parent: int, every_s: float = 0.5) -> None:
    """Exit this worker process once ``parent`` is gone (killed: it could not shut the pool down).

    A worker holds both ends of the pool's call queue, so it never reads an
    end of file when the parent dies; without this it would live on,
    idle or summarizing for nobody.
    """
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(0)  # nothing of this process is durable: the parent appended every answer it got


def _summarize_in_child(request: SummaryInput) -> SummaryOutput:
    assert _CHILD is not None, "worker process started without its initializer"
    return _CHILD.summarize(request)


class ProcessSummarizer:
    """An :class:`OfflineSummarizer` whose calls run in ``processes`` worker processes (started on first use)."""

    name = OfflineSummarizer.name

    def __init__(self, encoding: str, processes: int, niceness: int = 0):
        self.encoding = encoding
        self.processes = max(1, processes)
        self.niceness = niceness
        self._local = OfflineSummarizer(encoding=encoding)  # identity() only: no call runs here
        self._pool: ProcessPoolExecutor | None = None
        self._started = None  # the pool's workers put their pids here as they start (a SimpleQueue)
        self._pids: set[int] = set()  # the pids read from it so far
        self._lock = threading.Lock()
        self._closed = False

    def identity(self, request: SummaryInput) -> tuple[str, str]:
        """Return (model, prompt_hash), as the offline summarizer does."""
        return self._local.identity(request)

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        """Summarize ``request`` in a worker process; the same answer the offline summarizer gives here."""
        pool = self._executor()
        try:
            try:
                future = pool.submit(_summarize_in_child, request)
            except RuntimeError:  # retired by drop_text_caches() between _executor() and submit: the next pool
                future = self._executor().submit(_summarize_in_child, request)
            return future.result()
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:
                    self._pool = None  # the next call starts a new pool
            error = SummarizerError(f"the summarizer process stopped ({exc}); the request stays open to retry")
            error.retry_after = 0.0
            raise error from exc

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise SummarizerError("the summarizer processes are shut down")
            if self._pool is None:
                context = multiprocessing.get_context("spawn")
                self._started, self._pids = context.SimpleQueue(), set()
                self._pool = ProcessPoolExecutor(
                    self.processes, mp_context=context,
                    initializer=_start_child, initargs=(self.encoding, self.niceness, os.getpid(), self._started),
                )
            return self._pool

    def pids(self) -> list[int]:
        """Return the ids of the worker processes running now (the pool starts them as calls need them; at least one)."""
        pool = self._executor()
        pool.submit(int).result()  # the pool starts its processes on demand; each reports as it starts
        with self._lock:
            started = self._started if self._pool is pool else None
            while started is not None and not started.empty():
                self._pids.add(started.get())
            return sorted(self._pids)

    def drop_text_caches(self) -> None:
        """Empty the caches that keep conversation text (erasure calls it): they are the worker processes'.

        This process reads no message for a summary (``_local`` only answers
        ``identity()``), so it holds none. The pool is retired without waiting
        (calls in flight finish, then its processes exit) and the next call
        starts new processes, with empty caches.
        """
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def close(self) -> None:
        """Stop the worker processes (calls in flight finish first). Idempotent."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
