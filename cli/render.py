"""Human-readable terminal output for the CLI (box tables, plain lines), with content made safe for a terminal.

Tables are drawn by ``tabulate`` (a ~3 ms import; rich's tables cost ~30 ms of
a command's 0.3 s). Stored content never reaches the terminal raw: control
characters are shown as escapes.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, Protocol

from tabulate import tabulate


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


def history_line(index: int, role: str, content: str) -> str:
    """Return the line ``memfold history`` prints for one message."""
    return f"[{index:>4}] {terminal_safe(role):<9} {terminal_safe(content)}"


def print_context(messages: Sequence[ContextRow], *, title: str, budget: int | None, highlight: Sequence[str] = ()) -> None:
    """Print an assembled context: one row per message with its kind, role, tokens and content.

    On a terminal, memory rows and the words of ``highlight`` are marked (ANSI
    bold and reverse); piped, the table is plain text.
    """
    tty = _is_terminal()
    rows = []
    for m in messages:
        content = _cell(m.content)
        kind = _cell(m.kind)
        if tty:
            content = _mark(content, highlight, _REVERSE)
            if m.kind.startswith("memory"):
                kind = f"{_BOLD}{kind}{_RESET}"
        rows.append([kind, _cell(m.role), str(m.tokens), content])
    used = sum(m.tokens for m in messages)
    caption = f"{len(messages)} messages, {used} tokens" + (f" of a {budget}-token budget" if budget else "")
    if budget and used > budget:  # only the system prompt and the current message are never trimmed
        caption += ": over it, because the system prompt and the current message are never cut"
    _print_grid(["kind", "role", "tok", "content"], rows, title=title, caption=caption, right={2})


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None,
                caption: str | None = None, empty: str | None = None) -> None:
    """Print query results as a table; with no rows, the ``empty`` line instead when one is given."""
    if not rows and empty is not None:
        print(terminal_safe(empty))
        return
    cells = [[_cell("" if v is None else (f"{v:.2f}" if isinstance(v, float) else v)) for v in r] for r in rows]
    _print_grid([_cell(c) for c in columns], cells, title=title, caption=caption)


_BOLD, _REVERSE, _RESET = "\x1b[1m", "\x1b[7m", "\x1b[0m"


def _is_terminal() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb" and "NO_COLOR" not in os.environ


def _cell(value: Any) -> str:
    """Return ``value`` as a terminal-safe cell (control characters escaped, tabs as spaces)."""
    return terminal_safe(value).expandtabs(4)


def _mark(text: str, needles: Sequence[str], style: str) -> str:
    """Return ``text`` with each case-insensitive occurrence of any of ``needles`` wrapped in ``style`` (one pass,
    so a needle never matches inside another's escape code)."""
    wanted = [re.escape(terminal_safe(n)) for n in needles if n]
    if not wanted:
        return text
    return re.sub("|".join(wanted), lambda m: f"{style}{m.group()}{_RESET}", text, flags=re.IGNORECASE)


def _width() -> int:
    """The columns a table may use: ``COLUMNS`` when set, else the terminal's, else 200 (a file or a pipe).

    80 columns off a terminal would fold a dozen-column table (``memfold audit | less``) into cells a few
    characters wide.
    """
    if "COLUMNS" in os.environ or sys.stdout.isatty():
        return shutil.get_terminal_size((200, 24)).columns
    return 200


def _print_grid(columns: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None, caption: str | None,
                right: set[int] = frozenset()) -> None:
    """Print ``rows`` under ``columns`` as a box table within :func:`_width`, wrapping the widest columns.

    Every cell is text (no number parsing: ``"0042"`` stays ``"0042"``).
    """
    width = _width()
    # tabulate pads a header by 2 (its MIN_PADDING): a column is at least its header + 2 wide
    caps = _column_caps([max([_visible(c) + 2, *(_visible(line) for r in rows for line in r[i].splitlines())])
                         for i, c in enumerate(columns)], width)
    align = ["right" if i in right else "left" for i in range(len(columns))]
    table = tabulate(rows, headers=list(columns), tablefmt="rounded_outline", disable_numparse=True,
                     colalign=align, maxcolwidths=caps, maxheadercolwidths=caps)
    if title:
        print(textwrap.fill(terminal_safe(title), width))
    print(table)
    if caption:
        print(textwrap.fill(terminal_safe(caption), width))


_ANSI = re.compile("\x1b\\[[0-9;]*m")


def _visible(text: str) -> int:
    return len(_ANSI.sub("", text))


def _column_caps(widths: Sequence[int], available: int) -> list[int | None]:
    """Return a width cap per column (None: no cap) so the table fits ``available`` columns.

    The widest columns are capped to one common width, the largest that fits
    (at least 8 characters each); narrower columns keep their width.
    """
    frame = 3 * len(widths) + 1  # "│ " before each cell, " " after it, the closing "│"
    room = max(available - frame, 8 * len(widths))
    if sum(widths) <= room:
        return [None] * len(widths)
    low, high = 8, max(widths)
    while low < high:  # the largest cap whose capped widths fit the room
        mid = (low + high + 1) // 2
        if sum(min(w, mid) for w in widths) <= room:
            low = mid
        else:
            high = mid - 1
    return [low if w > low else None for w in widths]


def print_summaries(rows: Sequence[dict[str, Any]]) -> None:
    """Print a summary chain: one row per request with its outcome and lineage."""
    columns = ["policy", "request_id", "status", "covers_from", "covers_to", "base_summary_id", "summary_id",
               "tokens_in", "tokens_out", "latency_ms", "reason"]
    print_table(columns, [[r.get(c) for c in columns] for r in rows], title="summary chain",
                empty="summary chain: no summary requested yet (a policy asks for one once the conversation passes "
                      "its trigger)")
