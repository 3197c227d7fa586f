"""Memory across a user's conversations: answer-content recall from a new conversation, and the read's latency.

Recall (``--path BEAM/chats/100K``): each BEAM chat's sessions are stored as
conversations of one user (one conversation per session); each question is
then asked from a NEW conversation of that user (``context(...,
user_id=...)``, the question as the query) and scored by answer-content
recall (:mod:`memfold.projections.answer_recall`, as ``memory_quality.py``
does) at 2,000 / 4,000 / 8,000 tokens, for:

- ``no user memory``: the new conversation without a user (what memfold
  gave before users existed: nothing of the other sessions);
- ``user memory``: the new conversation of the user;
- ``one long conversation``: the same sessions as one conversation, the
  question asked inside it (as ``memory_quality.py --dataset beam``).

Figures are the held-out half's (chats 11-20, the default ``--chats``);
chats 1-10 are the tuning half. Offline summarizer, each conversation
appended in one batch.

Latency (``--latency``): one user with 50 conversations and 10,000 messages
(synthetic, ``benchmarks/synth.py``), then a context read with user memory
of a new conversation of that user, a question as the query, repeated;
prints p50 / p99 (ms). Nothing here asserts a figure: it prints them.

    .venv/bin/python benchmarks/user_memory.py --path BEAM/chats/100K
    .venv/bin/python benchmarks/user_memory.py --latency
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import beam  # noqa: E402

BUDGETS = (2000, 4000, 8000)
LIMITS = {"max_message_chars": 1_000_000, "max_message_tokens": 1_000_000}  # BEAM's degenerate messages
DOMAINS = ("support", "travel", "saas", "insurance", "tech")  # benchmarks/synth_domains.py
MODES = ("no user memory", "user memory", "one long conversation")


def sessions(messages: tuple[dict[str, Any], ...]) -> list[list[dict[str, Any]]]:
    """Split a BEAM chat's messages into its sessions: a new one at each new date (the session's time anchor)."""
    out: list[list[dict[str, Any]]] = []
    day = object()
    for m in messages:
        at = m.get("occurred_at")
        if not out or (at is not None and at.date() != day):
            out.append([])
            day = at.date() if at is not None else day
        out[-1].append(m)
    return out


def measure_recall(path: str, chats: str, policy: str, budgets: tuple[int, ...]) -> dict[str, Any]:
    from memfold.core.settings import Settings
    from memfold.engine.engine import MemoryEngine

    loaded = [beam.load_chat(d) for d in beam.chat_dirs(path, chats)]
    scores: dict[tuple[str, int], list[float]] = {}
    by_kind: dict[tuple[str, int, str], list[float]] = {}
    used: dict[tuple[str, int], list[int]] = {}
    latency: list[float] = []
    n_sessions = 0
    with tempfile.TemporaryDirectory(prefix="memfold-users-") as tmp:
        settings = Settings.load(None, data_dir=Path(tmp), policy=policy, policies=(policy,), **LIMITS)
        with MemoryEngine(settings) as engine:
            for chat in loaded:
                user = f"user-{chat.chat_id}"
                parts = sessions(chat.messages)
                n_sessions += len(parts)
                for k, part in enumerate(parts):
                    engine.append_many([{**m, "conversation_id": f"s-{chat.chat_id}-{k}", "user_id": user}
                                        for m in part])
                engine.append_many([{**m, "conversation_id": f"long-{chat.chat_id}"} for m in chat.messages])
            engine.wait_idle(timeout=3600)
            for chat in loaded:
                user = f"user-{chat.chat_id}"
                for q in chat.questions:
                    answer = beam.content_words(q.answer)
                    for b in budgets:
                        for mode in MODES:
                            if mode == "no user memory":  # a new conversation holds nothing without its user
                                msgs = []
                            elif mode == "user memory":
                                t0 = time.perf_counter()
                                msgs = engine.context(f"new-{chat.chat_id}", budget=b, query=q.text, policy=policy,
                                                      user_id=user)
                                latency.append((time.perf_counter() - t0) * 1000)
                            else:
                                msgs = engine.context(f"long-{chat.chat_id}", budget=b, query=q.text, policy=policy)
                            r = beam.recall(answer, beam.context_words(m.content for m in msgs))
                            scores.setdefault((mode, b), []).append(r)
                            by_kind.setdefault((mode, b, q.kind), []).append(r)
                            used.setdefault((mode, b), []).append(sum(m.tokens for m in msgs))
    return {
        "chats": [c.chat_id for c in loaded], "sessions": n_sessions, "policy": policy,
        "questions": sum(len(c.questions) for c in loaded),
        "recall": {f"{mode}@{b}": round(100 * statistics.fmean(v), 1) for (mode, b), v in scores.items()},
        "by_kind": {f"{mode}@{b}@{k}": round(100 * statistics.fmean(v), 1) for (mode, b, k), v in by_kind.items()},
        "tokens": {f"{mode}@{b}": round(statistics.fmean(v)) for (mode, b), v in used.items()},
        "user_read_ms": _percentiles(latency),
    }


def measure_latency(conversations: int, messages: int, reads: int, policy: str) -> dict[str, Any]:
    import synth

    from memfold.core.settings import Settings
    from memfold.engine.engine import MemoryEngine

    per = messages // conversations
    with tempfile.TemporaryDirectory(prefix="memfold-users-latency-") as tmp:
        settings = Settings.load(None, data_dir=Path(tmp), policy=policy, policies=(policy,))
        with MemoryEngine(settings) as engine:
            started = time.perf_counter()
            for c in range(conversations):
                rows = synth.generate_conversation(f"u{c}", DOMAINS[c % len(DOMAINS)], per,
                                                   conversation_id=f"c-{c}")
                engine.append_many([{**_message(r), "user_id": "dana"} for r in rows.messages])
            # The reference: a conversation of the same length without a user, read under the same load.
            solo = synth.generate_conversation("solo", "support", per, conversation_id="solo")
            engine.append_many([_message(r) for r in solo.messages])
            engine.wait_idle(timeout=3600)
            folded = time.perf_counter() - started
            questions = ["What was my order number?", "Which email address did I give you?",
                         "When is the appointment?", "How much was the refund?"]
            reads_of = {"user memory, new conversation": {"conversation_id": "new", "user_id": "dana"},
                        "user memory, one of the 50": {"conversation_id": "c-0"},
                        "no user (reference)": {"conversation_id": "solo"}}
            figures = {}
            for label, how in reads_of.items():
                how = dict(how)
                conversation = how.pop("conversation_id")
                for q in questions:  # warm: the first read of each conversation's recall index loads it
                    engine.context(conversation, budget=4000, query=q, policy=policy, **how)
                times = []
                for i in range(reads):
                    t0 = time.perf_counter()
                    engine.context(conversation, budget=4000, query=questions[i % len(questions)], policy=policy, **how)
                    times.append((time.perf_counter() - t0) * 1000)
                figures[label] = _percentiles(times)
            facts = len(engine.user_memory("dana")["facts"])
    return {"conversations": conversations, "messages": per * conversations, "user_facts": facts,
            "fold_s": round(folded, 1), "reads": reads, "read_ms": figures}


def _message(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("conversation_id", "tenant_id", "role", "content", "ts", "tool_calls", "tool_call_id", "name")
    return {k: v for k, v in row.items() if k in keep}


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 2),
            "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
            "n": len(ordered)}


def render(report: dict[str, Any]) -> None:
    print(f"BEAM chats {','.join(report['chats'])} ({report['sessions']} sessions as conversations, "
          f"{report['questions']} questions), policy {report['policy']}")
    budgets = sorted({int(k.split("@")[1]) for k in report["recall"]})
    print("| asked from | " + " | ".join(f"{b:,}" for b in budgets) + " |")
    print("|---|" + "--:|" * len(budgets))
    for mode in MODES:
        cells = [f"{report['recall'][f'{mode}@{b}']}% ({report['tokens'][f'{mode}@{b}']:,} tok)" for b in budgets]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    ratio = report["recall"]["user memory@4000"] / max(report["recall"]["one long conversation@4000"], 1e-9)
    print(f"user memory / one long conversation at 4,000 tokens: {100 * ratio:.0f}%")
    print(f"context read with user memory: {report['user_read_ms']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", help="folder of BEAM chat folders (BEAM/chats/100K)")
    p.add_argument("--chats", default="11-20", help="chat folders (default 11-20: the held-out half)")
    p.add_argument("--policy", default="sliding_window")
    p.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    p.add_argument("--latency", action="store_true", help="the read-latency benchmark instead")
    p.add_argument("--conversations", type=int, default=50)
    p.add_argument("--messages", type=int, default=10_000)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.latency:
        report = measure_latency(args.conversations, args.messages, args.reads, args.policy)
        print(json.dumps(report, indent=2))
        return 0
    if not args.path:
        p.error("--path BEAM/chats/100K is needed for the recall benchmark (or --latency)")
    report = measure_recall(args.path, args.chats, args.policy, tuple(int(b) for b in args.budgets.split(",")))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
