"""Lexical retrieval (BM25) over a conversation's messages, summaries and facts.

The projection is one DuckDB table, ``search_docs``: a row per searchable
document with its analyzed terms and their frequencies (parallel lists), so
text is tokenized once, when the projector folds the event, in the same
transaction as the rows it indexes and the log position. Everything in it is
a pure function of the events, so a rebuild writes the same rows. The view
``search_postings`` unnests it into (term, tf) rows for SQL.

Why not DuckDB's ``fts`` extension: ``create_fts_index`` rebuilds the whole
index from its table (no incremental update), and ``INSTALL fts`` needs the
network. Own tables give an append-only, per-event update; one row per
document (not per posting) keeps ingest cheap.

Reads do not go through SQL: :class:`SearchIndex` mirrors a conversation's
rows and messages in memory the first time it is searched (like the hot
tail) and follows each committed batch, so a ranked read costs a fraction of
a millisecond, not a DuckDB query.
"""

from __future__ import annotations

import bisect
import heapq
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, islice
from typing import TYPE_CHECKING, Any

import msgspec

from memfold.projections.fold_text import _WORD, analyze

if TYPE_CHECKING:
    import numpy as np

Key = tuple[str, str]

SEARCH_DDL = [
    """CREATE TABLE IF NOT EXISTS search_docs (
        tenant_id VARCHAR, conversation_id VARCHAR, kind VARCHAR, doc_id VARCHAR, idx BIGINT,
        policy VARCHAR, length INTEGER, terms VARCHAR[], tfs INTEGER[])""",
    """CREATE OR REPLACE VIEW search_postings AS
        SELECT tenant_id, conversation_id, kind, doc_id, idx, policy, length,
               unnest(terms) AS term, unnest(tfs) AS tf FROM search_docs""",
]
SEARCH_COLUMNS = ("tenant_id", "conversation_id", "kind", "doc_id", "idx", "policy", "length", "terms", "tfs")

# Words a question uses to point at the conversation itself ("what did I mention about the
# move?"): every turn is "said" or "talked about", so they only add noise to a query with other
# terms; so do apologies and hesitations ("sorry, wait, when am I flying out?"). Dropped from
# queries (when something else remains), never from documents.
QUERY_META_WORDS = """mention mentioned mentioning remind reminded remember remembered recall recalled said say
    says tell told talk talked talking discuss discussed discussing ask asked asking brought bring
    sorry wait hmm actually anyway""".split()
K1 = 1.2
B = 0.75
# Bounded work per read, whatever the query: postings are scored in full, rarest terms first,
# until _EXACT_POSTINGS are scored; a commoner term (in hundreds or thousands of messages: a
# low-vocabulary query such as "what did we say about the order") then only adds its _HEAD best
# postings as candidates and re-scores the candidates (rarer terms' best _CANDIDATES and the heads).
# Its other postings could not lift a document far: such a term's IDF is small and its tf low.
_EXACT_POSTINGS = 1_000
_CANDIDATES = 256
# A common term's best postings by BM25 term impact at a fixed reference length (a constant, not the
# corpus's moving average, so the head is a pure function of the postings: the same after a reload
# or a rebuild as live); the final scores use the real average length.
_HEAD = 64
_HEAD_LENGTH = 64.0
USER_BOOST = 1.5
# A question ("what was the ticket number?", "when is the adjuster coming?") is mostly answered by a
# message that states a value: a number, a date, an id, an amount, an email address. Among a
# question's candidates, a message holding a digit or an address weighs VALUE_BOOST times more,
# so "I've opened ticket TCK-14886" outranks chit-chat sharing the question's words ("who has my
# ticket?"). Measured 2026-11-26 (docs/quality.md, "Planted facts"): the asked fact in a 600-token
# sliding_window context 68% -> 79% for digits, 89% -> 96% with addresses; BEAM the same.
VALUE_BOOST = 1.6
_VALUE = re.compile(r"\d|\w@\w")
QUESTION_WORDS = frozenset("what when where which who whom whose why how remind".split())


_QUERY_META = frozenset(analyze(" ".join(QUERY_META_WORDS)))


def asks(query: str) -> bool:
    """True when ``query`` is a question: it has a question mark or starts with a question word."""
    if "?" in query:
        return True
    first = _WORD.search(query.lower())
    return first is not None and first.group() in QUESTION_WORDS


# A preface announcing a question ("One more question:", "Quick question,", "Oh, and another
# thing -") is not what the question is about: as query words, "question" recalled "Random
# question: are you a real person?". Only at the start of a query: BEAM's questions, and a
# question *about* questions, keep the word (dropped everywhere, BEAM lost 0.4 points).
_PREFACE = re.compile(
    r"^\W*(?:(?:oh|and|also|ok|okay|sorry|hmm|so|alright)\W+)*"
    r"(?:one more|another|a quick|quick|random|last|small|a)\s+(?:question|thing)\b\s*[:,.!-]+",
    re.I,
)


def query_terms(query: str) -> list[str]:
    """Return the index terms of a query: :func:`analyze` minus the words about the conversation itself.

    Those words (QUERY_META_WORDS) stay when the query has nothing else; so
    does a leading preface (:data:`_PREFACE`).
    """
    terms = analyze(_PREFACE.sub("", query, count=1)) or analyze(query)
    kept = [t for t in terms if t not in _QUERY_META]
    return kept or terms


def new_columns() -> dict[str, list[Any]]:
    """Return empty ``search_docs`` columns for one batch of changes."""
    return {c: [] for c in SEARCH_COLUMNS}


def add_doc(
    cols: dict[str, list[Any]], tenant_id: str, conversation_id: str, kind: str, doc_id: str, idx: int,
    text: str, policy: str | None = None,
) -> None:
    """Append the ``search_docs`` row of one document (terms sorted, so rows are canonical)."""
    words = analyze(text)
    counts = Counter(words)
    terms = sorted(counts)
    cols["tenant_id"].append(tenant_id)
    cols["conversation_id"].append(conversation_id)
    cols["kind"].append(kind)
    cols["doc_id"].append(doc_id)
    cols["idx"].append(idx)
    cols["policy"].append(policy)
    cols["length"].append(len(words))
    cols["terms"].append(terms)
    cols["tfs"].append(list(map(counts.__getitem__, terms)))


def drop_conversation(cols: dict[str, list[Any]], key: Key) -> None:
    """Remove a batch's pending rows of a conversation deleted later in the same batch."""
    keep = [i for i, k in enumerate(zip(cols["tenant_id"], cols["conversation_id"])) if k != key]
    if len(keep) != len(cols["tenant_id"]):
        for name, values in cols.items():
            cols[name] = [values[i] for i in keep]


class Hit(msgspec.Struct, frozen=True):
    """One ranked document: kind ("message" | "summary" | "fact"), id, message index (or covered end), score."""

    kind: str
    doc_id: str
    idx: int
    score: float
    policy: str | None = None


def _impact(tf: int, length: int) -> float:
    """Return a posting's place in its term's head: BM25's tf part at the reference length _HEAD_LENGTH."""
    return tf / (tf + K1 * (1.0 - B + B * length / _HEAD_LENGTH))


class _Corpus:
    """The documents of one kind in one conversation: BM25 statistics, postings (term -> {doc: tf}) and heads.

    ``heads[term]`` holds, for a term in more than _HEAD documents, its _HEAD best postings as a
    min-heap of (impact, doc): documents are only ever added, so keeping the heap's best on each
    add gives exactly the top _HEAD of the whole set, whatever order the documents came in.
    """

    __slots__ = ("meta", "lengths", "postings", "heads", "total", "as_of", "columns")

    def __init__(self) -> None:
        self.meta: list[tuple[str, int, str | None]] = []  # doc_id, idx, policy
        self.lengths: list[int] = []
        self.postings: dict[str, dict[int, int]] = {}
        self.heads: dict[str, list[tuple[float, int]]] = {}
        self.total = 0
        self.as_of: _AsOfStats | None = None  # built by the first time-travel read (scores_as_of)
        self.columns: dict[str, tuple[np.ndarray, int]] = {}  # common term -> (tf by document, postings written)

    def add(self, doc_id: str, idx: int, policy: str | None, length: int, terms: Sequence[str], tfs: Sequence[int]) -> None:
        n = len(self.meta)
        self.meta.append((doc_id, idx, policy))
        self.lengths.append(length)
        self.total += length
        postings = self.postings
        heads = self.heads
        for term, tf in zip(terms, tfs):
            p = postings.get(term)
            if p is None:
                postings[term] = {n: tf}
                continue
            p[n] = tf
            head = heads.get(term)
            if head is not None:
                key = (_impact(tf, length), n)
                if key > head[0]:
                    heapq.heapreplace(head, key)
            elif len(p) > _HEAD:
                lengths = self.lengths
                heads[term] = heapq.nlargest(_HEAD, ((_impact(f, lengths[d]), d) for d, f in p.items()))
                heads[term].reverse()  # descending is not a heap; ascending is

    def column(self, term: str, postings: dict[int, int]) -> np.ndarray:
        """Return ``term``'s tf in every document as an array, 0 where absent (at least as long as ``meta``).

        Built the first time a read finds the term common, then extended with
        the postings added since: postings come in document order and are
        never removed, so the new ones are the dict's last.
        """
        import numpy as np  # kept off the CLI's cold path: only a common term's sums use arrays

        arr, written = self.columns.get(term, (None, 0))
        size = len(self.meta)
        if arr is None or len(arr) < size:
            grown = np.zeros(max(size, 2 * len(arr) if arr is not None else size), np.int32)
            if arr is not None:
                grown[: len(arr)] = arr
            arr = grown
        if written < len(postings):
            new = list(islice(postings.items(), written, None))
            arr[[d for d, _ in new]] = [tf for _, tf in new]
        self.columns[term] = (arr, len(postings))
        return arr

    def scores(self, terms: Iterable[str]) -> dict[int, float]:
        """Return BM25 scores of candidate documents for ``terms`` (bounded work, see _EXACT_POSTINGS).

        Every document holding a rare term is scored; a common term brings its head.
        """
        n = len(self.meta)
        if n == 0:
            return {}
        lists = [(t, p, len(p)) for t in terms if (p := self.postings.get(t))]
        heads = self.heads

        def candidates(term: str, postings: dict[int, int], df: int) -> Iterable[int]:
            head = heads.get(term)
            return postings if head is None else (d for _, d in head)

        return _bm25(lists, n, self.total, self.lengths, candidates, self.column)


def _bm25(
    lists: list[tuple[str, dict[int, int], int]], n: int, total: int, lengths: list[int],
    candidates: Callable[[str, dict[int, int], int], Iterable[int]],
    column: Callable[[str, dict[int, int]], np.ndarray],
) -> dict[int, float]:
    """Return BM25 scores over the first ``n`` documents (total length ``total``): the one scoring loop.

    ``lists`` holds (term, postings, df) for each query term present; a
    term's first ``df`` postings (they are in document order) are the
    documents below ``n``. ``candidates(term, postings, df)`` names the
    documents a common term brings (its head); ``column(term, postings)``
    its tf in every document as an array (:meth:`_Corpus.column`). Shared by the live read
    (:meth:`_Corpus.scores`) and time travel (:func:`scores_as_of`), so both
    make the same float operations in the same order.
    """
    # Ties in df break on the term: a set's order changes with the process (hash seed), and the
    # order decides which terms are common and the order of each score's float sums.
    lists = sorted(lists, key=lambda tpd: (tpd[2], tpd[0]))
    base = K1 * (1.0 - B)
    per_length = K1 * B * n / total if total else 0.0
    scores: dict[int, float] = {}
    scored = 0
    common: list[tuple[str, float, dict[int, int], int]] = []
    for term, postings, df in lists:
        weight = math.log(1.0 + (n - df + 0.5) / (df + 0.5)) * (K1 + 1.0)
        if scored + df > _EXACT_POSTINGS:
            common.append((term, weight, postings, df))  # and so is every later (commoner) term
            continue
        scored += df
        below = postings.items() if df == len(postings) else islice(postings.items(), df)
        if not scores:  # the rarest term: one comprehension, not a += per posting (same values)
            scores = {d: weight * tf / (tf + base + per_length * lengths[d]) for d, tf in below}
            continue
        get = scores.get
        for d, tf in below:
            scores[d] = get(d, 0.0) + weight * tf / (tf + base + per_length * lengths[d])
    if not common:
        return scores
    if len(scores) > _CANDIDATES:  # rarer terms' best: commoner terms only re-order these
        scores = {d: s for s, d in sorted(zip(scores.values(), scores.keys()), reverse=True)[:_CANDIDATES]}
    for term, _, postings, df in common:
        for d in candidates(term, postings, df):
            if d not in scores:
                scores[d] = 0.0
    # Each candidate's sum, term by term in the same order, as arrays: the same float operations
    # (IEEE double, each rounded once) as `scores[d] += weight * tf / (tf + base + per_length * lengths[d])`
    # for the candidates holding the term, a fifth of the time (that loop was most of a read).
    import numpy as np  # kept off the CLI's cold path: only a common term's sums use arrays

    count = len(scores)
    docs = np.fromiter(scores.keys(), np.int64, count)
    acc = np.fromiter(scores.values(), np.float64, count)
    scaled = per_length * np.fromiter((lengths[d] for d in scores), np.float64, count)
    for term, weight, postings, _df in common:
        tf = column(term, postings)[docs].astype(np.float64)
        acc = np.where(tf > 0, acc + weight * tf / (tf + base + scaled), acc)
    return dict(zip(scores.keys(), acc.tolist()))


class _Docs:
    """One conversation in memory: a corpus per document kind, and its messages by index."""

    __slots__ = ("corpora", "seen", "messages", "values")

    def __init__(self) -> None:
        self.corpora: dict[str, _Corpus] = {}
        self.seen: set[tuple[str, str]] = set()
        self.messages: list[Any] = []
        self.values: dict[int, bool] = {}  # message index -> states_value, filled as questions meet them

    def add(self, kind: str, doc_id: str, idx: int, policy: str | None, length: int, terms: Sequence[str], tfs: Sequence[int]) -> None:
        if (kind, doc_id) in self.seen:
            return  # loaded from the store after this batch committed: already here
        self.seen.add((kind, doc_id))
        corpus = self.corpora.get(kind)
        if corpus is None:
            corpus = self.corpora[kind] = _Corpus()
        corpus.add(doc_id, idx, policy, length, terms, tfs)

    def states_value(self, m: Any) -> bool:
        """True when message ``m`` states a value (VALUE_BOOST); decided once per message (messages never change)."""
        valued = self.values.get(m.index)
        if valued is None:
            valued = self.values[m.index] = _VALUE.search(m.content) is not None
        return valued

    def add_message(self, record: Any) -> bool:
        """Append a committed message; False when it does not follow the last one (reload needed)."""
        if record.index < len(self.messages):
            return True  # loaded from the store after its batch committed
        if record.index != len(self.messages):
            return False
        self.messages.append(record)
        return True


def _by_index(records: Iterable[Any]) -> list[Any]:
    """Return ``records`` placed at their message index, None where one is missing (retracted)."""
    out: list[Any] = []
    for r in records:
        out.extend([None] * (r.index - len(out)))
        out.append(r)
    return out


class _Loading:
    """A conversation being read from the store while the index's lock is free.

    Batches committed meanwhile are kept here and added once the rows are in
    (what the load already saw is skipped: documents by id, messages by index).
    """

    __slots__ = ("batches", "done")

    def __init__(self) -> None:
        self.batches: list[tuple[dict[str, list[Any]], list[Any]]] = []
        self.done = threading.Event()


def _catch_up(key: Key, docs: _Docs, batches: list[tuple[dict[str, list[Any]], list[Any]]]) -> bool:
    """Add to freshly loaded ``docs`` the batches committed during the load; False when they do not follow on."""
    for cols, records in batches:
        for row in zip(*(cols[c] for c in SEARCH_COLUMNS)):
            if row[0] == key[0] and row[1] == key[1]:
                docs.add(*row[2:])
        for r in records:
            if r.tenant_id == key[0] and r.conversation_id == key[1] and not docs.add_message(r):
                return False
    return True


class SearchIndex:
    """Conversations being recalled from, in memory: BM25 over their ``search_docs`` rows and their messages.

    A conversation is loaded from the store the first time it is searched
    (rows and messages), then follows each committed batch, so reads never
    wait on DuckDB (a point query costs milliseconds there). A conversation
    whose first message the projector commits while the index has room
    starts in memory, empty, and is never loaded. LRU over conversations;
    thread-safe. A load runs without the lock: reads of other conversations
    and the projector's batches do not wait for it.
    """

    def __init__(self, load_rows, load_messages, max_conversations: int = 64):
        """``load_rows(t, c)`` returns ``search_docs`` rows in ``SEARCH_COLUMNS`` order; ``load_messages(t, c)`` every message."""
        self._load_rows = load_rows
        self._load_messages = load_messages
        self.max_conversations = max_conversations
        self._convs: dict[Key, _Docs] = {}
        self._loading: dict[Key, _Loading] = {}
        self._lock = threading.Lock()

    def extend(self, cols: dict[str, list[Any]], records: Iterable[Any] = ()) -> None:
        """Add a committed batch: its ``search_docs`` columns and its messages (index order per conversation).

        The lock is taken once per conversation, not for the whole batch: a
        projector batch holds thousands of documents, and a read of one
        conversation must not wait while all the others are indexed. Each
        conversation still changes atomically for its readers; adding is
        idempotent (documents by id, messages by index), so a load that ran
        in between and already saw the batch loses nothing and gains no copy.
        """
        records = list(records)
        rows: dict[Key, list[tuple]] = {}
        for row in zip(*(cols[c] for c in SEARCH_COLUMNS)):
            rows.setdefault((row[0], row[1]), []).append(row[2:])
        messages: dict[Key, list[Any]] = {}
        for r in records:
            messages.setdefault((r.tenant_id, r.conversation_id), []).append(r)
        with self._lock:
            for r in records:  # a conversation starting in this batch: all of it is here, nothing to load
                if r.index == 0 and len(self._convs) < self.max_conversations:
                    key = (r.tenant_id, r.conversation_id)
                    if key not in self._convs and key not in self._loading:
                        self._convs[key] = _Docs()
            for loading in self._loading.values():
                loading.batches.append((cols, records))
            if not self._convs:
                return
        for key in rows.keys() | messages.keys():
            with self._lock:
                docs = self._convs.get(key)
                if docs is None:
                    continue
                for row in rows.get(key, ()):
                    docs.add(*row)
                for r in messages.get(key, ()):
                    if not docs.add_message(r):
                        del self._convs[key]  # a gap (restart in between): reload on next use
                        break

    def drop(self, key: Key) -> None:
        """Forget a conversation (deleted); a load under way starts over."""
        with self._lock:
            self._convs.pop(key, None)
            self._loading.pop(key, None)

    def clear(self) -> None:
        """Forget everything (after a failed transaction or a rebuild); loads under way start over."""
        with self._lock:
            self._convs.clear()
            self._loading.clear()

    def _docs(self, key: Key) -> _Docs:
        """Return the conversation's documents, loading them first if needed. Call with ``self._lock`` held.

        The lock is released while the store is read (and while waiting for
        another thread's load of the same conversation) and held again on
        return. Batches committed during the load are added after it, so
        the result is what the projection holds when the lock is retaken.
        """
        while True:
            docs = self._convs.pop(key, None)
            if docs is not None:
                self._convs[key] = docs  # most recently used last
                return docs
            loading = self._loading.get(key)
            if loading is not None:  # another thread is loading it: wait for that load
                self._lock.release()
                try:
                    loading.done.wait()
                finally:
                    self._lock.acquire()
                continue
            loading = self._loading[key] = _Loading()
            self._lock.release()
            try:
                docs = _Docs()
                for row in self._load_rows(*key):
                    docs.add(*row[2:])
                docs.messages = _by_index(self._load_messages(*key))
            finally:
                self._lock.acquire()
                current = self._loading.get(key) is loading
                if current:
                    del self._loading[key]
                loading.done.set()
            if not current or not _catch_up(key, docs, loading.batches):
                continue  # dropped or cleared meanwhile, or the batches do not follow on: load again
            while len(self._convs) >= self.max_conversations:
                self._convs.pop(next(iter(self._convs)))
            self._convs[key] = docs
            return docs

    def messages_at(self, key: Key, indices: Iterable[int]) -> list[Any]:
        """Return the committed messages at ``indices`` (sorted), skipping those that do not exist."""
        with self._lock:
            messages = self._docs(key).messages
            return [messages[i] for i in indices if 0 <= i < len(messages) and messages[i] is not None]

    def newest(self, key: Key, before: int, budget: int) -> list[Any]:
        """Return the newest messages with index < ``before`` whose tokens fit ``budget`` (at least one), in index order."""
        with self._lock:
            messages = self._docs(key).messages
            picked: list[Any] = []
            used, i = 0, min(before, len(messages))
            while i > 0:
                i -= 1
                m = messages[i]
                if m is None:  # retracted
                    continue
                if picked and used + m.tokens > budget:
                    break
                picked.append(m)
                used += m.tokens
            return picked[::-1]

    def loaded(self, key: Key) -> bool:
        """True when the conversation's documents are in memory (a read of it needs no store query)."""
        with self._lock:
            return key in self._convs

    def count(self, key: Key) -> int:
        """Return how many committed messages the conversation has."""
        with self._lock:
            return len(self._docs(key).messages)

    def rank(
        self, key: Key, query: str, *, kinds: Iterable[str] = ("message",), policy: str | None = None, limit: int = 50
    ) -> list[Hit]:
        """Return up to ``limit`` documents of ``kinds`` best matching ``query`` by BM25, best first.

        Each kind is its own corpus (a summary's length does not skew message
        scores). Documents with no query term are never returned; ties break
        on the newer document. Summaries and facts are restricted to
        ``policy`` when given.
        """
        terms = set(query_terms(query))
        if not terms:
            return []
        hits: list[Hit] = []
        with self._lock:
            docs = self._docs(key)
            for kind in kinds:
                corpus = docs.corpora.get(kind)
                if corpus is None:
                    continue
                scores = corpus.scores(terms)
                if policy is not None and kind != "message":
                    scores = {d: s for d, s in scores.items() if corpus.meta[d][2] in (None, policy)}
                # (score, doc) pairs compare natively; ties go to the newer document.
                for score, d in sorted(zip(scores.values(), scores.keys()), reverse=True)[:limit]:
                    doc_id, idx, doc_policy = corpus.meta[d]
                    hits.append(Hit(kind, doc_id, idx, score, doc_policy))
        hits.sort(key=lambda h: -h.score)
        return hits[:limit]

    def rank_many(self, keys: Iterable[Key], query: str, limit: int) -> list[tuple[Key, Hit]]:
        """Return, for each conversation of ``keys``, its ``limit`` messages best matching ``query`` (BM25).

        What :meth:`rank` gives per conversation, with the query analysed once
        and the lock taken once: a user's memory ranks tens of conversations
        per read. Scores are per conversation (each its own corpus).
        """
        terms = set(query_terms(query))
        if not terms:
            return []
        out: list[tuple[Key, Hit]] = []
        with self._lock:
            for key in keys:
                corpus = self._docs(key).corpora.get("message")
                if corpus is None:
                    continue
                scores = corpus.scores(terms)
                # The best few of many candidates: a heap, not a sort (same order, ties to the newer document).
                for score, d in heapq.nlargest(limit, zip(scores.values(), scores.keys())):
                    doc_id, idx, doc_policy = corpus.meta[d]
                    out.append((key, Hit("message", doc_id, idx, score, doc_policy)))
        return out

    def rank_messages(
        self, key: Key, query: str, limit: int, user_boost: float = 1.0, as_of: int | None = None
    ) -> list[int]:
        """Return the indices of the ``limit`` messages best matching ``query``, best first (the read's hot path).

        The best ``2 * limit`` by BM25 are re-ordered with a user message's
        score times ``user_boost`` and, when the query is a question
        (:func:`asks`), a message stating a value (a digit or an email
        address, :meth:`_Docs.states_value`) times VALUE_BOOST; ties go
        to the newer message. With
        ``as_of`` (a message count), exactly as when the conversation had
        ``as_of`` messages (:func:`scores_as_of`).
        """
        terms = set(query_terms(query))
        if not terms:
            return []
        with self._lock:
            docs = self._docs(key)
            corpus = docs.corpora.get("message")
            if corpus is None:
                return []
            scores = corpus.scores(terms) if as_of is None else scores_as_of(corpus, terms, as_of)
            meta, messages, end = corpus.meta, docs.messages, len(docs.messages)
            question = asks(query)
            boosted = []
            for score, d in sorted(zip(scores.values(), scores.keys()), reverse=True)[: 2 * limit]:
                idx = meta[d][1]
                m = messages[idx] if idx < end else None
                if m is not None and m.role == "user":
                    score *= user_boost
                if m is not None and question and docs.states_value(m):
                    score *= VALUE_BOOST
                boosted.append((score, idx))
        boosted.sort(reverse=True)
        return [idx for _, idx in boosted[:limit]]


class OlderFromProjection:
    """Older messages of one conversation for the context assembler, ranked and read from the :class:`SearchIndex`."""

    def __init__(self, index: SearchIndex, key: Key):
        self.index = index
        self.key = key

    def ranked(self, query: str, limit: int) -> list[int]:
        """Return the indices of the messages best matching ``query``, best first.

        A user's own words weigh USER_BOOST times more: what a person said
        about themselves is what later questions ask about, and an assistant's
        long replies echo the same terms.
        """
        return self.index.rank_messages(self.key, query, limit, USER_BOOST)

    def at(self, indices: Sequence[int]) -> list[Any]:
        """Return the messages at ``indices``, in index order."""
        return self.index.messages_at(self.key, indices)

    def newest(self, before: int, budget: int) -> list[Any]:
        """Return the newest messages before index ``before`` within ``budget`` tokens (at least one)."""
        return self.index.newest(self.key, before, budget)

    def end(self) -> int:
        """Return the number of committed messages."""
        return self.index.count(self.key)


class OlderAsOf:
    """:class:`OlderFromProjection` as it was when the conversation had ``end`` messages (time travel).

    Messages from ``end`` on are invisible, and relevance is ranked with the
    index statistics of that moment (:func:`scores_as_of`): the same
    messages, in the same order, the live read recalled then.
    """

    def __init__(self, older: OlderFromProjection, end: int):
        self.older = older
        self._end = end

    def ranked(self, query: str, limit: int) -> list[int]:
        return self.older.index.rank_messages(self.older.key, query, limit, USER_BOOST, as_of=self._end)

    def at(self, indices: Sequence[int]) -> list[Any]:
        return self.older.at([i for i in indices if i < self._end])

    def newest(self, before: int, budget: int) -> list[Any]:
        return self.older.newest(min(before, self._end), budget)

    def end(self) -> int:
        return min(self._end, self.older.end())


class _AsOfStats:
    """What :func:`scores_as_of` needs beyond a :class:`_Corpus`, grown lazily as the corpus grows.

    ``idx``: each document's message index (documents come in index order,
    live and reloaded alike); ``cum[k]``: the total length of the first k
    documents; per queried term, its documents in order (``docs``: df below
    a bound is a bisect) and its postings by head order, best first
    (``best``: the head below a bound is a prefix scan).
    """

    __slots__ = ("idx", "cum", "docs", "best")

    def __init__(self) -> None:
        self.idx: list[int] = []
        self.cum: list[int] = [0]
        self.docs: dict[str, list[int]] = {}
        self.best: dict[str, list[int]] = {}

    def sync(self, corpus: _Corpus) -> None:
        n = len(self.idx)
        if n < len(corpus.meta):
            self.idx.extend(m[1] for m in corpus.meta[n:])
            self.cum.extend(accumulate(corpus.lengths[n:], initial=self.cum[-1]))
            del self.cum[n + 1]  # accumulate repeats its initial value

    def df(self, term: str, postings: dict[int, int], bound: int) -> int:
        docs = self.docs.get(term)
        if docs is None:
            docs = self.docs[term] = list(postings)
        elif len(docs) < len(postings):
            docs.extend(islice(postings, len(docs), None))
        return bisect.bisect_left(docs, bound)

    def head(self, term: str, postings: dict[int, int], lengths: list[int], bound: int) -> list[int]:
        """Return the term's _HEAD best documents among those below ``bound`` (what its live head held then)."""
        best = self.best.get(term)
        if best is None or len(best) < len(postings):
            ranked = sorted(((_impact(tf, lengths[d]), d) for d, tf in postings.items()), reverse=True)
            best = self.best[term] = [d for _, d in ranked]
        return list(islice(filter(bound.__gt__, best), _HEAD))  # the first _HEAD below bound, in C


def scores_as_of(corpus: _Corpus, terms: Iterable[str], end: int) -> dict[int, float]:
    """Return what ``corpus.scores(terms)`` returned when the conversation had ``end`` messages.

    The same algorithm as :meth:`_Corpus.scores` (same float operations in
    the same order) over the documents of messages before ``end``: document
    count, average length, document frequencies, which terms are common and
    their heads are those of that moment, not today's. A unit test holds
    the two equal against a corpus rebuilt from those documents.
    """
    if corpus.as_of is None:
        corpus.as_of = _AsOfStats()
    stats = corpus.as_of
    stats.sync(corpus)
    n = bisect.bisect_left(stats.idx, end)
    if n == len(corpus.meta):
        return corpus.scores(terms)
    if n == 0:
        return {}
    lists = [(t, p, df) for t in terms if (p := corpus.postings.get(t)) and (df := stats.df(t, p, n))]

    def candidates(term: str, postings: dict[int, int], df: int) -> Iterable[int]:
        return islice(postings, df) if df <= _HEAD else stats.head(term, postings, corpus.lengths, n)

    return _bm25(lists, n, stats.cum[n], corpus.lengths, candidates, corpus.column)
