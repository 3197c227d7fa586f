"""The text rules folds apply: what a user's message takes back, sentences, and bare values.

Folds are deterministic, yet these read English (``retracted_stems``: "please
forget my phone number" takes back ``phone``). They live in this module and
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
