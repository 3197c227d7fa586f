"""A literal gate in front of a regular expression: skip the scan when no match can be in the text.

Most of the fact extractor's patterns find nothing in most sentences ("my name
is", "agreed", "provided that", "within 14 days"), yet each search scans the
whole sentence, and scanning is most of the extractor's time. Every match of
such a pattern contains one of a few words, so a substring test on the
lower-cased text (a few hundred nanoseconds) says when the scan cannot find
anything, the way RE2 and Hyperscan prefilter by required literals.

:func:`required_literals` derives those words from the pattern itself (its
parse tree), so a gate cannot drift from the pattern it guards: every match
of the pattern contains at least one of them, compared case-insensitively.
A gated pattern answers exactly what the pattern answers; only the time differs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from re import (
    Match,
    Pattern,
    _parser,  # type: ignore[attr-defined]
)
from re import _constants as C  # type: ignore[attr-defined]  # sre's opcodes, stable in CPython 3.11+
from typing import Any

# Every match of a gated pattern holds one of its literals in the text as lower-cased here. Under
# IGNORECASE four non-ASCII characters match ASCII letters: "İ" (lower-cased as "i" plus U+0307),
# the Kelvin sign (lower-cased as "k"), dotless "ı" and long "ſ" (lower-cased as themselves), so
# those two are mapped and U+0307 dropped. Dropping or mapping characters can only add matches of
# a literal, never remove one: the gate may let a scan run for nothing, never skip a match.
_FOLD = {0x131: "i", 0x17F: "s", 0x307: None}
MIN_LITERAL = 3  # a gate on shorter literals rarely says no


def required_literals(pattern: Pattern[str]) -> frozenset[str] | None:
    """Return lower-case ASCII strings one of which every match of ``pattern`` contains (None: none known).

    Derived from sre's parse tree: a run of literal characters in a
    sequence must occur whole, in one of its spellings (a class of up to
    four ASCII characters, an optional literal such as ``'?`` or
    ``(?:ay)?`` and branches that start with literals each add spellings,
    up to MAX_VARIANTS); an alternation needs one of its branches'
    literals; a group, or a repeat of at least once, needs its body's.
    Anything else (wider classes, lookarounds, other optional parts,
    backreferences, non-ASCII characters) is taken as no requirement, which
    keeps the answer sound. Of the sets a sequence requires, the one whose
    shortest string is longest is returned.
    """
    return _sequence(_parser.parse(pattern.pattern, pattern.flags))


MAX_VARIANTS = 64  # spellings a literal run may branch into ("i'm" / "im", "authorised" / "authorized")


def _sequence(items: Any) -> frozenset[str] | None:
    best: frozenset[str] | None = None
    runs = {""}  # the spellings of the run of literal characters being read

    def take(candidate: frozenset[str] | None) -> None:
        nonlocal best
        if candidate and "" not in candidate and (best is None or _score(candidate) > _score(best)):
            best = candidate

    def close() -> None:
        nonlocal runs
        take(frozenset(runs))
        runs = {""}

    for op, av in items:
        longer = _extended(runs, op, av)
        if longer is not None:
            runs = longer
            continue
        if op is C.BRANCH:
            # "a(?:greed|pproved)" (sre factors out the common prefix): the run goes on into the
            # branches when each starts with literal characters; it ends there unless each is only that.
            leads = [_leading(b) for b in av[1]]
            if leads and all(leads) and len(runs) * sum(len(v) for v, _ in leads) <= MAX_VARIANTS:  # type: ignore[misc]
                runs = {r + v for r in runs for lead, _ in leads for v in lead}  # type: ignore[misc]
                if all(whole for _, whole in leads):  # type: ignore[misc]
                    continue
        close()
        if op is C.SUBPATTERN:
            take(_sequence(av[-1]))
        elif op is C.ATOMIC_GROUP:
            take(_sequence(av))
        elif op is C.BRANCH:
            branches = [_sequence(b) for b in av[1]]
            if branches and all(branches):
                take(frozenset().union(*branches))  # type: ignore[arg-type]
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT) and av[0] >= 1:
            take(_sequence(av[2]))
    close()
    return best


def _leading(items: Any) -> tuple[set[str], bool] | None:
    """The spellings of the literal run a sequence starts with, and whether that run is all of it."""
    runs = {""}
    whole = True
    for op, av in items:
        longer = _extended(runs, op, av)
        if longer is None:
            whole = False
            break
        runs = longer
    return (runs, whole) if "" not in runs else None


def _extended(runs: set[str], op: Any, av: Any) -> set[str] | None:
    """The spellings of ``runs`` followed by one item of literal characters, or None if the item is no such thing."""
    chars = _chars(op, av)
    if chars is not None:
        return {r + c for r in runs for c in chars} if len(runs) * len(chars) <= MAX_VARIANTS else None
    optional = _optional_literal(op, av)
    if optional is not None and 2 * len(runs) <= MAX_VARIANTS:
        return runs | {r + optional for r in runs}
    return None


def _chars(op: Any, av: Any) -> set[str] | None:
    """The lower-case ASCII characters one item matches, when it matches one of a few such characters."""
    if op is C.LITERAL:
        return {chr(av).lower()} if av < 128 else None
    if op is C.IN and len(av) <= 4 and all(o is C.LITERAL and a < 128 for o, a in av):
        return {chr(a).lower() for _, a in av}
    return None


def _optional_literal(op: Any, av: Any) -> str | None:
    """The text of an optional run of literal characters (``'?``, ``(?:ay)?``), or None."""
    if op not in (C.MAX_REPEAT, C.MIN_REPEAT) or av[0] != 0 or av[1] != 1:
        return None
    body = list(av[2])
    if len(body) == 1 and body[0][0] is C.SUBPATTERN:
        body = list(body[0][1][-1])
    if body and all(o is C.LITERAL and a < 128 for o, a in body):
        return "".join(chr(a).lower() for _, a in body)
    return None


def _score(literals: frozenset[str]) -> tuple[int, int]:
    return min(len(s) for s in literals), -len(literals)


_last: tuple[str, str] = ("", "")


def folded(text: str) -> str:
    """Return ``text`` lower-cased for the gate (the last one is remembered: patterns run on the same sentence)."""
    global _last
    last = _last
    if last[0] is text:
        return last[1]
    low = text.lower()
    if not low.isascii():
        low = low.translate(_FOLD)
    _last = (text, low)  # one tuple, swapped whole: safe from any thread
    return low


def forget() -> None:
    """Drop the remembered sentence (conversation text: erasure empties every cache of it)."""
    global _last
    _last = ("", "")


class GatedPattern:
    """A compiled pattern behind its literal gate; the methods the extractor uses, same answers."""

    __slots__ = ("compiled", "literals")

    def __init__(self, pattern: Pattern[str], literals: tuple[str, ...]):
        self.compiled = pattern
        self.literals = literals

    def possible(self, text: str) -> bool:
        """False when no match of the pattern can be in ``text``."""
        low = folded(text)
        for literal in self.literals:  # a plain loop: half the time of any() over a generator
            if literal in low:
                return True
        return False

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Match[str] | None:
        return self.compiled.search(string, pos, endpos) if self.possible(string) else None

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Match[str] | None:
        return self.compiled.match(string, pos, endpos) if self.possible(string) else None

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Match[str] | None:
        return self.compiled.fullmatch(string, pos, endpos) if self.possible(string) else None

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[Match[str]]:
        return self.compiled.finditer(string, pos, endpos) if self.possible(string) else iter(())

    def findall(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self.compiled.findall(string, pos, endpos) if self.possible(string) else []

    def sub(self, repl: Any, string: str, count: int = 0) -> str:
        return self.compiled.sub(repl, string, count) if self.possible(string) else string

    def __getattr__(self, name: str) -> Any:  # pattern, flags, groupindex, split, ...: the pattern's own
        return getattr(self.compiled, name)

    def __repr__(self) -> str:
        return f"gated({self.compiled!r}, literals={list(self.literals)})"


GATED: list[GatedPattern] = []  # every gate made, for the tests


def gated(pattern: Pattern[str], min_literal: int = MIN_LITERAL) -> Pattern[str]:
    """Return ``pattern`` behind its literal gate, or ``pattern`` itself when none of ``min_literal`` chars exists."""
    literals = required_literals(pattern)
    if not literals or min(len(s) for s in literals) < min_literal:
        return pattern
    gate = GatedPattern(pattern, tuple(sorted(literals)))
    GATED.append(gate)
    return gate  # type: ignore[return-value]  # duck-typed: the Pattern methods the extractor calls
