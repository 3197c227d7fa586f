"""The offline summarizer counts a statement's tokens once: not again for a message's whole text, nor for a message seen before."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from memfold.core.ports import MessageRecord
from memfold.core.tokens import MESSAGE_OVERHEAD, TokenCounter
from memfold.projections.salience import statements_of


class CountingTokens(TokenCounter):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return super().count(text)


def message(index: int, content: str, tokens: TokenCounter) -> MessageRecord:
    return MessageRecord(tenant_id="t", conversation_id="statements", index=index, seq=index + 1, event_id=f"s{index}",
                         role="user", content=content, tokens=tokens.count(content) + MESSAGE_OVERHEAD,
                         occurred_at=datetime(2025, 2, 4, tzinfo=UTC))


def test_a_one_sentence_message_uses_its_count_from_append_and_a_message_seen_before_is_not_split_again():
    tokens = CountingTokens()
    one = message(1, "My order number is 18066 and the desk arrived cracked", tokens)
    two = message(2, "The desk arrived cracked on Monday. My order number is 18066.", tokens)
    tokens.calls = 0
    (only,) = statements_of(one, tokens)
    assert only.text == one.content and only.tokens == one.tokens - MESSAGE_OVERHEAD
    assert tokens.calls == 0
    first = statements_of(two, tokens)
    assert [s.text for s in first] == ["The desk arrived cracked on Monday.", "My order number is 18066."]
    assert [s.tokens for s in first] == [TokenCounter().count(s.text) for s in first]
    counted = tokens.calls
    assert counted == 2
    assert statements_of(two, tokens) == first and tokens.calls == counted  # the cache: no count, the same statements
    edited = msgspec.structs.replace(two, content="Cracked desk, order 18066.")
    assert [s.text for s in statements_of(edited, tokens)] == ["Cracked desk, order 18066."]  # other text: split anew


def test_a_run_on_sentence_cut_at_its_clauses_marks_the_pieces_that_continue_it():
    """A piece opening with "which", "and", "because" ... continues the clause before it: it reads "… which ..."."""
    tokens = TokenCounter()
    head = "I have been studying probability every evening for the last three months with a tutor from the college"
    run_on = (f"{head}, which seems crucial for my growth as a 44-year-old colour technologist from Port Michael "
              "who works with paint batches every single day, and I prefer step-by-step explanations with "
              "concrete examples like coin tosses and dice rolls to grasp the fundamentals of dependent events.")
    assert len(run_on) > 300
    parts = [s.text for s in statements_of(message(7, run_on, tokens), tokens)]
    assert parts[0].startswith("I have been studying") and not parts[0].startswith("…")
    assert len(parts) > 1 and all(p.startswith("… ") for p in parts[1:]), parts
    assert "which seems crucial" in parts[0] and parts[1].startswith("… and I prefer step-by-step")
    assert [s.tokens for s in statements_of(message(8, run_on, tokens), tokens)] == [tokens.count(p) for p in parts]


def test_thanks_and_assent_are_never_chosen_but_a_thanks_that_goes_on_is():
    from memfold.projections.salience import select

    tokens = TokenCounter()
    texts = [
        "Makes sense, thanks for breaking it down!",
        "Okay, got it, thank you so much.",
        "Thanks! I'll start by listing all my assets and naming Douglas as the executor.",
        "Great, the review went well and the team approved the March launch.",
        "Great, Lisbon it is.",
        "Second, it is forty.",
        "A moment ago it rained.",
    ]
    statements = [s for i, t in enumerate(texts) for s in statements_of(message(20 + i, t, tokens), tokens)]
    chosen = [s.text for s in select(statements, None)]
    # No budget limit: everything with something to say, nothing else ("Thanks!" alone is too short a sentence).
    assert chosen == ["I'll start by listing all my assets and naming Douglas as the executor.", *texts[3:]]
    courtesies = ["You're welcome, the refund of 293.45 EUR is on its way.", "Thank you, Ms Fitzgerald!",
                  "No problem, Ravi."]  # a name that addresses the listener says nothing
    said = [s for i, t in enumerate(courtesies) for s in statements_of(message(40 + i, t, tokens), tokens)]
    assert [s.text for s in select(said, None)] == [courtesies[0]]  # a courtesy that goes on is kept
