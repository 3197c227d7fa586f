"""An excerpt's passages are condensed: the light words a reader restores are left out, never a content word."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.core.ports import MessageRecord
from memfold.core.tokens import counter
from memfold.projections.excerpt import LIGHT_WORDS, NOUN_WILL_AFTER, condense, excerpt

COUNT = counter().count
WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    return WORD.findall(text)


def test_condense_keeps_what_carries_the_meaning():
    text = "The refund will be sent to Porto, not Lisbon, by 3 May. It's the one that can't wait; this is it. Will said so."
    assert condense(text) == "refund sent to Porto, not Lisbon, by 3 May. It's one can't wait; it. Will said so."
    # "will" the noun stays; the verb goes.
    assert condense("Free will and determinism will be discussed; it goes against my will.") == (
        "Free will and determinism discussed; it goes against my will.")
    # Words that merely start like a light word are content words.
    assert condense("Thesis theatre itinerary island bean") == "Thesis theatre itinerary island bean"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["the", "The", "is", "will", "be", "plan", "Porto", "not", "can't", "it's", "That's",
                                 "42", ",", ".", "theory", "island", "to", "from", "and", "Which", "very", "May", "may", "Will", "it",
                                 "free", "my"]), max_size=30))
def test_condense_drops_only_light_words_standing_alone(pieces):
    text = " ".join(pieces)
    nouns = {v for w in NOUN_WILL_AFTER for v in (w, w.capitalize())}

    def light(k: int, p: str) -> bool:
        if p == "will":
            return k == 0 or pieces[k - 1] not in nouns
        return p in LIGHT_WORDS or (p.lower() in LIGHT_WORDS and p[0].isupper() and p not in ("May", "Will"))

    expected = words(" ".join(p for k, p in enumerate(pieces) if not light(k, p)))
    assert words(condense(text)) == expected


def test_an_excerpt_is_condensed_and_fits_more_of_the_answer():
    steps = [f"Step {k}: the invoice {1000 + k} is sent to the customer and it will be filed by the team." for k in range(60)]
    long = " ".join(steps)
    m = MessageRecord(tenant_id="t", conversation_id="c", index=3, seq=4, event_id="e3", role="assistant",
                      content=long, tokens=counter().count_message(long), occurred_at=datetime(2024, 3, 1, tzinfo=UTC))
    out = excerpt(m, frozenset({"invoic"}), COUNT, size=120)
    assert out is not None
    content = out[0].content
    assert "Step 0: invoice 1000 sent to customer and it filed by team." in content
    assert not set(words(content)) & LIGHT_WORDS
    # About 120 tokens of condensed text hold more steps than 120 tokens of the original would.
    shown = sum(f"invoice {1000 + k} " in content for k in range(60))
    whole = len(steps[0]) // 4 + 1
    assert shown > 120 // whole
