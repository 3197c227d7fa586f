"""The composition root: what each role of the engine is made of, assembled here and nowhere else.

A role is one of ``ROLES``. Every role but ``client`` runs the same pipeline
(log, projection store, folds, summarizer worker, runner); they differ in
which partitions they fold and who appends decided events:

- ``embedded`` (default): one process does everything, every partition.
- ``worker``: a distributed worker; folds and summarizes the partitions it is
  given (:meth:`memfold.engine.runner.Runner.own`, driven by
  :class:`memfold.engine.kafka_worker.PartitionWorker`); nothing runs until then.
- ``projector``: a read replica of every partition; appends nothing and runs
  no summarizer (the workers do). The service's fold process on a Kafka log
  is one.
- ``client``: validates and appends only; no projection is opened.

:func:`build` returns the :class:`Parts` of a role; ``MemoryEngine`` only
holds them. The folds that depend on settings (policies, projector, the
summarizer's inputs) are one :class:`Folds` value: a settings switch builds a
new one and the engine installs it. :func:`swap_projection` is the one way a
projection folded beside the live one replaces it (rebuild, promote, adopt).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from memfold.core import overrides as ov
from memfold.core.errors import ConfigError
from memfold.core.ports import FoldContext, Policy
from memfold.core.settings import Settings
from memfold.core.tokens import TokenCounter
from memfold.core.tokens import counter as token_counter
from memfold.engine.erasure import private_dir
from memfold.engine.settings_follow import SettingsFollower, at_start
from memfold.projections.summarizers import build_summarizer
from memfold.streams.logs import open_log

if TYPE_CHECKING:
    from memfold.core.sealing import Sealer
    from memfold.engine.runner import Runner
    from memfold.engine.settings_follow import SettingsFollower
    from memfold.engine.snapshots import SnapshotRefresher
    from memfold.engine.worker import FoldedSource, SummarizerWorker
    from memfold.projections.dense import DenseIndex
    from memfold.projections.projector import Projector, ServingHooks
    from memfold.projections.store import DuckDBProjectionStore

log = logging.getLogger("memfold.engine")

ROLES = ("embedded", "worker", "projector", "client")

_POLICY_MODULES = {
    "hierarchical": "memfold.projections.policies.hierarchical",
    "chunked": "memfold.projections.policies.chunked",
    "sliding_window": "memfold.projections.policies.sliding_window",
    "rolling": "memfold.projections.policies.rolling",
    "topics": "memfold.projections.policies.topics",
}


def load_policy(name: str) -> Policy:
    """Return an instance of the policy called ``name`` (one module per seed)."""
    module_name = _POLICY_MODULES.get(name)
    if module_name is None:
        raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(_POLICY_MODULES)}")
    module = importlib.import_module(module_name)
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "name", None) == name and hasattr(value, "evolve"):
            return value()
    raise ConfigError(f"module {module_name} defines no policy class named {name!r}")


def fold_contexts(settings: Settings) -> dict[str, tuple[Policy, FoldContext]]:
    """Return every active policy with its fold context (settings, hash, pure helpers)."""
    counter = token_counter(settings.encoding)
    embed = None
    if "topics" in settings.active_policies:
        from memfold.projections.embedders import LocalHashEmbedder

        local = LocalHashEmbedder(dimensions=settings.embedder.dimensions)
        embed = lambda text: local.embed([text])[0]  # noqa: E731 - a pure function for the fold
    out: dict[str, tuple[Policy, FoldContext]] = {}
    for name in settings.active_policies:
        ctx = FoldContext(
            policy=name,
            settings=settings.policy_settings(name),
            settings_hash=settings.settings_hash(name),
            count_tokens=counter.count,
            embed=embed,
            user_summary_every=settings.users.summary_every,
            user_summary_token_cap=settings.users.summary_token_cap,
        )
        out[name] = (load_policy(name), ctx)
    return out


class Folds(msgspec.Struct, frozen=True):
    """What folding and summarizing under one set of settings needs; replaced whole when the settings change."""

    settings: Settings
    policies: dict[str, tuple[Policy, FoldContext]]
    projector: Projector
    inputs: FoldedSource  # the summary worker's messages and base summaries, fed by the projector


def build_folds(settings: Settings, store: DuckDBProjectionStore, counter: TokenCounter,
                listeners: Sequence[Callable[[Any], None]] = (), *, partition_count: int,
                hooks: ServingHooks | None = None) -> Folds:
    """Return the folds of ``settings`` over ``store`` (a log of ``partition_count`` partitions); ``listeners``
    hear every committed batch; ``hooks`` are a serving process's (see :class:`ServingHooks`)."""
    from memfold.engine.worker import FoldedSource
    from memfold.projections.projector import Projector, ServingHooks

    policies = fold_contexts(settings)
    projector = Projector(store, policies, counter, hooks=hooks or ServingHooks())
    inputs = FoldedSource(projector.tail, store, partition_count=partition_count)
    projector.listeners.append(inputs.committed)
    projector.listeners.extend(listeners)
    return Folds(settings, policies, projector, inputs)


class Parts(msgspec.Struct):
    """Everything an engine of one role holds. ``store`` and what hangs from it are None for a client."""

    role: str
    settings: Settings
    counter: TokenCounter
    log: Any  # the EventLog, sealed when a key store is configured
    sealer: Sealer | None
    store: DuckDBProjectionStore | None = None
    folds: Folds | None = None
    summarizer: Any = None
    worker: SummarizerWorker | None = None
    runner: Runner | None = None
    dense: DenseIndex | None = None
    follower: SettingsFollower | None = None
    snapshots: SnapshotRefresher | None = None  # Parquet snapshots refreshed every snapshot.every_seconds
    hooks: ServingHooks | None = None  # a serving process's asks of every projector (settings switches too)

    def close(self) -> None:
        """Close what was opened, newest first (a build that failed half way, or the engine's close)."""
        if self.snapshots is not None:
            self.snapshots.stop()
        if self.runner is not None:
            self.runner.stop()
        if self.worker is not None:
            self.worker.stop()
        if self.summarizer is not None:
            self.summarizer.close()
        if self.dense is not None:
            self.dense.stop()
        if self.store is not None:
            self.store.close()
        self.log.close()


def build(role: str, settings: Settings, *, log_timeout: float | None = None, policy_changes: str = "rebuild",
          listeners: Sequence[Callable[[Any], None]] = (), on_appended: Callable[[], None] = lambda: None,
          partitions: Iterable[int] | None = None, hooks: ServingHooks | None = None) -> Parts:
    """Assemble the parts of an engine of ``role``; nothing is started (see :func:`start`).

    ``policy_changes``: ``"rebuild"`` rebuilds a projection folded with other
    settings or fold rules; ``"refuse"`` (reads) raises a :class:`ConfigError`
    naming the command that makes the change. ``listeners`` hear every
    committed batch; ``on_appended`` is called after the summarizer worker
    appended outcomes. ``partitions`` makes a ``projector`` a shard node folding only those.
    ``hooks`` are what a process serving reads asks of every projector (:class:`ServingHooks`).
    """
    from memfold.streams.sealed_log import sealed

    if role not in ROLES:
        raise ConfigError(f"unknown engine role {role!r}; choose from {', '.join(ROLES)}")
    if policy_changes not in ("rebuild", "refuse"):
        raise ConfigError(f"policy_changes must be 'rebuild' or 'refuse', got {policy_changes!r}")
    private_dir(settings.data_dir)
    settings = bind_log(settings)
    if role != "client":
        settings = with_promoted(settings)
    raw = open_log(settings.log_url(), partitions=settings.partitions, topic=settings.topic, timeout=log_timeout,
                   state_dir=settings.data_dir)
    try:
        log_, sealer = sealed(raw, settings.keystore_location())
    except BaseException:
        raw.close()
        raise
    parts = Parts(role, settings, token_counter(settings.encoding), log_, sealer, hooks=hooks)
    if role == "client":
        return parts
    try:
        _build_pipeline(parts, policy_changes, listeners, on_appended, partitions)
    except BaseException:
        parts.close()
        raise
    return parts


def _build_pipeline(parts: Parts, policy_changes: str, listeners: Sequence[Callable[[Any], None]],
                    on_appended: Callable[[], None], partitions: Iterable[int] | None) -> None:
    from memfold.engine.runner import Runner
    from memfold.engine.worker import SummarizerWorker
    from memfold.projections.store import DuckDBProjectionStore

    settings, role = parts.settings, parts.role
    if role in ("worker", "projector") and settings.log_url().startswith("kafka://"):
        # Nodes sharing a Kafka log fold with the settings promoted on it (see settings_follow).
        parts.follower = SettingsFollower(parts.log)
        settings = at_start(settings, parts.follower)
    parts.store = DuckDBProjectionStore(settings.projection_path())
    parts.settings = settings = reconcile(parts.store, settings, refuse=policy_changes == "refuse")
    if settings.retrieval.embedder != "none":
        from memfold.projections.dense import DenseIndex, build_dense_embedder, embedder_name

        parts.dense = DenseIndex(parts.store, build_dense_embedder(settings), embedder_name(settings))
    parts.folds = build_folds(settings, parts.store, parts.counter, [*listeners, *dense_listeners(parts.dense)],
                              partition_count=parts.log.partition_count, hooks=parts.hooks)
    parts.summarizer = build_summarizer(settings, cache_conn=parts.store, cache_table_made=True)
    inputs = parts.folds.inputs
    parts.worker = SummarizerWorker(
        parts.log, inputs, inputs, parts.summarizer, settings, on_appended=on_appended,
        concurrency=settings.summarizer.concurrency, max_pending=settings.summarizer.max_pending,
        flush_after_s=settings.summarizer.flush_after_s,
    )
    # Not for reads (policy_changes "refuse"): a read never changes the data dir, however long it runs.
    if settings.snapshot.every_seconds and policy_changes != "refuse":
        from memfold.engine.snapshots import SnapshotRefresher

        parts.snapshots = SnapshotRefresher(parts.store, settings.snapshot_dir(), settings.snapshot.every_seconds,
                                            node=settings.snapshot.node, keep_seconds=settings.snapshot.keep_seconds)
    summarizes = role in ("embedded", "worker")
    parts.runner = Runner(
        parts.log, parts.store, parts.folds.projector,
        on_requests=parts.worker.submit if summarizes else (lambda r: None),
        emit_requests=summarizes, partitions=[] if role == "worker" else partitions,
    )


def dense_listeners(dense: DenseIndex | None) -> list[Callable[[Any], None]]:
    return [] if dense is None else [dense.committed]


def start(parts: Parts, *, start: bool) -> None:
    """Start the threads of ``parts``: a worker's always (it idles until partitions are given), others' if ``start``.

    Requests left open by an earlier process (crash, --no-wait) are handed
    over once the runner has caught up with their partitions.
    """
    if parts.role == "client":
        return
    running = start or parts.role == "worker"
    if parts.dense is not None and running:
        parts.dense.start()
    if parts.role in ("embedded", "worker") and running:
        parts.worker.start()
    if start and parts.role != "worker":
        parts.runner.start()
    if parts.snapshots is not None and running:
        parts.snapshots.start()


def reconcile(store: DuckDBProjectionStore, settings: Settings, *, refuse: bool = False) -> Settings:
    """Return settings folding every policy ``store`` holds; reset the store if its fold rules or settings changed.

    The projection records ``{policy: settings_hash}``. A policy it holds
    keeps being folded even when not asked for (or it would go stale); a
    new policy or changed settings rebuild the projection from the log
    (the LLM cache survives, so unchanged summaries cost no model call).
    """
    from memfold.projections.fold import FOLD_VERSION

    folded = store.meta("fold_version")
    if folded != str(FOLD_VERSION):
        if any(store.position().values()):
            if refuse:
                raise ConfigError(_fold_change_message(folded, settings.data_dir))
            log.warning(
                "this projection was folded by other fold rules (version %s; this memfold folds version %s): "
                "rebuilding it from the log", folded or "unmarked", FOLD_VERSION,
            )
            store.reset()
        if not refuse:
            store.set_meta("fold_version", str(FOLD_VERSION))
    stored = json.loads(store.meta("policies") or "{}")
    names = tuple(dict.fromkeys((*settings.active_policies, *stored)))
    settings = settings.model_copy(update={"policies": names})
    wanted = {name: settings.settings_hash(name) for name in names}
    if stored != wanted:
        if refuse and stored:
            raise ConfigError(_policy_change_message(stored, wanted, settings.data_dir))
        if stored or any(store.position().values()):
            log.warning("policies or settings changed (%s -> %s): rebuilding the projection from the log", stored, wanted)
            store.reset()
        store.set_meta("policies", json.dumps(wanted, sort_keys=True))
    return settings


# Tables a projection folded beside the live one takes over from it: results bought from a model
# (summaries, embeddings) that a fold reads back instead of asking again.
CARRIED_TABLES = ("llm_cache", "dense_vectors")


def swap_projection(engine: Any, beside: DuckDBProjectionStore, settings: Settings) -> None:
    """Make ``beside`` (folded from the log under ``settings``) the live projection; the one swap procedure.

    Rebuild, promote and adopt all end here. Call with the engine's runner
    paused and ``beside`` caught up. It records the fold rules and settings
    in ``beside``, carries over :data:`CARRIED_TABLES`, swaps the files,
    installs folds built for ``settings`` and, once the runner runs again,
    has the dense index embed whatever has no vector yet.
    """
    from memfold.projections.fold import FOLD_VERSION

    beside.set_meta("policies", json.dumps({n: settings.settings_hash(n) for n in settings.active_policies},
                                           sort_keys=True))
    beside.set_meta("fold_version", str(FOLD_VERSION))
    for table in CARRIED_TABLES:
        beside.copy_rows_from(engine.store, table)
    engine.store.replace_with(beside)
    engine.switch_settings(settings)
    if engine.dense is not None:
        engine.dense.resync()  # messages the beside fold saw that have no vector yet (or lost one in the swap)


def bind_log(settings: Settings) -> Settings:
    """Return settings whose log (URL and topic) is the one this data dir was built from.

    The binding is recorded on first open with an explicit ``--log``. A
    projection holds positions of one log; opening it against another would
    fold nonsense, so that is refused with a clear error.
    """
    marker = settings.log_binding_path()
    bound = json.loads(marker.read_text()) if marker.is_file() else None
    if settings.log is None:
        if bound is not None:  # the data dir knows its log: no --log needed to read it
            return settings.model_copy(update={"log": bound["log"], "topic": bound["topic"]})
        return settings  # the data dir's own SQLite log, wherever the dir is reached from
    wanted = {"log": settings.log_url(), "topic": settings.topic}
    if bound is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(wanted) + "\n")
    elif bound != wanted:
        raise ConfigError(
            f"{settings.data_dir} holds a projection of {bound['log']} (topic {bound['topic']}), not "
            f"{wanted['log']} (topic {wanted['topic']}); use another --data-dir for that log"
        )
    return settings


def _fold_change_message(folded: str | None, data_dir: Path) -> str:
    """Say that the projection was folded by other fold rules, and which command folds it again."""
    from memfold.projections.fold import FOLD_VERSION

    return (
        f"{data_dir} was folded by other fold rules (version {folded or 'unmarked'}; this memfold folds version "
        f"{FOLD_VERSION}); a read does not change the data dir: fold it again with "
        f"`memfold --data-dir {data_dir} rebuild`"
    )


def _policy_change_message(stored: Mapping[str, str], wanted: Mapping[str, str], data_dir: Path) -> str:
    """Say what a read asked for that the projection does not keep, and which command changes it."""
    added = [name for name in wanted if name not in stored]
    changed = [name for name in wanted if name in stored and stored[name] != wanted[name]]
    if added:
        flags = " ".join(f"--policy {name}" for name in added[:1])
        return (
            f"{data_dir} does not keep the {', '.join(added)} policy (it keeps {', '.join(stored)}); a read does "
            f"not change the data dir: add it with `memfold --data-dir {data_dir} {flags} rebuild` (folds the "
            "log again), or add it to 'policies' in memfold.toml and run `memfold rebuild`"
        )
    return (
        f"the settings of {', '.join(changed)} differ from the ones {data_dir} was built with; a read does not "
        f"change the data dir: apply them with `memfold --data-dir {data_dir} rebuild` (folds the log again), "
        "or read with the settings the data dir was built with"
    )


# The data dir records the settings a promote made live: later processes open with them.
PROMOTED = "promoted.json"


def write_promoted(data_dir: Path, view: Mapping[str, Any]) -> None:
    """Record the promoted policy settings of a data dir (atomically)."""
    tmp = Path(data_dir) / (PROMOTED + ".tmp")
    tmp.write_text(json.dumps(dict(view), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, Path(data_dir) / PROMOTED)


def with_promoted(settings: Settings) -> Settings:
    """Return ``settings`` with the data dir's promoted policy settings applied, if a replay was promoted there."""
    path = settings.data_dir / PROMOTED
    if not path.is_file():
        return settings
    try:
        view = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{path} (the promoted settings) is unreadable: {exc}") from exc
    return ov.apply(settings, view)
