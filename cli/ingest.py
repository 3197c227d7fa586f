"""Bulk ingestion of JSONL input: one message per line; bad lines reported and skipped; re-runs store nothing twice.

A line is one message in the shape ``format`` names (default ``openai``: an
OpenAI chat message or memfold's flat alias; ``anthropic``: one Messages API
message; ``responses``: one Responses input item), plus memfold's keys
(``conversation_id``, ...). An Anthropic line may hold several messages (text,
tool uses, tool results); they are stored or rejected together, the k-th
(k >= 1) keyed by the line's key plus ``#k``.

The input is read once, front to back, and never probed: a regular file, a
pipe, ``/dev/stdin`` or a process substitution are all read the same way.

Idempotence comes from keyed ids. A line without an ``event_id`` is named
by :func:`line_key` (its source, its stripped bytes and how many earlier
lines of the source had the same bytes), and its event id is that key under
its conversation's data key (``MemoryEngine.keyed_event_id``). So:

- re-running the same input, or resuming a killed ingest, finds every stored
  line's id in the log and stores it no second time (counted as a duplicate);
- deleting or inserting other lines (a rejected line taken out) changes no
  other line's id;
- the same text said twice in a source gets two ids: a user who says "ok"
  twice keeps both messages; the same text in another source is new input;
- a line that was fixed after being rejected has new bytes, hence a new id;
- an id tells nothing of the line's content once its conversation is forgotten.

A line with its own ``event_id`` keeps it; if the log holds that id with
different content the line is a *conflict*: reported, not stored. A line
naming a forgotten conversation is rejected (``reopen`` it first).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from memfold.core.errors import EventConflictError, InputFileError, MemfoldError, ValidationError
from memfold.core.events import MessageAppended, replaced, same_message
from memfold.core.positions import Position
from memfold.core.shapes import messages_from
from memfold.core.unreadable import UnreadableRecord

# A line longer than this is rejected without being parsed: content is
# limited in characters (<= 4 bytes each), metadata and tool calls add at most this much.
EXTRA_LINE_BYTES = 2 * 1024 * 1024
_SKIP_CHUNK = 64 * 1024  # an over-long line is passed over this many bytes at a time, never held whole
_UNNAMED = "unnamed"  # the id a line is validated under before its keyed id is known


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
    the last line the log already held (0 when it held none; the lines it held
    are counted as duplicates); ``stopped``: why the run ended before
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


def ingest_file(
    engine: Any,
    path: Path,
    *,
    batch_size: int = 2000,
    progress: bool = True,
    strict: bool = False,
    resume: bool = False,
    source: str | None = None,
    format: str = "openai",
) -> IngestReport:
    """Append every valid line of ``path`` in batches; return an :class:`IngestReport`.

    ``path`` may be a regular file or a stream (a pipe, ``/dev/stdin``, a
    process substitution): it is read once, in order, and nothing of it is
    read before step 2. ``source`` names the input in its lines' keys
    (default: the file's name; ``stdin`` for ``/dev/stdin``, so two
    different inputs piped in should each be given their own ``source``).

    1. Check the path can be opened for reading (else :class:`InputFileError`, nothing read).
    2. Read line by line, at most the line limit at a time: a longer line is
       passed over in chunks (never held whole) and rejected.
    3. Parse and validate each line and give it its id (:func:`line_key`
       under the conversation's data key, or the line's own ``event_id``); a
       bad line is reported with its number and field and skipped
       (``strict``: the ingest stops there, nothing after it is written).
       Nothing a line contains can raise out of here.
    4. Append valid lines in batches, each atomically: lines already in the
       log are duplicates, an explicit ``event_id`` held with other content a
       conflict. If the log fails, the run stops and says from which line to
       resume; lines of earlier batches stay stored.

    ``resume`` changes what is stored in no way (every run stores only the
    lines the log lacks, whichever lines a cut Kafka batch kept); it reports
    the last line the log already held as ``resumed_after``.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    check_readable(path)
    report = IngestReport()
    started = time.perf_counter()
    source_name = source or path.name
    max_line = 4 * engine.settings.max_message_chars + EXTRA_LINE_BYTES
    seen: dict[bytes, int] = {}  # digest of a line's bytes -> how many lines had them so far
    batch: list[tuple[int, MessageAppended, bool]] = []  # (line, event, id given by the line)
    if resume:
        report.resumed_after = 0

    columns = (TextColumn("ingesting"), BarColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputFileError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    with Progress(*columns, disable=not progress, transient=True) as bar, fh:
        info = os.fstat(fh.fileno())
        # A pipe has no size: the bar then shows bytes read and speed, no fraction.
        task = bar.add_task("ingest", total=info.st_size if stat.S_ISREG(info.st_mode) else None)
        for line_no, (size, raw) in enumerate(_bounded_lines(fh, max_line), start=1):
            bar.advance(task, size)
            report.lines = line_no
            if raw is None:
                rejection: Rejection | None = Rejection(line_no, f"line is {size} bytes; the limit is {max_line}")
            else:
                text = raw.strip()
                if not text:
                    continue
                digest = hashlib.blake2b(text, digest_size=16).digest()
                occurrence = seen[digest] = seen.get(digest, 0) + 1
                rejection = _parse(engine, text, line_no, line_key(source_name, text, occurrence), batch, format)
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


def line_event_ids(engine: Any, path: Path, *, source: str | None = None, format: str = "openai") -> dict[int, str]:
    """Return, per line number, the event id :func:`ingest_file` gives each line of ``path`` that is a valid message.

    Blank and invalid lines are absent; a line holding several messages gives its first one's id. Reads ``path`` once and writes
    nothing (it may create a conversation's data key, as ingesting would).
    """
    check_readable(path)
    source_name = source or path.name
    max_line = 4 * engine.settings.max_message_chars + EXTRA_LINE_BYTES
    seen: dict[bytes, int] = {}
    ids: dict[int, str] = {}
    with path.open("rb") as fh:
        for line_no, (_size, raw) in enumerate(_bounded_lines(fh, max_line), start=1):
            text = raw.strip() if raw is not None else b""
            if not text:
                continue
            digest = hashlib.blake2b(text, digest_size=16).digest()
            occurrence = seen[digest] = seen.get(digest, 0) + 1
            batch: list[tuple[int, MessageAppended, bool]] = []
            if _parse(engine, text, line_no, line_key(source_name, text, occurrence), batch, format) is None:
                ids[line_no] = batch[0][1].event_id
    return ids


def check_readable(path: Path) -> None:
    """Raise :class:`InputFileError` unless ``path`` is a file or stream this process may read.

    Reads nothing: a byte taken from a pipe to test it would be lost to the ingest.
    """
    if not path.exists():
        raise InputFileError(f"{path}: no such file; give the path of a JSONL file (one message per line)")
    if path.is_dir():
        raise InputFileError(f"{path} is a directory; give the path of a JSONL file (one message per line)")
    if not os.access(path, os.R_OK):
        raise InputFileError(f"{path} cannot be read: permission denied")


def _bounded_lines(fh: BinaryIO, limit: int) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(bytes, line)`` for each line of ``fh``; ``line`` is None when it holds more than ``limit`` bytes.

    At most ``limit`` + 1 bytes of a line are held: the rest of a longer one
    is read and dropped in chunks, so memory stays bounded whatever the input.
    """
    while raw := fh.readline(limit + 1):
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield len(raw), raw
            continue
        size = len(raw)
        del raw
        while chunk := fh.readline(_SKIP_CHUNK):
            size += len(chunk)
            if chunk.endswith(b"\n"):
                break
        yield size, None


def _parse(engine, text: bytes, line_no: int, key: str, batch: list, format: str = "openai") -> Rejection | None:
    """Validate one line, name it, and add its message(s) to ``batch``; return the :class:`Rejection` if it is bad.

    Never raises. ``key`` is the line's :func:`line_key`; a message without
    its own ``event_id`` gets ``engine.keyed_event_id`` of it (``key#k`` for
    the k-th, k >= 1, of a line that holds several), which also refuses a
    forgotten conversation. A line is added whole or not at all.
    """
    try:
        obj = json.loads(text)
    except RecursionError:
        return Rejection(line_no, "not valid JSON: nested too deeply")
    except (ValueError, UnicodeDecodeError) as exc:
        return Rejection(line_no, f"not valid JSON ({exc})")
    try:
        # openai lines are made canonical by validation itself (the flat alias included)
        messages = [obj] if format == "openai" or not isinstance(obj, dict) else messages_from(format, [obj])
        events = []
        for k, message in enumerate(messages):
            given = isinstance(message, dict) and message.get("event_id") is not None
            event = engine.validate(message, line=line_no, event_id=_UNNAMED)
            if not given:
                event = replaced(event, event_id=engine.keyed_event_id(
                    event.conversation_id, key if k == 0 else f"{key}#{k}", tenant_id=event.tenant_id))
            events.append((line_no, event, given))
    except ValidationError as exc:
        return Rejection(line_no, str(exc).removeprefix(f"line {exc.line}: "), exc.field)
    except Exception as exc:  # a validation bug must cost this line only, and say so
        return Rejection(line_no, f"could not be validated ({type(exc).__name__}: {exc})")
    batch.extend(events)
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
            if isinstance(earlier, UnreadableRecord):  # the id names a record no event decodes from: not this line
                report.rejected.append(Rejection(
                    line_no, f"event_id {event.event_id!r} names a stored record that cannot be read "
                    f"({earlier.error}); use a new event_id", "event_id"))
                report.conflicts += 1
                continue
            if earlier is None:
                first[event.event_id] = event
                new.append((line_no, event))
            elif same_message(earlier, event):
                report.duplicates += 1
                if report.resumed_after is not None and event.event_id in stored:
                    report.resumed_after = max(report.resumed_after, line_no)
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
