"""Bulk ingestion of JSONL files: one message per line; bad lines reported and skipped; re-runs store nothing twice.

Idempotence comes from derived ids. A line without an ``event_id`` gets
``source(12 hex) + line number(8 hex) + line hash(12 hex)``, where the source
is the file's name (or ``--source KEY``). So:

- re-running the same file, or resuming a killed ingest, finds every stored
  line's id in the log and stores it no second time (counted as a duplicate);
- a new line, or the same text on another line or in another source, gets a
  new id: a user who says "ok" twice keeps both messages;
- a line that was fixed after being rejected has new bytes, hence a new id.

A line with its own ``event_id`` keeps it; if the log holds that id with
different content the line is a *conflict*: reported, not stored.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import EventConflictError, InputFileError, MemfoldError, ValidationError
from .events import MessageAppended, same_message
from .ids import content_hash
from .positions import Position

# A line longer than this is rejected without being parsed: content is
# limited in characters (<= 4 bytes each), metadata and tool calls add at most this much.
EXTRA_LINE_BYTES = 2 * 1024 * 1024
_FIND_CHUNK = 5000


@dataclass(frozen=True)
class Rejection:
    """One line that was not stored: its 1-based number, the field at fault (if one) and why."""

    line: int
    reason: str
    field: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field, "error": self.reason}


@dataclass
class IngestReport:
    """What an ingest did.

    ``accepted``: messages this run stored; ``duplicates``: lines whose
    message the log already held (stored by an earlier run); ``rejected``:
    lines not stored, conflicts included; ``resumed_after``: with ``resume``,
    the last line the log already held (lines it held were skipped unread and
    counted as duplicates); ``stopped``: why the run ended before
    the end of the file (``strict`` or the log failing), else ``None``.
    """

    accepted: int = 0
    duplicates: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    conflicts: int = 0
    lines: int = 0
    resumed_after: int | None = None
    stopped: str | None = None
    log_failed: bool = False
    seconds: float = 0.0
    positions: list[Position] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 every line is stored, 2 some lines were rejected (the rest is stored), 1 the log failed."""
        if self.log_failed:
            return 1
        return 2 if self.rejected else 0


def line_key(source: str, text: bytes, occurrence: int) -> str:
    """Return the idempotency key of an input line: what names it across re-runs, whatever line number it has.

    ``source`` is the file's name or ``--source``; ``text`` the line's
    stripped bytes; ``occurrence`` counts earlier lines of the same source
    with the same bytes (1 for the first), so a user who says "ok" twice
    keeps both. Deleting or inserting other lines changes no key. The key is
    never stored as it is: the engine turns it into the event id under the
    conversation's data key (``MemoryEngine.keyed_event_id``), and
    ``memfold --url ingest`` sends it as the message ``id``, so embedded and
    remote ingest name a line the same way.
    """
    digest = hashlib.blake2b(text, digest_size=16, key=source.encode("utf-8")[:64], person=b"memfold-line")
    digest.update(occurrence.to_bytes(8, "big"))
    return "ln-" + digest.hexdigest()


def line_id(source_key: str, line_no: int, text: bytes) -> str:
    """Return the derived event id of line ``line_no`` (1-based) with stripped bytes ``text`` of a source.

    Ids of one source sort by line number, so the log's id index grows at one
    place per file instead of taking random page writes.
    """
    return f"{source_key}{line_no:08x}{hashlib.blake2b(text, digest_size=6).hexdigest()}"


def ingest_file(
    engine: Any,
    path: Path,
    *,
    batch_size: int = 2000,
    progress: bool = True,
    strict: bool = False,
    resume: bool = False,
    source: str | None = None,
) -> IngestReport:
    """Append every valid line of ``path`` in batches; return an :class:`IngestReport`.

    1. Check the file can be read (else :class:`InputFileError`, nothing read).
    2. With ``resume``, ask the log which lines it holds and skip them
       unread (counted as duplicates). Every other line is read: a Kafka
       batch cut by a crash may have stored some of its lines and not others,
       so "after the last stored line" would lose the rest; lines rejected
       by the run that stopped are reported again.
    3. Parse and validate each line; a bad line is reported with its number
       and field and skipped (``strict``: the ingest stops there, nothing after
       it is written). Nothing a line contains can raise out of here.
    4. Append valid lines in batches, each atomically: lines already in the
       log are duplicates, an explicit ``event_id`` held with other content a
       conflict. If the log fails, the run stops and says from which line to
       resume; lines of earlier batches stay stored.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    check_readable(path)
    report = IngestReport()
    started = time.perf_counter()
    key = content_hash(source or path.name, length=12)
    max_line = 4 * engine.settings.max_message_chars + EXTRA_LINE_BYTES
    stored: set[int] = set()
    if resume:
        stored = _stored_lines(engine, path, key)
        report.resumed_after = max(stored, default=0)
    batch: list[tuple[int, MessageAppended, bool]] = []  # (line, event, id given by the line)

    columns = (TextColumn("ingesting"), BarColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress, transient=True) as bar, path.open("rb") as fh:
        task = bar.add_task("ingest", total=path.stat().st_size)
        for line_no, raw in enumerate(fh, start=1):
            bar.advance(task, len(raw))
            report.lines = line_no
            text = raw.strip()
            if not text:
                continue
            if line_no in stored:
                report.duplicates += 1
                continue
            if len(text) > max_line:
                rejection = Rejection(line_no, f"line is {len(text)} bytes; the limit is {max_line}")
            else:
                rejection = _parse(engine, text, line_no, key, batch)
            if rejection is not None:
                report.rejected.append(rejection)
                if strict:
                    report.stopped = f"stopped at line {line_no} (--strict); nothing after it was written"
                    break
            if len(batch) >= batch_size and not _flush(engine, batch, report):
                break
        if not report.log_failed:
            _flush(engine, batch, report)
    report.seconds = time.perf_counter() - started
    return report


def check_readable(path: Path) -> None:
    """Raise :class:`InputFileError` unless ``path`` is a file this process can read."""
    if not path.exists():
        raise InputFileError(f"{path}: no such file; give the path of a JSONL file (one message per line)")
    if path.is_dir():
        raise InputFileError(f"{path} is a directory; give the path of a JSONL file (one message per line)")
    try:
        with path.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise InputFileError(f"{path} cannot be read: {exc.strerror or exc}") from exc


def _parse(engine, text: bytes, line_no: int, key: str, batch: list) -> Rejection | None:
    """Validate one line and add it to ``batch``; return the :class:`Rejection` if it is bad. Never raises."""
    try:
        obj = json.loads(text)
    except RecursionError:
        return Rejection(line_no, "not valid JSON: nested too deeply")
    except (ValueError, UnicodeDecodeError) as exc:
        return Rejection(line_no, f"not valid JSON ({exc})")
    try:
        event = engine.validate(obj, line=line_no, event_id=line_id(key, line_no, text))
    except ValidationError as exc:
        return Rejection(line_no, str(exc).removeprefix(f"line {line_no}: "), exc.field)
    except Exception as exc:  # a validation bug must cost this line only, and say so
        return Rejection(line_no, f"could not be validated ({type(exc).__name__}: {exc})")
    batch.append((line_no, event, isinstance(obj, dict) and obj.get("event_id") is not None))
    return None


def _flush(engine, batch: list[tuple[int, MessageAppended, bool]], report: IngestReport) -> bool:
    """Append ``batch`` (then clear it); return False when the log failed and the ingest must stop.

    1. Ask the log which ids it holds: those lines are duplicates, or
       conflicts when the line gave its own id and the stored event differs.
       A repeated id within the batch is judged against its first line.
    2. Append the rest as one atomic batch.
    3. If that raises something other than a log error (an event the log
       cannot store although it passed validation), append line by line so
       only the culprit is rejected.
    """
    if not batch:
        return True
    items = list(batch)
    batch.clear()
    try:
        stored = engine.log.find([event.event_id for _, event, _ in items])
        new: list[tuple[int, MessageAppended]] = []
        first: dict[str, MessageAppended] = {}
        for line_no, event, given in items:
            earlier = first.get(event.event_id)
            if earlier is None and event.event_id in stored:
                position = stored[event.event_id]
                records = engine.log.read(position.partition, position.offset, 1) if given else []
                earlier = records[0].event if records else event
            if earlier is None:
                first[event.event_id] = event
                new.append((line_no, event))
            elif same_message(earlier, event):
                report.duplicates += 1
            else:
                conflict = EventConflictError(
                    f"event_id {event.event_id!r} is already stored with different content; "
                    "use a new event_id for a new message", field="event_id", event_id=event.event_id,
                )
                report.rejected.append(Rejection(line_no, str(conflict), "event_id"))
                report.conflicts += 1
        _append(engine, new, report)
    except MemfoldError as exc:
        report.log_failed = True
        report.stopped = (
            f"the log failed while storing lines {items[0][0]}..{items[-1][0]}: {exc}; lines before "
            f"{items[0][0]} are stored: run the same command with --resume to continue"
        )
        return False
    return True


def _append(engine, new: list[tuple[int, MessageAppended]], report: IngestReport) -> None:
    if not new:
        return
    try:
        report.positions.extend(engine.append_events([event for _, event in new]))
        report.accepted += len(new)
        return
    except MemfoldError as exc:
        if not isinstance(exc, ValidationError):
            raise
    except Exception:
        pass
    for line_no, event in new:  # find the line the log refused; the others are stored
        try:
            report.positions.extend(engine.append_events([event]))
            report.accepted += 1
        except MemfoldError as exc:
            if not isinstance(exc, ValidationError):
                raise
            report.rejected.append(Rejection(line_no, f"could not be stored: {exc}"))
        except Exception as exc:
            report.rejected.append(Rejection(line_no, f"could not be stored ({type(exc).__name__}: {exc})"))


def _stored_lines(engine, path: Path, key: str) -> set[int]:
    """Return the numbers of the lines of ``path`` whose message the log holds."""
    stored: set[int] = set()
    pending: list[tuple[str, int]] = []

    def check() -> None:
        found = engine.log.find([event_id for event_id, _ in pending])
        stored.update(line_no for event_id, line_no in pending if event_id in found)
        pending.clear()

    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            text = raw.strip()
            if not text:
                continue
            pending.append((_given_id(text) or line_id(key, line_no, text), line_no))
            if len(pending) >= _FIND_CHUNK:
                check()
    if pending:
        check()
    return stored


def _given_id(text: bytes) -> str | None:
    if b'"event_id"' not in text:
        return None
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    given = obj.get("event_id") if isinstance(obj, dict) else None
    return given if isinstance(given, str) else None
