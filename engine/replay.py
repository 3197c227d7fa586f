"""Fold the log into a projection *beside* the live one: for ``verify`` and for a rebuild that swaps at the end.

The beside projection is a fresh DuckDB file folded by the same
:class:`~memfold.projections.projector.Projector` as the live one, up to
given end positions, appending nothing to the log and calling no model: with
the live settings every outcome is already in the log. The live projection
is never written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfold.core.ports import EventLog, FoldContext, Policy
from memfold.core.tokens import TokenCounter
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore

# What verify compares: every table a read or an audit depends on.
VERIFIED_TABLES = ("conversations", "messages", "summaries", "facts", "policy_state", "policy_rows", "search_docs",
                   "state_history", "events", "positions", "user_facts", "user_notes", "user_summaries")
# How much of one differing row verify prints (a policy state row is a JSON document of kilobytes).
DESCRIBE_WIDTH = 300


def fold_beside(
    event_log: EventLog,
    store: DuckDBProjectionStore,
    policies: Mapping[str, tuple[Policy, FoldContext]],
    counter: TokenCounter,
    ends: Mapping[int, int],
    *,
    batch_size: int = 5000,
    progress: Callable[[int], None] = lambda n: None,
) -> int:
    """Fold ``event_log`` into ``store`` from the store's positions up to ``ends`` (partition -> next offset).

    Resumable: it starts *at* the store's own positions. Appends nothing;
    returns how many events were applied. ``progress(n)`` after each batch.
    """
    projector = Projector(store, dict(policies), counter)
    total = 0
    for partition, end in sorted(ends.items()):
        while (start := store.position().get(partition, 0)) < end:
            records = event_log.read(partition, start, min(batch_size, end - start))
            if not records:
                break
            changes, positions, _decided = projector.project(records)
            store.apply(changes, positions)
            projector.committed(changes)
            total += len(changes)
            progress(len(changes))
    return total


@dataclass
class Difference:
    """Rows of one table that differ between the live projection and the beside one."""

    table: str
    only_live: list[tuple[Any, ...]] = field(default_factory=list)
    only_replay: list[tuple[Any, ...]] = field(default_factory=list)

    def describe(self, limit: int = 5, width: int = DESCRIBE_WIDTH) -> str:
        """Return a few lines naming the table and the first differing rows, each cut to ``width`` characters.

        A policy state row is a JSON document of many kilobytes; cut, the
        lines still say which conversation and which table differ.
        """
        lines = [f"{self.table}: {len(self.only_live)} row(s) only in live, {len(self.only_replay)} only in the replay"]
        lines += [f"  live:   {_cut(r, width)}" for r in self.only_live[:limit]]
        lines += [f"  replay: {_cut(r, width)}" for r in self.only_replay[:limit]]
        return "\n".join(lines)


def _cut(row: tuple, width: int) -> str:
    """Return ``row`` as text, at most ``width`` characters plus a note of its full length."""
    text = str(row)
    return text if len(text) <= width else f"{text[:width]}… ({len(text):,} characters)"


def compare(live: DuckDBProjectionStore, replay: DuckDBProjectionStore,
            conversation: tuple[str, str] | None = None) -> list[Difference]:
    """Return the differences between two projections, table by table (empty: identical).

    ``conversation`` (tenant, conversation) restricts the comparison to its
    rows (``positions`` is then skipped: it spans every conversation).
    """
    out = []
    for table in VERIFIED_TABLES:
        if conversation is not None and table == "positions":
            continue
        a, b = _rows(live, table, conversation), _rows(replay, table, conversation)
        if a != b:
            sa, sb = set(a), set(b)
            out.append(Difference(table, sorted(sa - sb, key=str), sorted(sb - sa, key=str)))
    return out


def _rows(store: DuckDBProjectionStore, table: str, conversation: tuple[str, str] | None) -> list[tuple[Any, ...]]:
    sql, params = f"SELECT * FROM {table}", []
    if conversation is not None:
        sql += " WHERE tenant_id = ? AND conversation_id = ?"
        params = list(conversation)
    _cols, rows = store.query(sql, params)
    return sorted((tuple(str(v) if isinstance(v, (dict, list)) else v for v in r) for r in rows),
                  key=lambda r: tuple("" if v is None else str(v) for v in r))


def beside_path(live: Path, name: str) -> Path:
    """Return the path of a beside projection named ``name`` next to the live file."""
    return live.with_name(f"{live.stem}.{name}{live.suffix}")
