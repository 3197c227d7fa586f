"""Time-travel ranking: BM25 as of an earlier message count equals BM25 over the corpus as it was then."""

from __future__ import annotations

import random
from collections import Counter

from memfold.projections.retrieval import _Corpus, analyze, query_terms, scores_as_of

# A low vocabulary (every word in hundreds of messages: the common-term heads and the bounded
# exact scoring both come into play) plus rare words (order numbers, names).
WORDS = ("order refund invoice delivery address payment warranty account password shipping tracking label "
         "customer support replacement battery screen charger subscription plan upgrade discount").split()
QUERIES = ("refund for the order", "battery charger screen replacement", "order 1234 refund", "tracking label alice",
           "zebra", "invoice payment account warranty shipping upgrade")


def _docs(n: int) -> list[tuple[int, int, list[str], list[int]]]:
    rnd = random.Random(3)
    out = []
    for k in range(n):
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(3, 30))]
        if k % 37 == 0:
            words.append(str(1000 + k % 300))
        if k % 101 == 0:
            words.append("alice")
        counts = Counter(analyze(" ".join(words)))
        terms = sorted(counts)
        out.append((2 * k, sum(counts.values()), terms, [counts[t] for t in terms]))  # idx 2k: a gap at each
    return out


def _corpus(docs) -> _Corpus:
    corpus = _Corpus()
    for idx, length, terms, tfs in docs:
        corpus.add(f"m{idx}", idx, None, length, terms, tfs)
    return corpus


def test_scores_as_of_a_message_count_equal_the_scores_of_the_corpus_then():
    docs = _docs(2400)
    live = _Corpus()
    checked = 0
    for grown in (700, 1500, 2400):  # the corpus grows between time-travel reads (cached stats follow)
        for idx, length, terms, tfs in docs[len(live.meta):grown]:
            live.add(f"m{idx}", idx, None, length, terms, tfs)
        for then in (0, 1, 40, 64, 65, 66, 130, 333, 699, 700, 1201, 1499, 2399, 2400):
            if then > grown:
                continue
            past = _corpus(docs[:then])
            for query in QUERIES:
                terms = set(query_terms(query))
                expected = past.scores(terms)
                # Messages 2*then - 1 and 2*then both mean "the first `then` documents" (idx 2k).
                assert scores_as_of(live, terms, 2 * then) == expected, (grown, then, query)
                assert scores_as_of(live, terms, max(0, 2 * then - 1)) == expected, (grown, then, query)
                checked += bool(expected)
    assert checked > 100  # the comparisons were not all of empty results
    # The common-term path ran: some query terms exceed the exact budget at the full size.
    assert max(len(live.postings[t]) for t in query_terms(QUERIES[-1])) > 1000


def test_scores_do_not_depend_on_the_order_of_the_query_terms():
    # A query's terms come as a set, whose order changes with the process (hash seed): a context
    # recorded by one process must be the one another process reads as of that moment.
    docs = _docs(2400)
    corpus = _corpus(docs)
    for query in QUERIES + ("refund order payment account tracking label customer support plan",):
        terms = sorted(set(query_terms(query)))
        for then in (333, 2 * 1500, 2 * 2400):
            assert scores_as_of(corpus, terms, then) == scores_as_of(corpus, terms[::-1], then), (query, then)
        assert corpus.scores(terms) == corpus.scores(terms[::-1]), query


def _reference_scores(corpus: _Corpus, terms: set[str]) -> dict[int, float]:
    """BM25 as the scoring loop computed it before its common-term sums became arrays: one float at a time."""
    import math
    from itertools import islice

    from memfold.projections.retrieval import _CANDIDATES, _EXACT_POSTINGS, K1, B

    n, lengths = len(corpus.meta), corpus.lengths
    lists = sorted(((t, p, len(p)) for t in terms if (p := corpus.postings.get(t))), key=lambda tpd: (tpd[2], tpd[0]))
    base, per_length = K1 * (1.0 - B), K1 * B * n / corpus.total
    scores: dict[int, float] = {}
    scored, common = 0, []
    for term, postings, df in lists:
        weight = math.log(1.0 + (n - df + 0.5) / (df + 0.5)) * (K1 + 1.0)
        if scored + df > _EXACT_POSTINGS:
            common.append((term, weight, postings))
            continue
        scored += df
        for d, tf in islice(postings.items(), df):
            scores[d] = scores.get(d, 0.0) + weight * tf / (tf + base + per_length * lengths[d])
    if not common:
        return scores
    if len(scores) > _CANDIDATES:
        scores = {d: s for s, d in sorted(zip(scores.values(), scores.keys()), reverse=True)[:_CANDIDATES]}
    for term, _, postings in common:
        head = corpus.heads.get(term)
        for d in postings if head is None else (d for _, d in head):
            scores.setdefault(d, 0.0)
    for _, weight, postings in common:
        for d in scores.keys() & postings.keys():
            tf = postings[d]
            scores[d] += weight * tf / (tf + base + per_length * lengths[d])
    return scores


def test_array_sums_equal_the_float_by_float_loop_bit_for_bit():
    docs = _docs(2400)
    corpus = _Corpus()
    compared = 0
    for grown in (300, 1100, 2400):  # the tf columns are built, then extended as documents come
        for idx, length, terms, tfs in docs[len(corpus.meta):grown]:
            corpus.add(f"m{idx}", idx, None, length, terms, tfs)
        for query in (*QUERIES, " ".join(WORDS)):
            terms = set(query_terms(query))
            got, expected = corpus.scores(terms), _reference_scores(corpus, terms)
            assert got == expected, (grown, query)  # float equality: the same operations in the same order
            compared += len(expected)
    assert corpus.columns, "the common-term path ran"
    assert compared > 1000
