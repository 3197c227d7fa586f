"""The facade's replay operations: replay into a namespace, verify, promote (composition code of MemoryEngine).

Kept apart from :mod:`memfold.engine.engine` so the facade stays small; the
namespace itself (manifest, fold, side log) is
:mod:`memfold.engine.namespaces`. Every function takes the open engine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memfold.core import overrides as ov
from memfold.core.errors import ConfigError, ProjectionError, ValidationError
from memfold.core.events import SettingsChanged, SettingsChangedPayload, utcnow
from memfold.core.ids import content_hash
from memfold.core.positions import Position
from memfold.core.settings import Settings
from memfold.engine import namespaces as ns
from memfold.engine.builders import fold_contexts, swap_projection, write_promoted
from memfold.engine.namespaces import Namespace, ReplayReport, list_namespaces
from memfold.engine.replay import beside_path, compare
from memfold.engine.replay_group import PARTS, fold_in_parts
from memfold.engine.runner import Runner
from memfold.engine.settings_follow import SETTINGS_CONVERSATION, SETTINGS_TENANT, same_folds
from memfold.projections.fold import FOLD_VERSION
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore
from memfold.streams.sealed_log import SealedLog
from memfold.streams.sqlite_log import SQLiteEventLog

if TYPE_CHECKING:
    from memfold.engine.engine import MemoryEngine

log = logging.getLogger("memfold.replay")

_RUNNING: dict[Path, threading.Lock] = {}  # one run per namespace in this process (a service runs them on threads)
_RUNNING_GUARD = threading.Lock()


def replay_settings(
    engine: MemoryEngine, *, policy: str | None = None, overrides: Mapping[str, Any] | None = None,
    settings_file: str | Path | None = None,
) -> tuple[Settings, dict[str, Any]]:
    """Return the settings a replay folds with (the live ones, changed by the file, ``policy`` and ``overrides``) and the dotted changes."""
    changes: dict[str, Any] = {}
    if settings_file is not None:
        changes.update(ov.load_file(settings_file)[0])
    if policy is not None:
        changes["policy"] = policy
    changes.update(overrides or {})
    return ov.apply(engine.settings, changes), changes


def replay(
    engine: MemoryEngine,
    name: str,
    *,
    policy: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    settings_file: str | Path | None = None,
    conversations: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    target: Mapping[int, int] | None = None,
    root: Path | None = None,
    batch_size: int = 5000,
    processes: int = 1,
) -> ReplayReport:
    """Create or resume the namespace ``name`` and catch it up with the log (see :meth:`MemoryEngine.replay`)."""
    root = root or ns.replays_dir(engine.settings.data_dir) / ns.check_name(name)
    asked = policy is not None or overrides or settings_file is not None or conversations is not None
    if (root / ns.MANIFEST).is_file():
        space = ns.Namespace.open(root)
        settings = ov.apply(engine.settings, space.manifest["settings"])
        if asked:
            wanted, _ = replay_settings(engine, policy=policy, overrides=overrides, settings_file=settings_file)
            if ov.hashes(wanted) != space.manifest["hashes"] or wanted.policy != settings.policy or (
                conversations is not None and sorted(conversations) != sorted(space.manifest["conversations"] or [])
            ):
                raise ConfigError(
                    f"replay {name!r} exists with other settings; resume it with `memfold replay --name {name}` "
                    f"alone, or drop it first (`memfold drop {name}`)")
    else:
        settings, _ = replay_settings(engine, policy=policy, overrides=overrides, settings_file=settings_file)
        space = ns.Namespace.create(root, ns.new_manifest(
            name, settings_view=ov.policy_view(settings), hashes=ov.hashes(settings),
            settings_hash=ov.combined_hash(settings),
            source={"log": engine.settings.log_url(), "topic": engine.settings.topic},
            conversations=sorted(conversations) if conversations is not None else None,
        ))
    with _held(root):
        return _catch_up(engine, space, settings, progress=progress, target=target, batch_size=batch_size,
                         processes=processes)


@contextlib.contextmanager
def _held(root: Path) -> Iterator[None]:
    """Hold the namespace at ``root`` for one run; raise :class:`ConfigError` when another thread runs it."""
    with _RUNNING_GUARD:
        lock = _RUNNING.setdefault(root.resolve(), threading.Lock())
    if not lock.acquire(blocking=False):
        raise ConfigError(f"replay {root.name!r} is running in this process; wait for it to finish")
    try:
        yield
    finally:
        lock.release()


def _catch_up(engine: MemoryEngine, space: Namespace, settings: Settings, *,
              progress: Callable[[int, int], None] | None, target: Mapping[int, int] | None,
              batch_size: int = 5000, processes: int = 1) -> ReplayReport:
    """Fold the namespace up to its target (the recorded one when resuming, else ``target`` or the log's end)."""
    started = time.perf_counter()
    m = space.manifest
    if space.stale:  # folded by an older memfold: its rows and side log are not what these rules fold to
        log.warning("replay %r was folded by other fold rules (version %s; this memfold folds version %s): "
                    "folding it again from the start", space.name, m.get("fold_version") or "unmarked", FOLD_VERSION)
        space.reset()
    if m["status"] != "running" or not m["target"]:
        ends = engine.log.end_positions() if target is None else target
        m["target"] = {str(p): o for p, o in ends.items()}
        m["status"] = "running"
        m["fold_version"] = FOLD_VERSION
        space.save()
    goal = ns.positions(m["target"])
    live = json.loads(engine.store.meta("policies") or "{}")
    policies = fold_contexts(settings)
    emit = [name for name, (_impl, ctx) in policies.items() if live.get(name) != ctx.settings_hash]
    wanted = set(m["conversations"] or ())
    keep = (lambda e: e.conversation_id in wanted) if m["conversations"] is not None else None
    with _opened(engine, space) as (store, side):
        start = store.position()
        total = sum(max(0, end - start.get(p, 0)) for p, end in goal.items())
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(done[0], total)

        if store.meta("policies") is None:
            store.set_meta("policies", json.dumps(ov.hashes(settings), sort_keys=True))
            store.set_meta("fold_version", str(FOLD_VERSION))  # the rules this namespace is folded by
        grouped = ns.ReplayStats()
        if processes > 1 and not any(o for p, o in store.position().items() if p < ns.SIDE):
            # A fresh namespace: the source fold runs in a replay group; the side log and answers follow here.
            grouped = fold_in_parts(engine, space, settings, store, goal, emit=emit, conversations=m["conversations"],
                                    processes=processes, batch_size=batch_size, progress=advance)
        fold = ns.ReplayFold(engine.log, side, store, policies, engine.counter, emit=emit,
                             summarizer=engine.summarizer, settings=settings, keep=keep, progress=advance,
                             batch_size=batch_size)
        stats = fold.run(goal).add(grouped)
    m["status"], m["head"] = "ready", m["target"]
    m["stats"] = _asdict(space.stats().add(stats))
    space.save()
    ends = engine.log.end_positions()
    lag = sum(max(0, end - goal.get(p, 0)) for p, end in ends.items())
    return ns.ReplayReport(name=space.name, status=m["status"], settings_hash=m["settings_hash"], head=goal, lag=lag,
                           seconds=time.perf_counter() - started, run=stats, total=space.stats(), path=space.root)


@contextlib.contextmanager
def _opened(engine: MemoryEngine, space: Namespace) -> Iterator[tuple[Any, Any]]:
    """Open a namespace's projection and side log (sealed with the live key store, so forgetting covers it)."""
    store = DuckDBProjectionStore(space.store_path)
    inner = None
    try:
        inner = SQLiteEventLog(space.side_path, partitions=engine.log.partition_count)
        side = SealedLog(inner, engine.sealer) if engine.sealer is not None else inner
        yield store, side
    finally:
        if inner is not None:
            inner.close()  # not side.close(): the key store is the live engine's
        store.close()


def _asdict(stats: Any) -> dict[str, int]:
    return asdict(stats)


def verify(engine: MemoryEngine, conversation_id: str | None, tenant_id: str) -> list:
    """Replay the log with the live settings into a temporary namespace and compare it with live (paused)."""
    engine.wait_idle()
    root = ns.replays_dir(engine.settings.data_dir) / f".verify-{os.getpid()}-{time.monotonic_ns()}"
    try:
        with engine.runner.paused():
            replay(engine, root.name, conversations=[conversation_id] if conversation_id else None,
                   target=engine.store.position(), root=root)
            replica = DuckDBProjectionStore(root / "projections.duckdb", read_only=True)
            try:
                only = (tenant_id, conversation_id) if conversation_id else None
                return compare(engine.store, replica, only)
            finally:
                replica.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def promote(engine: MemoryEngine, name: str, timeout: float) -> Position:
    """Make replay ``name``'s settings live (see :meth:`MemoryEngine.promote`); return the SettingsChanged position."""
    if engine.role not in ("embedded", "projector"):
        raise ConfigError(
            f"promote runs where the replay is: an embedded engine, or a projector node or service on the Kafka log "
            f"(this engine is a {engine.role}); workers pick the promoted settings up from the log by themselves")
    space = ns.Namespace.open(ns.replays_dir(engine.settings.data_dir) / ns.check_name(name))
    if space.manifest["conversations"] is not None:
        raise ValidationError(f"replay {name!r} covers some conversations only; replay them all to promote",
                              field="name")
    settings = ov.apply(engine.settings, space.manifest["settings"])
    with _held(space.root):  # no run of this replay may add to its side log meanwhile
        return _promote(engine, space, settings, timeout)


def _promote(engine: MemoryEngine, space: Namespace, settings: Settings, timeout: float) -> Position:
    # 1. Catch the replay up with the log (it answers what arrived since, through the cache).
    engine.wait_idle(timeout)
    _catch_up(engine, space, settings, progress=None, target=None)
    with engine.switching:  # this node's follower must not fold the change it is recording a second time
        position = _record_and_swap(engine, space, settings)
    space.manifest["status"] = "promoted"
    space.manifest["promoted_position"] = str(position)
    space.save()
    engine.wait_idle(timeout)
    return position


def _record_and_swap(engine: MemoryEngine, space: Namespace, settings: Settings) -> Position:
    name = space.name
    # 2. Record the change and the replay's summary events on the live log (idempotent by event id).
    with _opened(engine, space) as (_store, side):
        made = ns.side_events(side)
    change = SettingsChanged(
        event_id="settings-" + content_hash(name, space.manifest["created_at"], space.manifest["settings_hash"]),
        tenant_id=SETTINGS_TENANT, conversation_id=SETTINGS_CONVERSATION, occurred_at=utcnow(),
        payload=SettingsChangedPayload(policy=settings.policy, settings={**space.manifest["settings"], "replay": name},
                                       settings_hash=space.manifest["settings_hash"]),
    )
    position = engine.log.append([change, *made])[0]
    # 3. The data dir keeps the promoted settings: the next process opens with them.
    write_promoted(engine.settings.data_dir, space.manifest["settings"])
    # 4. Fold the log beside under the new settings, then swap it in with the runner paused (reads never see a gap).
    swap_in(engine, settings)
    return position


def swap_in(engine: MemoryEngine, settings: Settings) -> None:
    """Fold the whole log beside the live projection under ``settings``, then swap it in and read with them.

    The fold runs while reads go on; the runner is paused only for the last
    records and the swap, so a read answers from the old projection or the
    new one, never an empty one. Only an embedded engine appends the
    summary requests the new settings decide (on a Kafka log the workers do).
    """
    path = beside_path(engine.store.path, "promote")
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".wal").unlink(missing_ok=True)
    beside = DuckDBProjectionStore(path)
    try:
        projector = Projector(beside, fold_contexts(settings), engine.counter)
        runner = Runner(engine.log, beside, projector, emit_requests=engine.role == "embedded")
        while runner.run_once():
            pass
        with engine.runner.paused():
            while runner.run_once():
                pass
            swap_projection(engine, beside, settings)
    except BaseException:
        beside.close()
        path.unlink(missing_ok=True)
        raise


def adopt(engine: MemoryEngine, settings: Settings) -> bool:
    """Make a running worker or projector node fold with ``settings`` (promoted elsewhere); False if it already does.

    A worker's projection serves no reads: it is dropped and its partitions
    are folded again from offset 0 (the promoted summaries are on the log,
    so no model call repeats them). A projector node folds beside and swaps
    (:func:`swap_in`): its reads never see an empty projection.
    """
    if same_folds(engine.settings, settings):
        return False
    log.info("adopting the settings promoted on the log: %s -> %s",
             ov.combined_hash(engine.settings), ov.combined_hash(settings))
    if engine.role == "worker":
        with engine.runner.paused():
            engine.store.reset()
            engine.store.set_meta("policies", json.dumps(ov.hashes(settings), sort_keys=True))
            engine.switch_settings(settings)
    else:
        swap_in(engine, settings)
    write_promoted(engine.settings.data_dir, ov.policy_view(settings))  # a restart without the broker keeps them
    return True


def erase_in_replays(data_dir: Path, tenant_id: str, conversation_id: str) -> tuple[list[str], list[str]]:
    """Delete a forgotten conversation's rows from every replay namespace; return (names that held some, failures).

    Their side logs hold its content sealed with the destroyed key, like the
    live log, so only the projections need erasing (and rewriting, so no
    freed block keeps the text); its fold states go too (a replay that
    resumes folds the deletion from the log). A namespace whose earlier
    erasure was cut short (killed, disk full) is rewritten even when no row
    is left: the erasing transaction recorded that a rewrite is owed. A
    namespace another process has open, or that cannot be rewritten, is
    named in the failures: forget again once it is free.
    """
    touched, failed = [], []
    for space in list_namespaces(data_dir):
        # The namespace's projection, and the part files of a replay group not merged yet (running or killed).
        for path in [space.store_path, *sorted((space.root / PARTS).glob("*.duckdb"))]:
            if not path.is_file():
                continue
            try:
                store = DuckDBProjectionStore(path)
            except ProjectionError as exc:
                failed.append(f"replay {space.name}: {exc}")
                continue
            try:
                if store.erase(tenant_id, conversation_id, fold_states=True) or store.compaction_owed():
                    store.compact()
                    if space.name not in touched:
                        touched.append(space.name)
            except ProjectionError as exc:
                failed.append(f"replay {space.name}: {exc}")
            finally:
                store.close()
    return touched, failed
