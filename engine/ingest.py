"""Bulk ingestion of JSONL files: one message per line, bad lines reported and skipped."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ValidationError
from .positions import Position


@dataclass
class IngestReport:
    """What an ingest did: messages accepted, (line, reason) rejected, wall time, last positions."""

    accepted: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    seconds: float = 0.0
    positions: list[Position] = field(default_factory=list)


def ingest_file(engine: Any, path: Path, *, batch_size: int = 2000, progress: bool = True) -> IngestReport:
    """Append every valid line of ``path`` in batches; return an :class:`IngestReport`.

    A line that is not JSON or not a valid message is reported with its
    1-based line number and skipped; the lines around it are still ingested.
    Each batch is appended atomically, so a crash loses at most the batch in flight
    (the positions of every acknowledged batch are in ``positions``).
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    report = IngestReport()
    started = time.perf_counter()
    batch = []
    total = path.stat().st_size

    def flush() -> None:
        if batch:
            report.positions.extend(engine.append_events(batch))
            report.accepted += len(batch)
            batch.clear()

    columns = (TextColumn("ingesting"), BarColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress, transient=True) as bar, path.open("rb") as fh:
        task = bar.add_task("ingest", total=total)
        for line_no, raw in enumerate(fh, start=1):
            bar.advance(task, len(raw))
            text = raw.strip()
            if not text:
                continue
            try:
                obj = json.loads(text)
            except (ValueError, UnicodeDecodeError) as exc:
                report.rejected.append((line_no, f"not valid JSON ({exc})"))
                continue
            if not isinstance(obj, dict):
                report.rejected.append((line_no, "not a JSON object"))
                continue
            try:
                batch.append(engine.validate(obj, line=line_no))
            except ValidationError as exc:
                report.rejected.append((line_no, str(exc).removeprefix(f"line {line_no}: ")))
                continue
            if len(batch) >= batch_size:
                flush()
        flush()
    report.seconds = time.perf_counter() - started
    return report
