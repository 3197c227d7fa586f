"""Answer-content recall: how much of a reference answer's material a context holds (no model involved).

The score of a context for a question is the share of the reference
answer's content words found in the context's text. Words are lower-cased
runs of letters or of digits (``250ms`` is ``250`` + ``ms``); stop words and
the phrasing words of answer templates ("you mentioned", "could you
clarify") are dropped; numbers lose leading zeros; a plural matches its
singular (``movies``/``movie``, ``libraries``/``library``); an ISO date in
the context (``2024-03-15``, how memfold renders dates) also counts as its
month name, day and year. Used by ``memfold diff --questions`` and the
benchmarks (``benchmarks/beam.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december")
_MONTH_ABBR = {m[:3]: m for m in MONTHS} | {"sept": "september"}

# A compact English stop list (NLTK's, plus contractions split by the tokenizer and ordinal suffixes).
STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren as at be because been before being below
between both but by can couldn d did didn do does doesn doing don down during each few for from further had
hadn has hasn have haven having he her here hers herself him himself his how i if in into is isn it its
itself just ll m ma me mightn more most mustn my myself needn no nor not now o of off on once only or other
our ours ourselves out over own re s same shan she should shouldn so some such t than that the their theirs
them themselves then there these they this those through to too under until up ve very was wasn we were
weren what when where which while who whom why will with won wouldn y you your yours yourself yourselves
would could also st nd rd th etc via
""".split())
# Words of BEAM's answer templates that describe the conversation rather than repeat it.
TEMPLATE_WORDS = frozenset("""
mention mentioned notice noticed said contradictory conflicting statement information clarify correct order
""".split())

_WORD = re.compile(r"[a-z]+|[0-9]+")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def _variants(word: str) -> frozenset[str]:
    """Return the forms ``word`` matches as: numbers without leading zeros, full month names, singulars."""
    if word.isdigit():
        return frozenset((word.lstrip("0") or "0",))
    if word in _MONTH_ABBR:
        return frozenset((word, _MONTH_ABBR[word]))
    forms = {word}
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "is", "us")):
        forms.add(word[:-1])  # columns -> column, movies -> movie
        if len(word) > 4 and word.endswith("ies"):
            forms.add(word[:-3] + "y")  # libraries -> library
    return frozenset(forms)


def words(text: str) -> set[str]:
    """Return every form of every word of ``text`` (:func:`_variants`), ISO dates also as month names."""
    text = text.lower()
    out: set[str] = set()
    for w in set(_WORD.findall(text)):
        out |= _variants(w)
    for _, month, _day in _ISO_DATE.findall(text):
        if 1 <= int(month) <= 12:
            out.add(MONTHS[int(month) - 1])
    return out


def content_words(answer: str) -> set[str]:
    """Return the answer's content words: its words minus stop and template words and lone letters.

    Numbers lose leading zeros and abbreviated months are spelled out, so
    each word is counted once however it is written.
    """
    out = set()
    for w in _WORD.findall(answer.lower()):
        if w in STOP_WORDS or not (w.isdigit() or len(w) > 1):
            continue
        forms = _variants(w)
        if forms & TEMPLATE_WORDS:
            continue
        out.add((w.lstrip("0") or "0") if w.isdigit() else _MONTH_ABBR.get(w, w))
    return out


def recall(answer_words: set[str], context_words: set[str]) -> float:
    """Return the share of ``answer_words`` found in ``context_words`` (:func:`words` of the context) in any form.

    1.0 when the answer has no content words.
    """
    if not answer_words:
        return 1.0
    return sum(bool(_variants(w) & context_words) for w in answer_words) / len(answer_words)


def context_words(texts: Iterable[str]) -> set[str]:
    """Return the words of a whole context (its messages' contents)."""
    return words("\n".join(texts))
