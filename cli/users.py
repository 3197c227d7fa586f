"""The ``memfold`` commands about users: ``user show``, ``search`` (``--user``), and ``--user`` on forget and audit.

Each runs on a local data dir or, with ``--url``, against a running service
(:data:`REMOTE`). :func:`add_commands` registers the new sub-commands;
``forget`` and ``audit`` (:mod:`memfold.cli.memory`) call
:func:`forget_user` / :func:`audit_user` when given ``--user``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from memfold.cli.common import UsageError, catch_up, open_engine, parse_as_of, print_json
from memfold.core.errors import ValidationError


def add_commands(command: Callable[..., argparse.ArgumentParser], positive_int: Callable[[str], int]) -> None:
    """Add ``user`` (with its ``show`` action) and ``search`` with ``command`` (the CLI's add_parser)."""
    u = command("user", help="a user's memory across conversations")
    usub = u.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    show = usub.add_parser("show", help="the user's current facts (and where each came from), summary, conversations")
    show.add_argument("user")
    show.add_argument("--tenant", default="default")
    show.add_argument("--as-of", default=None, metavar="TIME", help="the facts as they stood at an ISO-8601 time with zone")
    show.add_argument("--json", action="store_true")

    s = command("search", help="search messages: every conversation of a user (--user) or of the tenant")
    s.add_argument("query")
    s.add_argument("--user", default=None, help="search this user's conversations only")
    s.add_argument("--tenant", default="default")
    s.add_argument("--limit", type=positive_int, default=10)
    s.add_argument("--json", action="store_true")


def _say(line: str) -> None:
    from memfold.cli.render import terminal_safe

    sys.stdout.write(terminal_safe(line) + "\n")


def _as_of(text: str | None):
    if text is None:
        return None
    when = parse_as_of(text)
    if not hasattr(when, "tzinfo"):
        raise ValidationError("--as-of of a user is an ISO-8601 time with a timezone, not a log position",
                              field="as_of")
    return when


# --------------------------------------------------------------------------- local


def cmd_user(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        catch_up(engine)
        memory = engine.user_memory(args.user, tenant_id=args.tenant, as_of=_as_of(args.as_of))
    return show_memory(memory, args)


def cmd_search(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        catch_up(engine)
        if args.user is not None:
            hits = engine.search_user(args.user, args.query, limit=args.limit, tenant_id=args.tenant)
        else:
            hits = tenant_search(engine, args.query, args.tenant, args.limit)
    return show_hits(hits, args)


def tenant_search(engine: Any, query: str, tenant_id: str, limit: int) -> list[dict[str, Any]]:
    """Return the tenant's messages best matching ``query``: every live conversation searched, a page of ids at a time."""
    from memfold.engine.users import search_conversations

    after, hits = "", []
    while True:
        _, rows = engine.store.query(
            "SELECT conversation_id FROM conversations WHERE tenant_id = ? AND NOT coalesce(deleted, false) "
            "AND conversation_id > ? ORDER BY conversation_id LIMIT 500", [tenant_id, after])
        if not rows:
            break
        hits = sorted(hits + search_conversations(engine, [r[0] for r in rows], query, tenant_id, limit),
                      key=lambda h: -h["score"])[:limit]
        after = rows[-1][0]
    return hits


def forget_user(args: argparse.Namespace) -> int:
    with open_engine(args, read_only=False) as engine:
        forgotten = engine.forget_user(args.user, tenant_id=args.tenant, reason=args.reason)
    _say(f"forgot user {args.tenant}/{args.user}: {len(forgotten)} conversation(s) ({', '.join(forgotten)}); "
         "their data keys destroyed, the user memory deleted")
    return 0


def audit_user(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        catch_up(engine)
        report = engine.audit_user(args.user, tenant_id=args.tenant)
    return show_user_audit(report, args)


# --------------------------------------------------------------------------- output (local and remote alike)


def show_memory(memory: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        print_json(memory)
        return 0
    when = f" as of {memory['as_of']}" if memory.get("as_of") else ""
    _say(f"user {memory['tenant_id']}/{memory['user_id']}{when}: {len(memory['conversations'])} conversation(s)")
    for f in memory["facts"]:
        _say(f"  {f['key']}: {f['value']}  (conversation {f['conversation_id']}, message {f['stated_in']}, "
             f"{f['stated_at'] or 'undated'})")
    mine = memory.get("user_summary")
    if mine and (mine.get("text") or "").strip():
        _say(f"  user summary ({mine['summary_id']}, over {len(mine['covers'])} conversation(s), "
             f"{mine['produced_at']}):")
        for line in str(mine["text"]).splitlines():
            if line.strip():
                _say(f"    {line.strip()}")
    for n in memory["summary"]:
        _say(f"  [{n['conversation_id']}] {' '.join(str(n['text']).split())[:200]}")
    return 0


def show_hits(hits: list[dict[str, Any]], args: argparse.Namespace) -> int:
    if args.json:
        print_json(hits)
        return 0
    for h in hits:
        _say(f"{h['score']:.3f}  {h['conversation_id']}#{h['index']} {h['role']}: {' '.join(h['content'].split())[:160]}")
    return 0


def show_user_audit(report: dict[str, Any], args: argparse.Namespace) -> int:
    if getattr(args, "html", None):
        raise UsageError("--html is the audit page of a conversation; with --user use --json")
    if args.json:
        print_json(report)
        return 0
    _say(f"user {report['tenant_id']}/{report['user_id']}: conversations "
         + ", ".join(c["conversation_id"] for c in report["conversations"]))
    for f in report["facts"]:
        change = (f" -> {f['superseded_by_value']} (conversation {f['superseded_in']})"
                  if f["superseded_by"] else " (current)" if f["current"] else "")
        _say(f"  [{f['policy']}] {f['key']}: {f['value']} taught by conversation {f['conversation_id']} "
             f"at {f['stated_at'] or 'an unknown time'}{change}")
    return 0


# --------------------------------------------------------------------------- remote (--url)


def _remote_user(client, args) -> int:
    return show_memory(client.user_memory(args.user, as_of=args.as_of), args)


def _remote_search(client, args) -> int:
    if args.user is not None:
        hits = client.search_user(args.user, args.query, limit=args.limit)
    else:
        hits = [h.model_dump(mode="json") for h in client.search_all(args.query, limit=args.limit)]
    return show_hits(hits, args)


def remote_forget_user(client, args) -> int:
    done = client.forget_user(args.user, reason=args.reason)
    _say(f"forgot user {args.user} via {client.url}: {len(done['conversations'])} conversation(s) "
         f"({', '.join(done['conversations'])}); their data keys destroyed, the user memory deleted")
    return 0


def remote_audit_user(client, args) -> int:
    return show_user_audit(client.audit_user(args.user), args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"user": cmd_user, "search": cmd_search}
REMOTE: dict[str, Callable[[Any, argparse.Namespace], int]] = {"user": _remote_user, "search": _remote_search}
