"""The CLI's ``--url`` mode: the same commands against a running ``memfold serve``.

``REMOTE`` lists the commands the HTTP API serves; ``memfold`` refuses
``--url`` for every other one (they work on a local data dir). A remote
command never reads or writes the local data dir.

A service owns its projection, so reading while another process ingests
works: both are requests to it. Output shapes match the local commands'
``--json`` shapes where the service returns the same data. The tenant is
the API key's: ``--tenant`` is never sent, and a ``--tenant`` other than
``default`` that is not the key's tenant is refused (exit 2).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memfold.cli import users as cli_users
from memfold.cli.common import SHOWN_REJECTIONS, UsageError, one_line, print_json, refuse_errors_on_input
from memfold.cli.memory import one_scope, print_views, show_audit
from memfold.cli.render import history_line, print_context, print_summaries, print_table, terminal_safe
from memfold.cli.users import remote_audit_user, remote_forget_user
from memfold.client import (
    ApiError,
    Client,
    ConflictError,
    ConversationGoneError,
    InvalidRequestError,
    NotFoundError,
    RequestTooLargeError,
    ServiceUnavailableError,
)
from memfold.core.errors import ErasureIncompleteError, ValidationError
from memfold.core.shapes import Shaped, messages_from


def run_remote(args: argparse.Namespace) -> int:
    """Run ``args.command`` against the service at ``args.url``; return the exit code."""
    if not args.api_key:
        raise ValidationError("--url needs an API key: pass --api-key or set MEMFOLD_API_KEY", field="api_key")
    with Client(args.url, args.api_key) as client:
        _check_tenant(client, args)
        return REMOTE[args.command](client, args)


def _usage(message: str) -> Exception:

    return UsageError(message)


def _check_tenant(client, args: argparse.Namespace) -> None:
    """Refuse a ``--tenant`` that is not the API key's: the service answers for the key's tenant only."""
    tenant = getattr(args, "tenant", None)
    if tenant is None or tenant == "default":
        return
    own = client.me().tenant_id
    if tenant != own:
        raise _usage(f"--tenant {tenant}: the API key is tenant {own!r}'s, and --url acts as the key's tenant; "
                     f"use a key of tenant {tenant!r}")


def _say(line: str) -> None:
    print(terminal_safe(line))


def _append(client, args) -> int:
    message = {"role": args.role, "content": args.content, "model_variant": args.model_variant,
               "importance": args.importance, "tool_call_id": args.tool_call_id}
    done = client.append(args.conversation, [message], wait=not args.no_wait, user_id=args.user)[0]
    if args.json:
        print_json({"event_id": done.event_id, "partition": done.partition, "offset": done.offset})
    else:
        _say(f"appended to {args.conversation} at {done.partition}:{done.offset} via {client.url}")
    return 0


def _context(client, args) -> int:
    query = getattr(args, "query", None)
    if getattr(args, "user", None) is not None:
        if args.json and getattr(args, "format", "openai") != "compact":
            raise _usage("context --user with --url answers the compact form: add --format compact")
        context = client.context(args.conversation, budget=args.budget, query=query, policy=args.policy,
                                 user_id=args.user)
        if args.json:
            print_json({"format": "compact", "messages": [m.model_dump(mode="json", exclude_none=True)
                                                           for m in context.messages]})
            return 0
        print_context(context.messages, title=f"context for {args.conversation} of {args.user} ({client.url})",
                      budget=args.budget)
        return 0
    if args.json:
        print_json(_context_document(client, args, query))
        return 0
    context = client.context(args.conversation, budget=args.budget, query=query, policy=args.policy, as_of=args.as_of)
    print_context(context.messages, title=f"context for {args.conversation} ({client.url})", budget=args.budget)
    return 0


def _context_document(client, args, query: str | None) -> dict[str, Any]:
    """Return what the local ``context --json`` prints: ``Shaped.as_dict()`` of the context in ``--format``.

    ``compact`` is the compact read (:meth:`Client.context`), every other
    format the service's shaped read (:meth:`Client.prompt`), so messages and
    annotations are the service's own, not converted here.
    """
    fmt = getattr(args, "format", "openai")
    if fmt == "compact":
        context = client.context(args.conversation, budget=args.budget, query=query, policy=args.policy,
                                 as_of=args.as_of)
        return Shaped("compact", [m.model_dump(mode="json", exclude_none=True) for m in context.messages], None,
                      []).as_dict()
    prompt = client.prompt(args.conversation, format=fmt, budget=args.budget, query=query, policy=args.policy,
                           as_of=args.as_of)
    return Shaped(prompt.format, prompt.messages, prompt.system, prompt.memfold, prompt.system_memfold or []).as_dict()


HISTORY_PAGE = 10_000


def _all_messages(client, conversation: str) -> list:
    """Return every stored message of ``conversation``, page by page (a page is at most ``HISTORY_PAGE``)."""
    out: list = []
    while True:
        page = client.messages(conversation, start=len(out), limit=HISTORY_PAGE)
        out += page
        if len(page) < HISTORY_PAGE:
            return out


def _history(client, args) -> int:
    messages = _all_messages(client, args.conversation)
    if args.json:
        print_json([m.model_dump(mode="json") for m in messages])
    else:
        for m in messages:
            print(history_line(m.index, m.role, m.content))
    return 0


def _summaries(client, args) -> int:
    rows = client.summaries(args.conversation, policy=args.policy)
    if args.json:
        print_json(rows)
    else:
        print_summaries(rows)
    return 0


def _sql(client, args) -> int:
    if args.views:  # the documented views are part of this memfold, not of the data

        return print_views(args)
    if args.replay:
        raise _usage("sql --replay works on a local data dir; the HTTP API queries the live projection only")
    if args.snapshot:
        raise _usage("sql --snapshot reads a local snapshot directory; run it without --url")
    if not args.query:
        raise ValidationError("give a SQL query, or --views to list the documented views", field="query")
    result = client.sql(args.query)
    if args.json:
        print_json([dict(zip(result.columns, r)) for r in result.rows])
    elif args.csv:
        w = csv.writer(sys.stdout)
        w.writerow(result.columns)
        w.writerows(result.rows)
    else:
        print_table(result.columns, result.rows)
    return 0


def _forget(client, args) -> int:
    if one_scope(args) == "user":
        return remote_forget_user(client, args)
    if not args.conversation.strip():
        raise ValidationError("conversation is required and must not be blank", field="conversation")
    try:
        done = client.forget(args.conversation, reason=args.reason)
    except ApiError as exc:
        if exc.type == "ErasureIncompleteError":
            raise ErasureIncompleteError(str(exc)) from exc
        raise
    at = f" at {done['partition']}:{done['offset']}" if isinstance(done, dict) and "offset" in done else ""
    _say(f"forgot {args.conversation} via {client.url} (ConversationDeleted{at}; data key destroyed)")
    return 0


def _reopen(client, args) -> int:
    done = client.reopen(args.conversation)
    at = f" at {done['partition']}:{done['offset']}" if isinstance(done, dict) and "offset" in done else ""
    _say(f"reopened {args.conversation}{at} via {client.url}; its forgotten history stays erased")
    return 0


def _audit(client, args) -> int:
    if one_scope(args) == "user":
        return remote_audit_user(client, args)
    return show_audit(client.audit(args.conversation), args)


def _verify(client, args) -> int:
    found = client.verify(args.conversation)
    scope = args.conversation or "every conversation"
    if found["identical"]:
        _say(f"verified via {client.url}: the live projection of {scope} is exactly what the log folds to")
        return 0
    for d in found["differences"]:
        _say(f"{d['table']}: {d['only_live']} row(s) only live, {d['only_replay']} only in the replay")
    print(f"memfold: {len(found['differences'])} table(s) differ from a replay of the log ({scope})", file=sys.stderr)
    return 1


def _replay(client, args) -> int:
    from memfold.core.overrides import load_file, parse_assignments

    overrides = parse_assignments(args.assignments)
    if args.settings:
        taken, ignored = load_file(args.settings)
        overrides = {**taken, **overrides}
        if ignored:
            print(f"memfold: {args.settings}: a replay changes policy settings only; ignored: {', '.join(ignored)}",
                  file=sys.stderr)
    conversations = [c.strip() for c in args.conversations.split(",") if c.strip()] if args.conversations else None
    client.replay(args.name, policy=args.policy, overrides=overrides or None, conversations=conversations)
    status = client.wait_replay(args.name)
    job = status.get("job") or {}
    if args.json:
        print_json(status)
    else:
        _say(f"replay {args.name} via {client.url}: {job.get('state', status.get('status'))}, "
             f"settings hash {status.get('settings_hash')}")
    if job.get("state") == "failed":
        print(f"memfold: replay {args.name} failed: {job.get('error')}", file=sys.stderr)
        return 1
    return 0


def _replays(client, args) -> int:
    rows = client.replays()
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        _say(f"no replays at {client.url}")
        return 0
    print_table(["name", "settings", "status", "job", "created"],
                [(r["name"], r.get("settings_hash"), r.get("status"), (r.get("job") or {}).get("state"),
                  r.get("created_at")) for r in rows])
    return 0


def _drop(client, args) -> int:
    client.drop_replay(args.name)
    _say(f"dropped replay {args.name} via {client.url}")
    return 0


def _promote(client, args) -> int:
    done = client.promote(args.name)
    _say(f"promoted replay {args.name} via {client.url}: SettingsChanged at {done['partition']}:{done['offset']}; "
         f"read policy {done.get('policy')}")
    return 0


def _diff(client, args) -> int:
    """Print the service's diff as JSON (``--json`` or not: the table is drawn from the local result only)."""
    questions = None
    if args.questions:
        from memfold.engine.replay_diff import load_questions

        questions = [{"conversation_id": q.conversation_id, "question": q.question, "answer": q.answer}
                     for q in load_questions(args.questions)]
    print_json(client.diff(args.name, conversation_id=args.conversation, budget=args.budget, questions=questions))
    return 0


class _RemoteIngest:
    """One ``memfold --url ingest`` run: the lines of a JSONL file sent per conversation in batches.

    A line is converted from ``--format`` as embedded ingest converts it
    (:func:`~memfold.core.shapes.messages_from`; an ``anthropic`` line may
    hold several messages) and sent in the canonical form. A message's ``id``
    is its line's ``event_id`` when it gives one, else
    :func:`~memfold.cli.ingest.line_key` of (source, bytes, occurrence),
    the k-th (k >= 1) message of a line that holds several the same plus
    ``#k``: the keys embedded ingest derives its event ids from, so a re-run
    (or a run after an embedded one) stores nothing twice. Ids the
    conversation already holds are counted as duplicates and not sent again;
    that is also what ``--resume`` does here (every run skips what is
    stored). A line's messages are sent in one request, so they are stored
    or rejected together. With ``--strict`` lines are sent in file order, so
    nothing after the first bad line (bad here or refused by the service) is
    written.
    """

    def __init__(self, client, args: argparse.Namespace, tenant: str):
        self.client, self.args, self.tenant = client, args, tenant
        self.format = getattr(args, "format", "openai")
        self.accepted = self.duplicates = self.conflicts = 0
        self.rejected: list[tuple[int, str, str | None]] = []  # (line, reason, field)
        self.pending: dict[str, list[tuple[int, list[dict]]]] = {}  # conversation -> [(line, its messages)]
        self.queued = 0  # messages in ``pending``
        self.known: dict[str, set[str]] = {}
        self.newest: dict[int, tuple[int, str, dict]] = {}  # partition -> (offset, conversation, message)
        self.stop_line: int | None = None
        self.stopped: str | None = None
        self.failed = False
        self.batch = min(args.batch_size, 1000)

    def reject(self, line_no: int, reason: str, field: str | None = None) -> None:
        self.rejected.append((line_no, reason, field))
        if self.args.strict and self.stop_line is None:
            self.stop_line = line_no
            self.stopped = f"stopped at line {line_no} (--strict); nothing after it was written"

    def held(self, conversation: str) -> set[str]:
        """Return the message ids ``conversation`` already holds (read once per run)."""
        if conversation not in self.known:
            try:
                self.known[conversation] = {m.id for m in _all_messages(self.client, conversation) if m.id}
            except NotFoundError:
                self.known[conversation] = set()
        return self.known[conversation]

    def messages(self, row: dict, key: str) -> list[dict]:
        """Return the message(s) of one line (``row``, memfold's keys taken out), each with the ``id`` to send.

        Raises :class:`ValidationError` for a line ``--format`` cannot convert.
        """
        # openai lines are sent as they are: the service makes them canonical (the flat alias included)
        out = [row] if self.format == "openai" else messages_from(self.format, [row])
        for k, m in enumerate(out):
            given = m.pop("event_id", None)  # messages_from numbered the k-th already: "<event_id>#<k>"
            if "id" in m:
                given = m["id"] if k == 0 else f"{m['id']}#{k}"
            m["id"] = given if given is not None else key if k == 0 else f"{key}#{k}"
        return out

    def parse(self, line_no: int, text: bytes, key: str) -> None:
        """Check one line and queue its message(s) for its conversation, or reject it."""
        try:
            row = json.loads(text)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            return self.reject(line_no, f"not valid JSON ({exc})")
        if not isinstance(row, dict):
            return self.reject(line_no, "not a message object (a JSON object per line)")
        conversation = row.pop("conversation_id", None)
        if not isinstance(conversation, str) or not conversation.strip():
            return self.reject(line_no, "conversation_id is required (a non-empty string)", "conversation_id")
        tenant = row.pop("tenant_id", None)
        if tenant is not None and tenant != self.tenant:
            return self.reject(line_no, f"tenant_id {tenant!r} is not the API key's tenant {self.tenant!r}; ingest "
                                        f"it with a key of tenant {tenant!r}", "tenant_id")
        if "ts" in row:
            row.setdefault("occurred_at", row.pop("ts"))
        try:
            messages = self.messages(row, key)
        except ValidationError as exc:
            return self.reject(line_no, str(exc).removeprefix(f"line {exc.line}: "), exc.field)
        held = self.held(conversation)
        fresh = [m for m in messages if m["id"] not in held]
        self.duplicates += len(messages) - len(fresh)
        if not fresh:
            return None
        held.update(m["id"] for m in fresh)
        batch = self.pending.setdefault(conversation, [])
        batch.append((line_no, fresh))
        self.queued += len(fresh)
        if self.args.strict and self.queued >= self.batch:
            self.flush_in_order()
        elif sum(len(ms) for _, ms in batch) >= self.batch:
            sent = self.pending.pop(conversation)
            self.queued -= sum(len(ms) for _, ms in sent)
            self.send(conversation, sent)
        return None

    def flush_in_order(self) -> None:
        """Send every queued line in file order: each run of lines of one conversation as one batch."""
        lines = sorted(((n, c, ms) for c, batch in self.pending.items() for n, ms in batch), key=lambda x: x[0])
        self.pending.clear()
        self.queued = 0
        run: list[tuple[int, list[dict]]] = []
        for i, (n, conversation, messages) in enumerate(lines):
            run.append((n, messages))
            if i + 1 == len(lines) or lines[i + 1][1] != conversation:
                self.send(conversation, run)
                run = []

    def send(self, conversation: str, batch: list[tuple[int, list[dict]]]) -> None:
        """Append ``batch`` (lines, each with its messages); when the service refuses it, halve it until the refused lines are alone."""
        if self.stop_line is not None:
            batch = [(n, ms) for n, ms in batch if n < self.stop_line]
        if not batch:
            return
        messages = [m for _, ms in batch for m in ms]
        try:
            done = self.client.append(conversation, messages, wait=False)
        except ConversationGoneError:
            for n, _ in batch:
                self.reject(n, f"conversation {conversation!r} was forgotten; `memfold reopen {conversation}` "
                               "starts it again", "conversation_id")
            return
        except (InvalidRequestError, RequestTooLargeError, ConflictError) as exc:
            if len(batch) == 1:
                self.conflicts += isinstance(exc, ConflictError)
                return self.reject(batch[0][0], str(exc), getattr(exc, "field", None))
            half = len(batch) // 2
            self.send(conversation, batch[:half])
            self.send(conversation, batch[half:])
            return
        self.accepted += len(messages)
        last = done[-1]
        if last.offset >= self.newest.get(last.partition, (-1,))[0]:
            self.newest[last.partition] = (last.offset, conversation, messages[-1])

    def wait(self) -> None:
        """Return once a read sees every line sent: the newest message of each partition, sent again with a wait.

        The service answers a message id it holds with the stored event and
        waits until its projection reached it; nothing is stored twice.
        """
        for _, conversation, message in self.newest.values():
            self.client.append(conversation, [message], wait=True)

    def run(self, path: Path) -> None:
        """Read ``path`` and send every line; stop at the first bad line with ``--strict``."""
        from memfold.cli.ingest import line_key

        source = self.args.source or path.name
        seen: dict[bytes, int] = {}
        line_no = 0
        try:
            with path.open("rb") as fh:
                for line_no, raw in enumerate(fh, start=1):
                    text = raw.strip()
                    if not text:
                        continue
                    seen[text] = seen.get(text, 0) + 1
                    self.parse(line_no, text, line_key(source, text, seen[text]))
                    if self.stop_line is not None:
                        break
            self.flush_in_order()
            if not self.args.no_wait:
                self.wait()
        except ServiceUnavailableError as exc:
            self.failed = True
            self.stopped = (f"the service failed at or before line {line_no}: {exc}; lines sent before are "
                            "stored: run the same command again (stored lines count as duplicates)")


def _ingest(client, args) -> int:
    """Ingest a JSONL file through the service; the report and exit codes are a local ingest's."""
    from memfold.cli.ingest import check_readable

    path = Path(args.file)
    check_readable(path)
    refuse_errors_on_input(args.errors, args.file)
    started = time.perf_counter()
    run = _RemoteIngest(client, args, client.me().tenant_id)
    run.run(path)
    seconds = time.perf_counter() - started
    if args.errors:
        with open(args.errors, "w", encoding="utf-8") as out:
            for line_no, reason, field in run.rejected:
                out.write(json.dumps({"line": line_no, "field": field, "error": reason}, ensure_ascii=False) + "\n")
    for line_no, reason, _ in run.rejected[:SHOWN_REJECTIONS]:
        print(f"memfold: line {line_no} rejected: {terminal_safe(one_line(reason))}", file=sys.stderr)
    hidden = len(run.rejected) - SHOWN_REJECTIONS
    if hidden > 0:
        where = f"all are in {args.errors}" if args.errors else "--errors FILE writes all as JSONL"
        print(f"memfold: ... and {hidden} more rejected line(s) ({where})", file=sys.stderr)
    conflicts = f" ({run.conflicts} conflicting id)" if run.conflicts else ""
    waited = "" if not args.no_wait else "; not waited for: a read may not see them yet (drop --no-wait to wait)"
    _say(f"ingested {run.accepted} messages, duplicates {run.duplicates}, rejected {len(run.rejected)}{conflicts} "
         f"in {seconds:.2f}s via {client.url}{waited}")
    if run.stopped:
        print(f"memfold: {terminal_safe(one_line(run.stopped))}", file=sys.stderr)
    if run.failed:
        return 1
    return 2 if run.rejected else 0


REMOTE: dict[str, Callable[[Any, argparse.Namespace], int]] = {
    "append": _append, "ingest": _ingest, "context": _context, "history": _history, "summaries": _summaries,
    "sql": _sql, "forget": _forget, "reopen": _reopen, "audit": _audit, "verify": _verify, "replay": _replay,
    "replays": _replays, "drop": _drop, "promote": _promote, "diff": _diff, **cli_users.REMOTE,
}
"""The commands ``--url`` runs against the service; every other command refuses ``--url``."""
