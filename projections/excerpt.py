"""Excerpts: a long recalled message shown by the passages that hold the query's words.

One 1,500-token answer recalled whole would take the room of ten relevant
turns, so a long message recalled for its relevance comes as an excerpt:

- the message is cut into *passages* (:func:`passages`): sentences and lines,
  a run-on sentence into runs of its clauses;
- passages holding more of the query's terms come first (ties: the earlier),
  each with the one after it (an answer often follows the line that names
  its subject), until the excerpt's size; they are shown in their original
  order, gaps marked with "…";
- an excerpt is flat text (passages joined by spaces), so the markdown
  that laid the message out (heading marks, bold, bullets, code fences,
  backticks, indentation: :func:`plain`) is left out of it, never a word:
  BEAM's long answers spend ~10% of their tokens on it;
- an excerpt's passages are *condensed* (:func:`condense`): articles,
  forms of "be", modal verbs (not "will" the noun: "free will"),
  demonstratives and fillers ("very", "just") are left out, as prompt
  compressors such as Selective Context and LLMLingua drop the words a
  reader (or a model) restores from the rest.
  Content words, numbers, names, negations, pronouns, prepositions and
  conjunctions stay; a contraction ("can't", "it's") is kept whole. On
  BEAM's long answers this is ~7% of their tokens, spent on more passages
  (BEAM at 4,000 tokens: 88.8 -> 89.2). A message short enough to be
  recalled whole (nearly every user turn) is never condensed;
- a passage already shown in the same context (assistants repeat a plan or
  a code block answer after answer) is not shown again: its room goes to
  something new. Nor is a passage that mostly repeats words the context
  already holds (NEAR_DUPLICATE of its terms; people restate their setup,
  "I'm using Flask 2.3 with SQLite...", message after message). A message
  with nothing new to show is not recalled.

A message is analysed (passages and their terms) once and kept in a bounded
cache: messages never change, and the same long answers come back read after
read.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable

import msgspec

from memfold.core.ports import ContextMessage, MessageRecord
from memfold.core.tokens import MESSAGE_OVERHEAD
from memfold.projections.retrieval import analyze

# A recalled message longer than this (tokens) is excerpted.
EXCERPT_OVER = 240
# Roughly how long an excerpt is (tokens, estimated from characters; the result is counted exactly).
EXCERPT_TOKENS = 160
# A passage longer than this (a run-on sentence, a code line) is cut at its clauses: one
# 2,500-character sentence must not turn an excerpt back into the whole message.
PASSAGE_CHARS = 400
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_CLAUSE = re.compile(r"(?<=[,;:])\s+")
# A passage at least this long is not shown twice in one context (shorter ones are
# structure: a code fence, "Example:", a bullet's "1 day").
DEDUPE_CHARS = 20
# A passage of at least NEAR_DUPLICATE_TERMS terms, this share of them already in the context, is
# not shown again (measured on BEAM at 4,000 tokens: 0.7 to 0.8 all gain about half a point).
NEAR_DUPLICATE = 0.75
NEAR_DUPLICATE_TERMS = 3
_CACHE_MAX = 4096


class Analysed(msgspec.Struct, frozen=True):
    """A message cut into passages, with each passage's index terms and how many passages hold each term."""

    content: str
    passages: tuple[str, ...]
    terms: tuple[frozenset[str], ...]
    df: dict[str, int]
    condensed: tuple[str, ...]  # each passage as an excerpt shows it (:func:`condense`)


# Words an excerpt leaves out (:func:`condense`), as written and capitalized (a sentence's first
# word) but for "May" and "Will", which are also a month and a name. Not pronouns, negations,
# prepositions or conjunctions: "to Porto" / "from Porto", "A or B", "not", "it" carry the meaning.
# Measured on BEAM at 4,000 tokens (docs/quality.md): this list 89.2; with "it" and "its" 89.3, and
# "of" and "as" too 89.4; and "to", "for", "in", "on", "at", "with", "by", "from", "and", "or" too
# 89.6 (left out: "from Lisbon to Porto" must keep its direction).
LIGHT_WORDS = frozenset(
    "a an the that this these those is are was were be been being will would can could should may might "
    "very really just also which".split()
)
# "will" is also a noun ("free will", "against my will", "at will"): after these words it stays.
NOUN_WILL_AFTER = ("free", "good", "ill", "own", "my", "your", "his", "her", "their", "our", "the", "of", "against", "at")
_LIGHT = re.compile(
    r"(?<!['’])\b(?:"
    + "|".join(sorted((LIGHT_WORDS - {"will"}) | {w.capitalize() for w in LIGHT_WORDS - {"may", "will"}}, key=len,
                      reverse=True))
    # The lookbehinds come after "will", so they run only where "will" is (before it, at every position: 4x slower).
    + "|will" + "".join(f"(?<!\\b{v} will)" for w in NOUN_WILL_AFTER for v in (w, w.capitalize()))
    + r")\b(?!['’]) ?"
)
_SPACE_BEFORE = re.compile(r"[ \t]+(?=[.,;:!?])")


def condense(passage: str) -> str:
    """Return ``passage`` without its :data:`LIGHT_WORDS` ("This is the plan, which will be fine" -> "plan, fine")."""
    return _SPACE_BEFORE.sub("", _LIGHT.sub("", passage))


_CACHE: dict[tuple[str, str, int, str], Analysed] = {}
_LOCK = threading.Lock()


def passages(text: str) -> list[str]:
    """Split ``text`` into sentences (and lines); one longer than PASSAGE_CHARS into runs of its clauses.

    A clause longer than PASSAGE_CHARS is cut at a word boundary.
    """
    out: list[str] = []
    for sentence in SENTENCE.split(text):
        if not sentence.strip():
            continue
        if len(sentence) <= PASSAGE_CHARS:
            out.append(sentence)
            continue
        run = ""
        for clause in _CLAUSE.split(sentence):
            start = 0
            while len(clause) - start > PASSAGE_CHARS:  # offsets, not slices: a 300K-character clause stays linear
                cut = clause.rfind(" ", start, start + PASSAGE_CHARS)
                cut = cut if cut > start else start + PASSAGE_CHARS
                if run:
                    out.append(run)
                    run = ""
                out.append(clause[start:cut])
                start = cut
                while start < len(clause) and clause[start].isspace():
                    start += 1
            clause = clause[start:]
            if run and len(run) + 1 + len(clause) > PASSAGE_CHARS:
                out.append(run)
                run = ""
            run = f"{run} {clause}" if run else clause
        if run.strip():
            out.append(run)
    return out


_FENCE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*$", re.M)
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+", re.M)
_BULLET = re.compile(r"^[ \t]*[-*+•][ \t]+", re.M)
_INDENT = re.compile(r"^[ \t]+", re.M)
_EMPHASIS = re.compile(r"(?:\*\*|`)+")
_EMPHASIS_INSIDE = re.compile(r"(?<=\w)(?:\*\*|`)+(?=\w)")  # "a**b": a space, so words never merge


def plain(text: str) -> str:
    """Return ``text`` without markdown layout: heading marks, bullets, ``**``, backticks, fence lines, indentation.

    Every word stays, in order (two words a mark joined, ``a**b``, are
    split by a space), and so does every line break (passages are cut at
    them); only marks that lay a message out go, with a fence's language
    tag (```` ```python ````). Python's ``__init__`` keeps its underscores.
    """
    text = _FENCE.sub("", text)
    text = _HEADING.sub("", text)
    text = _BULLET.sub("", text)
    text = _INDENT.sub("", text)
    return _EMPHASIS.sub("", _EMPHASIS_INSIDE.sub(" ", text))


def forget_analysed() -> None:
    """Drop every message analysed so far (their text): erasure empties the caches that hold text."""
    with _LOCK:
        _CACHE.clear()


def analysed(m: MessageRecord) -> Analysed:
    """Return ``m`` cut into passages (of its :func:`plain` text) with their terms (cached per message; a hit must have the same text)."""
    key = (m.tenant_id, m.conversation_id, m.index, m.event_id)
    found = _CACHE.get(key)
    if found is not None and found.content == m.content:
        return found
    parts = tuple(passages(plain(m.content)))
    terms = tuple(frozenset(analyze(p)) for p in parts)
    df: Counter[str] = Counter()
    for t in terms:
        df.update(t)
    found = Analysed(m.content, parts, terms, dict(df), tuple(condense(p) for p in parts))
    with _LOCK:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = found
    return found


def excerpt(
    m: MessageRecord, terms: frozenset[str], count_tokens: Callable[[str], int], shown: set[str] | frozenset[str] = frozenset(),
    size: int = EXCERPT_TOKENS, dated: bool = True, seen: set[str] | frozenset[str] = frozenset(),
) -> tuple[ContextMessage, list[str], set[str]] | None:
    """Return ``m`` as its passages holding query ``terms`` (about ``size`` tokens), the passages to remember as shown and their terms.

    A passage in ``shown`` (already in the context: an answer that repeats
    an earlier plan) is not shown again, nor one whose terms are mostly in
    ``seen`` (the terms the context holds, :func:`repeats`); None when
    nothing new is left. A message with no matching passage (a recalled
    question's long answer) is shown by its opening passages. The excerpt
    starts with ``(excerpt)`` on its first line, after the message's date
    unless ``dated`` is false (the assembler dates only the first recalled
    message of each day). The excerpt keeps ``m``'s ``name``, ``tool_calls``
    and ``tool_call_id``: only its text is cut.
    """
    a = analysed(m)
    parts = a.passages
    shows = a.condensed
    n = len(parts)
    if any(t in a.df for t in terms):
        hits = [i for _, i in sorted((-len(terms & held), i) for i, held in enumerate(a.terms) if terms & held)]
    else:
        hits = list(range(n))  # nothing matches: the opening, in order
    keep: set[int] = set()
    used = 0
    held = a.terms
    for i in hits:
        if used >= size:
            break
        if parts[i] in shown or repeats(held[i], seen):
            continue
        for j in (i, i + 1):
            if j < n and j not in keep and (j == i or (parts[j] not in shown and not repeats(held[j], seen))):
                keep.add(j)
                used += len(shows[j]) // 4 + 1  # chars/4: a cheap estimate; the result is counted exactly
    if not keep:
        return None
    out: list[str] = []
    last = -1
    for j in sorted(keep):
        if j != last + 1:
            out.append("…")
        out.append(shows[j])
        last = j
    if last < n - 1:
        out.append("…")
    content = (f"[{m.occurred_at.date().isoformat()}] " if dated else "") + "(excerpt)\n" + " ".join(out)
    rendered = ContextMessage(
        role=m.role, content=content, kind="recalled", tokens=count_tokens(content) + MESSAGE_OVERHEAD, index=m.index,
        occurred_at=m.occurred_at, name=m.name, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id,
    )
    return rendered, [parts[j] for j in keep if len(parts[j]) >= DEDUPE_CHARS], set().union(*(held[j] for j in keep))


def repeats(terms: frozenset[str], seen: set[str] | frozenset[str]) -> bool:
    """True when a passage's ``terms`` are mostly (NEAR_DUPLICATE) among ``seen``: it would say again what is said.

    A passage with a number the context does not hold is never a repeat: a
    restated fact with a new value ("the deadline is now April 5") is news.
    """
    if len(terms) < NEAR_DUPLICATE_TERMS:
        return False
    new = terms - seen
    return len(new) <= (1 - NEAR_DUPLICATE) * len(terms) and not any(t[0].isdigit() for t in new)
