"""Optional dense retrieval: message embeddings in DuckDB, ranked by cosine, fused with BM25 by reciprocal rank.

Off by default (``retrieval.embedder = "none"``): recall is BM25 alone
(:mod:`projections.retrieval`). When an embedder is configured:

- :class:`DenseIndex` embeds every projected message *outside the fold*, in
  a background thread fed by the projector after each commit, and stores the
  vectors in ``dense_vectors`` (one row per message and embedder: its index,
  the sha256 of its content, a ``FLOAT[]`` vector). The table is keyed by
  conversation, embedder and message index and carries the content hash, so
  it is a cache as well as the vector table: a rebuild or replay folds the
  same messages to the same indices and finds every vector already there
  (zero embedder calls, identical rows); a message whose text another
  message of any conversation already had reuses that vector. Forgetting a
  conversation deletes its rows like the rest of its content.
- A read embeds the query once (LRU-cached), ranks the conversation's
  messages by cosine in DuckDB (``list_inner_product`` of unit vectors), and :class:`FusedOlder`
  fuses that ranking with BM25's by reciprocal rank (:func:`rrf`). If the
  embedder or the vector query fails, the read logs a warning and recalls by
  BM25 alone: dense retrieval can improve a context, never cost one.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import duckdb

from memfold.core.errors import ConfigError, EmbedderError, ProjectionError
from memfold.core.ports import Embedder, MessageRecord
from memfold.core.settings import Settings

log = logging.getLogger("memfold.dense")

DENSE_DDL = [
    """CREATE TABLE IF NOT EXISTS dense_vectors (
        tenant_id VARCHAR, conversation_id VARCHAR, embedder VARCHAR, idx BIGINT,
        content_hash VARCHAR, vector FLOAT[],
        PRIMARY KEY (tenant_id, conversation_id, embedder, idx))""",
]
# Embedders read the head of a long message: MiniLM stops at 256 word pieces, and
# OpenAI's models refuse inputs over 8,191 tokens (BEAM holds 349K-character messages).
EMBED_CHARS = 4000
BATCH = 64
RRF_K = 60
QUERY_CACHE = 1024
_RETRY_MAX_S = 30.0

Key = tuple[str, str]


def content_hash(text: str) -> str:
    """Return the hex sha256 of ``text`` (DuckDB's ``sha256(content)`` gives the same, for SQL joins)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rrf(rankings: Iterable[Sequence[int]], k: int = RRF_K) -> list[int]:
    """Return the items of ``rankings`` (each best first) fused by reciprocal rank, best first.

    Score of an item: the sum over rankings of ``1 / (k + rank)``, rank
    counted from 1; an item missing from a ranking gets nothing from it.
    Ties go to the item ranked first in the earliest ranking that holds it,
    so with equal evidence the first ranking (BM25) decides.
    """
    scores: dict[int, float] = {}
    first_seen: dict[int, tuple[int, int]] = {}
    for r, ranking in enumerate(rankings):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            first_seen.setdefault(item, (r, rank))
    return sorted(scores, key=lambda i: (-scores[i], first_seen[i]))


def embedder_name(settings: Settings) -> str:
    """Return the identity of the dense embedder, stored with each vector (a new model re-embeds)."""
    kind, e = settings.retrieval.embedder, settings.embedder
    if kind == "local":
        return f"local-hash:{e.dimensions}"
    if kind == "openai":
        return f"openai:{e.model}:{e.dimensions}"
    if kind == "sentence-transformers":
        return "sentence-transformers:all-MiniLM-L6-v2"
    raise ConfigError(f"retrieval.embedder is {kind!r}: no dense embedder")


def build_dense_embedder(settings: Settings) -> Embedder:
    """Return the embedder ``settings.retrieval.embedder`` names, configured by the ``[embedder]`` settings.

    MiniLM always embeds in 384 dimensions, whatever ``embedder.dimensions``
    says (that setting sizes the local and OpenAI vectors, and the topics
    policy's). Building makes no network call and loads no model.
    """
    from memfold.projections.summarizers import build_embedder

    kind = settings.retrieval.embedder
    if kind == "none":
        raise ConfigError("retrieval.embedder is 'none': no dense embedder to build")
    if kind == "sentence-transformers":
        from memfold.projections.embedders import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder()
    return build_embedder(settings.model_copy(update={"embedder": settings.embedder.model_copy(update={"kind": kind})}))


class DenseIndex:
    """Message vectors of one projection store: filled by a background thread, ranked by cosine in DuckDB.

    Writing: :meth:`committed` (called by the projector after each commit)
    queues the batch's messages; the thread embeds those whose vector is not
    stored yet, :data:`BATCH` at a time, and inserts their rows. A row is
    inserted only while its message is still projected and not retracted
    (a conversation deleted meanwhile gets none). An embedder failure is
    logged and retried with backoff; the messages stay queued. :meth:`start`
    first queues every projected message that has no vector (enabling dense
    retrieval on an existing data dir, or vectors lost to a crash).
    """

    def __init__(self, store: Any, embedder: Embedder, name: str, *, batch: int = BATCH):
        self.store = store
        self.embedder = embedder
        self.name = name
        self.batch = batch
        self.calls = 0  # embedder calls for messages (tests and benchmarks read it)
        self._pending: OrderedDict[tuple[str, str, int], str] = OrderedDict()
        self._cond = threading.Condition()
        self._busy = False
        self._failing = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self._queries: OrderedDict[str, list[float]] = OrderedDict()
        self._query_lock = threading.Lock()

    # ----------------------------------------------------------------- writing

    def start(self) -> None:
        """Queue every projected message without a vector, then start the embedding thread."""
        self.resync()
        self._thread = threading.Thread(target=self._run, name="memfold-dense", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread after the batch in flight (queued messages are found again by the next start)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def resync(self) -> None:
        """Queue the projected messages that have no vector of this embedder (after a start or a rebuild)."""
        rows = self.store.cursor().execute(
            "SELECT m.tenant_id, m.conversation_id, m.idx, m.content FROM messages m "
            "WHERE NOT m.retracted AND coalesce(m.content, '') <> '' AND NOT EXISTS (SELECT 1 FROM dense_vectors v "
            "WHERE v.tenant_id = m.tenant_id AND v.conversation_id = m.conversation_id AND v.embedder = ? "
            "AND v.idx = m.idx) ORDER BY m.tenant_id, m.conversation_id, m.idx",
            [self.name],
        ).fetchall()
        with self._cond:
            for t, c, idx, text in rows:
                self._pending[(t, c, idx)] = text
            self._failing = False
            self._cond.notify_all()

    def committed(self, changes: Any) -> None:
        """Queue the messages of a committed batch; drop queued ones of conversations it deleted. Cheap."""
        with self._cond:
            for r in changes.records:
                if r.content:
                    self._pending[(r.tenant_id, r.conversation_id, r.index)] = r.content
            if changes.deleted:
                for key in [k for k in self._pending if k[:2] in changes.deleted]:
                    del self._pending[key]
            self._cond.notify_all()

    def idle(self) -> bool:
        """True when nothing is queued or in flight, the embedder is failing, or the thread is not running."""
        if self._thread is None:
            return True
        with self._cond:
            return self._failing or (not self._pending and not self._busy)

    def _run(self) -> None:
        delay = 0.5
        while True:
            with self._cond:
                if self._failing and not self._stop:
                    self._cond.wait(delay)  # the backoff; a resync or stop cuts it short
                    self._failing = False
                while not self._stop and not self._pending:
                    self._cond.wait()
                if self._stop:
                    return
                items = [self._pending.popitem(last=False) for _ in range(min(self.batch, len(self._pending)))]
                self._busy = True
            try:
                self._embed(items)
                delay = 0.5
            except (EmbedderError, ProjectionError) as exc:
                log.warning("dense retrieval: cannot embed %d message(s) (%s); retrying in %.1fs", len(items), exc, delay)
                with self._cond:
                    for key, text in reversed(items):
                        if key not in self._pending:
                            self._pending[key] = text
                            self._pending.move_to_end(key, last=False)
                    self._failing = True
                delay = min(delay * 2, _RETRY_MAX_S)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _embed(self, items: list[tuple[tuple[str, str, int], str]]) -> None:
        """Store the vectors of ``items``: reuse stored vectors of the same text, embed the rest in one call."""
        hashes = [content_hash(text) for _, text in items]
        cur = self.store.cursor()
        try:
            known = dict(cur.execute(
                "SELECT content_hash, any_value(vector) FROM dense_vectors WHERE embedder = ? "
                "AND content_hash IN (SELECT unnest(?::VARCHAR[])) GROUP BY content_hash",
                [self.name, sorted(set(hashes))],
            ).fetchall())
        except duckdb.Error as exc:
            raise ProjectionError(f"cannot read dense_vectors: {exc}") from exc
        todo = {h: text[:EMBED_CHARS] for h, (_, text) in zip(hashes, items) if h not in known}
        if todo:
            vectors = self.embedder.embed(list(todo.values()))
            self.calls += 1
            known.update((h, [float(x) for x in v]) for h, v in zip(todo, vectors))
        import pyarrow as pa  # kept off the CLI's cold path: only embedding writes need Arrow

        batch = pa.table({
            "tenant_id": [k[0] for k, _ in items], "conversation_id": [k[1] for k, _ in items],
            "embedder": [self.name] * len(items), "idx": pa.array([k[2] for k, _ in items], pa.int64()),
            "content_hash": hashes, "vector": pa.array([known[h] for h in hashes], pa.list_(pa.float32())),
        })
        with self.store.write_lock():  # no insert while a batch, an erase or a file swap is being written
            try:
                cur.register("_dense_batch", batch)
                cur.execute(
                    "INSERT OR IGNORE INTO dense_vectors SELECT b.tenant_id, b.conversation_id, b.embedder, b.idx, "
                    "b.content_hash, b.vector FROM _dense_batch b JOIN messages m ON m.tenant_id = b.tenant_id "
                    "AND m.conversation_id = b.conversation_id AND m.idx = b.idx AND NOT m.retracted"
                )
                cur.unregister("_dense_batch")
            except duckdb.Error as exc:
                raise ProjectionError(f"cannot write dense_vectors: {exc}") from exc

    # ----------------------------------------------------------------- reading

    def query_vector(self, query: str) -> list[float]:
        """Return the embedding of ``query``, embedding it once per distinct text (LRU); raise ``EmbedderError``."""
        with self._query_lock:
            vector = self._queries.get(query)
            if vector is not None:
                self._queries.move_to_end(query)
                return vector
        vector = [float(x) for x in self.embedder.embed([query[:EMBED_CHARS]])[0]]
        with self._query_lock:
            self._queries[query] = vector
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    def rank(self, key: Key, query: str, limit: int) -> list[int]:
        """Return the indices of the ``limit`` messages most similar to ``query`` by cosine, best first.

        Every embedder returns unit vectors, so the inner product is the
        cosine, a fifth cheaper to compute.

        Ties go to the newer message. Raises :class:`EmbedderError` when the
        query cannot be embedded and :class:`ProjectionError` when the vectors
        cannot be read.
        """
        vector = self.query_vector(query)
        try:
            rows = self.store.cursor().execute(
                "SELECT idx FROM dense_vectors WHERE tenant_id = ? AND conversation_id = ? AND embedder = ? "
                "ORDER BY list_inner_product(vector, ?::FLOAT[]) DESC, idx DESC LIMIT ?",
                [key[0], key[1], self.name, vector, limit],
            ).fetchall()
        except duckdb.Error as exc:
            raise ProjectionError(f"cannot rank dense_vectors: {exc}") from exc
        return [r[0] for r in rows]


class FusedOlder:
    """An :class:`~memfold.projections.context.OlderMessages` whose ranking fuses BM25 with dense retrieval.

    ``ranked`` returns the reciprocal-rank fusion of the lexical ranking and
    the dense one; when dense retrieval fails it logs a warning and returns
    the lexical ranking alone. Everything else is the lexical source's.
    """

    def __init__(self, lexical: Any, dense: DenseIndex, key: Key, k: int = RRF_K):
        self.lexical = lexical
        self.dense = dense
        self.key = key
        self.k = k

    def ranked(self, query: str, limit: int) -> list[int]:
        lexical = self.lexical.ranked(query, limit)
        try:
            dense = self.dense.rank(self.key, query, limit)
        except (EmbedderError, ProjectionError) as exc:
            log.warning("dense retrieval unavailable (%s); recalling by BM25 only", exc)
            return lexical
        return rrf([lexical, dense], self.k)[:limit]

    def at(self, indices: Sequence[int]) -> list[MessageRecord]:
        return self.lexical.at(indices)

    def newest(self, before: int, budget: int) -> list[MessageRecord]:
        return self.lexical.newest(before, budget)

    def end(self) -> int:
        return self.lexical.end()
