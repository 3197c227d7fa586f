"""The fold in a process of its own: the service's requests no longer share an interpreter lock with it.

``memfold serve`` answers HTTP on an event loop. When the projector folds
in the same process, every request waits, again and again, for CPython's
interpreter lock that the fold holds (measured: a context read's p99 under
a paced mixed load was 39.8-55 ms with the fold in the process, 8.9 ms with
it paused). DuckDB admits one process per projection file, so the fold
cannot share the file with the service; it moves out instead:

- the **fold process** (:func:`_fold_main`) opens the engine as usual
  (log, projector, DuckDB, summarizer worker) and answers calls on a Unix
  socket, one thread per connection;
- the **serving process** keeps HTTP, API keys, limits, request validation
  and the appends: :class:`RemoteEngine` is a ``client`` engine (validates
  and appends to the log; the SQLite log takes appends from several
  processes, each a ``BEGIN IMMEDIATE`` transaction) that hands every other
  call to the fold process as one of :data:`OPERATIONS`, a fixed table of
  the engine API's method names (context, summaries, audit, SQL, replays,
  forget, ...). Nothing else of the engine is reachable from outside it.

On an event channel of their own the fold process sends, after each
committed batch, the conversations it touched (the context cache's
versions, :mod:`.context_cache`, stay as exact as in one process), the
reads it answered ahead for them (:class:`_ReadShapes`) and its committed
positions; the settings when they switch. The serving process sends a
one-way wake-up after each append. Three things keep reads fast:

- **answered ahead**: an agent's next read after its append is a cache hit
  (until a conversation's answers go unread a few batches in a row);
- **reads first**: while a context read is computed in the fold process,
  the projector waits at its next pause point (:class:`_ReadsFirst`);
- **bounded lag**: appends wait while the projection is ``max_lag`` events
  behind (:meth:`RemoteEngine.append_events`), so an overload slows appends
  rather than aging every read.

Arguments and answers are pickled; memfold's errors keep their class,
message and fields; a callable argument (a replay's ``progress``) is called
back in the serving process. If the fold process dies, calls raise
:class:`~memfold.core.errors.LogUnavailableError` (503) and it is started
again: the projection resumes from its committed positions, as after any
crash. If the serving process dies, the fold process closes the engine and
exits.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import multiprocessing
import os
import queue
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from memfold.core.errors import LogUnavailableError, MemfoldError
from memfold.core.runtime import tune_gc, tune_switch_interval
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.projector import ServingHooks
from memfold.service.context_cache import follow_projector, touched_by
from memfold.service.schemas import context_body

log = logging.getLogger("memfold.service")

_RESTART_WAIT_S = 120.0  # how long a call waits for a fold process being started again
# Appends wait while the projection is this many events behind what this process appended (RemoteEngine.append_events).
MAX_LAG = 10_000
MAX_LAG_WAIT_S = 30.0
# The fold process runs this much lower in CPU priority than the service (os.nice: its summarizer process,
# started by it, is lowered by [summarizer] process_nice more). Measured when the two cores are busy: the
# requests get the CPU first (saturated mixed load p99 62-83 against 87-93 ms, paced 11-12 against 14-19 ms).
FOLD_NICE = 5
# A conversation's read is answered ahead at most this many times in a row without being read (a hit on the
# answer in the serving process, or a read computed here): an agent's turn touches its conversation a few
# times (its messages, a summary request, the summary), a bulk import after one read would touch it at every
# batch. Measured, 50 conversations read once then appended to in 40 batches each: 979-1,240 answers ahead.
MAX_UNREAD_ANSWERS = 4


# ----------------------------------------------------------------------------- errors across the socket


def _encode_error(exc: BaseException) -> tuple[str, str, str, dict[str, Any]]:
    return type(exc).__module__, type(exc).__qualname__, str(exc), dict(getattr(exc, "__dict__", {}))


def _decode_error(module: str, name: str, message: str, attrs: dict[str, Any]) -> BaseException:
    """Rebuild an error raised in the fold process: same class (when importable), message and fields."""
    cls: type[BaseException] = RuntimeError
    with contextlib.suppress(Exception):
        found = getattr(importlib.import_module(module), name)
        if isinstance(found, type) and issubclass(found, BaseException):
            cls = found
    if cls is RuntimeError and name != "RuntimeError":
        return RuntimeError(f"{name} in the fold process: {message}")
    exc = cls.__new__(cls)
    BaseException.__init__(exc, message)
    with contextlib.suppress(Exception):
        exc.__dict__.update(attrs)
    return exc


# Calls answered before the fold goes on: while one is in flight the projector waits at its next pause point
# (every few events, at most READS_FIRST_WAIT_S each time). Calls that wait for the fold themselves
# (wait_for, forget, retract, a context read with a lazy wait) or may run long (SQL, replays, a context read
# that loads a conversation from the store) are not among them.
READS_FIRST = frozenset({"context", "prompt", "summaries", "conversation", "messages", "history", "search",
                         "search_messages"})

# The engine API the fold process answers: MemoryEngine methods, called by name. A name not in it is refused.
OPERATIONS = frozenset({
    "append_message", "append_many", "audit", "context", "conversation", "conversation_ids", "conversations",
    "diff_replay", "drop_replay", "erasure_pending", "export", "forget", "history", "messages", "plan", "progress", "prompt",
    "promote", "rebuild", "reopen", "replay", "replays", "retract", "search", "search_messages", "sql",
    "summaries", "summary_counts", "tenant_sql", "verify", "wait_for", "wait_idle",
    "audit_user", "forget_user", "search_user", "user_memory", "user_of",
})
READS_FIRST_WAIT_S = 0.02


class _ReadsFirst:
    """Counts reads in flight; :meth:`pause` (the projector's pause hook) waits until there are none."""

    def __init__(self, max_wait: float = READS_FIRST_WAIT_S):
        self.max_wait = max_wait
        self._busy = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def reading(self):
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                if not self._busy:
                    self._cond.notify_all()

    def pause(self) -> None:
        if self._busy:  # an unlocked peek: a read that starts just after waits one pause point more
            with self._cond:
                self._cond.wait_for(lambda: not self._busy, timeout=self.max_wait)


class _ReadShapes:
    """The last context read of each conversation, answered again ahead of time after each batch that changes it.

    An agent reads its conversation's context the same way turn after turn
    (the same budget, the current message as the query). So after a batch
    commits, the fold process computes that read again for each
    conversation the batch touched and sends the answer with the batch's
    note; the serving process stores it in its context cache under the
    version the note gives the conversation, and the next read is a cache
    hit. Only reads computed from memory alone are answered ahead
    (:meth:`~memfold.engine.engine.MemoryEngine.context_in_memory`: no
    embedder call, no lazy wait, no store query), at most ``max_unread``
    times in a row while nobody reads them, and at most ``max_entries``
    conversations are remembered, least recently read out.
    """

    def __init__(self, max_entries: int = 10_000, max_unread: int = MAX_UNREAD_ANSWERS):
        self.max_entries = max_entries
        self.max_unread = max_unread
        self._shapes: dict[tuple[str, str], tuple[int | None, str | None, str]] = {}
        self._unread: dict[tuple[str, str], int] = {}  # answers ahead sent since the conversation was last read
        self._lock = threading.Lock()

    def note(self, args: tuple, kwargs: dict) -> None:
        """Remember a ``context`` call's shape (time-travel reads and reads naming no policy are not answered ahead)."""
        if args and kwargs.get("as_of") is None and kwargs.get("policy") and not kwargs.get("dense"):
            key = (kwargs.get("tenant_id", "default"), args[0])
            with self._lock:
                self._shapes.pop(key, None)
                self._unread.pop(key, None)
                self._shapes[key] = (kwargs.get("budget"), kwargs.get("query"), kwargs["policy"])
                if len(self._shapes) > self.max_entries:
                    oldest = next(iter(self._shapes))
                    del self._shapes[oldest]
                    self._unread.pop(oldest, None)

    def read(self, keys) -> None:
        """The serving process read these conversations' answers ahead: answer them ahead again."""
        with self._lock:
            for key in keys:
                self._unread.pop(key, None)

    def answers(self, engine, touched: dict[tuple[str, str], bool]) -> dict[tuple[str, str], tuple]:
        """Return ``{(tenant, conversation): ((budget, query, policy), body, messages)}`` for the touched ones read before.

        A conversation answered ahead ``max_unread`` times since it was last
        read is skipped until its next read.
        """
        with self._lock:
            unread = self._unread
            due = {key: self._shapes[key] for key, gone in touched.items()
                   if not gone and key in self._shapes and unread.get(key, 0) < self.max_unread}
        out = {}
        for (tenant, conversation), (budget, query, policy) in due.items():
            try:
                if not engine.context_in_memory(conversation, policy=policy, tenant_id=tenant):
                    continue
                messages = engine.context(conversation, budget=budget, query=query, policy=policy, tenant_id=tenant)
            except MemfoldError:
                continue  # the read itself will say what is wrong
            messages = tuple(messages)  # sent along: the serving process makes the other formats from them
            out[(tenant, conversation)] = ((budget, query, policy), context_body(conversation, policy, budget, messages),
                                           messages)
        with self._lock:
            for key in out:
                if key in self._shapes:  # not dropped meanwhile (least recently read out)
                    unread[key] = unread.get(key, 0) + 1
        return out


@dataclass(frozen=True)
class _Callback:
    """Stands for a callable argument; the fold process calls it back over the same connection."""

    number: int


# ----------------------------------------------------------------------------- the fold process


def _fold_main(settings: Settings, address: str, authkey: bytes) -> None:
    """Entry point of the fold process: open the engine, answer calls until told to close."""
    parent = os.getppid()
    if FOLD_NICE:
        with contextlib.suppress(OSError):
            os.nice(FOLD_NICE)
    tune_switch_interval()
    tune_gc()
    listener = Listener(address, family="AF_UNIX", authkey=authkey)
    events = listener.accept()  # the serving process connects its event channel first
    reads = _ReadsFirst()
    try:
        engine = MemoryEngine(settings, role="embedded", hooks=ServingHooks(relate_users=True, pause=reads.pause))
    except BaseException as exc:  # the serving process raises it (a locked projection, a fold-rules change, ...)
        with contextlib.suppress(Exception):
            events.send(("failed", _encode_error(exc)))
        listener.close()
        raise SystemExit(1) from None
    server = _FoldServer(engine, listener, events, reads)
    try:
        server.start()
        while not server.closing.wait(0.5):
            if os.getppid() != parent:  # the serving process is gone (killed): nobody will ask us to close
                break
    finally:
        engine.close()
        listener.close()
        with contextlib.suppress(OSError):
            events.close()


class _FoldServer:
    """The fold process's side of the boundary: answers :data:`OPERATIONS` on each connection, sends events.

    Events to the serving process: ``("settings", ...)`` at start and after
    each switch, ``("projected", touched, deleted, answers)`` after each
    committed batch, ``("applied", positions)`` after each commit.
    """

    def __init__(self, engine: MemoryEngine, listener: Listener, events: Connection, reads: _ReadsFirst):
        self.engine, self.listener, self.events, self.reads = engine, listener, events, reads
        self.shapes = _ReadShapes()
        self.closing = threading.Event()
        self._sending = threading.Lock()

    def start(self) -> None:
        """Hear the engine's batches and switches, say hello, then accept calls and wake-ups on threads of their own."""
        follow_projector(self.engine, self._projected, lambda projector: self._send(self._hello()))
        self.engine.runner.add_commit_listener(lambda positions: self._send(("applied", positions)))
        self._send(self._hello())
        threading.Thread(target=self._accept, name="memfold-fold-accept", daemon=True).start()
        threading.Thread(target=self._woken, name="memfold-fold-woken", daemon=True).start()

    def _send(self, message: tuple) -> None:
        with self._sending:
            with contextlib.suppress(OSError, EOFError):
                self.events.send(message)

    def _hello(self) -> tuple:
        return "settings", self.engine.settings, self.engine.store.position()

    def _projected(self, changes) -> None:
        touched = touched_by(changes)
        if touched or changes.deleted:
            try:
                answers = self.shapes.answers(self.engine, touched)
            except Exception:  # a listener must not fail the runner's step: the reads compute it themselves
                log.exception("answering context reads ahead failed")
                answers = {}
            self._send(("projected", touched, set(changes.deleted), answers))

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                conn = self.listener.accept()
            except (OSError, EOFError):
                if self.closing.is_set():
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), name="memfold-fold-call", daemon=True).start()

    def _woken(self) -> None:
        """The serving process says it appended: fold now, not at the next poll."""
        while True:
            try:
                message = self.events.recv()
            except (EOFError, OSError):
                return
            self.shapes.read(message[1])  # with the answers ahead it read since its last append
            self.engine.runner.notify()

    def _serve(self, conn: Connection) -> None:
        with conn:
            while not self.closing.is_set():
                try:
                    path, args, kwargs = conn.recv()
                except (EOFError, OSError):
                    return
                if path == "close":
                    self.closing.set()
                    conn.send(("ok", None))
                    return
                if path == "hello":  # the settings now (after a promote, before its event is read)
                    conn.send(("ok", self._hello()))
                    continue
                args = [_called_back(conn, a) for a in args]
                kwargs = {k: _called_back(conn, v) for k, v in kwargs.items()}
                try:
                    reply = ("ok", self._call(path, args, kwargs))
                except BaseException as exc:  # the caller raises it; this thread serves on
                    reply = ("error", _encode_error(exc))
                try:
                    conn.send(reply)
                except (EOFError, OSError):
                    return
                except Exception as exc:  # an answer that does not pickle
                    conn.send(("error", _encode_error(TypeError(f"the answer of {path} cannot be sent: {exc}"))))

    def _call(self, path: str, args: list, kwargs: dict) -> Any:
        """Run the engine operation ``path``; only a name of :data:`OPERATIONS` is answered."""
        if path not in OPERATIONS:
            raise LookupError(f"{path!r} is not an operation of the fold process")
        engine = self.engine
        target = getattr(engine, path)
        if path in READS_FIRST and (path != "context" or _in_memory(engine, args, kwargs)):
            with self.reads.reading():
                result = target(*args, **kwargs)
        else:
            result = target(*args, **kwargs)
        if path == "context":
            self.shapes.note(args, kwargs)
        if path == "promote":
            self._send(self._hello())  # every cached answer is stale
        return result


def _in_memory(engine, args: tuple, kwargs: dict) -> bool:
    """True for a ``context`` call computed from memory alone (no lazy wait for a summary the fold must bring)."""
    if not args or kwargs.get("as_of") is not None:
        return False
    try:
        return engine.context_in_memory(args[0], policy=kwargs.get("policy"), tenant_id=kwargs.get("tenant_id", "default"))
    except MemfoldError:
        return False


def _called_back(conn: Connection, value: Any) -> Any:
    if not isinstance(value, _Callback):
        return value
    number = value.number

    def call(*args: Any, **kwargs: Any) -> None:
        conn.send(("callback", number, args, kwargs))

    return call


# ----------------------------------------------------------------------------- the serving process's side


@dataclass
class _Listeners:
    projected: list[Callable[[dict, set, dict], None]] = field(default_factory=list)
    switched: list[Callable[[], None]] = field(default_factory=list)


class FoldProcess:
    """Start the fold process for ``settings`` and call into it; restarted when it dies."""

    def __init__(self, settings: Settings, *, on_settings: Callable[[Settings], None]):
        self._settings = settings
        self._on_settings = on_settings
        self.listeners = _Listeners()
        self._authkey = secrets.token_bytes(32)
        self._dir = tempfile.mkdtemp(prefix="memfold-fold-")
        self._generation = itertools.count()
        self._idle: queue.SimpleQueue[tuple[int, Connection]] = queue.SimpleQueue()
        self._closed = False
        self._ready = threading.Event()
        self.applied: dict[int, int] = {}  # partition -> next offset the projection holds (from its notes)
        self._progress = threading.Condition()
        self._waking = threading.Lock()
        self._read: set[tuple[str, str]] = set()  # conversations whose answers ahead were read (see wake)
        self._start()
        self._watcher = threading.Thread(target=self._watch, name="memfold-fold-watch", daemon=True)
        self._watcher.start()

    # --------------------------------------------------------------- lifecycle

    def _start(self) -> None:
        self._gen = next(self._generation)
        self._address = str(Path(self._dir) / f"fold-{self._gen}.sock")
        ctx = multiprocessing.get_context("spawn")
        self._process = ctx.Process(target=_fold_main, args=(self._settings, self._address, self._authkey),
                                    name="memfold-fold", daemon=False)
        self._process.start()
        while True:
            try:
                self._events = Client(self._address, family="AF_UNIX", authkey=self._authkey)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if not self._process.is_alive():
                    raise LogUnavailableError(
                        f"the fold process exited with {self._process.exitcode} while starting; the service log has "
                        "its traceback") from None
                time.sleep(0.05)
        # Opening the engine may take long (a rebuild after an upgrade): the first note comes when it is open.
        try:
            first = self._events.recv()  # ("settings", ...) once the engine is open, ("failed", error) if it did not
        except (EOFError, OSError):
            self._process.join(5)
            raise LogUnavailableError(f"the fold process exited with {self._process.exitcode} while opening the "
                                      "engine; the service log has its traceback") from None
        if first[0] == "failed":
            self._events.close()
            self._process.join(10)
            raise _decode_error(*first[1])
        self._on_settings(first[1])
        self._applied_now(first[2])
        threading.Thread(target=self._read_events, args=(self._events,), name="memfold-fold-events",
                         daemon=True).start()
        self._ready.set()

    def _read_events(self, events: Connection) -> None:
        while True:
            try:
                message = events.recv()
            except (EOFError, OSError):
                return
            try:
                if message[0] == "projected":
                    for listener in self.listeners.projected:
                        listener(message[1], message[2], message[3])
                elif message[0] == "applied":
                    self._applied_now(message[1])
                elif message[0] == "settings":
                    self._on_settings(message[1])
                    self._applied_now(message[2])
                    for listener in self.listeners.switched:
                        listener()
            except Exception:
                log.exception("handling %s from the fold process failed", message[0])

    def wake(self) -> None:
        """Tell the fold process new events are in the log (no answer awaited: an append never waits for it).

        The wake-up carries the conversations whose answers ahead were read
        since the last one (:meth:`answers_read`), so they are answered ahead
        again (:class:`_ReadShapes`).
        """
        with self._waking:
            read, self._read = self._read, set()
            with contextlib.suppress(OSError, EOFError):
                self._events.send(("wake", read))

    def answers_read(self, tenant_id: str, conversation_id: str) -> None:
        """Note that an answer ahead of this conversation was read (sent with the next wake-up).

        No lock (the caller is the event loop; ``wake`` holds its lock while
        it sends): a note added to the set ``wake`` has just swapped out is
        lost: at worst a later read misses the cache (and resets the count), never a wrong answer.
        """
        self._read.add((tenant_id, conversation_id))

    def _applied_now(self, positions: dict[int, int]) -> None:
        with self._progress:
            for partition, offset in positions.items():
                if offset > self.applied.get(partition, 0):
                    self.applied[partition] = offset
            self._progress.notify_all()

    def wait_applied(self, done: Callable[[dict[int, int]], bool], timeout: float) -> bool:
        """Wait until ``done(applied positions)`` holds (or ``timeout`` passes); return whether it does."""
        with self._progress:
            return self._progress.wait_for(lambda: done(self.applied), timeout)

    def _watch(self) -> None:
        while not self._closed:
            self._process.join(0.5)
            if self._closed or self._process.is_alive():
                continue
            log.error("the fold process exited with %s; starting it again", self._process.exitcode)
            self._ready.clear()
            with contextlib.suppress(OSError):
                self._events.close()
            while not self._closed:
                try:
                    self._start()
                    for listener in self.listeners.switched:  # nothing cached survives a restart
                        listener()
                    break
                except Exception as exc:
                    log.error("restarting the fold process failed: %s", exc)
                    time.sleep(1.0)

    def close(self) -> None:
        """Ask the fold process to close its engine and wait for it to exit."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._call("close", (), {}, timeout=60.0)  # a hung fold process is killed below
        self._process.join(60)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        with contextlib.suppress(OSError):
            self._events.close()
        while True:
            try:
                _, conn = self._idle.get_nowait()
            except queue.Empty:
                break
            conn.close()
        with contextlib.suppress(OSError):
            for leftover in Path(self._dir).iterdir():
                leftover.unlink()
            os.rmdir(self._dir)

    # --------------------------------------------------------------- calls

    def call(self, path: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Call operation ``path`` (:data:`OPERATIONS`) in the fold process and return its answer (or raise its error)."""
        if self._closed:
            raise LogUnavailableError("the engine is closed")
        return self._call(path, args, kwargs or {})

    def _connection(self) -> tuple[int, Connection]:
        if not self._ready.wait(_RESTART_WAIT_S):
            raise LogUnavailableError("the fold process is starting again; retry shortly")
        while True:
            try:
                gen, conn = self._idle.get_nowait()
            except queue.Empty:
                gen = self._gen
                try:
                    return gen, Client(self._address, family="AF_UNIX", authkey=self._authkey)
                except OSError as exc:
                    raise LogUnavailableError(f"cannot reach the fold process: {exc}; retry shortly") from exc
            if gen == self._gen:
                return gen, conn
            conn.close()  # from a fold process that has since been restarted

    def _call(self, path: str, args: tuple, kwargs: dict, timeout: float | None = None) -> Any:
        callbacks: dict[int, Callable] = {}

        def placeholder(value: Any) -> Any:
            if callable(value):
                callbacks[len(callbacks)] = value
                return _Callback(len(callbacks) - 1)
            return value

        message = (path, tuple(placeholder(a) for a in args), {k: placeholder(v) for k, v in kwargs.items()})
        gen, conn = self._connection()
        try:
            conn.send(message)
            while True:
                if timeout is not None and not conn.poll(timeout):
                    raise OSError(f"no answer within {timeout:g}s")
                reply = conn.recv()
                if reply[0] == "callback":
                    callbacks[reply[1]](*reply[2], **reply[3])
                    continue
                break
        except (EOFError, OSError) as exc:
            conn.close()
            raise LogUnavailableError(f"the fold process went away during {path}: {exc}; retry shortly") from exc
        except BaseException:
            conn.close()  # mid-call: the connection's state is unknown
            raise
        self._idle.put((gen, conn))
        if reply[0] == "error":
            raise _decode_error(*reply[1])
        return reply[1]


class RemoteEngine:
    """The engine as the service's routes see it when the fold runs in its own process.

    Validation and appends run here (a ``client`` engine on the same log);
    every other call is one of :data:`OPERATIONS`, answered by the fold process.
    ``settings`` are the fold process's, kept current when they switch (a
    promote).
    """

    role = "service"

    def __init__(self, settings: Settings, *, max_lag: int = MAX_LAG, max_lag_wait_s: float = MAX_LAG_WAIT_S):
        self.max_lag = max_lag
        self.max_lag_wait_s = max_lag_wait_s
        self._appended: dict[int, int] = {}  # partition -> next offset after this process's last append

        # Appends check a message's user against its conversation's: the projection's is in the fold process.
        self.local = MemoryEngine(settings, role="client", owners=self._owner)
        self.log = self.local.log
        self.settings: Settings = settings
        try:
            self.fold = FoldProcess(settings, on_settings=self._settings_changed)
        except BaseException:
            self.local.close()
            raise

    def _owner(self, tenant_id: str, conversation_id: str) -> str | None:
        return self.fold.call("user_of", (conversation_id,), {"tenant_id": tenant_id})

    def _settings_changed(self, settings: Settings) -> None:
        self.settings = settings
        self.local.switch_settings(settings)  # validation follows the live settings too

    def listen(self, on_projected: Callable[[dict, set, dict], None], on_switched: Callable[[], None]) -> None:
        """Call ``on_projected(touched, deleted, answers)`` after each committed batch, ``on_switched()`` when settings switch.

        ``answers`` are the context reads answered ahead (:class:`_ReadShapes`).
        """
        self.fold.listeners.projected.append(on_projected)
        self.fold.listeners.switched.append(on_switched)

    def answers_read(self, tenant_id: str, conversation_id: str) -> None:
        """Say that an answer ahead of this conversation was read, so the fold process goes on answering it ahead."""
        self.fold.answers_read(tenant_id, conversation_id)

    # --------------------------------------------------------------- here

    def validate(self, *args: Any, **kwargs: Any):
        return self.local.validate(*args, **kwargs)

    def check_conflicts(self, *args: Any, **kwargs: Any):
        return self.local.check_conflicts(*args, **kwargs)

    def append_events(self, events):
        """Append validated events; first wait (up to ``max_lag_wait_s``) while the fold is ``max_lag`` events behind.

        Backpressure: appending costs this process far less than folding
        costs the fold process, so under a sustained overload the log would
        run ever further ahead of the projection and every read would be
        older. Waiting here holds the appender, and with it every append
        request, until the fold is back within the bound. After the wait
        (a fold process restarting, say) the events are appended anyway:
        accepted messages are never refused for lag.
        """
        if self._lag() > self.max_lag:
            self.fold.wait_applied(lambda applied: self._lag(applied) <= self.max_lag // 2, self.max_lag_wait_s)
        positions = self.local.append_events(events)
        if positions:
            ends = self._appended
            for position in positions:
                if position.offset >= ends.get(position.partition, 0):
                    ends[position.partition] = position.offset + 1
            self.fold.wake()  # fold now, not at the next poll
        return positions

    def _lag(self, applied: dict[int, int] | None = None) -> int:
        """Events this process appended that the projection does not hold yet."""
        applied = self.fold.applied if applied is None else applied
        return sum(max(0, end - applied.get(partition, 0)) for partition, end in self._appended.items())

    def promote(self, *args: Any, **kwargs: Any):
        position = self.fold.call("promote", args, kwargs)
        self._settings_changed(self.fold.call("hello")[1])  # the caller reads the new settings next
        return position

    def keyed_event_id(self, *args: Any, **kwargs: Any) -> str:
        # Here, not in the fold process: an append names every message this way, and this process's
        # engine shares the key store (it seals what it appends).
        return self.local.keyed_event_id(*args, **kwargs)

    def context_in_memory(self, *args: Any, **kwargs: Any) -> bool:
        return False  # every read is computed in the fold process: hand it to a thread

    def forget(self, conversation_id: str, **kwargs: Any):
        # What this process appended named the conversation's user: a reopened conversation may have another.
        self.local.appended_users.pop((kwargs.get("tenant_id", "default"), conversation_id), None)
        return self.fold.call("forget", (conversation_id,), kwargs)

    def forget_user(self, user_id: str, **kwargs: Any):
        tenant_id = kwargs.get("tenant_id", "default")
        for key in [k for k, u in self.local.appended_users.items() if k[0] == tenant_id and u == user_id]:
            self.local.appended_users.pop(key, None)
        return self.fold.call("forget_user", (user_id,), kwargs)

    def close(self) -> None:
        self.fold.close()
        self.local.close()


def _forwarded(name: str) -> Callable[..., Any]:
    def call(self: RemoteEngine, *args: Any, **kwargs: Any) -> Any:
        return self.fold.call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``MemoryEngine.{name}``, computed in the fold process."
    return call


for _name in sorted(OPERATIONS - set(vars(RemoteEngine))):
    setattr(RemoteEngine, _name, _forwarded(_name))
