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

    .venv/bin/python benchmarks/memory_quality.py                      # 6 x 300 messages, seed 7
    .venv/bin/python benchmarks/memory_quality.py --conversations 10 --turns 500 --json

A "turn" is one message of any role (user, assistant, tool).
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
    """Return per policy: summarizer calls (completed + failed), of which failed and cached, tokens in/out."""
    _, rows = engine.sql(
        "SELECT policy, count(*) AS calls, count(*) FILTER (WHERE status = 'failed') AS failed, "
        "count(*) FILTER (WHERE cached) AS cached, coalesce(sum(tokens_in), 0) AS tokens_in, "
        "coalesce(sum(tokens_out), 0) AS tokens_out FROM summaries "
        "WHERE status IN ('completed', 'failed') GROUP BY policy"
    )
    out = {p: {"calls": 0, "failed": 0, "cached": 0, "tokens_in": 0, "tokens_out": 0} for p in policies}
    for policy, calls, failed, cached, tokens_in, tokens_out in rows:
        out[policy] = {"calls": int(calls), "failed": int(failed), "cached": int(cached),
                       "tokens_in": int(tokens_in), "tokens_out": int(tokens_out)}
    return out


def measure(conversations: int = 6, turns: int | str = 300, seed: str | int = 7, *,
            budgets: Sequence[int] = BUDGETS, policies: Sequence[str] | None = None,
            timeout: float = 600.0, data_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the benchmark and return its results as a JSON-ready dict.

    Steps: 1. generate the conversations; 2. ingest them, one batch per
    conversation, into an engine in ``data_dir`` (default: a temporary
    directory, removed afterwards) folding every policy; 3. wait until the
    projection and every summary are done; 4. score contexts per policy and
    budget; 5. read summarizer costs from the projection.
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
            for conv in convs:
                engine.append_many(conv.messages)
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
            costs[BASELINE] = {"calls": 0, "failed": 0, "cached": 0, "tokens_in": 0, "tokens_out": 0}
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
        "seconds": {"append": appended - started, "until_idle": idle - appended, "score": scored - idle},
        "policies": results,
    }


def render_table(report: dict[str, Any]) -> None:
    """Print the report as an aligned table (rich)."""
    from rich.console import Console
    from rich.table import Table

    budgets = report["budgets"]
    table = Table(title=(f"memory quality: {report['conversations']} conversations x {report['turns']} messages "
                         f"(seed {report['seed']}), {report['facts']} planted facts, {report['summarizer']} summarizer"))
    table.add_column("policy")
    for b in budgets:
        table.add_column(f"facts @{b:,}", justify="right")
    table.add_column(f"updated @{budgets[-1]:,}", justify="right")
    table.add_column("calls / 1k turns", justify="right")
    table.add_column("tokens / 1k turns", justify="right")
    for policy, res in report["policies"].items():
        cells = [policy]
        for b in budgets:
            r = res["budgets"][str(b)]
            flag = "*" if r["contexts_over_budget"] else ""
            cells.append(f"{r['fraction']:.0%}{flag}")
        last = res["budgets"][str(budgets[-1])]
        cells.append(f"{last['updated_kept']}/{last['updated_total']}" if last["updated_total"] else "-")
        s = res["summarizer"]
        cells.append(f"{s['calls_per_1k_turns']:.1f}")
        cells.append(f"{s['tokens_per_1k_turns']:,.0f}")
        table.add_row(*cells)
    console = Console()
    console.print(table)
    if any(r["contexts_over_budget"] for res in report["policies"].values() for r in res["budgets"].values()):
        console.print("* some contexts exceed the budget (memory messages are never trimmed)")
    secs = report["seconds"]
    console.print(f"{report['messages']} messages appended in {secs['append']:.1f}s; projection and summaries done "
                  f"{secs['until_idle']:.1f}s later; scoring took {secs['score']:.1f}s. "
                  f"'updated' = facts whose value changed later in the conversation, latest value kept.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--turns", default="300", help="messages per conversation, or MIN-MAX (default 300)")
    parser.add_argument("--seed", default="7")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)), help="comma-separated token budgets")
    parser.add_argument("--policies", default=None, help="comma-separated subset (default: all five)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for summaries")
    parser.add_argument("--data-dir", default=None, help="keep the engine's files here instead of a temp dir")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    turns: int | str = int(args.turns) if args.turns.isdigit() else args.turns
    report = measure(args.conversations, turns, args.seed,
                     budgets=[int(b) for b in args.budgets.split(",")],
                     policies=[p.strip() for p in args.policies.split(",")] if args.policies else None,
                     timeout=args.timeout, data_dir=args.data_dir)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
