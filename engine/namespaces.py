"""Replay namespaces: fold the log with other settings into a projection of its own, beside the live one.

A namespace is a directory ``<data_dir>/replays/NAME/``::

    manifest.json       name, settings (dotted policy keys) and their hashes, created_at,
                        source log, target and head positions, status, cumulative counters,
                        the fold rules' version it was folded by
    projections.duckdb  the replay's projection, with the positions it has folded
    events.sqlite       its side log: the summary requests and outcomes the replay made

The replay reads the source log through the ``EventLog`` port from offset 0
with positions of its own (stored with its rows, so a replay killed at any
point resumes where its committed data ends), and folds every event the way
the live projector does (:class:`~memfold.projections.projector.Projector`).
A policy whose settings equal the live ones is folded from the outcomes the
live log recorded. For a policy with other settings, the requests it decides
go to the side log, never to the source log; once the source is folded to
the target, the open requests are answered through the shared summary cache
(the newest per lane; older ones superseded, as the summarizer pool does),
their outcomes appended to the side log in one batch and folded, until no
request is open. Side-log partition ``p`` is stored as partition
``SIDE + p`` in the replay's projection, so both logs' positions commit
with the rows. Nothing is ever written to the source log or the live
projection.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memfold.core.errors import ConfigError, UnknownReplayError, ValidationError
from memfold.core.events import Event, SummaryProduced, SummaryRequested
from memfold.core.ports import EventLog, FoldContext, Policy, Summarizer
from memfold.core.positions import LogRecord, Position
from memfold.core.settings import Settings
from memfold.core.tokens import TokenCounter
from memfold.engine.worker import FoldedSource, answer, answerers, batched, build_input
from memfold.projections.fold import FOLD_VERSION, failed
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore

SIDE = 1 << 20  # the projection's partition number for side-log partition p is SIDE + p
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MANIFEST = "manifest.json"


@dataclass
class ReplayStats:
    """What one catch-up did: events folded, requests answered and what the answers cost."""

    folded: int = 0  # source-log events folded
    side_events: int = 0  # requests and outcomes appended to the side log
    answered: int = 0  # requests answered (superseded ones included)
    cache_hits: int = 0
    cache_misses: int = 0
    model_calls: int = 0
    failures: int = 0

    def add(self, other: ReplayStats) -> ReplayStats:
        """Return the sum of two counters."""
        return ReplayStats(**{k: v + getattr(other, k) for k, v in asdict(self).items()})


@dataclass
class ReplayReport:
    """The outcome of :meth:`MemoryEngine.replay`: the manifest as it stands and this run's counters."""

    name: str
    status: str
    settings_hash: str
    head: dict[int, int]
    lag: int
    seconds: float
    run: ReplayStats = field(default_factory=ReplayStats)
    total: ReplayStats = field(default_factory=ReplayStats)
    path: Path | None = None


def replays_dir(data_dir: Path) -> Path:
    """Return the directory holding a data dir's replay namespaces."""
    return Path(data_dir) / "replays"


def check_name(name: str) -> str:
    """Return ``name`` if it can name a namespace (a directory), else raise :class:`ValidationError`."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValidationError(
            f"replay name {name!r} must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            field="name")
    return name


class Namespace:
    """One replay namespace directory: its manifest, projection and side log."""

    def __init__(self, root: Path, manifest: dict[str, Any]):
        self.root = root
        self.manifest = manifest

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def store_path(self) -> Path:
        return self.root / "projections.duckdb"

    @property
    def side_path(self) -> Path:
        return self.root / "events.sqlite"

    @classmethod
    def create(cls, root: Path, manifest: dict[str, Any]) -> Namespace:
        """Create the directory and write ``manifest``; raise :class:`ConfigError` if it exists."""
        if (root / MANIFEST).exists():
            raise ConfigError(f"replay {manifest['name']!r} already exists in {root.parent}")
        root.mkdir(parents=True, exist_ok=True)
        space = cls(root, manifest)
        space.save()
        return space

    @classmethod
    def open(cls, root: Path) -> Namespace:
        """Open an existing namespace; raise :class:`UnknownReplayError` when there is none."""
        try:
            manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UnknownReplayError(
                f"no replay named {root.name!r} in {root.parent}; list them with `memfold replays`", field="name"
            ) from None
        except ValueError as exc:
            raise ConfigError(f"the manifest of replay {root.name!r} ({root / MANIFEST}) is unreadable: {exc}") from exc
        return cls(root, manifest)

    def save(self) -> None:
        """Write the manifest atomically (a crash leaves the old or the new one, never half)."""
        self.manifest["updated_at"] = _now()
        tmp = self.root / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(self.manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.root / MANIFEST)

    def stats(self) -> ReplayStats:
        return ReplayStats(**self.manifest.get("stats", {}))

    @property
    def stale(self) -> bool:
        """True when the namespace holds rows folded by other fold rules (an older memfold: no marker, or another version)."""
        folded = self.manifest["status"] != "created" or bool(self.manifest.get("head"))
        return folded and self.manifest.get("fold_version") != FOLD_VERSION

    def refuse_stale(self) -> None:
        """Raise :class:`ConfigError` when the namespace is :attr:`stale`: its rows are not what this memfold folds."""
        if self.stale:
            raise ConfigError(
                f"replay {self.name!r} was folded by other fold rules (version "
                f"{self.manifest.get('fold_version') or 'unmarked'}; this memfold folds version {FOLD_VERSION}): "
                f"fold it again with `memfold replay --name {self.name}` (summaries come from the cache)")

    def reset(self) -> None:
        """Delete the namespace's projection and side log and mark it unfolded; its name and settings stay."""
        for path in (self.store_path, self.side_path):
            for suffix in ("", ".wal", "-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
        self.manifest.update(status="created", target=None, head={}, stats=asdict(ReplayStats()))
        self.manifest.pop("fold_version", None)
        self.save()


def new_manifest(name: str, *, settings_view: dict[str, Any], hashes: dict[str, str], settings_hash: str,
                 source: dict[str, str], conversations: list[str] | None) -> dict[str, Any]:
    """Return the manifest of a namespace about to be created (status ``created``, nothing folded)."""
    return {
        "name": name, "created_at": _now(), "status": "created", "settings": settings_view, "hashes": hashes,
        "settings_hash": settings_hash, "source": source, "conversations": conversations, "target": None,
        "head": {}, "stats": asdict(ReplayStats()),
    }


def list_namespaces(data_dir: Path) -> list[Namespace]:
    """Return every replay namespace of a data dir, by name (temporary ones, named with a leading dot, left out)."""
    root = replays_dir(data_dir)
    if not root.is_dir():
        return []
    out = []
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith(".") and (child / MANIFEST).is_file():
            out.append(Namespace.open(child))
    return out


def drop(data_dir: Path, name: str) -> Path:
    """Delete the namespace ``name`` (its projection and side log); return its path."""
    root = replays_dir(data_dir) / check_name(name)
    Namespace.open(root)  # raises when there is none
    shutil.rmtree(root)
    return root


def positions(manifest_positions: Mapping[str, int] | None) -> dict[int, int]:
    """Return a manifest's ``{"partition": offset}`` as ints."""
    return {int(p): int(o) for p, o in (manifest_positions or {}).items()}


# --------------------------------------------------------------------------- the fold


class ReplayFold:
    """Fold a source log into a namespace's store with the replay's policies; answer its own requests.

    ``emit`` names the policies whose requests are the replay's own (their
    settings differ from the live ones): those go to ``side``. ``keep``
    filters events (a conversation subset); skipped events still advance
    the positions. ``summarizer`` None: only :meth:`fold_source` may be called.
    """

    def __init__(
        self,
        source: EventLog,
        side: EventLog,
        store: DuckDBProjectionStore,
        policies: Mapping[str, tuple[Policy, FoldContext]],
        counter: TokenCounter,
        *,
        emit: Iterable[str],
        summarizer: Summarizer | None,
        settings: Settings,
        keep: Callable[[Event], bool] | None = None,
        batch_size: int = 5000,
        progress: Callable[[int], None] = lambda n: None,
    ):
        self.source = source
        self.side = side
        self.store = store
        self.projector = Projector(store, dict(policies), counter)
        # Summary inputs without re-reading the store.
        self.inputs = FoldedSource(self.projector.tail, store, partition_count=source.partition_count)
        self.projector.listeners.append(self.inputs.committed)
        self.emit = frozenset(emit)
        self.summarizer = summarizer
        self.settings = settings
        self.keep = keep
        self.batch_size = batch_size
        self.progress = progress
        self.stats = ReplayStats()

    def fold_source(self, target: Mapping[int, int]) -> ReplayStats:
        """Fold the source up to ``target`` only (a replay group's part): requests go to the side log, none answered."""
        self._fold(self.source, [(p, p, end) for p, end in sorted(target.items())])
        return self.stats

    def run(self, target: Mapping[int, int]) -> ReplayStats:
        """Fold the source up to ``target`` (partition -> next offset), then the side log until no request is open.

        Steps, repeated until nothing is open: (1) fold the source from the
        store's positions to ``target``; (2) fold the side log to its end;
        (3) answer the replay's open requests and append their outcomes to
        the side log in one batch. Resumable at every step: positions commit
        with the rows, requests are appended before the rows that count
        them (and re-appending the same id is a no-op), outcomes in one append.
        """
        self._fold(self.source, [(p, p, end) for p, end in sorted(target.items())])
        side = [(p, SIDE + p, None) for p in self.side.partitions()]
        while True:
            while self._fold(self.side, side):
                pass
            open_ = self.store.open_request_events([SIDE + p for p in self.side.partitions()])
            if not open_:
                return self.stats
            outcomes = self._answer(open_)
            self.side.append(outcomes)
            self.stats.side_events += len(outcomes)

    def _fold(self, log: EventLog, parts: list[tuple[int, int, int | None]]) -> int:
        """Fold ``log``'s partitions from the store's positions; return how many events were read.

        ``parts`` lists (partition, stored as, end or None for the log's
        end). A batch takes records from several partitions, so one
        transaction covers them all (a DuckDB commit costs far more than a
        record).
        """
        folded = 0
        while True:
            pos = self.store.position()
            records: list[LogRecord] = []
            ends: dict[int, int] = {}
            room = self.batch_size
            for partition, stored_as, end in parts:
                start = pos.get(stored_as, 0)
                limit = room if end is None else min(room, end - start)
                got = log.read(partition, start, limit) if limit > 0 else []
                if not got:
                    continue
                ends[stored_as] = got[-1].position.offset + 1
                if stored_as != partition:
                    got = [LogRecord(Position(stored_as, r.position.offset), r.event) for r in got]
                records.extend(got)
                room -= len(got)
                if room <= 0:
                    break
            if not records:
                return folded
            kept = records if self.keep is None else [r for r in records if self.keep(r.event)]
            changes, moved, decided = self.projector.project(kept)
            mine = [r for r in decided if r.payload.policy in self.emit]
            try:
                if mine:  # before the rows that count them (an outbox): a crash re-decides the same ids
                    self.side.append(mine)
                self.store.apply(changes, {**moved, **ends})
            except BaseException:
                self.projector.forget()
                raise
            self.projector.committed(changes)
            self.stats.side_events += len(mine)
            folded += len(records)
            source = sum(1 for r in records if r.position.partition < SIDE)
            self.stats.folded += source
            if source:
                self.progress(source)

    def _answer(self, requests: list[SummaryRequested]) -> list[Event]:
        """Return the outcome of every open request, in log order: the newest per lane answered, older superseded."""
        newest: dict[tuple[str, str, str, str | None, str], SummaryRequested] = {}
        for r in requests:
            newest[_lane(r)] = r
        if self.summarizer is None:
            raise ConfigError("this replay fold has no summarizer: it folds the source only (fold_source)")
        name = self.summarizer.name
        winners = [r for r in requests if newest[_lane(r)] is r]
        inputs = [build_input(r, self.inputs, self.inputs, self.settings) for r in winners]
        by = dict(zip((r.event_id for r in winners), answerers(self.summarizer, inputs)))  # cache hits in one query
        given = dict(zip((r.event_id for r in winners), inputs))
        outcomes: list[Event] = []
        with batched(self.summarizer):  # new cache entries in one transaction
            for r in requests:
                winner = newest[_lane(r)]
                if winner is not r:
                    outcomes.append(failed(r, reason=f"superseded by {winner.payload.request_id}",
                                           error_type="Superseded", summarizer=name))
                    continue
                outcome = answer(r, given[r.event_id], by[r.event_id])
                if isinstance(outcome, SummaryProduced) and outcome.payload.cached:
                    self.stats.cache_hits += 1
                else:
                    self.stats.cache_misses += 1
                    self.stats.model_calls += 1
                    self.stats.failures += not isinstance(outcome, SummaryProduced)
                outcomes.append(outcome)
        self.stats.answered += len(requests)
        return outcomes


def side_events(side: EventLog) -> list[Event]:
    """Return every event of a side log, partition by partition, in offset order."""
    out: list[Event] = []
    for p in side.partitions():
        start = 0
        while records := side.read(p, start, 5000):
            out.extend(r.event for r in records)
            start = records[-1].position.offset + 1
    return out


def _lane(request: SummaryRequested) -> tuple[str, str, str, str | None, str]:
    p = request.payload
    return (p.policy, request.tenant_id, request.conversation_id, p.topic_id, p.scope)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
