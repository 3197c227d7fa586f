"""The ``memfold`` commands for replay namespaces: replay, replays, drop, promote.

Kept apart from :mod:`memfold.cli.main`; :func:`add_commands` registers
the sub-parsers and ``COMMANDS`` maps them. ``replay`` reads the global
``--policy`` as the replay's read policy (the live data dir is opened with
its own settings).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from memfold.cli.common import open_engine, print_json
from memfold.cli.common import positive_int as parse


def positive_int(text: str) -> int:

    return parse(text)


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this module's sub-commands with ``command`` (the CLI's ``add_parser`` with the common options)."""
    r = command("replay", help="fold the log with other settings into a namespace of its own (resumable)")
    r.add_argument("--name", required=True, help="the namespace: <data-dir>/replays/NAME")
    r.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                   help="a policy setting, e.g. hierarchical.trigger_message_count=30 (repeatable)")
    r.add_argument("--settings", metavar="FILE", help="a memfold.toml whose policy settings the replay uses")
    r.add_argument("--conversations", metavar="C1,C2", help="replay only these conversation ids")
    r.add_argument("--batch-size", type=positive_int, default=5000, help="log events per transaction (default 5000)")
    r.add_argument("--processes", type=positive_int, default=1,
                   help="fold a new namespace in this many processes, each a share of the partitions (default 1)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--json", action="store_true", help="print the report as JSON")

    ls = command("replays", help="list the replay namespaces: settings hash, status, position, lag")
    ls.add_argument("--json", action="store_true")

    d = command("drop", help="delete a replay namespace")
    d.add_argument("name")

    p = command("promote", help="make a replay's settings live (audited SettingsChanged; reads never see a gap)")
    p.add_argument("name")


def cmd_replay(args: argparse.Namespace) -> int:
    from memfold.core.overrides import load_file, parse_assignments

    overrides = parse_assignments(args.assignments)
    if args.settings:
        _taken, ignored = load_file(args.settings)
        if ignored:
            print(f"memfold: {args.settings}: a replay changes policy settings only; ignored: {', '.join(ignored)}",
                  file=sys.stderr)
    conversations = [c.strip() for c in args.conversations.split(",") if c.strip()] if args.conversations else None
    policy, args.policy = args.policy, None  # the replay's policy, not the live data dir's
    with open_engine(args) as engine, _progress(not args.quiet) as progress:
        report = engine.replay(args.name, policy=policy, overrides=overrides, settings_file=args.settings,
                               conversations=conversations, progress=progress, batch_size=args.batch_size,
                               processes=args.processes)
    if args.json:
        print_json({**{k: v for k, v in asdict(report).items() if k != "path"}, "path": str(report.path)})
        return 0
    run, rate = report.run, report.run.folded / report.seconds if report.seconds else 0.0
    print(f"replay {report.name}: {report.status}, settings hash {report.settings_hash}; folded {run.folded} events "
          f"in {report.seconds:.2f}s ({rate:,.0f} events/s); {run.answered} summary request(s) answered: "
          f"{run.cache_hits} cache hit(s), {run.cache_misses} miss(es), {run.model_calls} model call(s); "
          f"lag {report.lag} events")
    return 0


class _Progress:
    """A rich progress bar fed by ``engine.replay(progress=...)``: done/total events, rate and ETA."""

    def __init__(self, enabled: bool):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), disable=not enabled,
                            transient=True)
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        if self.task is None:
            self.task = self.bar.add_task("replay", total=total, rate="")
        task = self.bar.tasks[0]
        speed = task.speed
        self.bar.update(self.task, completed=done, rate=f"{speed:,.0f} events/s" if speed else "")

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)


def _progress(enabled: bool) -> _Progress:
    return _Progress(enabled)


def cmd_replays(args: argparse.Namespace) -> int:

    with open_engine(args) as engine:
        ends = engine.log.end_positions()
        manifests = engine.replays()
    rows = []
    for m in manifests:
        head = {int(p): o for p, o in (m.get("head") or {}).items()}
        rows.append({
            "name": m["name"], "policy": m["settings"].get("policy"), "settings_hash": m["settings_hash"],
            "status": "stale" if m["stale"] else m["status"], "position": sum(head.values()),
            "lag": sum(max(0, end - head.get(p, 0)) for p, end in ends.items()),
            "conversations": m.get("conversations"), "created_at": m["created_at"], "stats": m.get("stats"),
        })
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no replays (create one with `memfold replay --name NAME --set KEY=VALUE`)")
        return 0
    from memfold.cli.render import print_table

    print_table(["name", "policy", "settings", "status", "position", "lag", "created"],
                [(r["name"], r["policy"], r["settings_hash"], r["status"], r["position"], r["lag"], r["created_at"])
                 for r in rows])
    return 0


def cmd_drop(args: argparse.Namespace) -> int:

    with open_engine(args) as engine:
        path = engine.drop_replay(args.name)
    print(f"dropped replay {args.name} ({path})")
    return 0


def cmd_promote(args: argparse.Namespace) -> int:

    with open_engine(args, read_only=False) as engine:
        position = engine.promote(args.name)
        hashes = ", ".join(f"{p}={engine.settings.settings_hash(p)}" for p in engine.settings.active_policies)
    print(f"promoted replay {args.name}: SettingsChanged at {position}; live folds with {hashes} "
          f"(read policy {engine.settings.policy})")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "replay": cmd_replay, "replays": cmd_replays, "drop": cmd_drop, "promote": cmd_promote,
}
