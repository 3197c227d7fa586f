"""The text rules folds apply: what a user's message takes back, sentences, and bare values.

Folds are deterministic, yet these read English (``retracted_stems``: "please
forget my phone number" takes back ``phone``; ``analyze``: the index terms of
the search rows the projector writes). They live in this module and
nowhere else a fold reaches: :data:`memfold.projections.fold.FOLD_VERSION`
includes the hash of this module's source, so any change here rebuilds every
projection folded by the old rules (``verify`` keeps proving the live
projection is what the log folds to). The offline summarizer applies the same
rules (:mod:`memfold.projections.fact_extraction` imports them from here), and
the retraction pattern is an entry of its rule table, with examples
(:mod:`memfold.projections.offline_rules`).

Import nothing here but the standard library and the ground (``memfold.core``):
``tests/unit/test_fold_version.py`` checks it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

from memfold.core.events import Fact

# --------------------------------------------------------------------------- sentences

ABBREVIATIONS = ("no", "nr", "e.g", "i.e", "mr", "mrs", "ms", "dr", "st", "vs", "approx", "etc")
BOUNDARY = re.compile(r"[.!?]+[\"')\]]*\s+|\n+")

_WORD_CHARS = frozenset(string.ascii_letters + ".")


def _word_before(text: str, start: int, end: int) -> str:
    """Return the run of ASCII letters and dots that ends ``text[start:end]`` (before one final newline).

    What ``re.search(r"([A-Za-z.]+)$", text[start:end])`` finds, without
    copying the slice or trying the pattern at each of its positions.
    """
    if end > start and text[end - 1] == "\n":  # "$" matches before a final newline too
        end -= 1
    i = end
    while i > start and text[i - 1] in _WORD_CHARS:
        i -= 1
    return text[i:end]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Return (start, end) spans of the sentences of ``text``; abbreviations like "no." do not end one."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in BOUNDARY.finditer(text):
        if m.group(0)[0] == ".":
            word = _word_before(text, start, m.start())
            if word and word.lower().rstrip(".") in ABBREVIATIONS:
                continue
        if text[start : m.start()].strip():
            spans.append((start, m.end()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def _is_question(sentence: str) -> bool:
    return sentence.rstrip().rstrip("\"')]").endswith("?")


# --------------------------------------------------------------------------- bare values

# What a summary's facts call a value nothing in its sentence names.
GENERIC_KEYS = ("amount", "date")
# Stems of values nothing in their sentence names ("on May 11", "$30"). Such a value is a fact of
# its own message (``date_150``, ``amount_150_2``), never a new value of another one: nothing says
# they are the same thing, and a long conversation states hundreds of dates. The newest BARE_KEEP
# of each stem are kept; a copy of a named fact's value under one is dropped.
BARE_KEEP = 4
_BARE_KEY = re.compile(rf"({'|'.join(GENERIC_KEYS)})(?:_\d+){{0,2}}")


def bare_stem(key: str) -> str | None:
    """Return ``"date"`` or ``"amount"`` for the key of a value nothing named (``date``, ``date_150``), else None."""
    m = _BARE_KEY.fullmatch(key)
    return m.group(1) if m else None


def _norm(value: str) -> str:
    return re.sub(r"[\s#]", "", value).lower()


def without_bare_copies(facts: Sequence[Fact]) -> list[Fact]:
    """Return ``facts`` without the bare values (``date_150``) another current fact holds, and at most
    :data:`BARE_KEEP` bare values per stem, the last stated (facts merged from several summaries)."""
    named = {_norm(f.value) for f in facts if f.current and not bare_stem(f.key)}
    kept: dict[str, list[Fact]] = {}
    seen: set[str] = set()
    for f in sorted((f for f in facts if f.current and bare_stem(f.key)), key=lambda f: -1 if f.stated_in is None else f.stated_in, reverse=True):
        norm = _norm(f.value)
        stem = bare_stem(f.key) or ""
        if norm in named or norm in seen or len(kept.setdefault(stem, [])) >= BARE_KEEP:
            continue
        seen.add(norm)
        kept[stem].append(f)
    keep = {id(f) for fs in kept.values() for f in fs}
    return [f for f in facts if not (f.current and bare_stem(f.key)) or id(f) in keep]


# --------------------------------------------------------------------------- retractions

# What a user takes back: a verb and its object ("please forget my phone number", "scratch the callback").
RETRACTION_PATTERN = (
    r"\b(?P<verb>forget|ignore|disregard|scratch|never ?mind|withdraw|cancel|remove|delete)\b"
    r"(?P<object>[^.;!?,]{0,40})"
    r"|\b(?:no longer|don't|do not) (?:need|want)\b(?P<object2>[^.;!?,]{0,40})"
)
RETRACTION_FLAGS = re.I
RETRACT_RE = re.compile(RETRACTION_PATTERN, RETRACTION_FLAGS)
# What a retraction can name → the key stem it removes. "order" only with a clear retraction verb:
# "cancel my order" is a request about the order, not a retraction of its id.
RETRACTABLE = {
    "email": "email",
    "e-mail": "email",
    "phone": "phone",
    "refund": "refund",
    "replacement": "replacement",
    "exchange": "exchange",
    "discount": "discount",
    "credit": "credit",
    "voucher": "credit",
    "callback": "callback",
    "call back": "callback",
    "appointment": "appointment",
    "upgrade": "upgrade",
    "downgrade": "downgrade",
    "compensation": "compensation",
    "return": "return",
    "order": "order",
}
RETRACT_ORDER_VERBS = {"forget", "ignore", "disregard", "scratch", "nevermind"}


def retracts(stem: str, key: str) -> bool:
    """True when taking back ``stem`` (:func:`retracted_stems`) takes back the fact ``key``: the stem or ``stem_...``."""
    return key == stem or key.startswith(stem + "_")


def retracted_stems(text: str, role: str, sentences: list[tuple[int, int]] | None = None) -> list[str]:
    """Return the key stems a user's message takes back ("please forget my phone number" -> ``phone``).

    A fact whose key is a stem or starts with ``stem_`` is retracted
    (:func:`retracts`). Only the user retracts; a question or a
    negated verb ("please don't cancel the refund") retracts nothing.
    ``sentences`` are ``sentence_spans(text)`` when the caller has them.
    """
    if role != "user":
        return []
    stems: list[str] = []
    for s, e in sentences if sentences is not None else sentence_spans(text):
        sentence = text[s:e]
        if _is_question(sentence):
            continue
        for m in RETRACT_RE.finditer(sentence):
            verb = (m.group("verb") or "").lower()
            if verb and re.search(r"(?:\bnot|\bnever|n't|n’t)\s*$", sentence[: m.start()], re.I):
                continue  # "please don't cancel the refund" keeps it
            obj = (m.group("object") or m.group("object2") or "").lower()
            for word, stem in RETRACTABLE.items():
                if not re.search(rf"\b{re.escape(word)}\b", obj):
                    continue
                if stem == "order" and verb.replace(" ", "") not in RETRACT_ORDER_VERBS:
                    continue
                stems.append("order_id" if stem == "order" else stem)
    return list(dict.fromkeys(stems))


# --------------------------------------------------------------------------- index terms (search rows)

# Function words carry no topic: a question's "when did I" must not match every message.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    also am im ive id ill youre dont doesnt didnt cant wont isnt arent wasnt s t d ll m re ve o y
    yes ok okay oh hi hello hey thanks thank please sure really well like get got let lets""".split()
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def stem(word: str) -> str:
    """Return ``word`` with common English inflections removed, so "move", "moves", "moved", "moving" meet."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 3 and word.endswith("ed"):
        word = word[:-2]
    else:
        return word[:-1] if len(word) >= 3 and word.endswith("e") else word
    if len(word) > 2 and word[-1] == word[-2] and word[-1] not in "lsz" and not word[-1].isdigit():
        return word[:-1]  # stopped -> stop, running -> run
    return word[:-1] if len(word) >= 3 and word.endswith("e") else word


def _term(word: str) -> str | None:
    """Return the index term of one lower-cased word, or None when it is not indexed."""
    if word in STOP_WORDS or (len(word) == 1 and not word.isdigit()):
        return None
    return stem(word)


# word -> term ("": not indexed). Talk reuses a small vocabulary, so nearly every word
# is a hit: indexing skips ~20 stem() calls per message. Cleared when full (memory stays flat).
_TERMS: dict[str, str] = {}
_TERMS_MAX = 200_000


def analyze(text: str) -> list[str]:
    """Return the index terms of ``text``: lower-cased words, stop words dropped, lightly stemmed, numbers kept."""
    words = _WORD.findall(text.lower())
    terms = _TERMS
    mapped = list(map(terms.get, words))  # one C-level pass; None marks a word not cached yet
    if None in mapped:
        if len(terms) + len(words) > _TERMS_MAX:
            terms.clear()
        for i, word in enumerate(words):
            if mapped[i] is None:
                term = terms.get(word)
                if term is None:
                    term = terms[word] = _term(word) or ""
                mapped[i] = term
    return [t for t in mapped if t]
