"""Fact extraction's faster forms (lookahead-led patterns, the first-person prefilter, sentence splitting) find exactly what the plain forms do."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.projections.fact_patterns import FAST_STARTS, FIRST_PERSON_RULES, FIRST_PERSON_WORD_RE

# Pieces the patterns start or go on with, their case variants, and the characters Python's re
# folds to ASCII letters under IGNORECASE (İ ı ſ K: "i", "s" and "k" match them).
PIECES = ["my name is", "I'm called", "call me", "The name is", "I'm", "im", "i am", "This is", "it's", "Its",
          "Hi", "hello there", "HEY", "here", "Ann", "Lee", "Ann Lee here", "Dana Whitfield", "order", "Ticket",
          "ORDER number", "ref", "is", ":", "#", "18066", "ORD-88231", "AB12C3", "$", "€", "£", "¥", "₹", "USD",
          "eur", "EUR", "1,200.50", "42", "dollars", "pounds", "shipped", "Cancelled", "canceled", "out for delivery",
          "ON HOLD", "delivered", "v2.4.1", "v", "#18066", "#", "&#123", "tracking number", "TRACKING", "1Z999AA10123",
          "SN-49VH-1453", "AES-256", "_", "2025-03-15", "March 4th, 2025", "4 of March", "May", "Sept", "June",
          "İ", "ı", "ſ", "K", "\u00a0", " ", "  ", ".", "!", "?", ",", "\n", "-", "'", "’", "x", "٣"]
TEXT = st.lists(st.sampled_from(PIECES), max_size=24).map(" ".join) | st.lists(st.sampled_from(PIECES), max_size=24).map("".join)
SAMPLES = [
    "Hi, my name is Dana Whitfield and my order number is 18066-B.",
    "I'm Ann Lee. Ann Lee here, calling about ticket 4471.",
    "The refund of 310.40 EUR and a $1,200 fee; USD 50 back, 20 dollars more.",
    "Your order has shipped, the claim was cancelled and the invoice INV-2231 is pending.",
    "İt's Kelvin here. ſhipped? Booking ref: AB12C3.",
    "Firmware v2.4.1 fixed it; tracking number: 1Z999AA10123456784; order #18066; serial SN-49VH-1453.",
    "The cutover is on 2025-03-15, not March 4th, 2025 or the 4th of March.",
]


def _pairs():
    return [pytest.param(compiled, re.compile(body, flags), id=compiled.pattern[:24]) for compiled, body, flags in FAST_STARTS]


def _matches(pattern: re.Pattern[str], text: str):
    return [(m.span(), m.groupdict()) for m in pattern.finditer(text)]


def test_the_whole_text_scans_are_the_ones_compiled_so():
    assert len(FAST_STARTS) == 9  # amounts, dates, names, prefixed ids, word ids, versions, tracking, #ids, states


@pytest.mark.parametrize("fast, plain", _pairs())
def test_samples_match_alike(fast, plain):
    found = [_matches(fast, s) for s in SAMPLES]
    assert found == [_matches(plain, s) for s in SAMPLES]
    assert any(found)  # each pattern finds something in the samples: the comparison is not of empty lists


@pytest.mark.parametrize("fast, plain", _pairs())
@settings(max_examples=1500, deadline=None)
@given(text=TEXT)
def test_generated_text_matches_alike(fast, plain, text):
    assert _matches(fast, text) == _matches(plain, text)
    assert [m.span() for m in (fast.search(text, i) for i in range(0, len(text), 7)) if m] == \
        [m.span() for m in (plain.search(text, i) for i in range(0, len(text), 7)) if m]


# Words the first-person rules open with and go on with, their case variants and the letters re folds to "i".
FIRST_PERSON_PIECES = ["I", "i", "I'm", "I’m", "i am", "I've", "I have", "we", "We've", "my", "My", "MY", "our",
                       "İ", "ı", "just", "moved", "relocated", "to", "Lisbon", "live", "in", "based", "work", "at",
                       "as", "a", "nurse", "prefer", "love", "chose", "opted", "planning", "plan", "name", "is",
                       "Ann", "sister", "Kate", "deadline", "moved to", "Friday", "favourite", "colour", "budget",
                       "$400", ",", ".", "'", "’", "-", "myself", "iPhone", "Ohio", "we're"]
SENTENCE = st.lists(st.sampled_from(FIRST_PERSON_PIECES), max_size=14).map(" ".join)


def test_every_first_person_rule_match_has_a_first_person_word():
    samples = ["I've just moved to Lisbon.", "I currently live in Porto", "I'm based in Leeds", "I work at Acme",
               "I work as a nurse", "My project deadline is moved to Friday", "I really prefer tea",
               "i am allergic to peanuts", "We've opted for the premium plan", "I'm planning to sell the car",
               "I plan to visit Ohio", "My sister Kate is moving", "my favourite colour is green", "My budget is $400"]
    for sentence in samples:
        assert any(p.search(sentence) for p, _, _ in FIRST_PERSON_RULES), sentence  # the samples mean something
        assert FIRST_PERSON_WORD_RE.search(sentence)


@settings(max_examples=3000, deadline=None)
@given(SENTENCE)
def test_a_sentence_without_a_first_person_word_matches_no_first_person_rule(sentence):
    if not FIRST_PERSON_WORD_RE.search(sentence):
        assert not any(p.search(sentence) for p, _, _ in FIRST_PERSON_RULES)


SENTENCE_PIECES = ["No", "no.", "Mr", "Mrs.", "e.g", "i.e.", "etc", "St", "vs", "approx", "Dr", "word", "é", "İ", "1",
                   "2.5", ".", "..", "!", "?", "?!", '"', "'", ")", "]", " ", "  ", "\n", "\n\n", "\t", "\u00a0", "x.y"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(SENTENCE_PIECES), max_size=30).map("".join), st.integers(0, 40), st.integers(0, 40))
def test_the_word_before_a_period_is_the_one_the_regex_finds(text, a, b):
    """sentence_spans' abbreviation check scans back (_word_before) where it ran this regex over the slice."""
    from memfold.projections.fold_text import _word_before

    start, end = sorted((min(a, len(text)), min(b, len(text))))
    found = re.search(r"([A-Za-z.]+)$", text[start:end])
    assert _word_before(text, start, end) == (found.group(1) if found else "")


def test_initials_make_a_character_class_whatever_the_words_start_with():
    from memfold.projections.fact_patterns import _initials

    klass = re.compile(f"[{_initials('order|-x|]y|^z|' + chr(92) + 'w|order')}]")
    assert [c for c in "o-]^" + chr(92) + "ab" if klass.fullmatch(c)] == ["o", "-", "]", "^", chr(92)]
