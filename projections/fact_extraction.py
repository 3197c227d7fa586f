"""Extract keyed facts from messages: ids, amounts, dates, contacts, names, decisions, conditions, states.

Pure functions over text. A :class:`FactBook` holds the facts in first-seen
order; reading a message retracts what it clearly withdraws, then adds or
updates (the latest mention of a key wins). The patterns live in
:mod:`memfold.projections.fact_patterns`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memfold.core.events import Fact
from memfold.core.ports import MessageRecord
from memfold.projections.fact_keys import MAX_FACTS, MAX_VALUE_CHARS, category_for, clip
from memfold.projections.fact_patterns import (
    ADVICE_OPENING_RE,
    ADVICE_RE,
    AMOUNT_AFTER_RE,
    AMOUNT_KEYS,
    AMOUNT_RE,
    ASKING_AUX_RE,
    ASKING_BEFORE_RE,
    ASKING_IF_RE,
    ATTRIBUTIVE_BEFORE_RE,
    ATTRIBUTIVE_RE,
    AUX_RE,
    BEFORE_RE,
    CHANGE_RE,
    CLAUSE_SUBJECT_RE,
    CODE_BLOCK_RE,
    CODE_KEYS,
    CONDITION_MARKER_RE,
    CONDITION_RE,
    DATE_AFTER_RE,
    DATE_KEYS,
    DATE_LEAD_RE,
    DATE_RE,
    DECISION_PHRASE_RE,
    DECISION_VERB_RE,
    DECISION_VERBS,
    EMAIL_RE,
    EVENT_NOUNS,
    EXAMPLE_RE,
    FILLER_RE,
    FIRST_PERSON_RULES,
    FIRST_PERSON_WORD_RE,
    HASH_ID_RE,
    HELP_REQUEST_RE,
    HYPOTHETICAL_RE,
    IDLE_IF_RE,
    IMPERATIVE_RE,
    MARKDOWN_RE,
    NAME_RE,
    NEGATION_RE,
    NOBODY_RE,
    NOT_ATTRIBUTIVE,
    NOT_ID_PREFIXES,
    NOT_NAMES,
    NOT_SUBJECTS,
    ORDER_ITEM_RE,
    PHONE_RE,
    PREFIX_KEYS,
    PREFIXED_ID_RE,
    PRONOUNS,
    PROVIDED_NOT_RE,
    REQUEST_RE,
    STATUS_RE,
    SUBJECT_RE,
    SUBJECTS,
    SUPERSEDED_RE,
    TOPIC_OBJECT_RE,
    TOPICS,
    TRACKING_RE,
    VERSION_KEYS,
    VERSION_RE,
    WAS_RE,
    WORD_ID_RE,
    WORD_KEYS,
)
from memfold.projections.fold_text import (
    BARE_KEEP,
    STOP_WORDS,
    _is_question,
    _norm,
    analyze,
    bare_stem,
    retracted_stems,
    retracts,
    sentence_spans,
)

MAX_HISTORY = 2  # earlier values kept per key
# An unnamed condition sharing this share of its index terms with one already held changes that one;
# the UNNAMED_KEEP most recently said are kept. Measured on planted seed 23 (docs/quality.md): 2 kept
# cost rolling 18 of 672 facts in its 600-token contexts (support chats repeat boilerplate conditions).
UNNAMED_SAME = 0.5
UNNAMED_KEEP = 1
# A conversation stays on one subject for a few turns: a keyword key's new value within this many
# messages of its current one is that thing's new value (further on, only a change word says so).
SAME_SUBJECT_SPAN = 10
# A text value sharing at least this share of its index terms with the current one restates it.
# Only sentences (RESTATED_TERMS index terms or more each) are compared so.
RESTATED_SHARE = 0.5
RESTATED_TERMS = 4
RESTATED_TAIL = 3
# --------------------------------------------------------------------------- sentences


def sentence_at(text: str, spans: list[tuple[int, int]], pos: int) -> tuple[int, int]:
    for s, e in spans:
        if s <= pos < e:
            return s, e
    return 0, len(text)


# --------------------------------------------------------------------------- the fact book


_NEGATION_WORDS = re.compile(r"\b(?:not|no|never|cannot|cancel\w*|declin\w*|reject\w*|refus\w*|denied|deny)\b|n't|n’t", re.I)


def _negations(text: str) -> list[str]:
    return sorted(m.group().lower() for m in _NEGATION_WORDS.finditer(text))


def _restated(old: str, new: str) -> bool:
    """True when sentence ``new`` says what ``old`` says in other words.

    "Refund status: approved pending inspection" and "The refund record shows
    approved pending inspection" are one fact read from two sentences, not a
    change of it: at least RESTATED_SHARE of their index terms shared, the
    last RESTATED_TAIL the same, the same negations. Values with a digit or
    an ``@`` (a date, an amount, an id, an address) and short ones (a name,
    an item: "Halden standing desk") change whenever their text does.
    """
    if re.search(r"[\d@]", old) or re.search(r"[\d@]", new):
        return False
    terms_old, terms_new = analyze(old), analyze(new)
    a, b = set(terms_old), set(terms_new)
    if min(len(a), len(b)) < RESTATED_TERMS or _negations(old) != _negations(new):
        return False
    # The value is said last ("... shows approved pending inspection"): it must end alike, or a
    # condition's new terms ("provided it is returned in its original packaging", was "... unused")
    # would read as the old one's restatement.
    if terms_old[-RESTATED_TAIL:] != terms_new[-RESTATED_TAIL:]:
        return False
    return _overlap(a, b) >= RESTATED_SHARE


def _overlap(a: set[str], b: set[str]) -> float:
    """Return the share of their index terms two values have in common (0 when both have none)."""
    return len(a & b) / len(a | b) if a or b else 0.0


@dataclass(slots=True)
class FactEntry:
    key: str
    value: str
    category: str
    source: int | None  # index of the message that last mentioned it (None: from an earlier summary)
    stated_at: datetime | None = None  # when this value was first stated
    stated_in: int | None = None  # the message that first stated it
    history: list[FactEntry] = field(default_factory=list)  # earlier values of the key, oldest first


def entry_facts(e: FactEntry) -> list[Fact]:
    """Return ``e`` as facts: its earlier values first, each ``superseded_by`` the next, then the current one."""
    chain = [*e.history, e]
    out = [
        Fact(key=e.key, value=older.value, category=e.category, stated_at=older.stated_at,
             stated_in=older.stated_in, superseded_by=newer.value)
        for older, newer in zip(chain, chain[1:])
    ]
    out.append(Fact(key=e.key, value=e.value, category=e.category, stated_at=e.stated_at, stated_in=e.stated_in))
    return out


def _siblings(a: str, b: str) -> bool:
    """True when keys ``a`` and ``b`` share their first and last words and one's words hold the other's."""
    pa, pb = a.split("_"), b.split("_")
    if len(pa) == len(pb) or pa[0] != pb[0] or pa[-1] != pb[-1]:
        return False
    short, long = (pa, pb) if len(pa) < len(pb) else (pb, pa)
    return set(short) <= set(long)


class FactBook:
    """Keyed facts in first-seen order: the latest mention of a key wins; retractions remove by stem.

    A key whose value changes keeps its earlier values (at most
    :data:`MAX_HISTORY`) as its lineage: :meth:`facts` lists them before the
    current value, each marked ``superseded_by``. Reading a message notes its
    timestamp (:meth:`note_date`), so a value is stamped with when it was
    first stated.
    """

    def __init__(self) -> None:
        self._entries: dict[str, FactEntry] = {}
        self._dates: dict[int, datetime] = {}

    def note_date(self, source: int, at: datetime | None) -> None:
        """Record that message ``source`` was written at ``at`` (values it states are stamped with it)."""
        if at is not None:
            self._dates[source] = at

    def said_on(self, source: int | None) -> datetime | None:
        """Return when message ``source`` was written (None when unknown)."""
        return None if source is None else self._dates.get(source)

    def put(
        self, key: str, value: str, source: int | None, category: str | None = None,
        stated_at: datetime | None = None, stated_in: int | None = None,
    ) -> None:
        """Set ``key`` (latest wins; the old value joins the lineage).

        An equal value (ignoring ``#`` and spaces) keeps its spelling; a
        sentence saying the current one in other words (:func:`_restated`)
        takes its place without a lineage entry, first stated when the old one was.
        """
        value = clip(value, MAX_VALUE_CHARS)
        if not value:
            return
        if stated_in is None:
            stated_in = source
        if stated_at is None and source is not None:
            stated_at = self._dates.get(source)
        old = self._entries.get(key)
        if old is not None and _norm(old.value) == _norm(value):
            old.source = source if source is not None else old.source
            return
        if old is not None and _restated(old.value, value):
            old.value = value  # the same fact in its latest words (a clipped one said whole), no lineage entry
            old.source = source if source is not None else old.source
            return
        if bare_stem(key) and self._named_elsewhere(key, value):
            return  # "amount: 293.45 EUR" says nothing "refund_amount: 293.45 EUR" does not
        if old is not None:
            earlier = FactEntry(old.key, old.value, old.category, old.source, old.stated_at, old.stated_in)
            old.history = [*old.history, earlier][-MAX_HISTORY:]
            old.value, old.source, old.stated_at, old.stated_in = value, source, stated_at, stated_in
        else:
            self._entries[key] = FactEntry(key, value, category or category_for(key), source, stated_at, stated_in)
        if not bare_stem(key):
            norm = _norm(value)
            for k in [k for k, e in self._entries.items() if bare_stem(k) and _norm(e.value) == norm]:
                del self._entries[k]  # now named: the unnamed copy goes

    def _named_elsewhere(self, key: str, value: str) -> bool:
        norm = _norm(value)
        return any(k != key and _norm(e.value) == norm for k, e in self._entries.items())

    def put_fact(self, fact: Fact) -> None:
        """Add a fact of an earlier summary; its superseded values, listed first, become the lineage again."""
        self.put(fact.key, fact.value, None, fact.category, fact.stated_at, fact.stated_in)

    def put_once(self, key: str, value: str, source: int | None) -> None:
        """Set ``key`` only if it is not set yet (topic, the user's first request)."""
        if key not in self._entries:
            self.put(key, value, source)

    def put_subject(self, key: str, value: str, source: int | None) -> None:
        """Set a key named by its value's own subject (``pickup_date``), unless a sibling key holds that value.

        A sibling names the same thing in more or fewer words, of the same
        kind: ``pickup_scheduled_date`` (a tool's ``"pickup_scheduled"``
        field) beside ``pickup_date`` ("Pickup is booked for ..."). Its equal
        value is a restatement of that fact, not a second fact: the sibling
        counts as said again, as :meth:`put` does for an equal value.
        """
        norm = _norm(clip(value, MAX_VALUE_CHARS))
        for k, e in self._entries.items():
            if k != key and _norm(e.value) == norm and _siblings(k, key):
                e.source = source if source is not None else e.source
                return
        self.put(key, value, source)

    def put_correction(self, old: str, value: str, source: int | None) -> bool:
        """Make ``value`` the new value of the one key holding ``old`` ("£3,347.10, not £4,200.70"); return whether one did.

        A named key holding ``old`` wins over a bare one; two named ones are
        ambiguous and nothing changes. The key moves to the end of the
        first-seen order: a corrected value is as new as one first said now
        (facts give way oldest first when a summary is short of room).
        """
        norm = _norm(old)
        holders = [k for k, e in self._entries.items() if _norm(e.value) == norm]
        candidates = [k for k in holders if bare_stem(k) is None] or holders
        if len(candidates) != 1:
            return False
        key = candidates[0]
        self.put(key, value, source)
        self._entries[key] = self._entries.pop(key)
        return True

    def put_numbered(self, stem: str, value: str, source: int | None, category: str) -> None:
        """Add ``value`` under ``stem``, ``stem_2``, ... (the first free one) unless an equal value is there."""
        value = clip(value, MAX_VALUE_CHARS)
        for k in self._numbered(stem):
            if _norm(self._entries[k].value) == _norm(value):
                self._entries[k].source = source if source is not None else self._entries[k].source
                return
        n = 1
        while (stem if n == 1 else f"{stem}_{n}") in self._entries:
            n += 1
        self.put(stem if n == 1 else f"{stem}_{n}", value, source, category)

    def holds(self, value: str, category: str) -> bool:
        """True when a current fact of ``category`` has ``value`` (ignoring ``#`` and spaces)."""
        norm = _norm(clip(value, MAX_VALUE_CHARS))
        return any(e.category == category and _norm(e.value) == norm for e in self._entries.values())

    def put_unnamed_condition(self, value: str, source: int | None) -> None:
        """Add a condition nothing names ("You'll get an email once it's paid out").

        It changes the unnamed condition it mostly repeats (:data:`UNNAMED_SAME`
        of their index terms shared: "within 14 days" -> "within 30 days": a
        lineage entry). One about something else is not a change of it: it
        takes the place of the least recently said when :data:`UNNAMED_KEEP`
        are held, with no "was:".
        """
        value = clip(value, MAX_VALUE_CHARS)
        terms = set(analyze(value))
        unnamed = self._numbered("condition")
        for k in unnamed:
            held = self._entries[k].value
            if _norm(held) == _norm(value) or (terms and _overlap(set(analyze(held)), terms) >= UNNAMED_SAME):
                self.put(k, value, source, "CONDITION")
                return
        by_said = sorted(unnamed, key=lambda k: -1 if self._entries[k].source is None else self._entries[k].source)
        for k in by_said[: max(0, len(unnamed) - UNNAMED_KEEP + 1)]:
            del self._entries[k]
        self.put_numbered("condition", value, source, "CONDITION")

    def _numbered(self, stem: str) -> list[str]:
        """Return the keys ``stem``, ``stem_2``, ... held, in the order they were added."""
        return [k for k in self._entries if k == stem or re.fullmatch(rf"{stem}_\d+", k)]

    def put_bare(self, stem: str, value: str, source: int | None) -> None:
        """Add a value nothing named as a fact of message ``source`` (``date_150``), unless the book holds it already.

        Only the newest :data:`BARE_KEEP` values of ``stem`` stay; older ones
        leave the book without being superseded (they were never the same thing).
        """
        value = clip(value, MAX_VALUE_CHARS)
        if not value:
            return
        norm = _norm(value)
        for k, e in self._entries.items():
            if _norm(e.value) == norm:
                if bare_stem(k) == stem and source is not None:
                    e.source = source  # said again: still in use
                return
        self.put_numbered(stem if source is None else f"{stem}_{source}", value, source, category_for(stem))
        same = [k for k in self._entries if bare_stem(k) == stem]
        for k in same[: max(0, len(same) - BARE_KEEP)]:
            del self._entries[k]

    def put_named(self, key: str, value: str, source: int | None, sentence: str, message: str) -> None:
        """Set a keyword key ("deadline", "refund_amount") from message ``source``.

        A different value replaces the current one when the conversation is
        still on it (the current value was said within :data:`SAME_SUBJECT_SPAN`
        messages) or when the update says so: a word of :data:`CHANGE_RE` in
        ``sentence``, or the old value named in ``message``. Otherwise it is
        another thing of that kind, kept beside it (``deadline_2``): a long
        conversation has many deadlines, and none of them moved.
        """
        old = self._entries.get(key)
        said = None if old is None else old.source if old.source is not None else old.stated_in
        if (
            old is None or _norm(old.value) == _norm(value) or CHANGE_RE.search(sentence) or old.value in message
            or (said is not None and source is not None and source - said <= SAME_SUBJECT_SPAN)
        ):
            self.put(key, value, source)
        else:
            self.put_numbered(key, value, source, category_for(key))

    def get(self, key: str) -> str | None:
        entry = self._entries.get(key)
        return entry.value if entry else None

    def retract(self, stem: str) -> list[str]:
        """Remove every key equal to ``stem`` or starting with ``stem_``; return the removed keys."""
        gone = [k for k in self._entries if retracts(stem, k)]
        for k in gone:
            del self._entries[k]
        return gone

    def drop_before(self, window_start: int) -> None:
        """Remove facts last mentioned by a message before ``window_start`` (sliding window)."""
        for k in [k for k, e in self._entries.items() if e.source is not None and e.source < window_start]:
            del self._entries[k]

    def entries(self) -> list[FactEntry]:
        return list(self._entries.values())

    def facts(self) -> tuple[Fact, ...]:
        """Return the current facts, first-seen order, at most :data:`MAX_FACTS` (the most recently added win).

        Each key's earlier values come right before its current one, marked
        ``superseded_by`` the value that replaced them.
        """
        return tuple(f for e in self.entries()[-MAX_FACTS:] for f in entry_facts(e))

    def by_category(self, category: str) -> list[FactEntry]:
        return [e for e in self._entries.values() if e.category == category]


# --------------------------------------------------------------------------- extraction


def _nearest_subject(text: str, pos: int, *, before_only: bool = False) -> str | None:
    best: tuple[int, str] | None = None
    for m in SUBJECT_RE.finditer(text):
        if before_only and m.start() > pos:
            break
        distance = abs(m.start() - pos)
        if best is None or distance < best[0]:
            best = (distance, SUBJECTS[m.group(1).lower()])
    return best[1] if best else None


# A keyword after a value names it unless another value follows the keyword this closely: "today is
# January 10 and you have until February 1" - "until" is February 1's deadline, not January 10's.
KEYWORD_INTRODUCES_CHARS = 24


def _keywords_around(
    rules: list[tuple[re.Pattern[str], str]], sentence: str, pos: int, value: re.Pattern[str] | None = None,
) -> tuple[str, str]:
    """Return the keys of the keywords nearest before and nearest after ``pos`` in ``sentence`` ("" where none).

    With ``value`` (the pattern of the value at ``pos``), a keyword after it that another such value
    follows within :data:`KEYWORD_INTRODUCES_CHARS` introduces that one, and is not returned.
    """
    before: tuple[int, str] | None = None
    after: tuple[int, int, str] | None = None
    for pattern, key in rules:
        for m in pattern.finditer(sentence):
            if m.end() <= pos:
                if before is None or m.end() > before[0]:
                    before = (m.end(), key)
            elif m.start() >= pos:
                if after is None or m.start() < after[0]:
                    after = (m.start(), m.end(), key)
    if after is not None and value is not None and value.search(sentence, after[1], after[1] + KEYWORD_INTRODUCES_CHARS):
        after = None
    return (before[1] if before else ""), (after[2] if after else "")


def _keyword_key(rules: list[tuple[re.Pattern[str], str]], sentence: str, pos: int, default: str) -> str:
    """Return the key of the keyword nearest before ``pos`` in ``sentence`` (else the nearest after)."""
    before, after = _keywords_around(rules, sentence, pos)
    return before or after or default


def _can_name(noun: str) -> bool:
    """True when ``noun``, read right by a value or a verb ("as the claimed amount", "the room is confirmed"), can key a fact."""
    return noun not in NOT_SUBJECTS and noun not in STOP_WORDS


def _with_kind(noun: str, suffix: str) -> str:
    """Return ``noun`` as a key of ``suffix``'s kind: "deductible" -> "deductible_amount"; "fee" stays "fee"."""
    return noun if noun.endswith((suffix.strip("_"), "total", "cost", "fee", "price")) else noun + suffix


def _subject_key(sentence: str, pos: int, suffix: str) -> str | None:
    """Return a key from the head noun of the clause the value at ``pos`` completes, or None.

    "Your deductible is $751.25" -> "deductible_amount"; "The adjuster is booked for
    2025-10-10" -> "adjuster" + ``suffix``. Only the text before the value counts.
    """
    m = CLAUSE_SUBJECT_RE.search(sentence[:pos])
    if m is None:
        return None
    words = m.group("noun").lower().split()
    noun = words[-1]
    if noun in ("date", "day", "amount", "sum") and len(words) > 1:  # "new pickup date is" -> pickup_date
        noun = words[-2]
    if noun in NOT_SUBJECTS or noun in ("date", "day", "new", "old", "sum"):
        return None
    return _with_kind(noun, suffix)


def _attributive(sentence: str, start: int, end: int) -> list[str]:
    """Return the one or two words naming what the value at ``start:end`` is the value of, or none.

    "a $2,000 penalty" -> ["penalty"]; "a $500 team lunch" -> ["team",
    "lunch"]; "the $75 could help" -> [] (:data:`NOT_ATTRIBUTIVE` words
    cannot name a thing); "$85,000 salary" -> [] (a thing's amount comes
    after a determiner; "$10 compared to" is no name).
    """
    m = ATTRIBUTIVE_RE.match(sentence, end)
    if m is None or not _names_thing(m.group("first")) or not ATTRIBUTIVE_BEFORE_RE.search(sentence, 0, start):
        return []
    second = m.group("second")
    return [m.group("first"), second] if second and _names_thing(second) else [m.group("first")]


def _dated_thing(sentence: str, start: int, end: int) -> str | None:
    """Return the event the date at ``start:end`` is the date of, or None.

    "my therapy session with Sara on March 10" -> "session"; "I've
    pencilled in 21 February 2025 for the cutover" -> "cutover"; "Noted
    January 27, 2025 as the incident date" -> "incident" (any noun there).
    Only :data:`EVENT_NOUNS` otherwise: "We moved the plants on June 16"
    names no event.
    """
    after = DATE_AFTER_RE.match(sentence, end)
    if after is not None and (after.group("noun") in EVENT_NOUNS or (after.group("date") and _names_thing(after.group("noun")))):
        return after.group("noun")
    before = DATE_LEAD_RE.search(sentence, max(0, start - 80), start)
    return before.group("noun") if before is not None and before.group("noun") in EVENT_NOUNS else None


def _names_thing(word: str) -> bool:
    """True when ``word`` can be (part of) the name of a thing: not a function word, verb form or adverb."""
    if word in STOP_WORDS or word in NOT_ATTRIBUTIVE:
        return False
    return not (len(word) > 4 and word.endswith(("ed", "ly", "ing")))


_JSON_KEY_RE = re.compile(r'"(?P<key>[A-Za-z][A-Za-z0-9 _-]{1,40})"\s*:\s*"?\s*$')


def _json_key(sentence: str, pos: int, suffix: str) -> str | None:
    """Return a key from the JSON field the value at ``pos`` is the value of (a tool result's ``"deductible": "$308.55"``)."""
    m = _JSON_KEY_RE.search(sentence[max(0, pos - 48):pos])
    if m is None:
        return None
    noun = _slug(m.group("key"))
    if not noun or noun in ("value", "amount", "date", "data", "result"):
        return None
    return _with_kind(noun, suffix)


class _Spans:
    def __init__(self) -> None:
        self._taken: list[tuple[int, int]] = []

    def free(self, start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in self._taken)

    def take(self, start: int, end: int) -> None:
        self._taken.append((start, end))


# An assistant message longer than this (characters) is an explanation, not a reply that records something.
TUTORIAL_CHARS = 1000


def _skip_tutorial_lines(text: str, spans: _Spans) -> None:
    """Mark a long assistant answer's markdown lines (bullets, steps, headings, bold, code) as read: no date or amount from them.

    A tutorial's bullets lay out examples and plans ("Week 1: finish Act 1 by
    March 3", "- Budget: $50/month"); read as facts they filled BEAM's memories
    with bare dates and amounts (404 of the 1,037 date and amount facts read
    from its chats). Only answers over TUTORIAL_CHARS: an agent's short
    structured reply ("- Total: $672.35\n- Delivery: March 3") records facts.
    What the user stated, and plain sentences, are read as before.
    """
    start = 0
    for line in text.split("\n"):
        end = start + len(line)
        if MARKDOWN_RE.search(line):
            spans.take(start, end)
        start = end + 1


def _extract_ids(text: str, book: FactBook, source: int | None, spans: _Spans) -> None:
    found: list[tuple[int, str, str]] = []
    for m in PREFIXED_ID_RE.finditer(text):
        if sum(c.isdigit() for c in m.group("rest")) < 3 or m.group("prefix").lower() in NOT_ID_PREFIXES:
            continue
        key = PREFIX_KEYS.get(m.group("prefix").lower()) or _keyword_key(CODE_KEYS, text, m.start(), "reference_id")
        found.append((m.start(), key, m.group(0)))
        spans.take(m.start(), m.end())
    versions = []  # (match, said to be old: "now runs v4.5.6, replacing v3.7.11")
    for m in VERSION_RE.finditer(text):
        if spans.free(m.start(), m.end()):
            spans.take(m.start(), m.end())
            versions.append((m, SUPERSEDED_RE.search(text, max(0, m.start() - 24), m.start()) is not None))
    replaced = [m.group(0) for m, old in versions if old]
    for m, old in versions:
        if old:
            continue
        key = _keyword_key(VERSION_KEYS, text, m.start(), "version")
        if key == "version" and any(book.put_correction(r, m.group(0), source) for r in replaced):
            continue  # no keyword: the new value of the key that held the old one (firmware_version)
        found.append((m.start(), key, m.group(0)))
    for m in WORD_ID_RE.finditer(text):
        if not spans.free(m.start("id"), m.end("id")):
            continue
        value = m.group("id")
        word = m.group("word").lower()
        if word == "account" and len(re.sub(r"\D", "", value)) < 4:
            continue
        key = WORD_KEYS[word]
        if word == "reference" and re.search(r"\b(?:booking|reservation|trip)\b", text[max(0, m.start() - 40) : m.start()], re.I):
            key = "booking_ref"
        found.append((m.start(), key, value))
        spans.take(m.start("id"), m.end("id"))
    for m in TRACKING_RE.finditer(text):
        if spans.free(m.start("id"), m.end("id")) and re.search(r"\d", m.group("id")):
            found.append((m.start(), "tracking_number", m.group("id")))
            spans.take(m.start("id"), m.end("id"))
    for m in HASH_ID_RE.finditer(text):
        if spans.free(m.start(), m.end()):
            found.append((m.start(), "order_id", m.group(0)))
            spans.take(m.start(), m.end())
    # Several ids of one kind in one message are all kept, in order of appearance.
    grouped: dict[str, list[str]] = {}
    for _, key, value in sorted(found):
        values = grouped.setdefault(key, [])
        if all(_norm(v) != _norm(value) for v in values):
            values.append(value)
    for key, values in grouped.items():
        book.put(key, ", ".join(values), source)


def _extract_items(text: str, book: FactBook, source: int | None) -> None:
    """Read what an order holds where it is named after the order's id ("order #18066: one Halden standing desk")."""
    for m in ORDER_ITEM_RE.finditer(text):
        book.put("item", m.group("item").strip(), source, "ENTITY")


def _amount(m: re.Match[str]) -> str:
    """Return the amount an AMOUNT_RE match spells, in one spelling: "£4,200.70", "EUR 50", "50.00 EUR"."""
    if m.group("sym"):
        return f"{m.group('sym')}{m.group('n1')}"
    if m.group("code1"):
        return f"{m.group('code1')} {m.group('n2')}"
    return f"{m.group('n3')} {m.group('code2')}"


def _date(m: re.Match[str]) -> str:
    """Return the date a DATE_RE match spells, spaces made single."""
    return " ".join((m.group("iso") or m.group("md") or m.group("dm")).split())


def _extract_amounts(text: str, sentences: list[tuple[int, int]], book: FactBook, source: int | None, spans: _Spans) -> None:
    for m in AMOUNT_RE.finditer(text):
        if not spans.free(m.start(), m.end()):
            continue
        spans.take(m.start(), m.end())
        before, after = text[max(0, m.start() - 24) : m.start()], text[m.end() : m.end() + 16]
        if SUPERSEDED_RE.search(before) or (WAS_RE.search(before) and BEFORE_RE.search(after)):
            continue  # "(it was 310.40 EUR before)", "instead of $20": an old value, not the current one
        s, e = sentence_at(text, sentences, m.start())
        _put_value(book, AMOUNT_KEYS, "amount", _amount(m), source, text, text[s:e], m.start() - s, AMOUNT_RE, _amount)


def _extract_dates(
    text: str, sentences: list[tuple[int, int]], book: FactBook, source: int | None, spans: _Spans, bare: bool = True,
) -> None:
    """Read the dates of ``text``; ``bare`` False keeps only those something names (a tutorial's worked example
    "the probability that it will rain on February 15, given that it rained on February 14" dates nothing)."""
    for m in DATE_RE.finditer(text):
        if not spans.free(m.start(), m.end()):
            continue
        spans.take(m.start(), m.end())
        if SUPERSEDED_RE.search(text[max(0, m.start() - 24) : m.start()]):
            continue  # "on May 5, not May 3": a denied or an old date
        s, e = sentence_at(text, sentences, m.start())
        _put_value(book, DATE_KEYS, "date", _date(m), source, text, text[s:e], m.start() - s, DATE_RE, _date, bare)


# After a value, what makes it the correction of the value named next: "£3,347.10 per month, not
# £4,200.70 as first quoted", "on May 5 rather than May 3", "$40 instead of the $50".
_CORRECTING = re.compile(
    r"(?:\s+(?:a|an|per|each)\s+\w+)?\s*,?\s*(?:not|rather than|instead of)(?:\s+(?:on|in|at|for|by|the))?\s+", re.I
)


# Before a value, what makes it the new value of the one named before it: "moved from May 3 to May 5".
_TO_BEFORE = re.compile(r"\s+to\s+$", re.I)
_FROM_BEFORE = re.compile(r"\bfrom\s+$", re.I)


def _corrects(
    book: FactBook, pattern: re.Pattern[str], spell: Callable[[re.Match[str]], str], value: str,
    source: int | None, sentence: str, at: re.Match[str] | None,
) -> bool:
    """Set ``value`` as the new value of the key holding the value it corrects, if any; return whether it did.

    "With everything included, it's £3,347.10 per month, not £4,200.70 as
    first quoted", or "it moved from £4,200.70 to £3,347.10": ``price:
    £4,200.70`` becomes £3,347.10, the old value in its lineage, where it
    would otherwise stand beside a bare ``amount_54``
    (:meth:`FactBook.put_correction`). ``at`` is ``pattern``'s match of the value in ``sentence``.
    """
    said = None if at is None else _CORRECTING.match(sentence, at.end())
    old = None if said is None else pattern.match(sentence, said.end())
    if old is None and at is not None and (to := _TO_BEFORE.search(sentence, 0, at.start())) is not None:
        # "The pickup moved from May 3 to May 5": the value "from" introduces, right before "to".
        old = next((v for v in pattern.finditer(sentence, 0, to.start())
                    if v.end() == to.start() and _FROM_BEFORE.search(sentence, 0, v.start())), None)
    return old is not None and book.put_correction(spell(old), value, source)


def _put_value(
    book: FactBook, rules: list[tuple[re.Pattern[str], str]], stem: str, value: str, source: int | None,
    text: str, sentence: str, pos: int, pattern: re.Pattern[str], spell: Callable[[re.Match[str]], str],
    bare: bool = True,
) -> None:
    """Keep an amount or date at ``pos`` in ``sentence``: under its keyword's key, else its subject's (or, for
    an amount, the name after it: "as the claimed amount"), else as the new value of the one it corrects
    (``pattern``/``spell`` read that one), else bare. With no keyword before it, an amount said of a thing ("a $2,000 penalty", :func:`_attributive`) is that
    thing's, and a date said of an event ("my therapy session on March 10", :func:`_dated_thing`) that event's.
    With ``bare`` False a value nothing names is not kept."""
    key, after = _keywords_around(rules, sentence, pos, pattern)
    subject = None if key else _json_key(sentence, pos, f"_{stem}") or _subject_key(sentence, pos, f"_{stem}")
    at = pattern.match(sentence, pos) if not key and not subject else None
    if at is not None and stem == "date":
        thing = _dated_thing(sentence, pos, at.end())
        if thing:  # a keyword after it still names it better ("... on May 3 for the delivery")
            book.put_named(after or f"{thing}_date", value, source, sentence, text)
            return
    said_of = [] if at is None or stem != "amount" else _attributive(sentence, pos, at.end())
    if said_of:  # "a $50 gift card" is a credit, as a keyword says; "a $2,000 penalty" is a penalty
        key = _keyword_key(rules, " ".join(said_of), 0, "")
        if not key:  # another penalty later is another thing of that kind, kept beside (penalty_amount_2)
            name = _with_kind("_".join(said_of), f"_{stem}")
            book.put_numbered(name, value, source, category_for(name))
            return
    key = key or after
    if key:
        book.put_named(key, value, source, sentence, text)
        return
    # "$1,043.75 as the claimed amount": named right after it, like a subject (a later value updates it).
    named = AMOUNT_AFTER_RE.match(sentence, at.end()) if at is not None and stem == "amount" else None
    if named is not None and _can_name(named.group("noun")):
        subject = _with_kind(named.group("noun"), "_amount")
    if subject:
        book.put_subject(subject, value, source)  # named by its own subject: a new value is that thing's new value
        return
    if stem == "date" and at is not None and _on_the_day(at, book.said_on(source)):
        return  # "my current focus on April 5, 2024", said that day: the message's own date, no fact
    if not _corrects(book, pattern, spell, value, source, sentence, at) and bare:
        book.put_bare(stem, value, source)


_MONTH_NUMBERS = {m: i for i, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}


def _on_the_day(m: re.Match[str], said: datetime | None) -> bool:
    """True when the date a DATE_RE match spells is the day ``said`` (a date without a year: its month and day)."""
    if said is None:
        return False
    if m.group("iso"):
        return m.group("iso") == said.date().isoformat()
    spelled = (m.group("md") or m.group("dm")).lower()
    month = re.search(r"[a-z]{3}", spelled)  # "15th of february": "th" and "of" are too short to match
    numbers = [int(n) for n in re.findall(r"\d+", spelled)]
    if month is None or not numbers:
        return False
    day = numbers[0]
    year = numbers[1] if len(numbers) > 1 else None
    return (_MONTH_NUMBERS.get(month.group(0)) == said.month and day == said.day
            and (year is None or year == said.year))


def _owner_key(text: str, pos: int, role: str, own: str, other: str, value: str, book: FactBook) -> str:
    """Return ``own`` for the user's own contact, ``other`` for one the assistant gives (not "your ...", not theirs)."""
    if role != "assistant":
        return own
    known = book.get(own)
    if known is not None and _norm(known) == _norm(value):
        return own
    return own if re.search(r"\byour\b", text[max(0, pos - 40) : pos], re.I) else other


# An assistant message holding a draft for the user to send: its "My name is ..." is the user's.
_DRAFT_RE = re.compile(
    r"^\s*(?:\*\*)?(?:dear|hi|hello)\b[^\n.!?]{0,40},\s*$|^\s*(?:\*\*)?subject:|\b(?:sincerely|best regards|kind regards|warm regards),",
    re.I | re.M,
)


def _extract_contacts(text: str, role: str, book: FactBook, source: int | None, spans: _Spans, has_digit: bool = True) -> None:
    for m in EMAIL_RE.finditer(text) if "@" in text else ():
        spans.take(m.start(), m.end())
        book.put(_owner_key(text, m.start(), role, "email", "contact_email", m.group(0), book), m.group(0), source)
    for m in PHONE_RE.finditer(text) if has_digit else ():
        digits = re.sub(r"\D", "", m.group(0))
        if not 7 <= len(digits) <= 15 or not spans.free(m.start(), m.end()):
            continue
        spans.take(m.start(), m.end())
        phone = " ".join(m.group(0).split())
        book.put(_owner_key(text, m.start(), role, "phone", "contact_phone", phone, book), phone, source)
    for m in NAME_RE.finditer(text):
        name = m.group("name") or m.group("full") or m.group("here")
        if name.split()[0].lower() in NOT_NAMES:
            continue
        if role == "assistant" and (name == book.get("customer_name") or _DRAFT_RE.search(text)):
            continue  # a letter or message the assistant drafted for the user names the user, not the agent
        key = "agent_name" if role == "assistant" else "customer_name"
        book.put(key, name, source)


def _extract_sentence_facts(
    text: str, sentences: list[tuple[int, int]], role: str, book: FactBook, source: int | None, previous: str | None,
    tutorial: bool = False,
) -> None:
    """Read decisions, conditions and states sentence by sentence.

    In a ``tutorial`` (an assistant answer over TUTORIAL_CHARS) an "if",
    "unless" or "once" qualifies advice ("However, if budget constraints are
    a concern, sticking with the regular version ..."): only a condition
    named as one ("One condition: ...") is read there.
    """
    for s, e in sentences:
        sentence = text[s:e].strip()
        if not sentence or _is_question(sentence) or sentence.endswith(":"):
            continue  # a lead-in ("This is confirmed by the fact that:"): what it announces follows
        if role == "assistant" and MARKDOWN_RE.search(sentence):
            continue  # a tutorial's bullet or `code` explains in general; it agrees or reports nothing
        _decision(sentence, book, source, previous)
        if not tutorial or CONDITION_MARKER_RE.search(sentence):
            _conditions(sentence, book, source)
        _states(sentence, book, source)




def _statement(sentence: str) -> str:
    """Return a sentence as a fact value: leading fillers and the final full stop removed."""
    return FILLER_RE.sub("", sentence.strip()).rstrip(" .")


def _clause_before(sentence: str, pos: int) -> str:
    """Return the text of the clause that ends at ``pos`` (after the last comma, semicolon or colon)."""
    head = sentence[:pos]
    cut = max(head.rfind(","), head.rfind(";"), head.rfind(":"))
    return head[cut + 1 :]


# A decision stated in a sentence longer than this (words) is its clause: "I'm trying to deploy my
# site and I've decided to use Netlify over GitHub Pages due to its SSL, but I'm not sure how..." is
# "I've decided to use Netlify over GitHub Pages due to its SSL".
DECISION_CLAUSE_WORDS = 16
# Where a clause ends: a semicolon, a coordinating conjunction after a comma, "but", "and I" / "and we"
# (not a bare comma or "which": "the review, which was approved with comments" is one statement).
_CLAUSE_BREAK = re.compile(r";|,\s+(?:but|so|and|because|though|although|yet)\b|\s+but\s+|\s+and\s+(?=(?:I|we)\b)", re.I)


def _clause_around(sentence: str, start: int, end: int) -> str:
    """Return the clause of ``sentence`` holding ``[start, end)``: between the clause breaks around it."""
    before = [b.end() for b in _CLAUSE_BREAK.finditer(sentence, 0, start)]
    after = _CLAUSE_BREAK.search(sentence, end)
    return sentence[(before[-1] if before else 0) : (after.start() if after else len(sentence))]


# "will be rejected", "being accepted": the verb as a possibility (a passive after "be"), no decision.
_PASSIVE_BEFORE = re.compile(r"\b(?:be|being)\s+(?:\w+ly\s+)?$", re.I)
# "the room is already confirmed": a state of the thing named right before the verb, no new decision.
# A fact named by that noun (``room_confirmed``), when no subject word names it; "Everything is
# confirmed" (no determiner) stays a decision.
_STATE_OF = re.compile(
    r"\b(?:the|your|my|our|his|her|their)\s+(?P<noun>[a-z]{3,})\s+(?:is|are|was|were|has been|have been)"
    r"\s+(?:already\s+|now\s+|\w+ly\s+)?$",
    re.I,
)
# "Let's go with this approach", "I'll go with that": the decision is what the other side just said.
_POINTING = re.compile(r"\s*(?:this|that|these|those|it)\b(?:\s+\w+)?\s*[.!]*\s*$", re.I)


# What an answer opens with before it says anything: "Certainly! ", "Great question. ", "Sure thing, ".
_OPENER = re.compile(
    r"^(?:\s*(?:certainly|absolutely|sure(?: thing)?|of course|great(?: question| idea| choice)?|good (?:question|idea)"
    r"|happy to help|no problem|got it|okay|ok|yes|perfect|excellent|thanks(?: for [^.!?]{0,40})?)[!.,]+\s*)+",
    re.I,
)


_ACCEPTING = re.compile(r"\bdeal\b|\btake\b", re.I)


def _decision(sentence: str, book: FactBook, source: int | None, previous: str | None) -> None:
    by_verb = DECISION_VERB_RE.search(sentence)
    m = by_verb or DECISION_PHRASE_RE.search(sentence)
    if m is None:
        return
    if HYPOTHETICAL_RE.search(_clause_before(sentence, m.start())):
        return  # "if approved, ..." is a condition; "If it comes to that, we agreed ..." is still a decision
    if by_verb is not None and _PASSIVE_BEFORE.search(sentence, 0, m.start()):
        return  # "the commit will be rejected", "its chances of being accepted": what may happen, not a decision
    if by_verb is not None:
        verb = m.group("verb").lower()
        verb = DECISION_VERBS.get(verb, verb)
    else:  # "Deal." and "I'll take it" accept an offer; "let's go with ..." chooses
        verb = "accepted" if _ACCEPTING.search(m.group(0)) else "chosen"
    subject = _nearest_subject(sentence, m.start())
    if subject is None and by_verb is not None and (state := _STATE_OF.search(sentence, 0, m.start())):
        noun = state.group("noun").lower()
        subject = noun if _can_name(noun) else None
    value = _statement(sentence)
    if len(sentence.split()) > DECISION_CLAUSE_WORDS:
        value = _statement(_clause_around(sentence, m.start(), m.end()))
    if (len(sentence.split()) < 5 or _POINTING.match(sentence, m.end())) and previous:
        # "Deal, agreed." names nothing: it agrees to what the other side just said, named by what
        # that offer names first ("I've set up a refund of 310.40 EUR. One condition: ... the item ...").
        subject = subject or _nearest_subject(previous, 0)
        value = f"{value} (re: {clip(_OPENER.sub('', previous), 120)})"
    if subject:
        book.put(f"{subject}_{verb}", value, source, "DECISION")
    else:
        book.put_numbered("decision", value, source, "DECISION")




def _comma_after(sentence: str, pos: int) -> int:
    """Return the position of the first comma at or after ``pos`` (the end of the sentence when none)."""
    i = sentence.find(",", pos)
    return len(sentence) if i < 0 else i


# "Let me know what the lights do once it's back up": a request to hear back, its "once" a time.
_ASKING_TO_HEAR = re.compile(
    r"^\W*(?:(?:ok(?:ay)?|great|perfect|sure|thanks)\W+)*(?:please\s+)?"
    r"(?:let (?:me|us) know|tell me|keep me (?:posted|updated)|send me|ping me|give me a shout)\b",
    re.I,
)


# "You'll get an email once it's paid out", "We'll text you if the courier is late": a notice the
# listener will get; its "once", "if" or "unless" says when the notice comes, not what a deal depends
# on. "You'll get a refund once the item arrives" stays a condition: a refund is no notice.
_NOTICE = re.compile(
    r"\b(?:you(?:'ll|’ll| will) (?:also )?(?:get|receive|be sent)\b[^.;!?]{0,40}?"
    r"\b(?:e-?mails?|texts?|sms|notifications?|messages?|updates?|confirmations?|alerts?|reminders?)\b"
    r"|(?:we|i)(?:'ll|’ll| will) (?:also )?(?:e-?mail|text|notify|message|ping|update|remind) you\b"
    r"|(?:we|i)(?:'ll|’ll| will) (?:also )?let you know\b"
    r"|you(?:'ll|’ll| will) be (?:notified|e-?mailed|texted|updated|reminded)\b)",
    re.I,
)


def _within(sentence: str, condition: re.Match[str], pos: int) -> bool:
    """True when ``pos`` is inside the conditional clause ``condition`` opens (up to the next comma)."""
    return condition.start() <= pos < _comma_after(sentence, condition.end())


def _conditions(sentence: str, book: FactBook, source: int | None) -> None:
    if HELP_REQUEST_RE.search(sentence) or EXAMPLE_RE.match(sentence) or _ASKING_TO_HEAR.match(sentence):
        return
    opening_advice = ADVICE_OPENING_RE.match(sentence) is not None
    marker = CONDITION_MARKER_RE.search(sentence)
    if marker is not None:
        value = _statement(marker.group("rest"))
        subject = _nearest_subject(value, 0) or _nearest_subject(sentence, marker.start())
    else:
        found = None
        for m in CONDITION_RE.finditer(sentence):
            if m.group("provided") and PROVIDED_NOT_RE.search(sentence[: m.start()]):
                continue  # "we provided a label", "using the provided schedule" are no conditions
            opening = m.group(0).lower()
            if opening.startswith("if") and (
                IDLE_IF_RE.search(m.group("if_rest") or "")
                or ASKING_IF_RE.search(sentence[: m.start()])
                or (SUBJECT_RE.search(sentence) is None and not DECISION_VERB_RE.search(sentence))
            ):
                continue
            if opening.startswith(("if", "once")) and ADVICE_RE.search(sentence, m.end()):
                continue
            if opening.startswith(("if", "once", "unless")) and IMPERATIVE_RE.match(sentence, _comma_after(sentence, m.end())):
                continue  # "If you fall behind, adjust your plan": a step to take
            if opening.startswith("if") and ASKING_BEFORE_RE.search(sentence, 0, m.end()):
                continue  # "I'm not sure if I need X or if there are steps": asking still
            if opening_advice and not re.search(r"[;:]", sentence[: m.start()]):
                continue  # "Avoid jargon unless it is essential": advice, qualified
            if _NOTICE.search(sentence, 0, m.start()):
                continue  # "You'll get an email once it's paid out": when a notice comes
            found = m
            break
        if found is None:
            return
        value = _statement(sentence)
        subject = _nearest_subject(sentence, found.start())
        verb = DECISION_VERB_RE.search(sentence)
        if verb is not None and not _within(sentence, found, verb.start()) and book.holds(value, "DECISION"):
            return  # "If it comes to that, we agreed to replace it": an agreement with its condition, held whole already
    if value:
        if subject:
            book.put(f"{subject}_condition", value, source, "CONDITION")
        else:
            book.put_unnamed_condition(value, source)




# A state as the condition of something else: "a refund within 14 days provided the item is returned".
_PROVIDED = re.compile(r"\b(?:provided|providing|as long as|so long as|assuming|on condition)\b", re.I)


# "Refund status: pending", "the return's status is now": the status is that subject's.
_STATUS_OF = re.compile(r"\b(\w+)(?:'s|’s)?\s+status(?:\s+is|\s*:)?\s*(?:(?:now|currently|still)\s+)?$", re.I)


# The noun a state is said of ("the fence is damaged"); a pronoun points at the conversation's own matter.
_OTHER_THING = re.compile(
    r"\b([A-Za-z]+)\s+(?:is|are|was|were|has been|have been|had been|got|gets)\s+"
    r"(?:(?:not|now|already|currently|still|just|also|finally|been)\s+)*$"
)
_POINTERS = frozenset("it that this everything which what who they one all there".split())


def _states(sentence: str, book: FactBook, source: int | None) -> None:
    for m in STATUS_RE.finditer(sentence):
        before = sentence[max(0, m.start() - 40) : m.start()]
        if not AUX_RE.search(before):
            continue  # "I want it cancelled" asks for a state; "it has been cancelled" reports one
        clause = _clause_before(sentence, m.start())
        if HYPOTHETICAL_RE.search(clause) or NOBODY_RE.search(clause) or _PROVIDED.search(clause):
            continue  # "if it is delivered", "so nothing is lost", "provided the item is returned unused"
        status = m.group("status").lower().replace("canceled", "cancelled")
        if NEGATION_RE.search(before[-25:]):
            status = f"not {status}"
        named = _STATUS_OF.search(before)  # "Refund status: pending": the status of what it names
        subject = SUBJECTS.get(named.group(1).lower()) if named else None
        if subject is None:
            subject = _nearest_subject(clause, len(clause), before_only=True)
        if subject is None:
            other = _OTHER_THING.search(before)
            if other and other.group(1).lower() not in _POINTERS:
                continue  # "The neighbour's fence is damaged too": the state of something memfold does not track
            subject = "order" if book.get("order_id") else None
        book.put(f"{subject}_status" if subject else "status", status, source, "STATE")


# "Will you tell me if the flight is cancelled?", "And if it's broken?": a matter the user supposes
# is not the one they came about. The supposition ends with its clause: "If it helps, the mug arrived
# broken." is the matter.
_SUPPOSED = re.compile(r"\b(?:if|whether|in case|unless|what happens when)\b[^.!?,;\n]*$", re.I)


def _supposed(text: str, pos: int) -> bool:
    """True when ``pos`` is inside a supposition (:data:`_SUPPOSED`), searched from its clause's start only."""
    start = max(text.rfind(c, 0, pos) for c in ".!?,;\n") + 1
    return _SUPPOSED.search(text, start, pos) is not None


def _extract_topic(text: str, book: FactBook, source: int | None) -> None:
    if book.get("topic") is not None:
        return  # the first topic stays (put_once): no need to look for another
    for pattern, topic in TOPICS:
        if any(not _supposed(text, m.start()) for m in pattern.finditer(text)):
            if topic == "cancellation":
                obj = TOPIC_OBJECT_RE.search(text)
                topic = f"{obj.group(1).lower()} cancellation" if obj else topic
            book.put_once("topic", topic, source)
            return




# "is asking", "was calling", "is waiting for me": what a person does while the user types, not a
# fact about them; one naming a place, a person or a number ("is moving to Lisbon", "is starting
# school on 3 September") is kept.
_MOMENTARY = re.compile(r"(?:is|was|'s|’s)\s+(?:just\s+|still\s+)?\w+ing\b(?![^\n]*(?:\b[A-Z][a-z]|\d))")


def _extract_first_person(text: str, sentences: list[tuple[int, int]], book: FactBook, source: int | None) -> None:
    """Read the user's statements about themselves: where they live, their people, plans, preferences, decisions.

    A rule's key is one subject (a later value supersedes the earlier one) or,
    ending in ``_``, numbered (every distinct plan or preference is kept).
    """
    for s, e in sentences:
        sentence = text[s:e].strip()
        if not sentence or not FIRST_PERSON_WORD_RE.search(sentence) or _is_question(sentence):
            continue
        for pattern, key, category in FIRST_PERSON_RULES:
            for m in pattern.finditer(sentence):
                if HYPOTHETICAL_RE.search(_clause_before(sentence, m.start())):
                    continue  # "if I move to Paris" states nothing yet
                groups = m.groupdict()
                value = (groups.get("name") or groups.get("value") or "").strip(" ,")
                if not value:
                    continue
                if groups.get("value") and len(value.split()) <= 2:
                    value = _listed_on(sentence, m.end("value"), value)
                if groups.get("relation") and groups.get("value") and _MOMENTARY.match(value):
                    continue  # "my partner is asking who I'm typing to": what they do right now
                name = key.format(**{k: _slug(v) for k, v in groups.items() if v and k in ("subject", "relation")})
                if name.endswith("_"):
                    book.put_numbered(name.rstrip("_"), value, source, category)
                else:
                    book.put(name, value, source, category)


# A comma after a one- or two-word value that goes on listing ("I prefer simple, minimal
# dependencies"), not a new clause ("..., so can you help", "..., but I'm not sure").
_LIST_GOES_ON = re.compile(
    r",\s+(?!(?:so|but|and|or|can|could|would|how|what|which|where|when|why|who|if|since|because|though|while|as"
    r"|i|i'm|i've|i'd|i'll|we|you|it|it's|this|that|there|then|please|especially|considering|like)\b)"
    r"(?P<more>[^.;!?,\n]{2,80})(?=[.;!?,\n]|$)",
    re.I,
)


def _listed_on(sentence: str, end: int, value: str) -> str:
    """Return ``value`` with the list it starts when a comma cut it short ("simple" -> "simple, minimal dependencies")."""
    more = _LIST_GOES_ON.match(sentence, end)
    return f"{value}, {more['more'].strip()}" if more else value


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _third_person(text: str) -> str:
    for pattern, repl in PRONOUNS:
        text = pattern.sub(repl, text)
    return text


def _extract_request(text: str, sentences: list[tuple[int, int]], book: FactBook, source: int | None) -> None:
    if book.get("user_request") is not None:
        return
    first = next(request_phrases(text, sentences), None)
    if first is not None:
        book.put("user_request", first[1], source)


# A request whose object ends in one of these points back at what was said before ("make the most of it");
# not "them": a request says "me" of the user, and reads "them" once in the third person.
_BACK_REFERENCES = frozenset({"it", "this", "that", "these", "those", "so", "more", "there"})


def specific_request(text: str) -> str | None:
    """Return the first request of ``text`` that names what it is about (3+ words, not ending in "it" or "that")."""
    for rest, phrase in request_phrases(text, sentence_spans(text), every_lead=True):
        words = rest.split()
        if len(words) >= 3 and words[-1].lower().strip(".,!?\"'") not in _BACK_REFERENCES:
            return phrase
    return None


def request_phrases(
    text: str, sentences: list[tuple[int, int]], every_lead: bool = False
) -> Iterator[tuple[str, str]]:
    """Yield (object, phrase) for what a user message asks for, the phrase in the third person ("wants to ...").

    One per sentence, its first lead ("I want to", "can you", ...), a sentence whose first
    lead follows an asking word ("Do I need ...?") skipped; ``every_lead`` yields each lead
    of a sentence that no asking word precedes ("I want to learn, can you explain ...").
    """
    for s, e in sentences:
        sentence, pos = text[s:e], 0
        while (m := REQUEST_RE.search(sentence, pos)) is not None:
            if ASKING_AUX_RE.search(sentence[: m.start()]):
                if not every_lead:
                    break  # "Do I need the box?" asks, it does not request
            else:
                lead = m.group("lead").lower()
                rest = _REQUEST_END.split(m.group("rest"))[0]
                rest = _third_person(rest.strip().rstrip(".!?"))
                yield rest, clip(_request_phrase(lead, rest), 120)
                if not every_lead:
                    break
            pos = m.start("rest")


# Where a request's object ends: a clause break (not the comma of "$60,000") or a reason.
_REQUEST_END = re.compile(r";|,(?!\d)|(?<!\d),|\s+(?:but|because|since|as|so that)\s+")


def _request_phrase(lead: str, rest: str) -> str:
    if lead in ("can you", "could you", "would you", "please") or lead.startswith("help me"):
        return f"asked for help to {rest}" if lead.startswith("help me") else f"asked to {rest}"
    if lead in ("i need", "i want"):
        return f"wants {rest}"
    if lead == "i need to":
        return f"needs to {rest}"
    if lead.startswith("i have"):
        return "has " + lead.split(" ", 2)[2] + f" {rest}"
    if "writing about" in lead:
        return f"is writing about {rest}"
    return f"wants to {rest}"


def _retract(text: str, role: str, book: FactBook, sentences: list[tuple[int, int]]) -> None:
    for stem in retracted_stems(text, role, sentences):
        book.retract(stem)


_DIGIT = re.compile(r"\d")


# ----------------------------------------------------------------------------- reading a message again
#
# A summary reads every message it covers, and the next version reads most of them again (a sliding
# window's catch-up, hierarchical's whole history, a replay with other settings): reading is nearly
# all of the offline summarizer's time there. What reading a message does to a book is the calls it
# makes on it, and it makes the same calls as long as the book answers them the same: the extractors
# are pure functions of the message, ``previous`` and the book's answers. So the calls of a reading
# are kept (its *trace*), and the next reading of the same message makes them again on the new book,
# checking each answer against the kept one. All equal: done, exactly as reading it would have left
# the book. One differs: every call up to it is the one reading would have made too, so reading runs
# from the start with those calls' answers handed back instead of made again, then goes on for real.

_TRACES: dict[tuple, tuple[tuple[str, tuple, tuple, object], ...]] = {}
# Traces kept, and characters of message text their keys hold (a message and the one before it):
# past either, all are forgotten and kept again as messages are read. At most tens of MB.
TRACES_MAX = 20_000
TRACES_MAX_CHARS = 8_000_000
_traces_chars = 0
_TRACES_LOCK = threading.Lock()  # the summarizer's threads read messages at once
_PLAIN = frozenset({str, int, float, bool, type(None), datetime})


def _plain(values: tuple | list) -> bool:
    """True when every value is one a trace can keep and compare: immutable scalars, and lists/tuples of them."""
    for v in values:
        kind = type(v)
        if kind in _PLAIN or ((kind is tuple or kind is list) and all(type(x) in _PLAIN for x in v)):
            continue
        return False
    return True


class _TracedBook:
    """A :class:`FactBook` seen through while a message is read: every call is made and kept with its answer.

    ``made`` are calls already made on the book (with their answers) by a trace that stopped matching:
    the first ``len(made)`` calls get those answers back and are not made again. Each public method of
    FactBook is one of this class's (below), so a call costs no attribute lookup on a miss.
    """

    __slots__ = ("_book", "_made", "calls", "keepable")

    def __init__(self, book: FactBook, made: Sequence[tuple[str, tuple, tuple, object]] = ()) -> None:
        self._book = book
        self._made = made
        self.calls: list[tuple[str, tuple, tuple, object]] = []
        self.keepable = True

    def _call(self, name: str, args: tuple, kwargs: dict[str, object]) -> object:
        named = tuple(sorted(kwargs.items())) if kwargs else ()
        k = len(self.calls)
        if k < len(self._made):
            made_name, made_args, made_kwargs, answer = self._made[k]
            if (made_name, made_args, made_kwargs) != (name, args, named):
                raise RuntimeError(f"reading a message again diverged at call {k}: {name} after {made_name}")
        else:
            answer = getattr(self._book, name)(*args, **kwargs)
        if self.keepable and not (_plain(args) and _plain(tuple(kwargs.values())) and _plain((answer,))):
            self.keepable = False
        self.calls.append((name, args, named, list(answer) if isinstance(answer, list) else answer))
        return answer


def _traced(name: str) -> Callable[..., object]:
    def call(self: _TracedBook, *args: object, **kwargs: object) -> object:
        return self._call(name, args, kwargs)

    call.__name__ = name
    return call


for _name in [n for n in vars(FactBook) if not n.startswith("_") and callable(vars(FactBook)[n])]:
    setattr(_TracedBook, _name, _traced(_name))


def _same(now: object, then: object) -> bool:
    """True when an answer is the kept one: equal, of the same type, and a time in the same zone.

    Equality alone is not enough: 1 == True and 12:00 UTC == 13:00 +01:00, but an extractor may
    read the type of an answer or the date of a time.
    """
    if type(now) is not type(then) or now != then:
        return False
    return not isinstance(now, datetime) or now.utcoffset() == then.utcoffset()  # type: ignore[union-attr]


def _again(trace: Sequence[tuple[str, tuple, tuple, object]], book: FactBook) -> tuple[list, bool]:
    """Make ``trace``'s calls on ``book`` while each answers as it did; return the calls made and whether all did."""
    made = []
    for name, args, named, answer in trace:
        now = getattr(book, name)(*args, **dict(named))
        made.append((name, args, named, now))
        if not _same(now, answer):
            return made, False
    return made, True


def read_message(message: MessageRecord, book: FactBook, previous: str | None = None) -> None:
    """Fold one message's facts into ``book``: retractions first, then every extractor, latest wins.

    ``previous`` is the other side's last message: a bare "Deal, agreed." refers to it. A message
    read before is read again from its trace (above), with the same result.
    """
    calls = tuple(c.arguments for c in message.tool_calls) if message.tool_calls else None
    key = (message.content, message.role, message.index, message.occurred_at, calls, previous)
    made: Sequence[tuple[str, tuple, tuple, object]] = ()
    trace = _TRACES.get(key)
    if trace is not None:
        made, whole = _again(trace, book)
        if whole:
            return
    traced = _TracedBook(book, made)
    _read(message, traced, previous)  # type: ignore[arg-type]  # a FactBook to the extractors
    chars = len(message.content) + len(previous or "")
    if traced.keepable and chars <= TRACES_MAX_CHARS // 100:
        _keep(key, tuple(traced.calls), chars)


def forget_traces() -> None:
    """Forget every trace kept: the next reading of each message is made in full."""
    global _traces_chars
    with _TRACES_LOCK:
        _TRACES.clear()
        _traces_chars = 0


def _keep(key: tuple, trace: tuple[tuple[str, tuple, tuple, object], ...], chars: int) -> None:
    global _traces_chars
    with _TRACES_LOCK:
        if len(_TRACES) >= TRACES_MAX or _traces_chars + chars > TRACES_MAX_CHARS:
            _TRACES.clear()
            _traces_chars = 0
        if key not in _TRACES:
            _traces_chars += chars
        _TRACES[key] = trace


def _read(message: MessageRecord, book: FactBook, previous: str | None) -> None:
    text = CODE_BLOCK_RE.sub("\n", message.content)  # code is not what anyone said: no facts in it
    if message.tool_calls:
        text = f"{text}\n" + "\n".join(c.arguments for c in message.tool_calls)
    source = message.index if message.index >= 0 else None
    if source is not None:
        book.note_date(source, message.occurred_at)
    sentences = sentence_spans(text)
    _retract(text, message.role, book, sentences)
    spans = _Spans()
    # Every id, item, date, amount and phone pattern needs a digit: most chat lines have none.
    has_digit = _DIGIT.search(text) is not None
    _extract_contacts(text, message.role, book, source, spans, has_digit)
    if has_digit:
        _extract_ids(text, book, source, spans)
        _extract_items(text, book, source)
    tutorial = message.role == "assistant" and len(text) > TUTORIAL_CHARS
    if tutorial:
        _skip_tutorial_lines(text, spans)
    if has_digit:
        _extract_dates(text, sentences, book, source, spans, bare=not tutorial)
        _extract_amounts(text, sentences, book, source, spans)
    if message.role in ("user", "assistant", "summary"):
        _extract_sentence_facts(text, sentences, message.role, book, source, previous, tutorial)
    if message.role == "user":
        _extract_first_person(text, sentences, book, source)
        _extract_topic(text, book, source)
        _extract_request(text, sentences, book, source)


def extract_facts(messages: Sequence[MessageRecord], existing: Iterable[Fact] = ()) -> tuple[Fact, ...]:
    """Return ``existing`` merged with the facts of ``messages``: added, updated (latest wins), retracted."""
    return read_all(messages, existing).facts()


def read_all(messages: Sequence[MessageRecord], existing: Iterable[Fact] = ()) -> FactBook:
    """Return a :class:`FactBook` of ``existing`` facts updated by ``messages`` in order."""
    book = FactBook()
    for f in existing:
        book.put_fact(f)
    previous: str | None = None
    for m in messages:
        read_message(m, book, previous)
        if m.role in ("user", "assistant") and m.content.strip():
            previous = m.content.strip()
    return book
