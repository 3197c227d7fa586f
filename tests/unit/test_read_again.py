"""Reading a message again from its trace leaves a FactBook exactly as reading it would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.core.events import Fact
from memfold.core.ports import MessageRecord
from memfold.projections import fact_extraction
from memfold.projections.fact_extraction import FactBook, read_message

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
# Turns that make the extractors ask the book (who the customer is, whether an order id or a request
# is held, when a message was written, whether a decision is known) and answer differently in other books.
TURNS = [
    ("user", "Hi, my name is Dana Whitfield and my order number is 18066-B."),
    ("assistant", "Thanks Dana Whitfield, I found order 18066-B. It ships on March 4."),
    ("user", "Please send the invoice to dana@example.org by Friday."),
    ("assistant", "I've set up a refund of 310.40 EUR. One condition: the desk must be returned within 14 days."),
    ("user", "Deal, agreed."),
    ("user", "Actually the order number is 18067-B, sorry."),
    ("user", "Cancel the order please, I no longer need it."),
    ("user", "I'm allergic to peanuts and I live in Leeds."),
    ("assistant", "Noted. We decided to use the Leeds depot for the pickup on March 10."),
    ("user", "My phone is +44 20 7946 0958 and the budget is $420."),
    ("user", "Can you help me plan a trip to Lisbon in May? My flight departs on May 3."),
    ("assistant", "Your therapy session with Sara on March 12 is confirmed, and the penalty is $2,000."),
    ("user", "Let's go with the premium plan for $29 a month."),
    ("user", "thanks, that is all"),
]


def message(index: int, role: str, content: str) -> MessageRecord:
    return MessageRecord(tenant_id="t", conversation_id="again", index=index, seq=index + 1, event_id=f"e{index}",
                         role=role, content=content, tokens=0, occurred_at=T0 + timedelta(days=index))


def read(messages: list[MessageRecord], existing: tuple[Fact, ...], again: bool) -> tuple[Fact, ...]:
    book = FactBook()
    for f in existing:
        book.put_fact(f)
    previous = None
    for m in messages:
        if again:
            read_message(m, book, previous)
        else:
            fact_extraction._read(m, book, previous)  # reading it, with no trace
        previous = m.content
    return book.facts()


EXISTING = [
    (),
    (Fact(key="customer_name", value="Dana Whitfield"),),
    (Fact(key="order_id", value="18066-B"), Fact(key="user_request", value="Plan a trip to Lisbon")),
    (Fact(key="decision", value="We decided to use the Leeds depot for the pickup on March 10.", category="DECISION"),),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(range(len(TURNS))), min_size=1, max_size=8), min_size=1, max_size=5),
       st.lists(st.sampled_from(range(len(EXISTING))), min_size=5, max_size=5))
def test_reading_again_from_traces_gives_the_facts_reading_gives(versions, existing):
    """Each version reads some turns into a book that starts from other facts, as summary versions do."""
    fact_extraction.forget_traces()
    for v, picks in enumerate(versions):
        messages = [message(i, *TURNS[i]) for i in sorted(set(picks))]
        base = EXISTING[existing[v]]
        assert read(messages, base, again=True) == read(messages, base, again=False)


def test_a_trace_is_replayed_whole_when_the_book_answers_alike_and_resumed_where_it_does_not(monkeypatch):
    outcomes: list[bool] = []
    made_again = fact_extraction._again

    def again(trace, book):
        made, whole = made_again(trace, book)
        outcomes.append(whole)
        return made, whole

    monkeypatch.setattr(fact_extraction, "_again", again)
    fact_extraction.forget_traces()
    cancel = message(6, *TURNS[6])  # "Cancel the order please": the user's request, unless the book holds one
    assert read([cancel], (), again=True) == read([cancel], (), again=False)
    assert outcomes == []  # first reading: made for real, its trace kept
    assert read([cancel], (), again=True) == read([cancel], (), again=False)
    assert outcomes == [True]  # same book: the trace's calls, each answered as before
    known = EXISTING[2]
    facts = read([cancel], known, again=True)
    assert outcomes == [True, False]  # a request is held now: read on from where the answers differ
    assert facts == read([cancel], known, again=False)
    assert [f.value for f in facts if f.key == "user_request"] == ["Plan a trip to Lisbon"]


def test_a_reading_whose_calls_cannot_be_kept_is_made_every_time(monkeypatch):
    class Answer:  # a mutable answer: a trace could not compare it
        pass

    fact_extraction.forget_traces()
    monkeypatch.setattr(FactBook, "note_date", lambda self, source, at: Answer())
    read([message(2, *TURNS[2])], (), again=True)
    assert fact_extraction._TRACES == {}


def test_a_reading_that_diverges_from_the_calls_already_made_says_so():
    book = FactBook()
    traced = fact_extraction._TracedBook(book, made=[("get", ("order_id",), (), None)])
    with pytest.raises(RuntimeError, match="diverged at call 0"):
        traced.put("order_id", "1", 0)


def test_traces_hold_a_bounded_amount_of_message_text(monkeypatch):
    monkeypatch.setattr(fact_extraction, "TRACES_MAX_CHARS", 20_000)
    fact_extraction.forget_traces()
    read([message(0, "user", "My order number is 18066-B. " * 4)], (), again=True)
    assert len(fact_extraction._TRACES) == 1
    read([message(1, "user", "My order number is 18066-B. " * 40)], (), again=True)  # over a hundredth: not kept
    assert len(fact_extraction._TRACES) == 1
    for i in range(2, 300):  # 112 characters each: the budget is spent after 178 and all start over
        read([message(i, "user", f"My order number is {18000 + i}-B. " * 4)], (), again=True)
    assert 0 < len(fact_extraction._TRACES) < 178
    assert fact_extraction._traces_chars <= 20_000


def test_an_answer_equal_in_value_but_not_in_type_or_zone_is_not_the_same():
    utc = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    lisbon_summer = utc.astimezone(timezone(timedelta(hours=1)))
    # Equal under == (1 == True; one instant in two zones) yet not the same answer, either way round.
    assert not fact_extraction._same(lisbon_summer, utc) and not fact_extraction._same(utc, lisbon_summer)
    assert fact_extraction._same(utc, lisbon_summer.astimezone(UTC))
    assert not fact_extraction._same(1, True) and not fact_extraction._same(True, 1)
    assert fact_extraction._same(True, True) and fact_extraction._same(1, 1) and not fact_extraction._same(1, 2)
    assert fact_extraction._same(["order_id"], ["order_id"]) and fact_extraction._same(None, None)


def test_the_first_topic_stays_and_a_book_holding_one_looks_for_no_other():
    refund = message(0, "user", "I want a refund for the broken chair.")
    address = message(2, "user", "Also please change my shipping address to 4 Elm Street.")
    facts = {f.key: f.value for f in read([refund, address], (), again=False)}
    assert facts["topic"] == "refund request"  # the address change came later: the first topic stays
    facts = {f.key: f.value for f in read([address, refund], (), again=False)}
    assert facts["topic"] == "address change"
