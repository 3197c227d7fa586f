"""``memfold demo``: ingest the bundled sample and show what memory keeps that takeLast loses."""

from __future__ import annotations

import json
import os
import shutil
import time
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from memfold.cli.ingest import ingest_file
from memfold.cli.render import print_context, print_table
from memfold.core.errors import ConfigError
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.context import take_last


def make_console() -> Console:
    """Return the demo's console: the terminal's width, or 200 columns when output goes to a file or a pipe."""
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 200
    return console


console = make_console()
MARKER = ".memfold-demo"
DEMO_CONVERSATION = "support-4711"
DEMO_TENANT = "acme"


def _sample() -> tuple[Path, dict]:
    data = resources.files("memfold.cli") / "data"
    sample = Path(str(data / "sample.jsonl"))
    truth_path = Path(str(data / "sample.truth.json"))
    truth = json.loads(truth_path.read_text()) if truth_path.is_file() else {}
    return sample, truth


def _fresh_dir(path: Path) -> None:
    if path.exists():
        if not (path / MARKER).exists() and any(path.iterdir()):
            raise ConfigError(
                f"{path} exists and is not a memfold demo directory; pass --data-dir to an empty or new directory"
            )
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / MARKER).write_text("created by `memfold demo`; safe to delete\n")


def _facts_for(truth: dict, conversation: str) -> list[tuple[str, str]]:
    conv = truth.get(conversation) or truth.get(f"{DEMO_TENANT}/{conversation}") or {}
    facts = conv.get("facts", conv) if isinstance(conv, dict) else conv
    out = []
    if isinstance(facts, dict):
        for key, value in facts.items():
            out.append((key, value["value"] if isinstance(value, dict) else str(value)))
    elif isinstance(facts, list):
        for f in facts:
            out.append((f.get("key", "?"), str(f.get("latest_value", f.get("value", "")))))
    return out


def _present(value: str, messages) -> bool:
    text = " ".join(" ".join(m.content.split()) for m in messages).lower()
    return " ".join(value.split()).lower() in text


def run_demo(data_dir: Path, *, budget: int = 600, config: str | None = None) -> int:
    """Run the demo in ``data_dir`` (default ``.memfold-demo``); return the exit code."""
    if data_dir == Path(".memfold"):
        data_dir = Path(".memfold-demo")
    started = time.perf_counter()
    _fresh_dir(data_dir)
    sample, truth = _sample()
    settings = Settings.load(config, data_dir=data_dir, policies=POLICY_NAMES, policy="hierarchical")
    console.print(Rule("[bold]memfold demo[/] — event-sourced conversation memory"))
    console.print(f"data dir: [cyan]{data_dir}[/]   event log: [cyan]{settings.log_url()}[/]   "
                  f"projection: [cyan]{settings.projection_path()}[/]   policies: {', '.join(settings.active_policies)}")

    with MemoryEngine(settings) as engine:
        console.print(Rule("1. ingest the bundled sample"))
        report = ingest_file(engine, sample, progress=True)
        engine.wait_idle(timeout=300)
        console.print(f"ingested [bold]{report.accepted}[/] messages in {report.seconds:.2f}s "
                      f"({report.accepted / max(report.seconds, 1e-9):,.0f} messages/s); "
                      f"every message is an immutable event in the log; summaries are events too")

        console.print(Rule("2. what is stored"))
        cols, rows = engine.sql(
            "SELECT tenant_id, conversation_id, message_count AS messages, token_count AS tokens, "
            "strftime(first_at, '%Y-%m-%d %H:%M') AS first, strftime(last_at, '%Y-%m-%d %H:%M') AS last "
            "FROM conversations ORDER BY tenant_id, conversation_id"
        )
        print_table(cols, rows, title="conversations")

        console.print(Rule(f"3. context for {DEMO_TENANT}/{DEMO_CONVERSATION} within {budget} tokens"))
        facts = _facts_for(truth, DEMO_CONVERSATION)
        context = engine.context(DEMO_CONVERSATION, budget=budget, tenant_id=DEMO_TENANT, policy="hierarchical")
        print_context(context, title=f"hierarchical memory (structured facts + narrative), budget {budget}", budget=budget,
                      highlight=[v for _, v in facts])
        history = engine.history(DEMO_CONVERSATION, tenant_id=DEMO_TENANT)
        baseline = take_last(history, budget, settings.system_prompt, engine.counter.count)
        console.print(f"plain takeLast at the same budget keeps the last {len(baseline)} of {len(history)} messages.")
        default = type(settings).model_fields["policy"].default
        window = engine.context(DEMO_CONVERSATION, budget=budget, tenant_id=DEMO_TENANT, policy=default)
        table = Table(title="early facts: in the context or lost?")
        table.add_column("fact")
        table.add_column("latest value")
        table.add_column("memfold (hierarchical)")
        table.add_column(f"memfold ({default}, the default)")
        table.add_column("takeLast")
        kept = [[_present(value, msgs) for msgs in (context, window, baseline)] for _, value in facts]
        for (key, value), cells in zip(facts, kept):
            table.add_row(key, value, *("[green]kept[/]" if k else "[red]lost[/]" for k in cells))
        console.print(table)
        hier, ours, last = (sum(column) for column in zip(*kept)) if kept else (0, 0, 0)
        console.print(f"kept: hierarchical {hier}/{len(facts)}, {default} {ours}/{len(facts)}, takeLast {last}/{len(facts)}")

        console.print(Rule("4. analytics: plain SQL over the projections"))
        cols, rows = engine.sql(
            "SELECT policy, count(*) AS requests, count(*) FILTER (WHERE status = 'completed') AS produced, "
            "count(*) FILTER (WHERE status = 'superseded') AS superseded, "
            "count(*) FILTER (WHERE status = 'failed') AS failed, sum(tokens_in) AS tokens_in, "
            "sum(tokens_out) AS tokens_out, round(avg(covers_to - covers_from + 1), 1) AS avg_covered "
            "FROM summaries GROUP BY policy ORDER BY policy"
        )
        print_table(cols, rows, title="summaries per policy")
        cols, rows = engine.sql(
            "SELECT policy, count(*) AS facts, count(*) FILTER (WHERE retired_by IS NULL) AS current, "
            "count(*) FILTER (WHERE superseded_by IS NOT NULL) AS superseded, "
            "count(DISTINCT conversation_id) AS conversations FROM facts GROUP BY policy ORDER BY policy"
        )
        print_table(cols, rows, title="structured facts per policy, with their lineage (table facts)")
    console.print(Rule())
    console.print(f"done in {time.perf_counter() - started:.1f}s. Try:\n"
                  f"  memfold --data-dir {data_dir} context {DEMO_CONVERSATION} --tenant {DEMO_TENANT} --budget 800 --json\n"
                  f"  memfold --data-dir {data_dir} summaries {DEMO_CONVERSATION} --tenant {DEMO_TENANT}\n"
                  f"  memfold --data-dir {data_dir} sql \"SELECT type, count(*) FROM events GROUP BY type\"")
    return 0
