"""The ``memfold`` commands about a conversation's memory over time: forget, reopen (and audit, time travel).

Kept apart from :mod:`memfold.cli.main` so the general commands stay small;
:func:`add_commands` registers the sub-parsers and ``COMMANDS`` maps them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memfold.cli.common import UsageError, catch_up, open_engine, print_json
from memfold.cli.users import audit_user, forget_user
from memfold.core.errors import ValidationError


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this module's sub-commands with ``command`` (the CLI's ``add_parser`` with the common options)."""
    f = command("forget", help="erase a conversation (or every conversation of --user): delete its rows, destroy "
                               "its data key (crypto-shredding)")
    f.add_argument("conversation", nargs="?")
    f.add_argument("--user", default=None, help="forget every conversation of this user and the user memory")
    f.add_argument("--tenant", default="default")
    f.add_argument("--reason", default=None, help="recorded on the ConversationDeleted event")

    r = command("reopen", help="start a forgotten conversation again (new messages get a new data key)")
    r.add_argument("conversation")
    r.add_argument("--tenant", default="default")

    v = command("verify", help="fold the log again beside the live projection and prove them identical")
    v.add_argument("conversation", nargs="?", help="compare only this conversation's rows")
    v.add_argument("--tenant", default="default")

    a = command("audit", help="how a conversation's memory evolved: summary versions, facts, settings, erasure")
    a.add_argument("conversation", nargs="?")
    a.add_argument("--user", default=None, help="how this user's memory evolved: which conversation taught each fact")
    a.add_argument("--tenant", default="default")
    a.add_argument("--json", action="store_true", help="print the whole audit as JSON")
    a.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with a timeline")


def one_scope(args: argparse.Namespace) -> str:
    """Return "user" or "conversation": what ``forget`` / ``audit`` name; exactly one of them (else exit 2)."""
    if (args.conversation is None) == (args.user is None):
        raise UsageError(f"{args.command} takes a CONVERSATION or --user USER (one of them)")
    return "user" if args.user is not None else "conversation"


def cmd_forget(args: argparse.Namespace) -> int:
    if one_scope(args) == "user":
        return forget_user(args)
    if not args.conversation.strip():
        raise ValidationError("conversation is required and must not be blank", field="conversation")
    from memfold.cli.render import terminal_safe

    with open_engine(args, read_only=False) as engine:
        position = engine.forget(args.conversation, tenant_id=args.tenant, reason=args.reason)
    print(terminal_safe(f"forgot {args.tenant}/{args.conversation} (ConversationDeleted at {position}; "
                        "data key destroyed)"))
    return 0


def cmd_reopen(args: argparse.Namespace) -> int:
    """Start a forgotten conversation again: appends to it are accepted from now on, under a new data key."""
    from memfold.cli.render import terminal_safe

    with open_engine(args, read_only=False) as engine:
        position = engine.reopen(args.conversation, tenant_id=args.tenant)
    at = f" at {position}" if position is not None else ""
    print(terminal_safe(f"reopened {args.tenant}/{args.conversation}{at}; its forgotten history stays erased"))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    if one_scope(args) == "user":
        return audit_user(args)
    with open_engine(args) as engine:
        catch_up(engine)
        report = engine.audit(args.conversation, tenant_id=args.tenant)
    return show_audit(report, args)


def show_audit(report: dict[str, Any], args: argparse.Namespace) -> int:
    """Write the audit page (``--html``), then print the report as JSON or as lines; return 0. Local and remote alike."""
    from memfold.cli.render import terminal_safe

    if args.html:
        from memfold.cli.audit_page import render

        Path(args.html).write_text(render(report), encoding="utf-8")
    if args.json:
        print_json(report)
    else:
        _print_audit(report)
        if args.html:
            sys.stdout.write(terminal_safe(f"HTML page written to {args.html}") + "\n")
    return 0


def _print_audit(report: dict[str, Any]) -> None:
    from memfold.cli.render import print_table, terminal_safe

    def print(line: str) -> None:  # noqa: A001 - every line below shows stored values
        sys.stdout.write(terminal_safe(line) + "\n")

    c = report["conversation"]
    print(f"{c['tenant_id']}/{c['conversation_id']}: {c['status']}, {c['message_count']} messages, "
          f"{c['token_count']} tokens, {c['first_at'] or '-'} .. {c['last_at'] or '-'}")
    if report["erasure"]:
        e = report["erasure"]
        if e.get("pending"):
            print("erasure NOT finished: a forget began and did not remove every copy; run memfold forget again")
        if e["seq"] is not None:
            print(f"erased at {e['occurred_at']} (seq {e['seq']}, position {e['position']})"
                  + (f": {e['reason']}" if e["reason"] else "") + "; its content in the log is sealed with a destroyed key")
    print("events: " + ", ".join(f"{t} {n}" for t, n in report["events"].items()))
    print_table(
        ["policy", "ver", "status", "covers", "base", "settings", "model", "tok in", "tok out", "ms", "cached", "resolved at"],
        [(s["policy"], s["version"], s["status"], f"{s['covers'][0]}-{s['covers'][1]}", s["base_version"],
          s["settings_hash"], s["model"], s["tokens_in"], s["tokens_out"], s["latency_ms"], s["cached"],
          s["resolved_position"]) for s in report["summaries"]],
        empty="summary versions: none yet",
    )
    print_table(
        ["policy", "key", "value", "stated at", "learned", "retired", "superseded by"],
        [(f["policy"], f["key"], f["value"], f["stated_at"], f["learned_version"], f["retired_version"],
          f["superseded_by"]) for f in report["facts"]],
        empty="facts: none yet",
    )
    changes = report["settings"]["changes"]
    print("settings in force: " + ", ".join(f"{p}={h}" for p, h in report["settings"]["in_force"].items())
          + (f"; {len(changes)} change(s) in the log" if changes else ""))


def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the live projection equals a replay with the live settings, 1 (each difference printed) if not."""

    with open_engine(args) as engine:
        diffs = engine.verify(args.conversation, tenant_id=args.tenant)
    scope = f"{args.tenant}/{args.conversation}" if args.conversation else "every conversation"
    if not diffs:
        print(f"verified: the live projection of {scope} is exactly what the log folds to")
        return 0
    from memfold.cli.render import terminal_safe

    for d in diffs:
        print(terminal_safe(d.describe()))
    print(f"memfold: {len(diffs)} table(s) differ from a replay of the log ({scope})", file=sys.stderr)
    return 1


def print_views(args: argparse.Namespace) -> int:
    """Print the documented SQL views (``memfold sql --views``): name, description, definition with --json."""
    from memfold.projections.views import VIEWS

    if getattr(args, "json", False):
        print_json([{"name": v.name, "description": v.doc, "sql": " ".join(v.sql.split())} for v in VIEWS])
        return 0
    for v in VIEWS:
        print(f"{v.name}\n    {v.doc}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "forget": cmd_forget, "reopen": cmd_reopen, "audit": cmd_audit, "verify": cmd_verify,
}
