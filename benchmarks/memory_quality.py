"""Measure how many planted facts each memory policy keeps in the context, and what the summaries cost.

For every policy (and the takeLast baseline: the newest messages that fit,
no memory) this generates long synthetic conversations with
:mod:`synth` (seeded), ingests them into a fresh embedded engine with the
offline summarizer, waits until every summary due is done, then reads the
context of each conversation at several token budgets and checks which
planted facts are present with their LATEST value (see
:func:`synth.fact_present`: case-insensitive, whitespace-normalized; amounts
match the same number in the same currency, dates the same day in another
format). Summarizer calls and tokens come from the ``summaries`` projection
(rows with status completed or failed), per 1,000 ingested messages.

    .venv/bin/python benchmarks/memory_quality.py                      # 6 x 400 messages, seed 7
    .venv/bin/python benchmarks/memory_quality.py --conversations 10 --turns 500 --json

A "turn" is one message of any role (user, assistant, tool). Calls depend on
pacing for policies that decide after every message (sliding_window): with
``--step 1`` (live chat) they are several times higher than with the default
``--step 10``; fact scores and the other policies' calls do not change.

``--dataset beam --path DIR`` measures on BEAM's long real chats instead (see
:mod:`beam`): every chat is ingested once with its session dates as message
timestamps, then for each probing question the context of every policy, of
takeLast and of the full history is read at each budget, with the question as
the query, and scored by answer-content recall:

    .venv/bin/python benchmarks/memory_quality.py --dataset beam --path ~/beam/chats/100K --chats 1-5
    .venv/bin/python benchmarks/memory_quality.py --dataset beam --path ~/beam/chats/100K --dense st  # + BM25 fused with MiniLM
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # synth.py lives next to this file

import beam  # noqa: E402
import halves  # noqa: E402
import synth  # noqa: E402

BASELINE = "takeLast"
FULL = "full history"
BUDGETS = (1000, 3000, 8000)
BEAM_BUDGETS = (2000, 4000, 8000)
# BEAM holds a few degenerate assistant messages (up to 349K characters of repeated
# whitespace); the benchmark ingests them as they are rather than rejecting the chat.
BEAM_LIMITS = {"max_message_chars": 1_000_000, "max_message_tokens": 1_000_000}


def _context_text(messages: Sequence[Any]) -> str:
    return "\n".join(m.content or "" for m in messages)


def _summary_costs(engine: Any, policies: Sequence[str]) -> dict[str, dict[str, int]]:
    """Return per policy: summarizer calls and their tokens, plus requests that never reached a model.

    A call is a summary request that ended completed or failed after the
    summarizer ran: requests superseded by a newer one before they started
    (error_type 'Superseded') and answers served from the LLM cache cost no
    call. ``unanswered`` counts requests still without an outcome after the
    engine reported idle (it should be 0).
    """
    _, rows = engine.sql(
        "SELECT policy, "
        "count(*) FILTER (WHERE status IN ('completed', 'failed') AND NOT superseded AND NOT coalesce(cached, false)) AS calls, "
        "count(*) FILTER (WHERE status = 'failed' AND NOT superseded) AS failed, "
        "count(*) FILTER (WHERE superseded) AS superseded, "
        "count(*) FILTER (WHERE coalesce(cached, false)) AS cached, "
        "coalesce(sum(tokens_in) FILTER (WHERE NOT coalesce(cached, false)), 0) AS tokens_in, "
        "coalesce(sum(tokens_out) FILTER (WHERE NOT coalesce(cached, false)), 0) AS tokens_out, "
        "count(*) FILTER (WHERE status NOT IN ('completed', 'failed')) AS unanswered "
        "FROM (SELECT *, coalesce(error_type, '') = 'Superseded' AS superseded FROM summaries) GROUP BY policy"
    )
    zero = {"calls": 0, "failed": 0, "superseded": 0, "cached": 0, "tokens_in": 0, "tokens_out": 0, "unanswered": 0}
    out = {p: dict(zero) for p in policies}
    for policy, *values in rows:
        out[policy] = {k: int(v) for k, v in zip(zero, values)}
    return out


def measure(conversations: int = 6, turns: int | str = 400, seed: str | int = 7, *,
            budgets: Sequence[int] = BUDGETS, policies: Sequence[str] | None = None, step: int = 10,
            timeout: float = 600.0, data_dir: str | Path | None = None, half: str = "all") -> dict[str, Any]:
    """Run the benchmark and return its results as a JSON-ready dict.

    Steps: 1. generate the conversations and keep those of ``half``
    (:mod:`halves`: ``"tuning"``, ``"held-out"`` or ``"all"``); 2. ingest them into an engine in
    ``data_dir`` (default: a temporary directory, removed afterwards) folding
    every policy, ``step`` messages per conversation at a time, waiting
    until projection and summaries are done before the next round
    (``step=1``: a live chat where the summarizer always keeps up;
    ``step=0``: one batch per conversation, a backfill, where requests
    overtaken by newer ones are superseded before reaching the summarizer);
    3. wait until everything is done; 4. score contexts per policy and budget; 5. read
    summarizer costs from the projection.
    """
    from memfold.core.settings import POLICY_NAMES, Settings
    from memfold.engine.engine import MemoryEngine
    from memfold.projections.context import take_last

    policies = tuple(policies or POLICY_NAMES)
    convs = halves.select(synth.generate(conversations, turns, seed), half, lambda c: c.conversation_id)
    n_messages = sum(len(c.messages) for c in convs)
    truth = {c.conversation_id: [f.to_json() for f in c.facts.values()] for c in convs}

    with tempfile.TemporaryDirectory(prefix="memfold-quality-") as tmp:
        root = Path(data_dir) if data_dir is not None else Path(tmp)
        settings = Settings.load(None, data_dir=root, policies=policies, policy=policies[0])
        engine = MemoryEngine.open(root, settings)
        try:
            started = time.perf_counter()
            _ingest(engine, [c.messages for c in convs], step, timeout)
            appended = time.perf_counter()
            engine.wait_idle(timeout=timeout)
            idle = time.perf_counter()

            results: dict[str, Any] = {}
            for policy in (BASELINE, *policies):
                per_budget: dict[str, Any] = {}
                for budget in budgets:
                    kept = total = tokens = over = 0
                    stale = updated = updated_kept = asked = asked_kept = 0
                    by_kind: Counter[str] = Counter()
                    kind_total: Counter[str] = Counter()
                    for conv in convs:
                        if policy == BASELINE:
                            history = engine.history(conv.conversation_id, tenant_id=conv.tenant_id)
                            msgs = take_last(history, budget, settings.system_prompt, engine.counter.count)
                        else:
                            msgs = engine.context(conv.conversation_id, budget=budget, policy=policy,
                                                  tenant_id=conv.tenant_id)
                        text = _context_text(msgs)
                        if conv.final_question is not None:  # the closing user question asks about this fact
                            fact = conv.facts[conv.final_question]
                            asked += 1
                            asked_kept += synth.fact_present(fact.kind, fact.value, text)
                        used = sum(m.tokens for m in msgs)
                        tokens += used
                        over += used > budget
                        for fact in truth[conv.conversation_id]:
                            present = synth.fact_present(fact["kind"], fact["value"], text)
                            kept += present
                            total += 1
                            kind_total[fact["kind"]] += 1
                            by_kind[fact["kind"]] += present
                            if fact["updated"]:
                                updated += 1
                                updated_kept += present
                                old = [h["value"] for h in fact["history"][:-1]]
                                stale += (not present) and any(synth.fact_present(fact["kind"], v, text) for v in old)
                    per_budget[str(budget)] = {
                        "facts_kept": kept, "facts_total": total, "fraction": kept / total if total else 0.0,
                        "updated_kept": updated_kept, "updated_total": updated, "stale_only": stale,
                        "asked_kept": asked_kept, "asked_total": asked,
                        "avg_context_tokens": tokens / len(convs), "contexts_over_budget": over,
                        "by_kind": {k: by_kind[k] / kind_total[k] for k in sorted(kind_total)},
                    }
                results[policy] = {"budgets": per_budget}
            scored = time.perf_counter()

            costs = _summary_costs(engine, policies)
            costs[BASELINE] = {k: 0 for k in next(iter(costs.values()))} if costs else {}
            for policy, cost in costs.items():
                if policy in results:
                    per_k = 1000 / n_messages
                    results[policy]["summarizer"] = {
                        **cost,
                        "calls_per_1k_turns": cost["calls"] * per_k,
                        "tokens_per_1k_turns": (cost["tokens_in"] + cost["tokens_out"]) * per_k,
                    }
        finally:
            engine.close()

    return {
        "benchmark": "memory_quality",
        "conversations": conversations, "turns": turns, "seed": seed, "messages": n_messages,
        "facts": sum(len(v) for v in truth.values()),
        "domains": [c.domain for c in convs], "budgets": list(budgets), "summarizer": settings.summarizer.kind,
        "step": step,
        "seconds": {"append": appended - started, "until_idle": idle - appended, "score": scored - idle},
        "policies": results,
    }


def _budget_label(budget: int) -> str:
    return f"{budget // 1000}k" if budget % 1000 == 0 else f"{budget:,}"


def render_table(report: dict[str, Any]) -> None:
    """Print the report as an aligned table (rich)."""
    from rich.console import Console
    from rich.table import Table

    budgets = report["budgets"]
    last, first = _budget_label(budgets[-1]), _budget_label(budgets[0])
    table = Table(
        title=(f"facts kept in context: {report['conversations']} conversations x {report['turns']} messages, "
               f"seed {report['seed']}, {report['facts']} planted facts, {report['summarizer']} summarizer"),
        caption=(f"@N: share of planted facts whose latest value is in the context at an N-token budget; "
                 f"upd: facts changed later in the conversation, latest value kept @{last}; "
                 f"asked @{first}: the fact the conversation's closing question asks about (\"what was my "
                 f"order number again?\"), latest value in the context at {first} tokens; "
                 f"calls, tokens (in+out): summarizer per 1,000 messages"),
    )
    table.add_column("policy", no_wrap=True)
    for b in budgets:
        table.add_column(f"@{_budget_label(b)}", justify="right", no_wrap=True)
    table.add_column(f"upd @{last}", justify="right", no_wrap=True)
    table.add_column(f"asked @{first}", justify="right", no_wrap=True)
    table.add_column("calls/1k", justify="right", no_wrap=True)
    table.add_column("tokens/1k", justify="right", no_wrap=True)
    for policy, res in report["policies"].items():
        cells = [policy]
        for b in budgets:
            r = res["budgets"][str(b)]
            cells.append(f"{r['fraction']:.0%}" + ("*" if r["contexts_over_budget"] else ""))
        final = res["budgets"][str(budgets[-1])]
        cells.append(f"{final['updated_kept']}/{final['updated_total']}")
        smallest = res["budgets"][str(budgets[0])]
        cells.append(f"{smallest['asked_kept']}/{smallest['asked_total']}")
        cost = res["summarizer"]
        cells.append(f"{cost['calls_per_1k_turns']:.1f}")
        cells.append(f"{cost['tokens_per_1k_turns']:,.0f}")
        table.add_row(*cells)
    console = Console()
    console.print(table)
    if any(r["contexts_over_budget"] for res in report["policies"].values() for r in res["budgets"].values()):
        console.print("* some contexts exceed the budget (memory messages are never trimmed)")
    stuck = {p: r["summarizer"]["unanswered"] for p, r in report["policies"].items() if r["summarizer"].get("unanswered")}
    if stuck:
        console.print(f"[red]summary requests still unanswered after the engine reported idle:[/] {stuck}")
    secs = report["seconds"]
    pacing = (f"{report['step']} per conversation at a time" if report["step"] > 0
              else "in one batch per conversation")
    console.print(f"{report['messages']:,} messages ingested {pacing} in {secs['append'] + secs['until_idle']:.1f}s "
                  f"(summaries included); scoring took {secs['score']:.1f}s.")


def _ingest(engine: Any, conversations: Sequence[Sequence[dict[str, Any]]], step: int, timeout: float) -> None:
    """Append every conversation, ``step`` messages of each at a time, letting the summarizer catch up in between.

    ``step <= 0`` appends one batch per conversation, like a backfill.
    """
    if step <= 0:
        for messages in conversations:
            engine.append_many(messages)
        return
    longest = max((len(m) for m in conversations), default=0)
    for start in range(0, longest, step):
        engine.append_many([m for messages in conversations for m in messages[start : start + step]])
        engine.wait_idle(timeout=timeout)


_DENSE_NAMES = {"sentence-transformers": "MiniLM", "local": "local-hash", "openai": "openai"}


def dense_label(policy: str, dense: str) -> str:
    """Return the row name of ``policy`` read with BM25 fused with the ``dense`` embedder."""
    return f"{policy} + {_DENSE_NAMES.get(dense, dense)}"


def _held(engine: Any, conversation_id: str) -> int:
    """Return how many messages the projection holds of a conversation (0 when it holds none)."""
    row = engine.conversation(conversation_id)
    return 0 if row is None or row.get("deleted") else int(row["message_count"])

def measure_beam(path: str | Path, chats: str | None = None, *, budgets: Sequence[int] = BEAM_BUDGETS,
                 policies: Sequence[str] | None = None, step: int = 10, timeout: float = 1800.0,
                 data_dir: str | Path | None = None, kinds: Sequence[str] = beam.KINDS,
                 dense: str | None = None, half: str = "all") -> dict[str, Any]:
    """Run the BEAM benchmark on the chat folders under ``path`` and return a JSON-ready dict.

    Steps: 1. load the chats (``chats`` selects folders, "1-5"; ``half`` keeps
    those of one half, :mod:`halves`, by conversation id ``beam-N``); 2. ingest them
    into one engine folding every policy, dated by their time anchors, paced
    like :func:`measure` (``step``); 3. wait until every summary due is done;
    4. per chat and question, read each policy's context at each budget with
    the question as ``query`` (when ``MemoryEngine.context`` accepts one),
    takeLast's at each budget and the full history, and score answer-content
    recall (:func:`beam.recall`); 5. read summarizer costs. Per question the
    result keeps every score, so misses can be inspected.

    ``dense`` (an embedder kind: local, openai, sentence-transformers) turns
    dense retrieval on: every message is embedded during ingest, and each
    policy gets a second row, read with BM25 fused with the embeddings
    (``dense_label``), beside its BM25-only row, from the same ingest.
    Context read times (ms, p50/p99) are kept per row.
    """
    from memfold.core.settings import POLICY_NAMES, Settings
    from memfold.engine.engine import MemoryEngine
    from memfold.projections.context import take_last

    dirs = halves.select(beam.chat_dirs(path, chats), half, lambda d: f"beam-{d.name}")
    if not dirs:
        raise FileNotFoundError(f"no chat folders of the {half} half under {path}")
    loaded = [beam.load_chat(d, kinds) for d in dirs]
    policies = tuple(policies or POLICY_NAMES)
    default_policy = Settings.model_fields["policy"].default
    conv_ids = {c.chat_id: f"beam-{c.chat_id}" for c in loaded}
    n_messages = sum(len(c.messages) for c in loaded)

    with tempfile.TemporaryDirectory(prefix="memfold-beam-") as tmp:
        root = Path(data_dir) if data_dir is not None else Path(tmp)
        extra: dict[str, Any] = {"retrieval": {"embedder": dense}} if dense else {}
        settings = Settings.load(None, data_dir=root, policies=policies, policy=policies[0], **BEAM_LIMITS, **extra)
        engine = MemoryEngine.open(root, settings)
        try:
            started = time.perf_counter()
            # A --data-dir that already holds a chat whole (an earlier run) is scored again without
            # re-ingesting it: read-side changes (recall, excerpts) are measured in minutes, not an hour.
            todo = [c for c in loaded if _held(engine, conv_ids[c.chat_id]) != len(c.messages)]
            if any(_held(engine, conv_ids[c.chat_id]) for c in todo):
                raise ValueError(f"{root} holds some chats partly or differently; use an empty --data-dir")
            _ingest(engine, [[{**m, "conversation_id": conv_ids[c.chat_id]} for m in c.messages] for c in todo],
                    step, timeout)
            appended = time.perf_counter()
            engine.wait_idle(timeout=timeout)
            idle = time.perf_counter()
            takes_query = "query" in inspect.signature(engine.context).parameters

            details: list[dict[str, Any]] = []
            tokens: dict[tuple[str, int], list[int]] = {}
            over: Counter[tuple[str, int]] = Counter()
            latency: dict[tuple[str, int], list[float]] = {}
            full_tokens: list[int] = []
            rows = [(p, p, False) for p in policies] + ([(dense_label(p, dense), p, True) for p in policies] if dense else [])
            for chat in loaded:
                conv = conv_ids[chat.chat_id]
                history = engine.history(conv)
                full_tokens.append(sum(m.tokens for m in history))
                full_words = beam.context_words(m.content for m in history)
                # takeLast ignores the question: one context per budget and chat.
                baseline = {b: take_last(history, b, settings.system_prompt, engine.counter.count) for b in budgets}
                for question in chat.questions:
                    answer = beam.content_words(question.answer)
                    scores: dict[str, dict[str, float]] = {}
                    for label, policy, fused in ((BASELINE, BASELINE, False), *rows):
                        scores[label] = {}
                        for b in budgets:
                            if policy == BASELINE:
                                msgs = baseline[b]
                            else:
                                extra = {"query": question.text} if takes_query else {}
                                if dense:
                                    extra["dense"] = fused
                                t0 = time.perf_counter()
                                msgs = engine.context(conv, budget=b, policy=policy, **extra)
                                latency.setdefault((label, b), []).append((time.perf_counter() - t0) * 1000)
                            used = sum(m.tokens for m in msgs)
                            tokens.setdefault((label, b), []).append(used)
                            over[(label, b)] += used > b
                            scores[label][str(b)] = beam.recall(answer, beam.context_words(m.content for m in msgs))
                    scores[FULL] = {"all": beam.recall(answer, full_words)}
                    details.append({"chat": chat.chat_id, "kind": question.kind, "index": question.index,
                                    "question": question.text, "answer": question.answer,
                                    "answer_words": len(answer), "recall": scores})
            scored = time.perf_counter()
            costs = _summary_costs(engine, policies)
        finally:
            engine.close()

    def by_kind(policy: str, key: str) -> dict[str, Any]:
        values = {k: [d["recall"][policy][key] for d in details if d["kind"] == k] for k in kinds}
        everything = [d["recall"][policy][key] for d in details]
        return {"recall": _mean(everything), "by_kind": {k: _mean(v) for k, v in values.items() if v}}

    results: dict[str, Any] = {}
    for label, policy, _fused in ((BASELINE, BASELINE, False), *rows):
        cost = costs.get(policy, {"calls": 0, "tokens_in": 0, "tokens_out": 0, "unanswered": 0})
        results[label] = {
            "budgets": {str(b): {**by_kind(label, str(b)), "avg_context_tokens": _mean(tokens.get((label, b), [])),
                                 "contexts_over_budget": over[(label, b)],
                                 "read_ms": _percentiles(latency.get((label, b), []))} for b in budgets},
            "summarizer": {**cost, "calls_per_chat": cost["calls"] / max(len(loaded), 1)},
        }
    report = {
        "benchmark": "memory_quality", "dataset": "beam", "path": str(path),
        "chats": [c.chat_id for c in loaded], "messages": n_messages, "questions": len(details),
        "budgets": list(budgets), "kinds": list(kinds), "summarizer": settings.summarizer.kind,
        "step": step, "query": takes_query, "default_policy": default_policy, "dense": dense,
        "seconds": {"append": appended - started, "until_idle": idle - appended, "score": scored - idle},
        "policies": results,
        "full_history": {**by_kind(FULL, "all"), "avg_context_tokens": _mean(full_tokens)},
        "details": details,
    }
    report["headline"] = beam_headline(report)
    report["targets"] = beam_targets(report)
    return report


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    """Return p50 and p99 of ``values`` (nearest rank), 0 when empty."""
    ordered = sorted(values)
    if not ordered:
        return {"p50": 0.0, "p99": 0.0}
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50": at(0.50), "p99": at(0.99)}


def _headline_budget(report: dict[str, Any]) -> int:
    return min(report["budgets"], key=lambda b: abs(b - 4000))


def _ranked(report: dict[str, Any], budget: int) -> list[tuple[str, float]]:
    """Return the policies (not takeLast) by recall at ``budget``, best first."""
    rows = [(p, r["budgets"][str(budget)]["recall"]) for p, r in report["policies"].items() if p != BASELINE]
    return sorted(rows, key=lambda pr: -pr[1])


def beam_headline(report: dict[str, Any]) -> str:
    """Return one line: the best policy at the budget nearest 4,000 against takeLast and the full history."""
    b = _headline_budget(report)
    ranked = _ranked(report, b)
    if not ranked:
        return "no policy measured"
    best, value = ranked[0]
    base = report["policies"][BASELINE]["budgets"][str(b)]["recall"]
    full = report["full_history"]["recall"]
    times = f"{value / base:.1f}x" if base else "n/a"
    share = f"{value / full:.0%}" if full else "n/a"
    return (f"best at {b:,} tokens: {best} {value:.0%} = {times} takeLast ({base:.0%}), "
            f"{share} of full history ({full:.0%})")


def beam_targets(report: dict[str, Any]) -> dict[str, Any]:
    """Check the issue's targets: best >= 2x takeLast and >= 80% of full history at ~4,000; no policy
    below takeLast at any budget; every policy rises with the budget; the default policy among the best two."""
    b = _headline_budget(report)
    ranked = _ranked(report, b)
    pol = report["policies"]
    base = {x: pol[BASELINE]["budgets"][str(x)]["recall"] for x in report["budgets"]}
    best = ranked[0][1] if ranked else 0.0
    below = sorted(f"{p}@{x}" for p in pol if p != BASELINE for x in report["budgets"]
                   if pol[p]["budgets"][str(x)]["recall"] < base[x])
    flat = sorted(p for p in pol if any(
        pol[p]["budgets"][str(hi)]["recall"] <= pol[p]["budgets"][str(lo)]["recall"]
        for lo, hi in zip(report["budgets"], report["budgets"][1:])))
    top_two = [p for p, _ in ranked[:2]]
    return {
        "best_2x_takeLast": best >= 2 * base[b],
        "best_80pct_full": best >= 0.8 * report["full_history"]["recall"],
        "below_takeLast": below, "not_rising": flat,
        "default_in_top_two": report["default_policy"] in top_two, "top_two": top_two,
    }


_KIND_LABELS = {"information_extraction": "info", "temporal_reasoning": "temporal", "knowledge_update": "update",
                "multi_session_reasoning": "multi", "event_ordering": "order", "contradiction_resolution": "contra"}


def render_beam(report: dict[str, Any]) -> None:
    """Print the BEAM report: one row per policy and budget, one column per question kind, then the headline."""
    from rich.console import Console
    from rich.table import Table

    kinds = report["kinds"]
    table = Table(
        title=(f"BEAM answer-content recall: {len(report['chats'])} chats, {report['messages']:,} messages, "
               f"{report['questions']} questions, {report['summarizer']} summarizer, "
               f"query {'on' if report['query'] else 'unsupported (no query passed)'}"
               + (f", +{report['dense']}: BM25 fused with {report['dense']} embeddings" if report.get("dense") else "")),
        caption=("recall: share of the answer's content words in the context (mean over questions); "
                 "tokens: mean context tokens; calls: summarizer calls per chat"),
    )
    table.add_column("policy", no_wrap=True)
    table.add_column("budget", justify="right", no_wrap=True)
    for k in kinds:
        table.add_column(_KIND_LABELS.get(k, k), justify="right", no_wrap=True)
    table.add_column("all", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("calls", justify="right", no_wrap=True)

    def cells(r: dict[str, Any]) -> list[str]:
        return [f"{r['by_kind'][k]:.0%}" if k in r["by_kind"] else "-" for k in kinds] + [f"{r['recall']:.0%}"]

    for policy, res in report["policies"].items():
        name = f"{policy} (default)" if policy == report["default_policy"] else policy
        for i, b in enumerate(report["budgets"]):
            r = res["budgets"][str(b)]
            star = "*" if r["contexts_over_budget"] else ""
            table.add_row(name if i == 0 else "", f"{b:,}", *cells(r), f"{r['avg_context_tokens']:,.0f}{star}",
                          f"{res['summarizer']['calls_per_chat']:.1f}" if i == 0 else "",
                          end_section=i == len(report["budgets"]) - 1)
    full = report["full_history"]
    table.add_row(FULL, "all", *cells(full), f"{full['avg_context_tokens']:,.0f}", "0")
    console = Console(width=max(Console().width, 120))
    console.print(table)
    if any(r["contexts_over_budget"] for res in report["policies"].values() for r in res["budgets"].values()):
        console.print("* some contexts exceed the budget")
    console.print(report["headline"])
    t = report["targets"]
    console.print(f"targets: best >= 2x takeLast {'yes' if t['best_2x_takeLast'] else 'NO'}; "
                  f">= 80% of full history {'yes' if t['best_80pct_full'] else 'NO'}; "
                  f"below takeLast: {', '.join(t['below_takeLast']) or 'none'}; "
                  f"not rising with budget: {', '.join(t['not_rising']) or 'none'}; "
                  f"default ({report['default_policy']}) in top two ({', '.join(t['top_two'])}): "
                  f"{'yes' if t['default_in_top_two'] else 'NO'}")
    if report.get("dense"):
        reads = [(p, b, r["read_ms"]) for p, res in report["policies"].items() if p != BASELINE
                 for b, r in res["budgets"].items()]
        console.print("context read ms (p50/p99): " + "; ".join(
            f"{p}@{int(b) // 1000}k {ms['p50']:.1f}/{ms['p99']:.1f}" for p, b, ms in reads))
    secs = report["seconds"]
    console.print(f"{report['messages']:,} messages ingested in {secs['append'] + secs['until_idle']:.1f}s "
                  f"(summaries included, step {report['step']}); scoring took {secs['score']:.1f}s.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=("synth", "beam"), default="synth",
                        help="synth: generated conversations with planted facts (default); beam: BEAM chats from --path")
    parser.add_argument("--path", default=None, help="beam: folder of BEAM chat folders (e.g. BEAM/chats/100K)")
    parser.add_argument("--chats", default=None, help="beam: chat folders to use, e.g. 1-5 or 1,3,7 (default: all)")
    parser.add_argument("--conversations", type=int, default=6, help="synth: conversations (default 6)")
    parser.add_argument("--turns", default="400", help="synth: messages per conversation, or MIN-MAX (default 400)")
    parser.add_argument("--seed", default="7", help="synth: generator seed")
    parser.add_argument("--budgets", default=None,
                        help=f"comma-separated token budgets (default {','.join(map(str, BUDGETS))}; "
                             f"beam: {','.join(map(str, BEAM_BUDGETS))})")
    parser.add_argument("--policies", default=None, help="comma-separated subset (default: all five)")
    parser.add_argument("--step", type=int, default=10,
                        help="messages per conversation between waits for the summarizer: 1 = live chat, "
                             "0 = one batch per conversation (default 10)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for summaries")
    parser.add_argument("--data-dir", default=None, help="keep the engine's files here instead of a temp dir; beam: chats already there whole are not ingested again")
    parser.add_argument("--dense", choices=("local", "openai", "st"), default=None,
                        help="beam: also read every policy with BM25 fused with dense retrieval by this embedder "
                             "(st: the [st] extra's all-MiniLM-L6-v2; openai: the [embedder] settings / "
                             "MEMFOLD_EMBEDDER__*), one extra row per policy")
    parser.add_argument("--half", choices=halves.HALVES, default="held-out",
                        help="conversations of this half only (by a hash of their id, see benchmarks/halves.py): "
                             "tune on 'tuning', report 'held-out' (default)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",")] if args.policies else None
    if args.dataset == "beam":
        if not args.path:
            parser.error("--dataset beam needs --path (a folder of BEAM chat folders, e.g. BEAM/chats/100K)")
        budgets = [int(b) for b in args.budgets.split(",")] if args.budgets else list(BEAM_BUDGETS)
        try:
            dense = {"st": "sentence-transformers"}.get(args.dense, args.dense)
            report = measure_beam(args.path, args.chats, budgets=budgets, policies=policies, step=args.step,
                                  timeout=args.timeout, data_dir=args.data_dir, dense=dense, half=args.half)
        except (FileNotFoundError, ValueError) as exc:
            parser.error(str(exc))
        render = render_beam
    else:
        turns: int | str = int(args.turns) if args.turns.isdigit() else args.turns
        budgets = [int(b) for b in args.budgets.split(",")] if args.budgets else list(BUDGETS)
        report = measure(args.conversations, turns, args.seed, budgets=budgets, policies=policies,
                         step=args.step, timeout=args.timeout, data_dir=args.data_dir, half=args.half)
        render = render_table
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
