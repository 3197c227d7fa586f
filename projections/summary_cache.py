"""A content-addressed summary cache in the projection store's DuckDB: unchanged inputs cost no model call.

The key is a sha256 over the summarizer's name, model, prompt hash, hosted
prompt id/version and the whole :class:`SummaryInput` (messages with their
ids, tenant and conversation, existing summary and facts, window, caps), so
any change to what the model would see, or to who asked, is a miss.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import operator
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import duckdb
import msgspec
from pydantic import BaseModel

from memfold.core.errors import ProjectionError
from memfold.core.events import Fact
from memfold.core.ids import canonical_json
from memfold.core.ports import Summarizer, SummaryInput, SummaryOutput

log = logging.getLogger(__name__)

CACHE_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS llm_cache (
    key         VARCHAR PRIMARY KEY,
    summarizer  VARCHAR NOT NULL,
    model       VARCHAR NOT NULL,
    prompt_hash VARCHAR NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    output      JSON NOT NULL,
    tenant_id   VARCHAR,
    conversation_id VARCHAR
)
"""
# Caches written before entries named their conversation (forgetting one deletes its entries).
CACHE_TABLE_MIGRATIONS = (
    "ALTER TABLE llm_cache ADD COLUMN IF NOT EXISTS tenant_id VARCHAR",
    "ALTER TABLE llm_cache ADD COLUMN IF NOT EXISTS conversation_id VARCHAR",
    # Every conversation an entry was made from (a user summary reads several): forgetting any deletes it.
    "ALTER TABLE llm_cache ADD COLUMN IF NOT EXISTS conversations VARCHAR[]",
)


_EXACT_TYPES = frozenset({str, bool, type(None)})  # encoded alike by json.dumps and msgspec
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
# The key is sha256 over canonical JSON (engine.ids.canonical_json: sorted keys, no whitespace, no
# ASCII escaping). msgspec writes the same bytes for strings (checked for every code point), ints of
# 64 bits, booleans, null, arrays and sorted objects, 5-10x faster than json.dumps; floats and larger
# ints are handed to it as the text json.dumps gives them (msgspec.Raw), so stored keys stay valid.
_KEY_JSON = msgspec.json.Encoder(order="sorted")


@functools.lru_cache(maxsize=64)
def _fields(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple]] | None:
    """Return the field names of struct ``cls`` and a getter of their values (None for any other type)."""
    if not issubclass(cls, msgspec.Struct):
        return None
    names = cls.__struct_fields__
    return names, operator.attrgetter(*names) if len(names) > 1 else (lambda obj: (getattr(obj, names[0]),))


def _number(value: int | float) -> Any:
    """Return ``value`` as the key's encoder writes it: as is, or json.dumps' own text of it."""
    if isinstance(value, float):
        if value != value:
            text = "NaN"
        elif value in (float("inf"), float("-inf")):
            text = "Infinity" if value > 0 else "-Infinity"
        else:
            text = float.__repr__(value)
        return msgspec.Raw(text.encode())
    if type(value) is int and _INT_MIN <= value <= _INT_MAX:
        return value
    return msgspec.Raw(int.__repr__(value).encode())


def _plain(value: Any) -> Any:
    """Return ``value`` as data for the key's JSON: structs and pydantic models become dicts, tuples lists.

    Dispatched on the exact type first (a key is built for every summary call,
    over every message of the request); anything else goes the general way.
    Numbers go through :func:`_number`; what JSON has no form for becomes its
    ``str`` (as ``canonical_json``'s ``default=str`` made it).
    """
    kind = type(value)
    if kind in _EXACT_TYPES:
        return value
    if kind is int and _INT_MIN <= value <= _INT_MAX:
        return value
    if kind is datetime:
        return value.isoformat()
    if kind is tuple or kind is list:
        return [_plain(v) for v in value]
    if kind is dict:
        return {str(k): _plain(v) for k, v in value.items()}
    fields = _fields(kind)
    if fields is not None:
        names, values = fields
        return {
            name: v if type(v) in _EXACT_TYPES or (type(v) is int and _INT_MIN <= v <= _INT_MAX) else _plain(v)
            for name, v in zip(names, values(value))
        }
    if isinstance(value, str):  # a str subclass: its text, as json.dumps writes it
        return str.__str__(value)
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(mode="json"))
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def summary_input_content(request: SummaryInput) -> Any:
    """Return every field of ``request`` as canonical, JSON-able data (the content part of the key).

    ``keep_facts`` is left out when false, so the keys of requests from before
    the field (and of every policy but the sliding window) stay what they were.
    """
    content = _plain(request)
    if not request.keep_facts:
        del content["keep_facts"]
    return content


def key_material(summarizer: str, model: str, prompt_hash: str, request: SummaryInput) -> bytes:
    """Return the bytes the cache key hashes: the canonical JSON of the summarizer identity and ``request``."""
    return _KEY_JSON.encode({
        "summarizer": summarizer,
        "model": model,
        "prompt_hash": prompt_hash,
        "prompt_id": request.prompt_id,
        "prompt_version": request.prompt_version,
        "input": summary_input_content(request),
    })


def cache_key(summarizer: str, model: str, prompt_hash: str, request: SummaryInput) -> str:
    """Return the cache key of ``request`` for a summarizer identity (hex sha256)."""
    return hashlib.sha256(key_material(summarizer, model, prompt_hash, request)).hexdigest()


def output_to_json(output: SummaryOutput) -> str:
    """Return the stored JSON of an output (``cached`` is not stored: it describes a read)."""
    return canonical_json(
        {
            "text": output.text,
            "facts": [f.model_dump(mode="json", exclude_none=True) for f in output.facts],
            "model": output.model,
            "prompt_hash": output.prompt_hash,
            "tokens_in": output.tokens_in,
            "tokens_out": output.tokens_out,
        }
    )


def output_from_json(text: str, *, cached: bool) -> SummaryOutput:
    """Return the :class:`SummaryOutput` stored as ``text``."""
    data = json.loads(text)
    return SummaryOutput(
        text=data["text"],
        facts=tuple(Fact(**f) for f in data.get("facts", [])),
        model=data.get("model", ""),
        prompt_hash=data.get("prompt_hash", ""),
        tokens_in=int(data.get("tokens_in", 0)),
        tokens_out=int(data.get("tokens_out", 0)),
        cached=cached,
    )


class CachingSummarizer:
    """Wrap a summarizer with the ``llm_cache`` table of a DuckDB connection.

    A hit returns the stored output with ``cached=True`` and does not call the
    inner summarizer; a miss calls it and stores the result; an error from the
    inner summarizer propagates and nothing is stored. A DuckDB failure while
    reading or writing the cache is logged and counted in ``errors``, never
    raised: the cache can only save calls, not cause failures. Thread-safe:
    each call uses its own cursor. Inside :meth:`batched`, new entries are
    written together when the block ends (one transaction instead of one
    per call).
    """

    def __init__(self, inner: Summarizer, conn: duckdb.DuckDBPyConnection, *, make_table: bool = True):
        self.inner = inner
        self.name = inner.name
        self._conn = conn
        self._lock = threading.Lock()
        self._batching = 0  # open batched() blocks
        self._pending: list[list[Any]] = []  # rows written when the last batched() block ends
        self.hits = 0
        self.misses = 0
        self.errors = 0
        if not make_table:  # the connection's schema has it (DuckDBProjectionStore)
            return
        try:
            with self._cursor() as cur:
                for ddl in (CACHE_TABLE_DDL, *CACHE_TABLE_MIGRATIONS):
                    cur.execute(ddl)
        except duckdb.Error as exc:
            raise ProjectionError(f"cannot create the llm_cache table: {exc}") from exc

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        return self._conn.cursor()

    def identity(self, request: SummaryInput) -> tuple[str, str]:
        """Return (model, prompt_hash) of the inner summarizer for ``request`` ("" when it cannot tell)."""
        model, phash = self.inner.identity(request)
        return str(model), str(phash)

    def key(self, request: SummaryInput) -> str:
        """Return the cache key of ``request``."""
        model, phash = self.identity(request)
        return cache_key(self.inner.name, model, phash, request)

    def drop_text_caches(self) -> None:
        """Empty the inner summarizer's caches of conversation text, where it keeps any (erasure calls it)."""
        self.inner.drop_text_caches()

    def close(self) -> None:
        """Close the inner summarizer, where it has anything to close (worker processes)."""
        self.inner.close()

    def stats(self) -> dict[str, int]:
        """Return the hit/miss/error counters since this wrapper was built."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "errors": self.errors}

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        """Return the cached output for ``request``, or call the inner summarizer and cache its output."""
        key = self.key(request)
        found = self._read(key)
        if found is not None:
            with self._lock:
                self.hits += 1
            return found
        return self.call(request, key)

    def cached(self, requests: list[SummaryInput]) -> list[SummaryOutput | None]:
        """Return the cached output of each request (None: not cached), read in one query; hits are counted."""
        return [output for _key, output in self.lookup(requests)]

    def call(self, request: SummaryInput, key: str) -> SummaryOutput:
        """Call the inner summarizer for ``request``, whose ``key`` :meth:`lookup` just missed, and cache its output."""
        with self._lock:
            self.misses += 1
        output = self.inner.summarize(request)  # errors propagate uncached
        self._write(key, output, request)
        return output

    def lookup(self, requests: list[SummaryInput]) -> list[tuple[str, SummaryOutput | None]]:
        """Return (key, cached output or None) of each request, read in one query; hits are counted.

        For callers answering many requests at once (the summarizer pool, a
        replay): a point query per request cost DuckDB milliseconds each.
        Answer a miss with :meth:`call` and its key.
        """
        keys = [self.key(r) for r in requests]
        try:
            with self._cursor() as cur:
                rows = dict(cur.execute("SELECT key, output FROM llm_cache WHERE key IN (SELECT unnest(?::VARCHAR[]))",
                                        [sorted(set(keys))]).fetchall())
        except duckdb.Error as exc:
            self._count_error("read", exc)
            return [(key, None) for key in keys]
        out = [(key, self._decode(rows[key]) if key in rows else None) for key in keys]
        with self._lock:
            self.hits += sum(o is not None for _k, o in out)
        return out

    def _read(self, key: str) -> SummaryOutput | None:
        try:
            with self._cursor() as cur:
                rows = cur.execute("SELECT output FROM llm_cache WHERE key = ?", [key]).fetchall()
                row = rows[0] if rows else None
        except duckdb.Error as exc:
            self._count_error("read", exc)
            return None
        return None if row is None else self._decode(row[0])

    def _decode(self, text: str) -> SummaryOutput | None:
        """Return the stored output ``text`` as a cache hit; None (counted as an error) when it does not decode."""
        try:
            return output_from_json(text, cached=True)
        except (ValueError, KeyError, TypeError) as exc:
            self._count_error("decode", exc)
            return None

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Hold the entries written inside the block and write them in one transaction when it ends.

        A DuckDB commit per entry cost more than the offline summarizer's
        call itself. Blocks may nest or overlap (other threads): the
        entries are written when the last one ends. An entry not yet
        written is only a later miss, never a wrong answer.
        """
        with self._lock:
            self._batching += 1
        try:
            yield
        finally:
            with self._lock:
                self._batching -= 1
                rows, self._pending = (self._pending, []) if self._batching == 0 else ([], self._pending)
            self._insert(rows)

    def _write(self, key: str, output: SummaryOutput, request: SummaryInput) -> None:
        first = request.messages[0] if request.messages else None
        tenant_id, conversation_id = (first.tenant_id, first.conversation_id) if first else (None, None)
        conversations = list(dict.fromkeys(m.conversation_id for m in request.messages))
        row = [key, self.inner.name, output.model, output.prompt_hash, datetime.now(UTC),
               output_to_json(output), tenant_id, conversation_id, conversations]
        with self._lock:
            if self._batching:
                self._pending.append(row)
                return
        self._insert([row])

    def _insert(self, rows: list[list[Any]]) -> None:
        if not rows:
            return
        # One statement over column lists: a DuckDB INSERT costs milliseconds whatever its size
        # (executemany pays it per row).
        columns = [list(c) for c in zip(*rows)]
        try:
            with self._cursor() as cur:
                cur.execute(
                    "INSERT INTO llm_cache (key, summarizer, model, prompt_hash, created_at, output, tenant_id, "
                    "conversation_id, conversations) SELECT DISTINCT ON (key) * FROM (SELECT unnest(?::VARCHAR[]) "
                    "AS key, unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
                    "unnest(?::TIMESTAMPTZ[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
                    "unnest(?::VARCHAR[][])) ON CONFLICT (key) DO NOTHING",
                    columns,
                )
        except duckdb.Error as exc:
            self._count_error("write", exc)

    def _count_error(self, what: str, exc: Exception) -> None:
        with self._lock:
            self.errors += 1
        log.warning("summary cache %s failed (%s: %s); continuing without the cache", what, type(exc).__name__, exc)
