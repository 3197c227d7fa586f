"""The ``memfold`` commands that take memory elsewhere: export, import (the log) and snapshot (the projection as Parquet).

Kept apart from :mod:`memfold.cli.main` like cli_memory.py: :func:`add_commands`
registers the sub-parsers and ``COMMANDS`` maps them. All three work on a local
data dir and refuse ``--url`` (exit 2) like every command the HTTP API does not serve.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from memfold.cli.common import catch_up, open_engine, print_json, settings_of


def _when(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time (2026-01-31 or 2026-01-31T12:00+00:00)") \
            from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this module's sub-commands with ``command`` (the CLI's ``add_parser`` with the common options)."""
    e = command("export", help="write the event log to DIR as Parquet (or JSONL) with a manifest of checksums")
    e.add_argument("dir")
    e.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    e.add_argument("--plaintext", action="store_true",
                   help="unseal content (needed to import into another deployment); default: sealed as stored")
    e.add_argument("--tenant", default=None, help="only this tenant's events")
    e.add_argument("--conversation", default=None, help="only this conversation (of --tenant, default 'default')")
    e.add_argument("--since", type=_when, default=None, help="only events that occurred at or after this time")
    e.add_argument("--until", type=_when, default=None, help="only events that occurred before this time")

    i = command("import", help="append the events of an export DIR to this data dir's log, then verify")
    i.add_argument("dir")
    i.add_argument("--no-verify", action="store_true", help="skip folding and verifying after the import")

    s = command("snapshot", help="write every projection table to DIR as hive-partitioned Parquet, swapped in atomically")
    s.add_argument("dir", nargs="?", default=None, help="snapshot root (default: setting snapshot.dir)")
    s.add_argument("--replay", metavar="NAME", help="snapshot the projection of replay NAME instead of the live one")
    s.add_argument("--json", action="store_true")


def cmd_export(args: argparse.Namespace) -> int:
    from memfold.engine.portability import ExportFilter, export_engine

    tenant = args.tenant if args.tenant is not None or args.conversation is None else "default"
    only = ExportFilter(tenant, args.conversation, args.since, args.until)
    with open_engine(args) as engine:
        report = export_engine(engine, args.dir, format=args.format, plaintext=args.plaintext, only=only)
    m = report.manifest
    rate = report.events / report.seconds if report.seconds else float("inf")
    print(f"exported {report.events} events ({'sealed' if m['sealed'] else 'plaintext'}, {m['event_format']}) to "
          f"{report.directory} in {report.seconds:.2f}s ({rate:,.0f} events/s); "
          f"{len(m['destroyed_keys'])} forgotten conversation key(s) listed as destroyed")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from memfold.engine.builders import bind_log
    from memfold.engine.engine import MemoryEngine
    from memfold.engine.portability import import_into, read_manifest

    read_manifest(args.dir)  # checksums first: a damaged export creates nothing in the data dir
    settings = bind_log(settings_of(args))
    with MemoryEngine(settings, role="client") as client:
        report = import_into(client, args.dir)
    rate = report.stored / report.seconds if report.seconds else float("inf")
    print(f"imported {report.stored} events ({report.present} already present) in {report.seconds:.2f}s "
          f"({rate:,.0f} events/s)")
    for warning in report.warnings:
        print(f"memfold: warning: {warning}", file=sys.stderr)
    if args.no_verify:
        return 0
    kafka = settings.log_url().startswith("kafka://")
    started = time.perf_counter()
    with MemoryEngine(settings, role="projector" if kafka else "embedded", start=not kafka) as engine:
        if kafka:
            while engine.runner.run_once() or not engine.runner.caught_up():
                pass
        else:
            engine.wait_idle(timeout=3600)
        diffs = engine.verify()
    if diffs:
        for d in diffs:
            print(d.describe())
        print(f"memfold: the imported log folds to {len(diffs)} table(s) other than a replay", file=sys.stderr)
        return 1
    print(f"verified in {time.perf_counter() - started:.2f}s: the projection folded from the import is exactly "
          "what its log folds to")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from memfold.engine.snapshots import write_snapshot

    if args.replay:
        from memfold.engine.namespaces import Namespace, check_name, replays_dir
        from memfold.projections.store import DuckDBProjectionStore

        settings = settings_of(args)
        space = Namespace.open(replays_dir(settings.data_dir) / check_name(args.replay))
        space.refuse_stale()
        store = DuckDBProjectionStore(space.store_path, read_only=True)
        root = Path(args.dir) if args.dir else settings.snapshot_dir().with_name(f"snapshots-{args.replay}")
        try:
            snap = write_snapshot(store, root, node=settings.snapshot.node, keep_seconds=settings.snapshot.keep_seconds)
        finally:
            store.close()
    else:
        with open_engine(args) as engine:
            catch_up(engine)
            root = Path(args.dir) if args.dir else engine.settings.snapshot_dir()
            snap = write_snapshot(engine.store, root, node=engine.settings.snapshot.node,
                                  keep_seconds=engine.settings.snapshot.keep_seconds)
    if args.json:
        print_json({"path": str(snap.path), "snapshot": snap.number, "rows": snap.rows,
                     "positions": snap.positions, "seconds": snap.seconds, "bytes": snap.bytes})
    else:
        print(f"snapshot {snap.number} at {snap.path} ({sum(snap.rows.values())} rows in {len(snap.rows)} tables, "
              f"{snap.bytes / 1e6:.1f} MB) in {snap.seconds:.2f}s; {root / 'current'} points at it")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "export": cmd_export, "import": cmd_import, "snapshot": cmd_snapshot,
}
