"""Render an audit (:func:`memfold.projections.audit.audit`) as one self-contained HTML page.

No script, no external file: inline CSS only, so the page can be mailed,
archived with a ticket or opened offline. The timeline's horizontal axis is
the conversation's message index: each summary version is a bar over the
messages it covers, each fact a bar from the message that stated it to the
summary that retired it (open-ended while current).
"""

from __future__ import annotations

from html import escape
from typing import Any

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;background:#fbfbfd}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde;padding-bottom:4px}
.meta{color:#556}.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.active{background:#dff5e3;color:#1b6b2e}.erased{background:#fde2e2;color:#9b1c1c}.unknown{background:#eee;color:#555}
.notice{background:#fff4e5;border:1px solid #f0c36d;padding:10px 14px;border-radius:6px;margin:14px 0}
.timeline{position:relative;border:1px solid #dde;background:#fff;border-radius:6px;padding:8px 0 4px}
.lane{position:relative;height:24px;margin:3px 0}
.lane .label{position:absolute;left:8px;width:230px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;font-size:12px;line-height:24px}
.lane .track{position:absolute;left:250px;right:12px;top:0;bottom:0;background:repeating-linear-gradient(90deg,#f4f5f9 0 1px,transparent 1px 10%)}
.bar{position:absolute;top:4px;height:16px;border-radius:4px;font-size:11px;line-height:16px;color:#fff;padding:0 4px;overflow:hidden;white-space:nowrap;box-sizing:border-box;min-width:6px}
.completed{background:#3b6fd8}.processing{background:#d8a33b}.failed{background:#c0392b}.superseded{background:#9aa3b5}
.fact{background:#2e9e6a}.fact.retired{background:#9aa3b5}.axis{position:relative;height:18px;margin-left:250px;margin-right:12px;font-size:11px;color:#778}
.axis span{position:absolute;transform:translateX(-50%)}
table{border-collapse:collapse;width:100%;background:#fff;font-size:12.5px}
th,td{border:1px solid #e3e5ee;padding:4px 6px;text-align:left;vertical-align:top}th{background:#f1f3f9}
td.num{text-align:right;font-variant-numeric:tabular-nums}.muted{color:#889}
"""


def render(report: dict[str, Any]) -> str:
    """Return the HTML page of ``report`` (an audit dict)."""
    c = report["conversation"]
    n = max(c["message_count"], 1 + max((s["covers"][1] or 0 for s in report["summaries"]), default=0), 1)
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>memfold audit: {escape(c['tenant_id'])}/{escape(c['conversation_id'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Memory audit: {escape(c['conversation_id'])} <span class='badge {c['status']}'>{c['status']}</span></h1>",
        f"<div class='meta'>tenant {escape(c['tenant_id'])} · {c['message_count']} messages · "
        f"{c['token_count']} tokens · {_fmt(c['first_at'])} → {_fmt(c['last_at'])} · events: "
        + ", ".join(f"{escape(t)} {k}" for t, k in report["events"].items()) + "</div>",
    ]
    if report["erasure"] and report["erasure"].get("pending"):
        parts.append("<div class='notice'><b>Erasure not finished</b>: a forget began and did not remove every copy "
                     "yet; run forget again to finish it.</div>")
    if report["erasure"] and report["erasure"]["seq"] is not None:
        e = report["erasure"]
        parts.append(
            f"<div class='notice'><b>Erased</b> at {_fmt(e['occurred_at'])} (seq {e['seq']}, log position "
            f"{escape(str(e['position']))}){' — ' + escape(e['reason']) if e.get('reason') else ''}. The log keeps "
            "every event of this conversation sealed with a destroyed key; its content can no longer be read.</div>"
        )
    parts.append("<h2>Timeline</h2>")
    parts.append(_timeline(report, n))
    parts.append("<h2>Summary versions</h2>")
    parts.append(_summary_table(report["summaries"]))
    parts.append("<h2>Facts</h2>")
    parts.append(_fact_table(report["facts"]))
    parts.append("<h2>Settings</h2>")
    parts.append(_settings(report["settings"]))
    if report["messages"]:
        parts.append("<h2>Messages</h2>")
        parts.append(_table(
            ["#", "seq", "time", "role", "tokens", "status", "message"],
            # A retracted message's content is withdrawn from every read: the page says so, without a preview.
            [[m["index"], m["seq"], _fmt(m["occurred_at"]), _speaker(m), m["tokens"],
              "retracted" if m.get("retracted") else "", "(retracted)" if m.get("retracted") else _said(m)]
             for m in report["messages"]],
        ))
    parts.append("</body></html>")
    return "\n".join(parts)


def _timeline(report: dict[str, Any], n: int) -> str:
    lanes = []
    for s in report["summaries"]:
        lo, hi = s["covers"]
        if lo is None or hi is None:
            continue
        version = f"v{s['version']}" if s["version"] else s["status"]
        base = f" ← v{s['base_version']}" if s["base_version"] else ""
        label = f"{s['policy']}{' · ' + s['topic_id'] if s['topic_id'] else ''} {version}{base}"
        text = f"{version}: messages {lo}–{hi}"
        lanes.append(_lane(label, _bar(lo, hi, n, s["status"], text)))
    for f in report["facts"]:
        start = f["stated_in"] if f["stated_in"] is not None else _introduced_at(report, f)
        end = _retired_at(report, f)
        state = "fact retired" if not f["current"] else "fact"
        label = f"{f['key']} = {f['value']}"
        text = f"v{f['learned_version'] or '?'}" + (f" → retired v{f['retired_version']}" if f["retired_version"] else "")
        lanes.append(_lane(label, _bar(start or 0, end if end is not None else n - 1, n, state, text)))
    if not lanes:
        lanes.append("<div class='lane'><div class='label muted'>no summaries</div></div>")
    ticks = "".join(f"<span style='left:{100 * i / 10:.1f}%'>{round((n - 1) * i / 10)}</span>" for i in range(11))
    legend = ("<span class='badge completed' style='color:#fff'>summary version</span> "
              "<span class='badge superseded' style='color:#fff'>superseded / failed request</span> "
              "<span class='badge fact' style='color:#fff'>fact: stated → now</span> "
              "<span class='badge retired' style='background:#9aa3b5;color:#fff'>fact: stated → retired</span>")
    return (f"<div class='timeline'>{''.join(lanes)}<div class='axis'>{ticks}</div></div>"
            f"<div class='meta'>horizontal axis: message index · {legend}</div>")


def _introduced_at(report: dict[str, Any], fact: dict[str, Any]) -> int | None:
    s = next((s for s in report["summaries"] if s["summary_id"] == fact["introduced_by"]), None)
    return s["covers"][1] if s else None


def _retired_at(report: dict[str, Any], fact: dict[str, Any]) -> int | None:
    s = next((s for s in report["summaries"] if s["summary_id"] == fact["retired_by"]), None) if fact["retired_by"] else None
    return s["covers"][1] if s else None


def _lane(label: str, bar: str) -> str:
    return f"<div class='lane'><div class='label' title='{escape(label)}'>{escape(label)}</div><div class='track'>{bar}</div></div>"


def _bar(lo: int, hi: int, n: int, css: str, text: str) -> str:
    left = 100 * lo / n
    width = max(100 * (hi - lo + 1) / n, 0.8)
    return f"<div class='bar {css}' style='left:{left:.2f}%;width:{min(width, 100 - left):.2f}%' title='{escape(text)}'>{escape(text)}</div>"


def _summary_table(summaries: list[dict[str, Any]]) -> str:
    rows = [
        [s["policy"], f"v{s['version']}" if s["version"] else "", s["status"], f"{s['covers'][0]}–{s['covers'][1]}",
         f"v{s['base_version']}" if s["base_version"] else (s["base_summary_id"] or "—"), s["settings_hash"],
         (s["prompt_hash"] or "")[:12], s["model"] or "", s["tokens_in"], s["tokens_out"], s["latency_ms"],
         "yes" if s["cached"] else "", s["requested_position"] or "", s["resolved_position"] or "",
         s["reason"] or _short(s["text"])]
        for s in summaries
    ]
    return _table(["policy", "version", "status", "covers", "base", "settings", "prompt", "model", "tok in",
                   "tok out", "ms", "cached", "requested at", "resolved at", "text / reason"], rows)


def _fact_table(facts: list[dict[str, Any]]) -> str:
    by_id = {f["fact_id"]: f for f in facts}
    rows = []
    for f in facts:
        successor = by_id.get(f["superseded_by"]) if f["superseded_by"] else None
        rows.append([
            f["policy"], f["key"], f["value"], f["category"], _fmt(f["stated_at"]),
            f["stated_in"] if f["stated_in"] is not None else "", f"v{f['learned_version']}" if f["learned_version"] else "",
            f["learned_position"] or "", f"v{f['retired_version']}" if f["retired_version"] else "",
            f"{successor['value']}" if successor else (f["superseded_by"] or ""), "current" if f["current"] else "retired",
        ])
    return _table(["policy", "key", "value", "category", "stated at", "message", "learned in", "log position",
                   "retired in", "superseded by", "state"], rows)


def _settings(settings: dict[str, Any]) -> str:
    rows = [[p, h, "in force"] for p, h in settings["in_force"].items()]
    rows += [[c.get("policy") or "", c.get("settings_hash") or "", f"changed at {_fmt(c['occurred_at'])} ({c['position']})"]
             for c in settings["changes"]]
    return _table(["policy", "settings hash", "when"], rows)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return "<p class='muted'>none</p>"
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f"<td class='num'>{v}</td>" if isinstance(v, (int, float)) and not isinstance(v, bool)
            else f"<td>{escape('' if v is None else str(v))}</td>" for v in r
        ) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _speaker(m: dict[str, Any]) -> str:
    """Return the role, with the name it was sent with (a tool message's tool)."""
    return f"{m['role']} ({m['name']})" if m.get("name") else m["role"]


def _said(m: dict[str, Any]) -> str:
    """Return the preview, then each tool call as ``name(arguments)`` (a turn that only calls tools has no text)."""
    calls = [f"→ {c.get('name')}({_short(c.get('arguments'), 120)})" for c in m.get("tool_calls") or ()]
    answered = [f"↳ answers {m['tool_call_id']}"] if m.get("tool_call_id") else []
    return "  ".join(p for p in (m.get("preview") or "", *calls, *answered) if p)


def _fmt(iso: str | None) -> str:
    return iso.replace("T", " ")[:19] if iso else "—"


def _short(text: str | None, limit: int = 90) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
