"""Human-readable terminal output for the CLI (rich tables and panels)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .ports import ContextMessage


def make_console() -> Console:
    """Return the CLI's console: the terminal's width, or 200 columns when output goes to a file or a pipe.

    Rich assumes 80 columns off a terminal, which folds a dozen-column table
    (``memfold audit | less``) into cells four characters wide. ``COLUMNS``
    still decides when set.
    """
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 200
    return console


console = make_console()

_STYLE = {"system_prompt": "bold magenta", "recalled": "cyan", "verbatim": "white", "current": "bold green"}


def print_context(messages: Sequence[ContextMessage], *, title: str, budget: int | None, highlight: Sequence[str] = ()) -> None:
    """Print an assembled context: one row per message with its kind, role, tokens and content."""
    table = Table(title=title, show_lines=False, expand=True)
    table.add_column("kind", style="cyan", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("tok", justify="right", no_wrap=True)
    table.add_column("content", overflow="fold")
    for m in messages:
        style = "bold yellow" if m.kind.startswith("memory") else _STYLE.get(m.kind, "white")
        content = Text(m.content, style=style)
        for needle in highlight:
            content.highlight_words([needle], style="reverse bold", case_sensitive=False)
        table.add_row(m.kind, m.role, str(m.tokens), content)
    used = sum(m.tokens for m in messages)
    table.caption = f"{len(messages)} messages, {used} tokens" + (f" of a {budget}-token budget" if budget else "")
    if budget and used > budget:  # only the system prompt and the current message are never trimmed
        table.caption += ": over it, because the system prompt and the current message are never cut"
    console.print(table)


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None,
                caption: str | None = None, empty: str | None = None) -> None:
    """Print query results as a table; with no rows, the ``empty`` line instead when one is given."""
    if not rows and empty is not None:
        console.print(empty)
        return
    table = Table(title=title, caption=caption)
    for c in columns:
        table.add_column(str(c), overflow="fold")
    for r in rows:
        table.add_row(*("" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v)) for v in r))
    console.print(table)


def print_summaries(rows: Sequence[dict[str, Any]]) -> None:
    """Print a summary chain: one row per request with its outcome and lineage."""
    columns = ["policy", "request_id", "status", "covers_from", "covers_to", "base_summary_id", "summary_id",
               "tokens_in", "tokens_out", "latency_ms", "reason"]
    print_table(columns, [[r.get(c) for c in columns] for r in rows], title="summary chain",
                empty="summary chain: no summary requested yet (a policy asks for one once the conversation passes "
                      "its trigger)")
