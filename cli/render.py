"""Human-readable terminal output for the CLI (rich tables and panels), with content made safe for a terminal."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


class ContextRow(Protocol):
    """What a printed context row shows: the engine's ``ContextMessage`` and the client's both are one."""

    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def tokens(self) -> int: ...


def make_console() -> Console:
    """Return the CLI's console: the terminal's width, or 200 columns when output goes to a file or a pipe.

    Rich assumes 80 columns off a terminal, which folds a dozen-column table
    (``memfold audit | less``) into cells four characters wide. ``COLUMNS``
    still decides when set.
    """
    from rich.console import Console  # kept off the CLI's cold path: only tables and panels need rich

    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 200
    return console


@functools.cache
def _console() -> Console:
    """Return the console every table is printed on, made by the first table (the plain lines need none)."""
    return make_console()


# C0 controls but tab and newline (ESC starts a CSI/OSC sequence that can recolour, move the cursor or retitle the
# window; CR overwrites a line), DEL, C1 controls (0x9b is CSI on its own) and the bidi controls that reorder text.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: Any) -> str:
    """Return ``text`` with every control character shown as an escape (``\\x1b``), so content prints as text.

    Stored content is whatever a caller sent; printed raw, an escape sequence
    in it would drive the reader's terminal. Tab and newline stay.
    """
    return UNSAFE.sub(_escape, str(text))


def safe_text(text: Any, style: str = "") -> Text:
    """Return a rich ``Text`` of ``text`` made terminal-safe and never read as rich markup (``[bold]``)."""
    from rich.text import Text  # kept off the CLI's cold path: only tables and panels need rich

    return Text(terminal_safe(text), style=style)


def history_line(index: int, role: str, content: str) -> str:
    """Return the line ``memfold history`` prints for one message."""
    return f"[{index:>4}] {terminal_safe(role):<9} {terminal_safe(content)}"


_STYLE = {"system_prompt": "bold magenta", "recalled": "cyan", "verbatim": "white", "current": "bold green"}


def print_context(messages: Sequence[ContextRow], *, title: str, budget: int | None, highlight: Sequence[str] = ()) -> None:
    """Print an assembled context: one row per message with its kind, role, tokens and content."""
    from rich.table import Table  # kept off the CLI's cold path: only tables and panels need rich

    table = Table(title=safe_text(title), show_lines=False, expand=True)
    table.add_column("kind", style="cyan", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("tok", justify="right", no_wrap=True)
    table.add_column("content", overflow="fold")
    for m in messages:
        style = "bold yellow" if m.kind.startswith("memory") else _STYLE.get(m.kind, "white")
        content = safe_text(m.content, style)
        for needle in highlight:
            content.highlight_words([needle], style="reverse bold", case_sensitive=False)
        table.add_row(safe_text(m.kind), safe_text(m.role), str(m.tokens), content)
    used = sum(m.tokens for m in messages)
    table.caption = f"{len(messages)} messages, {used} tokens" + (f" of a {budget}-token budget" if budget else "")
    if budget and used > budget:  # only the system prompt and the current message are never trimmed
        table.caption += ": over it, because the system prompt and the current message are never cut"
    _console().print(table)


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None,
                caption: str | None = None, empty: str | None = None) -> None:
    """Print query results as a table; with no rows, the ``empty`` line instead when one is given."""
    if not rows and empty is not None:
        _console().print(empty)
        return
    from rich.table import Table  # kept off the CLI's cold path: only tables and panels need rich

    table = Table(title=None if title is None else safe_text(title), caption=caption)
    for c in columns:
        table.add_column(safe_text(c), overflow="fold")
    for r in rows:
        table.add_row(*(safe_text("" if v is None else (f"{v:.2f}" if isinstance(v, float) else v)) for v in r))
    _console().print(table)


def print_summaries(rows: Sequence[dict[str, Any]]) -> None:
    """Print a summary chain: one row per request with its outcome and lineage."""
    columns = ["policy", "request_id", "status", "covers_from", "covers_to", "base_summary_id", "summary_id",
               "tokens_in", "tokens_out", "latency_ms", "reason"]
    print_table(columns, [[r.get(c) for c in columns] for r in rows], title="summary chain",
                empty="summary chain: no summary requested yet (a policy asks for one once the conversation passes "
                      "its trigger)")
