"""The audit trail of one conversation's memory, read from the projection (plain SQL, no model call).

:func:`audit` returns a JSON-able dict:

- ``conversation``: ids, ``status`` (``active``, ``erased``, ``erasure
  pending`` or ``unknown``; ``active`` again after a reopen), message and
  token counts, first and last event time;
- ``erasure``: the ``ConversationDeleted`` record in force (the first after
  the last reopen: seq, time, reason, log position) and ``pending``: True while a ``forget`` that began has not
  removed every copy (run it again), else None;
- ``events``: how many events of each type the log holds for it;
- ``messages``: index, seq, role, time, tokens and a short preview;
- ``summaries``: every summary request and outcome of every policy with its
  lineage (``version`` within its chain, ``base_summary_id`` and
  ``base_version``, covered and input message ranges, status, policy,
  settings hash, prompt hash, summarizer, model, tokens, latency, cache hit,
  log seq and position of the request and of the outcome);
- ``facts``: every fact any summary carried, bi-temporal: ``stated_at`` /
  ``stated_in`` (when the conversation said it: the first covered message
  that contains the value, unless the projection recorded it), and
  ``learned_seq`` / ``learned_version`` (when memfold learned it: the log
  seq and summary version that introduced it); ``retired_version`` when a
  later summary dropped it and ``superseded_by`` (the fact that replaced it:
  same key, new value) — superseded facts are kept, never deleted;
- ``settings``: the settings hash each policy is folded with now and every
  ``SettingsChanged`` event in the log (settings changes, replay promotions).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from typing import Any

from memfold.projections.store import DuckDBProjectionStore

PREVIEW_CHARS = 120


def audit(store: DuckDBProjectionStore, tenant_id: str, conversation_id: str, *, erasure_pending: bool = False) -> dict[str, Any]:
    """Return the memory evolution of ``tenant_id/conversation_id`` (see the module docstring for the shape)."""
    key = [tenant_id, conversation_id]
    conv = store.conversation(tenant_id, conversation_id)
    events = _rows(store, "SELECT type, seq, occurred_at, event_id, \"partition\", \"offset\", payload FROM events "
                          "WHERE tenant_id = ? AND conversation_id = ? ORDER BY seq", key)
    positions = {e["event_id"]: f"{e['partition']}:{e['offset']}" for e in events}
    seqs = {e["event_id"]: e["seq"] for e in events}
    # The erasure in force: the first deletion after the last reopen (a forget run again adds a record, not a new erasure).
    reopened = max((i for i, e in enumerate(events) if e["type"] == "ConversationReopened"), default=-1)
    deletions = [e for e in events[reopened + 1:] if e["type"] == "ConversationDeleted"]
    erasure = None
    if deletions or erasure_pending:
        d = deletions[0] if deletions else None
        erasure = {"seq": d["seq"] if d else None, "occurred_at": _iso(d["occurred_at"]) if d else None,
                   "position": positions[d["event_id"]] if d else None,
                   "reason": json.loads(d["payload"] or "{}").get("reason") if d else None,
                   "pending": erasure_pending}
    counts: dict[str, int] = defaultdict(int)
    for e in events:
        counts[e["type"]] += 1
    messages = _rows(store, "SELECT idx, seq, role, occurred_at, tokens, content, retracted, name, tool_calls, "
                            "tool_call_id FROM messages WHERE tenant_id = ? AND conversation_id = ? ORDER BY idx", key)
    summaries = _summaries(store, key, positions, seqs)
    facts = _facts(store, key, summaries, messages)
    if erasure_pending:
        status = "erasure pending"  # a forget began and did not finish: copies may remain until forget runs again
    elif conv:
        status = "erased" if conv["deleted"] else "active"  # active again after a reopen
    else:
        status = "erased" if erasure else "unknown"
    return {
        "conversation": {
            "tenant_id": tenant_id, "conversation_id": conversation_id, "status": status,
            "message_count": conv["message_count"] if conv else 0, "token_count": conv["token_count"] if conv else 0,
            "first_at": _iso(conv["first_at"]) if conv else None, "last_at": _iso(conv["last_at"]) if conv else None,
        },
        "erasure": erasure,
        "events": dict(sorted(counts.items())),
        "messages": [
            {"index": m["idx"], "seq": m["seq"], "role": m["role"], "occurred_at": _iso(m["occurred_at"]),
             "tokens": m["tokens"], "preview": _preview(m["content"]), "retracted": bool(m["retracted"]),
             **_tool_fields(m)}
            for m in messages
        ],
        "summaries": summaries,
        "facts": facts,
        "settings": _settings(store),
    }


def _summaries(store: DuckDBProjectionStore, key: list[str], positions: dict[str, str], seqs: dict[str, int]) -> list[dict[str, Any]]:
    rows = _rows(store, "SELECT * FROM summaries WHERE tenant_id = ? AND conversation_id = ? "
                        "ORDER BY policy, requested_seq, request_id", key)
    version: dict[str, int] = {}
    chain_length: dict[tuple[str, str | None, str | None], int] = defaultdict(int)
    for r in sorted((r for r in rows if r["status"] == "completed"), key=lambda r: (r["resolved_seq"] or 0)):
        chain = (r["policy"], r["topic_id"], r.get("scope") or "conversation")  # the user's summaries are a chain of their own
        chain_length[chain] += 1
        version[r["summary_id"]] = chain_length[chain]
    out = []
    for r in rows:
        outcome_id = r["summary_id"] if r["status"] == "completed" else None
        out.append({
            "request_id": r["request_id"], "summary_id": r["summary_id"], "policy": r["policy"],
            "topic_id": r["topic_id"], "kind": r["kind"], "status": r["status"],
            "scope": r.get("scope") or "conversation",  # "user": the user's summary, asked in this conversation
            "version": version.get(r["summary_id"]),
            "base_summary_id": r["base_summary_id"], "base_version": version.get(r["base_summary_id"]),
            "covers": [r["covers_from"], r["covers_to"]], "inputs": [r["input_from"], r["input_to"]],
            "window_start": r["window_start"],
            "settings_hash": r["settings_hash"], "prompt_hash": r["prompt_hash"],
            "summarizer": r["summarizer"], "model": r["model"],
            "tokens_in": r["tokens_in"], "tokens_out": r["tokens_out"], "latency_ms": r["latency_ms"],
            "cached": r["cached"], "reason": r["reason"], "error_type": r["error_type"],
            "requested_seq": r["requested_seq"], "requested_at": _iso(r["requested_at"]),
            "requested_position": positions.get(r["request_id"]),
            "resolved_seq": r["resolved_seq"],
            "resolved_position": positions.get(outcome_id) if outcome_id else None,
            "text": r["text"], "facts": json.loads(r["facts"]) if r["facts"] else [],
        })
    return out


def _facts(store: DuckDBProjectionStore, key: list[str], summaries: list[dict[str, Any]],
           messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = _rows(store, "SELECT * FROM facts WHERE tenant_id = ? AND conversation_id = ?", key)
    by_id = {s["summary_id"]: s for s in summaries if s["summary_id"]}
    out = []
    for r in rows:
        introduced = by_id.get(r["introduced_by"]) or {}
        retired = by_id.get(r["retired_by"]) or {}
        stated_at, stated_in = r.get("stated_at"), r.get("stated_in")
        if stated_at is None:
            stated_at, stated_in = _first_mention(messages, r["value"], (introduced.get("covers") or [None, None])[1])
        out.append({
            "fact_id": r.get("fact_id") or _fact_ref(r),
            "policy": r["policy"], "key": r["key"], "value": r["value"], "category": r["category"],
            "stated_at": _iso(stated_at), "stated_in": stated_in,
            "learned_seq": r.get("introduced_seq") or introduced.get("resolved_seq"),
            "learned_position": introduced.get("resolved_position"),
            "introduced_by": r["introduced_by"], "learned_version": introduced.get("version"),
            "retired_by": r["retired_by"], "retired_version": retired.get("version"),
            "superseded_by": r.get("superseded_by"),
            "current": r["retired_by"] is None,
        })
    _link_supersessions(out)
    out.sort(key=lambda f: (f["policy"], f["learned_seq"] or 0, f["key"], f["value"]))
    return out


def _link_supersessions(facts: list[dict[str, Any]]) -> None:
    """Mark a retired fact superseded by the value of the same key introduced when it was retired.

    Rows the projection already linked (``superseded_by`` set) are kept as they are.
    """
    introduced: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for f in facts:
        introduced[(f["policy"], f["key"], f["introduced_by"])].append(f)
    for f in facts:
        if f["superseded_by"] is None and f["retired_by"] is not None:
            newer = [n for n in introduced.get((f["policy"], f["key"], f["retired_by"]), []) if n["value"] != f["value"]]
            if newer:
                f["superseded_by"] = newer[0]["fact_id"]


def _first_mention(messages: list[dict[str, Any]], value: str, upto: int | None) -> tuple[datetime | None, int | None]:
    needle = (value or "").strip().lower()
    if not needle:
        return None, None
    for m in messages:
        if upto is not None and m["idx"] > upto:
            break
        if needle in (m["content"] or "").lower():
            return m["occurred_at"], m["idx"]
    return None, None


def _settings(store: DuckDBProjectionStore) -> dict[str, Any]:
    changes = _rows(store, "SELECT seq, occurred_at, tenant_id, conversation_id, event_id, \"partition\", \"offset\", payload "
                           "FROM events WHERE type = 'SettingsChanged' ORDER BY occurred_at, \"partition\", \"offset\"", [])
    return {
        "in_force": json.loads(store.meta("policies") or "{}"),
        "changes": [
            {"occurred_at": _iso(c["occurred_at"]), "position": f"{c['partition']}:{c['offset']}",
             "scope": f"{c['tenant_id']}/{c['conversation_id']}", **json.loads(c["payload"] or "{}")}
            for c in changes
        ],
    }


def _rows(store: DuckDBProjectionStore, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cols, rows = store.query(sql, params)
    return [dict(zip(cols, r)) for r in rows]


def _fact_ref(row: dict[str, Any]) -> str:
    return f"{row['policy']}:{row['key']}={row['value']}@{row['introduced_by']}"


def _preview(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _tool_fields(m: dict[str, Any]) -> dict[str, Any]:
    """A message's name, tool calls and the call it answers, when it has them (a retracted one shows none)."""
    if m["retracted"]:
        return {}
    out: dict[str, Any] = {}
    if m["name"]:
        out["name"] = m["name"]
    calls = json.loads(m["tool_calls"]) if m["tool_calls"] else []
    if calls:
        out["tool_calls"] = calls
    if m["tool_call_id"]:
        out["tool_call_id"] = m["tool_call_id"]
    return out
