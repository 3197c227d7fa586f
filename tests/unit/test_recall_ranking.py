"""How recall orders a conversation's messages for a query: BM25, then a user's words and, for a question, stated values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memfold.core.ports import MessageRecord
from memfold.projections import retrieval
from memfold.projections.retrieval import USER_BOOST, SearchIndex, asks

T0 = datetime(2025, 5, 14, 9, 0, tzinfo=UTC)
KEY = ("t", "c")
TALK = [
    ("user", "My router keeps dropping the connection every evening."),
    ("user", "Just confirming the ticket is TCK-14886?"),
    ("user", "Who has my ticket?"),
    ("assistant", "The field team in the east region has it."),
    ("user", "My son has an online exam this week."),
    ("assistant", "Understood, I'll prioritise this."),
]


def indexed(talk: list[tuple[str, str]]) -> SearchIndex:
    records = [MessageRecord(tenant_id="t", conversation_id="c", index=i, seq=i + 1, event_id=f"e{i}", role=role,
                             content=text, tokens=len(text) // 4, occurred_at=T0 + timedelta(minutes=i))
               for i, (role, text) in enumerate(talk)]
    cols = retrieval.new_columns()
    for m in records:
        retrieval.add_doc(cols, "t", "c", "message", m.event_id, m.index, m.content)
    index = SearchIndex(lambda tenant, conversation: [], lambda tenant, conversation: [])
    index.extend(cols, records)
    return index


@pytest.mark.parametrize("query,expected", [
    ("What was the ticket number?", True), ("ticket number?", True), ("remind me of the ticket number", True),
    ("When is the visit", True), ("the ticket number", False), ("I still have no ticket number", False),
])
def test_a_question_is_told_by_its_mark_or_its_first_word(query, expected):
    assert asks(query) is expected


def test_a_question_ranks_the_message_stating_a_value_above_chit_chat_sharing_its_words():
    index = indexed(TALK)
    # Without the value weight the shorter message wins (BM25: the same term in fewer words).
    assert index.rank_messages(KEY, "the ticket", 3, USER_BOOST)[:2] == [2, 1]
    assert index.rank_messages(KEY, "What was the ticket?", 3, USER_BOOST)[:2] == [1, 2]


def test_the_value_weight_only_reorders_messages_that_match_the_query():
    index = indexed(TALK)
    ranked = index.rank_messages(KEY, "Who is on the exam?", 6, USER_BOOST)
    assert ranked == [4]  # the only message with a query term; the one with a number is not brought in


def test_an_email_address_is_a_stated_value_too():
    index = indexed([
        ("user", "Sure: my email is gabriel.lindqvist@example.org and my phone is +44 20 7946 0075."),
        ("assistant", "Noted."),
        ("user", "Please change the email on file. Use lindqvist.g@mail.example.com."),
        ("user", "Give me a minute to dig out the email."),
        ("user", "I didn't get any return email"),
    ])
    assert index.rank_messages(KEY, "email", 5, USER_BOOST)[0] == 4  # not a question, BM25 alone: the shortest
    ranked = index.rank_messages(KEY, "Which email address do you have for me now?", 5, USER_BOOST)
    assert ranked[0] == 2  # the changed address first, before the shorter chit-chat about email
    assert ranked.index(0) < ranked.index(3)  # the first address too outranks a message with no address
