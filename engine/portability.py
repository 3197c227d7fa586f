"""Export the event log to a portable directory (Parquet or JSONL + manifest) and import one into a fresh data dir.

The log is the portable record: an export holds every event as the log
holds it (id, type, schema version, tenant, conversation, seq, time,
causation, payload) with the log position it was read at, and a
``manifest.json`` (memfold and fold versions, settings hashes, positions,
event counts, a SHA-256 per file). See docs/export.md for the format and
the choices below.

- **Sealed unless asked.** By default events are exported as stored:
  private fields sealed under their conversation's data key (the
  ciphertext). ``plaintext=True`` unseals what can be unsealed.
- **Forgotten stays forgotten.** A forgotten conversation's events export
  as the sealed bytes whose key no longer exists (in either mode); the
  manifest lists those destroyed key ids (never key bytes) so an import
  records them as destroyed and reads the events as erased.
- **Keys never leave the key store.** A sealed export imports only where
  the key store holding its live keys is reachable (the same ``keystore``
  setting); to move memory to another deployment, export ``plaintext``:
  the import seals it again under the target's own keys.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from memfold.core.errors import (
    EventDecodeError,
    ExportRefusedError,
    InputFileError,
    KeyStoreError,
    ValidationError,
)
from memfold.core.events import ConversationReopened, Event, decode_dict, sealed_content
from memfold.core.ports import EventLog
from memfold.core.unreadable import UnreadableRecord

FORMAT = "memfold-export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
FORMATS = ("parquet", "jsonl")
_FILES = {"parquet": "events.parquet", "jsonl": "events.jsonl"}
_READ_BATCH = 5000
_APPEND_BATCH = 2000
_PARQUET_ROWS = 50_000  # rows per Parquet row group: bounds the exporter's memory


@dataclass(frozen=True)
class ExportFilter:
    """Which events an export keeps: a tenant, one conversation of it, a time range (``since`` <= occurred_at < ``until``)."""

    tenant_id: str | None = None
    conversation_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for name in ("since", "until"):  # a time without a zone is UTC, as event times are
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))

    def keeps(self, event: Event) -> bool:
        if self.tenant_id is not None and event.tenant_id != self.tenant_id:
            return False
        if self.conversation_id is not None and event.conversation_id != self.conversation_id:
            return False
        if self.since is not None and event.occurred_at < self.since:
            return False
        return self.until is None or event.occurred_at < self.until

    def as_dict(self) -> dict[str, Any]:
        return {"tenant_id": self.tenant_id, "conversation_id": self.conversation_id,
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None}


@dataclass
class ExportReport:
    directory: Path
    events: int
    seconds: float
    manifest: dict[str, Any]


@dataclass
class ImportReport:
    events: int  # in the export
    stored: int  # appended by this import
    present: int  # already in the target log (a second import stores nothing)
    seconds: float
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- export


def export_log(
    log: EventLog, directory: str | Path, *, raw_log: EventLog | None = None, keys: Any = None,
    settings_hashes: dict[str, str] | None = None, fold_version: str = "", format: str = "parquet",
    plaintext: bool = False, only: ExportFilter | None = None,
) -> ExportReport:
    """Write the events of ``log`` up to its current end into ``directory`` (created; must be empty) and a manifest.

    ``log`` reads events unsealed (a sealed log) and ``raw_log`` as stored
    (sealed); without ``plaintext`` the stored form is exported. ``keys`` is
    the key store, asked which key ids are destroyed (forgotten
    conversations). The cut is the end positions at the start: events
    appended meanwhile are left for the next export. Undecodable records
    (poison) are counted in the manifest, not exported. Steps: (1) take the
    end positions; (2) read every partition up to them, filtered, writing
    the file as it goes; (3) hash the file; (4) write the manifest last, so
    a directory without one is an unfinished export.
    """
    if format not in FORMATS:
        raise ValidationError(f"unknown export format {format!r}; choose from {', '.join(FORMATS)}", field="format")
    only = only or ExportFilter()
    out = Path(directory)
    if out.exists() and any(out.iterdir()):
        raise ValidationError(f"{out} is not empty: export into a new or empty directory", field="directory")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    source = log if plaintext or raw_log is None else raw_log
    ends = log.end_positions()  # (1)
    counts: Counter[str] = Counter()
    key_ids: set[tuple[str, str]] = set()
    unreadable = 0
    path = out / _FILES[format]
    writer = _ParquetWriter(path) if format == "parquet" else _JsonlWriter(path)
    try:
        for partition in sorted(ends):  # (2)
            for offset, event in _read_partition(source, partition, ends[partition]):
                if isinstance(event, UnreadableRecord):
                    unreadable += 1
                    continue
                if not only.keeps(event):
                    continue
                counts[event.type] += 1
                sealed = sealed_content(event)
                if sealed is not None:
                    key_ids.add((sealed.key_id, event.key))
                writer.add(partition, offset, event)
    finally:
        writer.close()
    destroyed, live = _key_status(keys, key_ids)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "memfold_version": _memfold_version(),
        "fold_version": fold_version, "created_at": datetime.now(UTC).isoformat(),
        "event_format": format, "sealed": not plaintext and raw_log is not None,
        "settings_hashes": dict(sorted((settings_hashes or {}).items())),
        "partitions": len(ends), "positions": {str(p): o for p, o in sorted(ends.items())},
        "filter": only.as_dict(), "events": sum(counts.values()), "event_counts": dict(sorted(counts.items())),
        "unreadable_skipped": unreadable,
        "destroyed_keys": [{"key_id": k, "scope": s} for k, s in sorted(destroyed)],
        "live_key_ids": sorted(live) if not plaintext else [],
        "files": {path.name: {"sha256": _sha256(path), "bytes": path.stat().st_size, "rows": sum(counts.values())}},
    }  # (3)
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / MANIFEST)  # (4)
    return ExportReport(out, manifest["events"], time.perf_counter() - started, manifest)


def _read_partition(log: EventLog, partition: int, end: int) -> Iterator[tuple[int, Event]]:
    offset = 0
    while offset < end:
        records = log.read(partition, offset, min(_READ_BATCH, end - offset))
        if not records:
            break
        for record in records:
            if record.position.offset >= end:
                return
            yield record.position.offset, record.event
        offset = records[-1].position.offset + 1


def _key_status(keys: Any, key_ids: set[tuple[str, str]]) -> tuple[set[tuple[str, str]], set[str]]:
    """Split ``(key_id, scope)`` pairs into destroyed ones and live key ids."""
    destroyed: set[tuple[str, str]] = set()
    live: set[str] = set()
    if keys is None:
        return destroyed, live
    for key_id, scope in key_ids:
        try:
            alive = keys.key(key_id) is not None
        except KeyStoreError:
            alive = False  # sealed with a key this store never held: unreadable here as anywhere
        if alive:
            live.add(key_id)
        else:
            destroyed.add((key_id, scope))
    return destroyed, live


class _JsonlWriter:
    """One JSON object per line: the event as the log encodes it, plus ``partition`` and ``offset``."""

    def __init__(self, path: Path):
        self._file = open(path, "w", encoding="utf-8")

    def add(self, partition: int, offset: int, event: Event) -> None:
        # The log's own canonical JSON of the event, with the position put first.
        self._file.write(f'{{"partition":{partition},"offset":{offset},{event.encode()[1:]}\n')

    def close(self) -> None:
        self._file.close()


_COLUMNS = ("partition", "offset", "event_id", "type", "schema_version", "tenant_id", "conversation_id", "seq",
            "occurred_at", "causation_id", "payload")


def _parquet_schema():
    import pyarrow as pa

    return pa.schema([
        ("partition", pa.int32()), ("offset", pa.int64()), ("event_id", pa.string()), ("type", pa.string()),
        ("schema_version", pa.int32()), ("tenant_id", pa.string()), ("conversation_id", pa.string()),
        ("seq", pa.int64()), ("occurred_at", pa.timestamp("us", tz="UTC")), ("causation_id", pa.string()),
        ("payload", pa.string()),  # the payload's JSON text, as the log stores it
    ])


class _ParquetWriter:
    """Envelope columns plus the payload's JSON text, written in row groups of :data:`_PARQUET_ROWS`."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self._schema = _parquet_schema()
        self._writer = pq.ParquetWriter(path, self._schema, compression="zstd")
        self._columns: dict[str, list[Any]] = {c: [] for c in _COLUMNS}

    def add(self, partition: int, offset: int, event: Event) -> None:
        c = self._columns
        c["partition"].append(partition)
        c["offset"].append(offset)
        c["event_id"].append(event.event_id)
        c["type"].append(event.type)
        c["schema_version"].append(event.schema_version)
        c["tenant_id"].append(event.tenant_id)
        c["conversation_id"].append(event.conversation_id)
        c["seq"].append(event.seq)
        c["occurred_at"].append(event.occurred_at)
        c["causation_id"].append(event.causation_id)
        payload = event.payload
        c["payload"].append(type(payload).__pydantic_serializer__.to_json(payload).decode())
        if len(c["event_id"]) >= _PARQUET_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._columns["event_id"]:
            self._writer.write_table(pa.table(self._columns, schema=self._schema))
            self._columns = {c: [] for c in _COLUMNS}

    def close(self) -> None:
        self._flush()
        self._writer.close()


# --------------------------------------------------------------------------- import


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """Return the manifest of the export in ``directory`` after checking every file's SHA-256.

    Raises :class:`ExportRefusedError` for a missing or foreign manifest, a
    newer format version, a missing file, or a checksum that fails.
    """
    where = Path(directory)
    if not where.is_dir():
        raise InputFileError(f"{where} is not a directory: give the directory `memfold export` wrote")
    path = where / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportRefusedError(f"{where} has no {MANIFEST}: not a memfold export, or an unfinished one") from None
    except (ValueError, OSError) as exc:
        raise ExportRefusedError(f"{path} cannot be read as JSON: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise ExportRefusedError(f"{path} is not a memfold export manifest (format {manifest.get('format')!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ExportRefusedError(f"{path} has export format version {manifest.get('format_version')!r}; this memfold "
                                 f"reads version {FORMAT_VERSION}: import it with the memfold that wrote it, or newer")
    for name, meta in manifest.get("files", {}).items():
        file = where / name
        if not file.is_file():
            raise ExportRefusedError(f"{file} is listed in the manifest but missing; nothing was imported")
        digest = _sha256(file)
        if digest != meta.get("sha256"):
            raise ExportRefusedError(f"{file}: checksum mismatch (sha256 {digest}, the manifest says "
                                     f"{meta.get('sha256')}); the file was changed or damaged; nothing was imported")
    return manifest


def read_events(directory: str | Path, manifest: dict[str, Any]) -> list[tuple[int, int, Event]]:
    """Return every exported event as ``(partition, offset, event)`` in source log order, upcast to this memfold's schemas.

    Raises :class:`ExportRefusedError` naming the file and row of an event
    this memfold cannot read (an unknown type, a schema version it cannot upcast).
    """
    fmt = manifest.get("event_format")
    if fmt not in _FILES:
        raise ExportRefusedError(f"unknown event file format {fmt!r} in the manifest")
    path = Path(directory) / _FILES[fmt]
    rows = _parquet_rows(path) if fmt == "parquet" else _jsonl_rows(path)
    out: list[tuple[int, int, Event]] = []
    for number, raw in enumerate(rows, 1):
        partition, offset = raw.pop("partition"), raw.pop("offset")
        try:
            out.append((partition, offset, decode_dict(raw)))
        except EventDecodeError as exc:
            raise ExportRefusedError(f"{path.name} row {number} (event {raw.get('event_id')}): {exc}; "
                                     "nothing was imported") from exc
    out.sort(key=lambda t: (t[0], t[1]))
    return out


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                yield json.loads(line)
            except ValueError as exc:
                raise ExportRefusedError(f"{path.name} line {number} is not JSON: {exc}") from exc


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=_PARQUET_ROWS):
        for row in batch.to_pylist():
            row["payload"] = json.loads(row["payload"])
            row["occurred_at"] = row["occurred_at"].isoformat()
            yield row


def import_events(
    log: EventLog, keys: Any, events: Sequence[tuple[int, int, Event]], manifest: dict[str, Any],
    *, settings_hashes: dict[str, str] | None = None,
) -> ImportReport:
    """Append ``events`` (from :func:`read_events`) to ``log`` as they were: ids, times, order per conversation.

    ``log`` seals plaintext content under the target's keys (``keys``, its
    key store) and stores already-sealed events as they are. Idempotent:
    events whose id the log already holds are skipped, so a second import
    stores nothing. Steps: (1) a sealed export needs every live key it
    references in ``keys``, else it is refused before anything is written;
    (2) the destroyed keys of forgotten conversations are recorded as
    destroyed; (3) events are appended in source order in batches, a
    ``ConversationReopened`` giving its conversation a fresh key first.
    Seq numbers are assigned by the log: the same as the source's when the
    export is whole (a filtered export renumbers from each conversation's start).
    """
    started = time.perf_counter()
    warnings = []
    if manifest.get("sealed"):  # (1)
        if keys is None:
            raise ExportRefusedError("this export is sealed and the target seals nothing (no key store): export "
                                     "with --plaintext, or set 'keystore' to the source's key store")
        for key_id in manifest.get("live_key_ids", []):
            try:
                missing = keys.key(key_id) is None
            except KeyStoreError:
                missing = True
            if missing:
                raise ExportRefusedError(
                    f"this export is sealed and data key {key_id} is not in the target's key store: import where the "
                    "source's key store is reachable (setting 'keystore'), or export with --plaintext (docs/export.md)"
                )
    if keys is not None:  # (2)
        for entry in manifest.get("destroyed_keys", []):
            keys.record_destroyed(entry["key_id"], entry["scope"])
    theirs, ours = manifest.get("settings_hashes") or {}, settings_hashes or {}
    if set(theirs) - set(ours):
        warnings.append(f"the source folded policies {', '.join(sorted(theirs))} and this data dir folds "
                        f"{', '.join(sorted(ours))}: set 'policies' to fold the others too (memfold rebuild)")
    for policy in sorted(set(theirs) & set(ours)):
        if theirs[policy] != ours[policy]:
            warnings.append(f"policy {policy} was folded with settings {theirs[policy]} in the source and "
                            f"{ours[policy]} here: contexts differ until the same settings are used")
    stored = present = 0
    pending: list[Event] = []

    def flush() -> None:
        nonlocal stored, present
        if not pending:
            return
        held = log.find([e.event_id for e in pending])
        new = [e for e in pending if e.event_id not in held]
        present += len(pending) - len(new)
        if new:
            log.append(new)
            stored += len(new)
        pending.clear()

    for _, _, event in events:  # (3)
        if isinstance(event, ConversationReopened) and keys is not None:
            flush()
            if not log.find([event.event_id]):
                keys.reopen(event.key)
        pending.append(event)
        if len(pending) >= _APPEND_BATCH:
            flush()
    flush()
    return ImportReport(len(events), stored, present, time.perf_counter() - started, warnings)


# --------------------------------------------------------------------------- helpers


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _memfold_version() -> str:
    try:
        return version("memfold")
    except PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------------- over an engine


def export_engine(engine: Any, directory: str | Path, **options: Any) -> ExportReport:
    """Export the log of ``engine`` (any role) with its settings hashes and fold version; see :func:`export_log`."""
    from memfold.projections.fold import FOLD_VERSION
    from memfold.streams.sealed_log import SealedLog

    log = engine.log
    raw = log.inner if isinstance(log, SealedLog) else None
    keys = engine.sealer.keys if engine.sealer is not None else None
    hashes = {p: engine.settings.settings_hash(p) for p in engine.settings.active_policies}
    return export_log(log, directory, raw_log=raw, keys=keys, settings_hashes=hashes,
                      fold_version=str(FOLD_VERSION), **options)


def import_into(engine: Any, directory: str | Path) -> ImportReport:
    """Check and import the export in ``directory`` through ``engine``'s log (a ``client`` role engine is enough).

    Nothing is appended unless every file's checksum holds, every event
    decodes, and (for a sealed export) every live key is reachable.
    """
    manifest = read_manifest(directory)
    events = read_events(directory, manifest)
    keys = engine.sealer.keys if engine.sealer is not None else None
    hashes = {p: engine.settings.settings_hash(p) for p in engine.settings.active_policies}
    return import_events(engine.log, keys, events, manifest, settings_hashes=hashes)
