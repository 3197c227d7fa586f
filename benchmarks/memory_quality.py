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
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # synth.py lives next to this file

import synth  # noqa: E402

BASELINE = "takeLast"
BUDGETS = (1000, 3000, 8000)


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
            timeout: float = 600.0, data_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the benchmark and return its results as a JSON-ready dict.

    Steps: 1. generate the conversations; 2. ingest them into an engine in
    ``data_dir`` (default: a temporary directory, removed afterwards) folding
    every policy, ``step`` messages per conversation at a time, waiting
    until projection and summaries are done before the next round
    (``step=1``: a live chat where the summarizer always keeps up;
    ``step=0``: one batch per conversation, a backfill, where requests
    overtaken by newer ones are superseded before reaching the summarizer);
    3. wait until everything is done; 4. score contexts per policy and budget; 5. read
    summarizer costs from the projection.
    """
    from memfold.engine.engine import MemoryEngine
    from memfold.engine.settings import POLICY_NAMES, Settings
    from memfold.projections.context import take_last

    policies = tuple(policies or POLICY_NAMES)
    convs = synth.generate(conversations, turns, seed)
    n_messages = sum(len(c.messages) for c in convs)
    truth = {c.conversation_id: [f.to_json() for f in c.facts.values()] for c in convs}

    with tempfile.TemporaryDirectory(prefix="memfold-quality-") as tmp:
        root = Path(data_dir) if data_dir is not None else Path(tmp)
        settings = Settings.load(None, data_dir=root, policies=policies, policy=policies[0])
        engine = MemoryEngine.open(root, settings)
        try:
            started = time.perf_counter()
            if step <= 0:  # bulk: one batch per conversation, like a backfill
                for conv in convs:
                    engine.append_many(conv.messages)
            else:  # paced: every conversation gets ``step`` more messages, then the summarizer catches up
                longest = max(len(c.messages) for c in convs)
                for start in range(0, longest, step):
                    engine.append_many([m for c in convs for m in c.messages[start : start + step]])
                    engine.wait_idle(timeout=timeout)
            appended = time.perf_counter()
            engine.wait_idle(timeout=timeout)
            idle = time.perf_counter()

            results: dict[str, Any] = {}
            for policy in (BASELINE, *policies):
                per_budget: dict[str, Any] = {}
                for budget in budgets:
                    kept = total = tokens = over = 0
                    stale = updated = updated_kept = 0
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
    last = _budget_label(budgets[-1])
    table = Table(
        title=(f"facts kept in context: {report['conversations']} conversations x {report['turns']} messages, "
               f"seed {report['seed']}, {report['facts']} planted facts, {report['summarizer']} summarizer"),
        caption=(f"@N: share of planted facts whose latest value is in the context at an N-token budget; "
                 f"upd: facts changed later in the conversation, latest value kept @{last}; "
                 f"calls, tokens (in+out): summarizer per 1,000 messages"),
    )
    table.add_column("policy", no_wrap=True)
    for b in budgets:
        table.add_column(f"@{_budget_label(b)}", justify="right", no_wrap=True)
    table.add_column(f"upd @{last}", justify="right", no_wrap=True)
    table.add_column("calls/1k", justify="right", no_wrap=True)
    table.add_column("tokens/1k", justify="right", no_wrap=True)
    for policy, res in report["policies"].items():
        cells = [policy]
        for b in budgets:
            r = res["budgets"][str(b)]
            cells.append(f"{r['fraction']:.0%}" + ("*" if r["contexts_over_budget"] else ""))
        final = res["budgets"][str(budgets[-1])]
        cells.append(f"{final['updated_kept']}/{final['updated_total']}")
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--turns", default="400", help="messages per conversation, or MIN-MAX (default 400)")
    parser.add_argument("--seed", default="7")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)), help="comma-separated token budgets")
    parser.add_argument("--policies", default=None, help="comma-separated subset (default: all five)")
    parser.add_argument("--step", type=int, default=10,
                        help="messages per conversation between waits for the summarizer: 1 = live chat, "
                             "0 = one batch per conversation (default 10)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for summaries")
    parser.add_argument("--data-dir", default=None, help="keep the engine's files here instead of a temp dir")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    turns: int | str = int(args.turns) if args.turns.isdigit() else args.turns
    report = measure(args.conversations, turns, args.seed,
                     budgets=[int(b) for b in args.budgets.split(",")],
                     policies=[p.strip() for p in args.policies.split(",")] if args.policies else None,
                     step=args.step, timeout=args.timeout, data_dir=args.data_dir)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
