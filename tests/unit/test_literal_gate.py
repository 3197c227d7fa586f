"""Literal gates (projections/literal_gate.py): derived from the pattern, they never hide a match."""

from __future__ import annotations

import _sre
import re
from re import _casefix  # type: ignore[attr-defined]

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.projections import fact_patterns  # noqa: F401  # builds the extractor's gates
from memfold.projections.literal_gate import GATED, GatedPattern, folded, gated, required_literals


@pytest.mark.parametrize("pattern, literals", [
    (r"\bagreed\b", {"agreed"}),
    (r"\b(?:agreed|approved|authori[sz]ed)\b", {"agreed", "approved", "authorised", "authorized"}),
    (r"\bi'?m called", {"i'm called", "im called"}),
    (r"ok(?:ay)?,? deal", {"ok deal", "ok, deal", "okay deal", "okay, deal"}),  # optional parts: their spellings
    (r"(?i:My Name Is)\s+(?P<n>[A-Z]\w+)", {"my name is"}),
    (r"\d+ (?:days?|weeks?)", {" day", " days", " week", " weeks"}),
    (r"(?:refund)+ now", {"refund"}),
    (r"(?=order)\w+", None),  # a lookahead requires nothing of the match itself
    (r"x?[ab]\d", {"a", "b", "xa", "xb"}),  # a small class: its letters
    (r"[a-z]+\d", None),
    (r"caf\u00e9 bars", {" bars"}),  # a non-ASCII character ends a run
    (r"(?:yes|)", None),  # a branch that can match nothing: nothing is required
])
def test_the_literals_are_derived_from_the_parse_tree(pattern, literals):
    found = required_literals(re.compile(pattern, re.I))
    assert (set(found) if found else None) == literals


def test_a_pattern_without_a_long_enough_literal_is_left_as_it_is():
    plain = re.compile(r"\b(?:if|so)\b")
    assert gated(plain) is plain
    assert isinstance(gated(plain, min_literal=2), GatedPattern)


def test_the_gate_says_no_only_where_nothing_can_match():
    gate = gated(re.compile(r"\b(?P<verb>agreed|approved)\b", re.I))
    assert not gate.possible("We talked about the weather.")
    assert gate.search("We talked about the weather.") is None
    assert list(gate.finditer("nothing here")) == []
    m = gate.search("The manager APPROVED it")
    assert m is not None and m.group("verb") == "APPROVED"
    assert gate.sub("x", "no match") == "no match" and gate.sub("x", "agreed!") == "x!"
    assert gate.pattern == gate.compiled.pattern and gate.groupindex == {"verb": 1}


def test_ignorecase_letters_outside_ascii_are_folded():
    """Python's re matches İ and ı with "i", ſ with "s", the Kelvin sign with "k": so does the gate."""
    for text, pattern in [("\u0130f so", r"\bif\b"), ("\u0131f so", r"\bif\b"), ("\u017fhipped", r"shipped"),
                          ("\u212aeep it", r"keep")]:
        compiled = re.compile(pattern, re.I)
        assert compiled.search(text), text  # re does match them
        assert gated(compiled, min_literal=2).search(text), text


def test_every_non_ascii_character_re_folds_to_ascii_is_handled():
    """Exhaustive: a character whose IGNORECASE form is an ASCII letter lower-cases or folds to it."""
    for cp in range(128, 0x110000):
        low = _sre.unicode_tolower(cp)
        related = {low} | set(_casefix._EXTRA_CASES.get(low, ()))
        ascii_ = [c for c in related if c < 128]
        if ascii_:
            assert chr(ascii_[0]) in folded(f"x{chr(cp)}x"), hex(cp)


def _matches(pattern, text: str):
    return [(m.span(), m.groupdict()) for m in pattern.finditer(text)]


def _variants(word: str) -> list[str]:
    return [word, word.upper(), word.title(), word.replace("s", "\u017f").replace("i", "\u0130").replace("k", "\u212a")]


PIECES = sorted({v for g in GATED for s in g.literals for v in _variants(s)} | {
    "14", "Ann Lee", "Dana", "is", "are", "the", "item", "returned", "unused", ",", ".", ";", ":", "?", "\n", " ",
    "'", "’", "-", "#", "1234", "ORD-88231", "you", "please", "help", "it", "that", "days", "business", "x",
})
TEXT = st.lists(st.sampled_from(PIECES), max_size=20).map(" ".join) | st.lists(st.sampled_from(PIECES), max_size=20).map("".join)


def test_the_extractor_gates_its_costly_patterns():
    assert len(GATED) >= 9
    assert all(g.literals and all(s == s.lower() and s.isascii() for s in g.literals) for g in GATED)


@pytest.mark.parametrize("gate", GATED, ids=lambda g: g.compiled.pattern[:28])
@settings(max_examples=800, deadline=None)
@given(text=TEXT)
def test_a_gated_pattern_finds_what_the_pattern_finds(gate, text):
    assert _matches(gate, text) == _matches(gate.compiled, text)
    for i in range(0, len(text), 5):
        assert gate.search(text, i) == gate.compiled.search(text, i) or \
            gate.search(text, i).span() == gate.compiled.search(text, i).span()
        assert (gate.match(text, i) is None) == (gate.compiled.match(text, i) is None)


def test_erasure_drops_the_sentence_the_gates_remember():
    from memfold.projections import literal_gate
    from memfold.projections.offline_summarizer import OfflineSummarizer

    GATED[0].possible("my secret is ORD-4711")
    assert "ord-4711" in literal_gate._last[1]  # remembered for the next pattern on the same sentence
    OfflineSummarizer().drop_text_caches()  # what forget calls
    assert "4711" not in "".join(literal_gate._last)
