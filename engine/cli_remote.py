"""The CLI's ``--url`` mode: the same commands against a running ``memfold serve``.

A service owns its projection, so reading while another process ingests
works: both are requests to it. Output shapes match the local commands'
``--json`` shapes where the service returns the same data. The tenant is
the API key's (``--tenant`` is not sent: the service never takes it from a
request).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from .errors import ValidationError


def run_remote(args: argparse.Namespace) -> int:
    """Run ``args.command`` against the service at ``args.url``; return the exit code."""
    from memfold.client import Client

    if not args.api_key:
        raise ValidationError("--url needs an API key: pass --api-key or set MEMFOLD_API_KEY", field="api_key")
    with Client(args.url, args.api_key) as client:
        return _REMOTE[args.command](client, args)


def _print_json(value: Any) -> None:
    from .cli import _print_json as print_json

    print_json(value)


def _append(client, args) -> int:
    message = {"role": args.role, "content": args.content, "model_variant": args.model_variant,
               "importance": args.importance, "tool_call_id": args.tool_call_id}
    done = client.append(args.conversation, [message], wait=not args.no_wait)[0]
    if args.json:
        _print_json({"event_id": done.event_id, "partition": done.partition, "offset": done.offset})
    else:
        print(f"appended to {args.conversation} at {done.partition}:{done.offset} via {client.url}")
    return 0


def _ingest(client, args) -> int:
    """Send the file's lines in batches per conversation; a bad line is reported and skipped, like a local ingest.

    Every line gets a message id (its ``event_id`` or ``id`` key, else one
    the client makes), so a batch retried after a lost answer is stored once.
    """
    from memfold.client import InvalidRequestError, RequestTooLargeError

    started = time.perf_counter()
    accepted, rejected = 0, []
    batches: dict[str, list[tuple[int, dict]]] = {}

    def send(conversation: str, batch: list[tuple[int, dict]]) -> None:
        """Append ``batch``; when the service refuses it, halve it until the refused lines are alone."""
        nonlocal accepted
        try:
            client.append(conversation, [m for _, m in batch], wait=False)
            accepted += len(batch)
        except (InvalidRequestError, RequestTooLargeError) as exc:
            if len(batch) == 1:
                rejected.append((batch[0][0], str(exc)))
                return
            half = len(batch) // 2
            send(conversation, batch[:half])
            send(conversation, batch[half:])

    def flush(conversation: str) -> None:
        batch = batches.pop(conversation, [])
        if batch:
            send(conversation, batch)

    with Path(args.file).open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                conversation = row.pop("conversation_id")
                row.pop("tenant_id", None)
                if "ts" in row:
                    row.setdefault("occurred_at", row.pop("ts"))
                if "event_id" in row:
                    row.setdefault("id", row.pop("event_id"))
            except (ValueError, KeyError, AttributeError, TypeError) as exc:
                rejected.append((line_no, f"not a message object with a conversation_id: {exc}"))
                continue
            batch = batches.setdefault(conversation, [])
            batch.append((line_no, row))
            if len(batch) >= min(args.batch_size, 1000):
                flush(conversation)
    for conversation in list(batches):
        flush(conversation)
    seconds = time.perf_counter() - started
    for line_no, reason in rejected:
        print(f"memfold: line {line_no} rejected: {reason}", file=sys.stderr)
    print(f"ingested {accepted} messages in {seconds:.2f}s via {client.url}; {len(rejected)} line(s) rejected")
    return 0 if not rejected else 2


def _context(client, args) -> int:
    context = client.context(args.conversation, budget=args.budget, query=getattr(args, "query", None), policy=args.policy)
    if args.json:  # the local shape: role, content, kind, tokens (+ index and tool fields when set)
        _print_json([m.model_dump(exclude_none=True) for m in context.messages])
        return 0
    from memfold.engine.ports import ContextMessage

    from .render import print_context

    messages = [ContextMessage(role=m.role, content=m.content, kind=m.kind, tokens=m.tokens) for m in context.messages]
    print_context(messages, title=f"context for {args.conversation} ({client.url})", budget=args.budget)
    return 0


def _history(client, args) -> int:
    messages = client.messages(args.conversation, limit=10_000)
    if args.json:
        _print_json([m.model_dump(mode="json") for m in messages])
    else:
        for m in messages:
            print(f"[{m.index:>4}] {m.role:<9} {m.content}")
    return 0


def _summaries(client, args) -> int:
    rows = client.summaries(args.conversation, policy=args.policy)
    if args.json:
        _print_json(rows)
    else:
        from .render import print_summaries

        print_summaries(rows)
    return 0


def _sql(client, args) -> int:
    result = client.sql(args.query)
    if args.json:
        _print_json([dict(zip(result.columns, r)) for r in result.rows])
    elif args.csv:
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(result.columns)
        w.writerows(result.rows)
    else:
        from .render import print_table

        print_table(result.columns, result.rows)
    return 0


_REMOTE = {"append": _append, "ingest": _ingest, "context": _context, "history": _history,
           "summaries": _summaries, "sql": _sql}
