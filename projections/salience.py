"""Salience: cut a conversation into statements and pick the ones later questions ask about, within a budget.

Pure and deterministic (no clock, no randomness, no I/O). A *statement* is a
sentence (or a bullet line) of one message, code blocks left out. Its salience
is what makes it worth keeping when most of the conversation must go:

- specific tokens: numbers, dates, proper nouns and names, versions;
- the user speaking about themselves: first-person statements, stronger for
  plans, preferences, decisions, changes and deadlines;
- rarity: words that are rare in the statements read together (a word every
  other sentence repeats says little).

The user's own words weigh more than the assistant's (questions are asked
about what the user said), a question less than a statement. :func:`select`
takes the best statements greedily by value per token, counting each content
word once (a statement that repeats what was already kept is worth less),
until the budget is spent, and returns them in conversation order.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memfold.core.ports import MessageRecord
from memfold.core.tokens import MESSAGE_OVERHEAD, TokenCounter
from memfold.projections.fact_keys import clip
from memfold.projections.fact_patterns import CODE_BLOCK_RE, DATE_RE
from memfold.projections.fold_text import sentence_spans
from memfold.projections.offline_rules import RULE

MAX_STATEMENT_CHARS = 300
MIN_WORDS = 4

ROLE_WEIGHT = {"user": 1.0, "summary": 0.9, "assistant": 0.35, "tool": 0.3, "system": 0.2}
QUESTION_WEIGHT = 0.7
COST_EXPONENT = 0.75  # below 1: a long statement full of specifics beats two short ones that say less

_MARKUP = RULE["markup"].pattern
# A turn's thanks or assent ("Okay, that makes sense, thanks!"): with fewer than ACKNOWLEDGMENT_WORDS
# content words after it and nothing specific, the statement says nothing to keep.
_ACKNOWLEDGMENT = RULE["assent_or_thanks"].pattern
ACKNOWLEDGMENT_WORDS = 3
# Thanks that end on the listener's name ("Thanks, Noor."): the name addresses them and says nothing.
# After assent a name may be the choice ("Great, Lisbon."), so only thanks and courtesy take a vocative.
_COURTESY = RULE["courtesy"].pattern
_VOCATIVE = RULE["vocative"].pattern
# A run-on sentence is cut before the words its clauses open with, and a piece opening with one is marked.
_CONNECTIVE = RULE["connective"].pattern
_CLAUSE = RULE["clause_break"].pattern
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d+(?:[.,:/-]\d+)*")
_NUMBER = RULE["number"].pattern
_FIRST_PERSON = RULE["first_person"].pattern
_COMMITMENT = RULE["commitment"].pattern
_WEEKDAY = RULE["relative_day"].pattern
# Capitalised words that are not names: sentence openers and words English capitalises anyway.
_NOT_PROPER = frozenset("""
i i'm i've i'd i'll a an the this that these those it its here there what when where which who how why
can could would should will shall may might must do does did is are was were be been have has had
hi hello hey thanks thank please sure yes no ok okay great good also so but and or if then
step note example first second third finally however for from with in on at to of by my your our
monday tuesday wednesday thursday friday saturday sunday january february march april may june july
august september october november december jan feb mar apr jun jul aug sep sept oct nov dec
""".split())
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he her
here hers him his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours out over own same she should so some such than that the their theirs them
then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours also get got make sure like want need help let know
i'm i've i'd i'll it's that's don't can't i’m i’ve i’d i’ll it’s that’s don’t can’t here's there's
""".split())


@dataclass(frozen=True, slots=True)
class Statement:
    """One sentence of one message: where it comes from, its text, and its cost in tokens."""

    index: int  # message index; -1 for a statement of an earlier, unstructured summary
    role: str
    day: str | None  # ISO date (YYYY-MM-DD) of the message, None when unknown
    order: int  # position within its message
    text: str
    tokens: int


# Statements per message, kept in a bounded cache: a message never changes, and a sliding window
# summarizes it again in every window it is part of (each statement is counted with tiktoken, which
# was the offline summarizer's largest cost). Cleared when full: memory stays flat.
_STATEMENTS: dict[tuple[str, str, int, str, str], tuple[str, tuple[Statement, ...]]] = {}
_STATEMENTS_MAX = 8192


def forget_statements() -> None:
    """Drop every message's statements kept so far (their text): erasure empties the caches that hold text."""
    _STATEMENTS.clear()
    _features.cache_clear()  # keyed by statement text too


def statements_of(message: MessageRecord, tokens: TokenCounter) -> list[Statement]:
    """Return the statements of ``message``: sentences and bullet lines, code blocks left out, long ones cut at clauses."""
    key = (message.tenant_id, message.conversation_id, message.index, message.event_id, tokens.encoding_name)
    found = _STATEMENTS.get(key)
    if found is not None and found[0] == message.content:
        return list(found[1])
    day = message.occurred_at.date().isoformat() if message.occurred_at is not None else None
    known = message.tokens - MESSAGE_OVERHEAD if message.tokens > MESSAGE_OVERHEAD else None
    out = statements_from_text(message.content, message.index, message.role, day, tokens, known)
    if len(_STATEMENTS) >= _STATEMENTS_MAX:
        _STATEMENTS.clear()
    _STATEMENTS[key] = (message.content, tuple(out))
    return out


def statements_from_text(
    text: str, index: int, role: str, day: str | None, tokens: TokenCounter, known: int | None = None
) -> list[Statement]:
    """Return the statements of a text said by ``role`` in message ``index`` on ``day``.

    ``known`` is the token count of ``text`` when the caller has it (a message's, counted at
    append): a statement that is the whole text is not counted again.
    """
    whole = text if known is not None else None  # exactly the text counted: no surrounding whitespace
    text = CODE_BLOCK_RE.sub("\n", text)
    out: list[Statement] = []
    for s, e in sentence_spans(text):
        sentence = _MARKUP.sub("", text[s:e]).strip()
        for part in _split_long(sentence):
            if len(_WORD.findall(part)) < MIN_WORDS:
                continue
            part = clip(part, MAX_STATEMENT_CHARS)
            out.append(Statement(index, role, day, len(out), part, known if part == whole else tokens.count(part)))
    return out


def _split_long(sentence: str) -> list[str]:
    if len(sentence) <= MAX_STATEMENT_CHARS:
        return [sentence]
    parts: list[str] = []
    current = ""
    start = 0
    for m in _CLAUSE.finditer(sentence):
        piece = sentence[start : m.start()]
        start = m.end()
        if current and len(current) + len(piece) > MAX_STATEMENT_CHARS:
            parts.append(current)
            current = piece
        else:
            current = f"{current}, {piece}" if current else piece
    tail = sentence[start:]
    if current and len(current) + len(tail) > MAX_STATEMENT_CHARS:
        parts.extend((current, tail))
    else:
        parts.append(f"{current}, {tail}" if current else tail)
    parts = [p.strip(" ,") for p in parts if p.strip(" ,")]
    # A piece opening with its connective ("which seems crucial ...", "and how it applies ...") continues
    # the clause before it: marked, it reads as the part of a sentence it is.
    return [f"… {p}" if i and _CONNECTIVE.match(p) else p for i, p in enumerate(parts)]


def content_words(text: str) -> set[str]:
    """Return the lower-cased content words of ``text`` (stop words and one-letter words left out)."""
    return {w for w in (t.lower() for t in _WORD.findall(text)) if len(w) > 1 and w not in STOP_WORDS}


def specificity(statement: Statement) -> float:
    """Return how much ``statement`` names specific things: numbers, dates, names, first-person commitments."""
    return _specificity(statement.text, statement.role)


def _specificity(text: str, role: str, opening: bool = True) -> float:
    """See :func:`specificity`; ``opening`` False: ``text`` goes on a sentence ("Great, Lisbon it is"), so its first word may be a name."""
    score = 0.0
    dates = len(DATE_RE.findall(text)) + len(_WEEKDAY.findall(text))
    score += 2.5 * min(dates, 2)
    numbers = [m.group(0) for m in _NUMBER.finditer(text)]
    score += 1.2 * min(len(numbers), 4)
    words = _WORD.findall(text)
    proper = {w for i, w in enumerate(words) if (i > 0 or not opening) and w[0].isupper() and w.lower() not in _NOT_PROPER}
    score += 0.8 * min(len(proper), 5)
    if role in ("user", "summary") and _FIRST_PERSON.search(text):
        score += 1.0
        score += 1.5 * min(len(_COMMITMENT.findall(text)), 2)
    return score


@dataclass(slots=True)
class _Candidate:
    statement: Statement
    words: frozenset[str]
    specific: float
    weight: float


def select(
    statements: Sequence[Statement],
    token_budget: int | None,
    char_budget: int | None = None,
    *,
    line_tokens: int = 0,
    line_chars: int = 0,
) -> list[Statement]:
    """Return the most salient ``statements`` whose costs fit both budgets, in conversation order.

    Greedy by marginal value per token (lazy evaluation: values only fall as
    words get covered). A statement's value is ``weight × (specificity ×
    novelty + Σ idf of its words not covered yet)``; ``line_tokens`` /
    ``line_chars`` are added to each statement's cost for its rendering. A
    ``None`` budget is no limit. Ties break on conversation order, so the
    result is a pure function of the input.
    """
    if not statements:
        return []
    cands = [_candidate(s) for s in statements]
    df: Counter[str] = Counter()
    for c in cands:
        df.update(c.words)
    n = len(cands)
    idf = {w: math.log((n + 1) / (f + 0.5)) for w, f in df.items()}
    covered: set[str] = set()

    def value(c: _Candidate) -> float:
        if not c.words:
            return c.weight * c.specific * 0.5
        new = c.words - covered
        novelty = len(new) / len(c.words)
        # fsum: exact, so the same whatever the set's order (a plain sum's last bit followed the hash
        # seed, and between two near-equal statements it decided which one a summary kept).
        return c.weight * (c.specific * novelty + math.fsum(idf[w] for w in new) / 2.0)

    def cost(c: _Candidate) -> float:
        return float(c.statement.tokens + line_tokens) ** COST_EXPONENT

    heap = [(-value(c) / cost(c), i) for i, c in enumerate(cands)]
    heapq.heapify(heap)
    tokens_left = token_budget
    chars_left = char_budget
    chosen: list[int] = []
    while heap:
        neg, i = heapq.heappop(heap)
        c = cands[i]
        fresh = value(c) / cost(c)
        if heap and fresh < -heap[0][0] - 1e-12:
            heapq.heappush(heap, (-fresh, i))
            continue
        if fresh <= 0:
            break
        t = c.statement.tokens + line_tokens
        ch = len(c.statement.text) + line_chars
        if (tokens_left is not None and t > tokens_left) or (chars_left is not None and ch > chars_left):
            continue
        chosen.append(i)
        covered |= c.words
        if tokens_left is not None:
            tokens_left -= t
        if chars_left is not None:
            chars_left -= ch
    return [cands[i].statement for i in sorted(chosen, key=lambda i: _position(cands[i].statement))]


def _candidate(s: Statement) -> _Candidate:
    return _Candidate(s, *_features(s.text, s.role))


@functools.lru_cache(maxsize=50_000)
def _features(text: str, role: str) -> tuple[frozenset[str], float, float]:
    """Return (content words, specificity, weight) of a statement's text said by ``role``.

    Cached: the same statements come back in every summary whose window
    still holds their message, so each is analysed once.
    """
    weight = ROLE_WEIGHT.get(role, 0.3) * (QUESTION_WEIGHT if text.rstrip().endswith("?") else 1.0)
    words, specific = frozenset(content_words(text)), _specificity(text, role)
    if says_nothing(text, role):
        weight = 0.0  # never chosen: its value is 0
    return words, specific, weight


def says_nothing(text: str, role: str = "user") -> bool:
    """True when ``text`` is only thanks, assent, a pause or a pleasantry (never chosen by :func:`select`).

    What follows the thanks or the pause decides ("give me a minute" is first person, not specific).
    Not cached: the narrative asks it of whole messages, which the statement cache should not hold.
    """
    ack = _ACKNOWLEDGMENT.match(text)
    if ack is None:
        return False
    rest = text[ack.end():]
    if _VOCATIVE.fullmatch(rest) and ack.group(0).rstrip().endswith(",") and _COURTESY.search(ack.group(0)):
        return True
    return not _specificity(rest, role, opening=False) and len(content_words(rest)) < ACKNOWLEDGMENT_WORDS


def _position(s: Statement) -> tuple[int, int]:
    return (s.index, s.order)


def rank(statements: Iterable[Statement]) -> list[Statement]:
    """Return ``statements`` from the least to the most salient on their own (what to shed first)."""
    cands = [_candidate(s) for s in statements]
    return [c.statement for c in sorted(cands, key=lambda c: (c.weight * (c.specific + len(c.words) / 4), _position(c.statement)))]
