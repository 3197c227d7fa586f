"""The ``memfold diff`` command: live versus a replay namespace (:mod:`memfold.engine.replay_diff`)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from memfold.cli.common import open_engine, print_json


def add_commands(command: Callable[..., argparse.ArgumentParser], positive_int: Callable[[str], int]) -> None:
    """Add ``diff`` with ``command`` (the CLI's ``add_parser`` with the common options)."""
    d = command("diff", help="compare a replay with live, per conversation: summaries, facts, context, recall, cost")
    d.add_argument("name", help="the replay namespace (see `memfold replays`)")
    d.add_argument("conversation", nargs="?", help="one conversation (default: every conversation)")
    d.add_argument("--tenant", default=None, help="the conversation's tenant (default: every tenant, or 'default' with CONV)")
    d.add_argument("--budget", type=positive_int, default=4000, help="token budget of the contexts compared (default 4000)")
    d.add_argument("--questions", metavar="FILE",
                   help="JSONL of {conversation, question, answer}: answer-content recall of each side's context")
    d.add_argument("--facts", action="store_true", help="also list each fact added, changed or lost")
    d.add_argument("--json", action="store_true")


def cmd_diff(args: argparse.Namespace) -> int:
    from memfold.engine.replay_diff import load_questions

    questions = load_questions(args.questions) if args.questions else ()
    with open_engine(args) as engine:
        result = engine.diff_replay(args.name, args.conversation, tenant_id=args.tenant, budget=args.budget,
                                    questions=questions)
    if args.json:
        print_json(result.as_dict())
        return 0
    _print(result, facts=args.facts)
    return 0


def _print(result, *, facts: bool) -> None:
    """Print two rows per conversation (live, then the replay with its fact changes) and the totals."""
    from memfold.cli.render import print_table

    def cells(label: str, versions: str, side: dict, delta: str) -> list:
        row = [label, versions, side["facts"], delta, side["context_tokens"]]
        if scored:
            row.append("-" if side["recall"] is None else f"{side['recall']:.0%}")
        return row + [side["calls"], side["cached"], f"{side['tokens_in']}/{side['tokens_out']}"]

    def versions(side) -> str:
        return f"{side.versions} [{side.covers_from}-{side.covers_to}]" if side.versions else "0"

    scored = any(c.questions for c in result.conversations)
    columns = ["conversation", "versions", "facts", "+/~/-", f"ctx@{result.budget}"]
    columns += ["recall"] if scored else []
    columns += ["calls", "cached", "tok in/out"]
    rows = []
    for c in result.conversations:
        name = c.conversation_id if c.tenant_id == "default" else f"{c.tenant_id}/{c.conversation_id}"
        name += f" ({c.live.messages} msgs" + (f", {c.questions} q)" if c.questions else ")")
        changes = f"+{len(c.facts_added)} ~{len(c.facts_changed)} -{len(c.facts_lost)}"
        rows.append(cells(name, versions(c.live), dataclasses.asdict(c.live), ""))
        rows.append(cells(f"  {result.name}", versions(c.replay), dataclasses.asdict(c.replay), changes))
    t = result.totals()
    changes = f"+{t['facts_added']} ~{t['facts_changed']} -{t['facts_lost']}"
    rows.append(cells(f"all ({t['conversations']})", str(t["live"]["versions"]), t["live"], ""))
    rows.append(cells(f"  {result.name}", str(t["replay"]["versions"]), t["replay"], changes))
    policies = result.live_policy if result.live_policy == result.replay_policy else f"{result.live_policy} -> {result.replay_policy}"
    print_table(columns, rows, title=f"live vs replay {result.name} ({policies}, settings {result.replay_settings_hash})",
                caption="each conversation: live, then the replay. versions: completed summaries (and the "
                        "messages the newest covers); facts in force; +/~/-: facts the replay added, changed, lost; ctx: "
                        "context tokens at the budget; calls: summarizer calls, cached apart")
    if facts:
        lines = []
        for c in result.conversations:
            lines += [(c.conversation_id, "added", k, "", v) for k, v in c.facts_added]
            lines += [(c.conversation_id, "changed", k, a, b) for k, a, b in c.facts_changed]
            lines += [(c.conversation_id, "lost", k, v, "") for k, v in c.facts_lost]
        if lines:
            print_table(["conversation", "change", "key", "live", "replay"], lines, title="facts")


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"diff": cmd_diff}
