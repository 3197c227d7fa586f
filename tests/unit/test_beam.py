"""BEAM loading and answer-content scoring (benchmarks/beam.py): pure functions, no engine."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support.benchmarks import load as _load

beam = _load("beam")


def test_content_words_drop_stop_and_template_words_and_keep_numbers_and_dates():
    words = beam.content_words(
        "I notice you've mentioned contradictory information. You said the first sprint ends on March 29, 2024, "
        "at 250ms on Apr. 05. Could you clarify which is correct?"
    )
    assert words == {"first", "sprint", "ends", "march", "29", "2024", "250", "ms", "april", "5"}


def test_words_match_plurals_abbreviations_leading_zeros_and_iso_dates():
    context = beam.words("column, library, movie, analysis, status, Apr. 05")
    assert beam.recall({"columns", "libraries", "movies", "analysis", "status", "april", "5"}, context) == 1.0
    assert beam.recall({"statu", "analysi"}, context) == 0.0  # no "singular" made of -is / -us words
    # memfold renders dates as ISO: the month counts as its name, the day without its zero
    assert {"march", "5", "2024"} <= beam.words("[2024-03-05] user: hi")


def test_recall_is_the_share_of_answer_words_in_the_context():
    answer = beam.content_words("Two columns: category and notes.")
    assert answer == {"two", "columns", "category", "notes"}
    assert beam.recall(answer, beam.context_words(["add a category column", "and a notes column"])) == 0.75
    assert beam.recall(answer, set()) == 0.0
    assert beam.recall(set(), set()) == 1.0


def test_messages_carry_the_session_date_forward_and_lose_the_generation_marker():
    batches = [
        {"batch_number": 1, "time_anchor": None, "turns": [
            [{"role": "user", "content": "plan my sprint ->-> 1,1", "time_anchor": "March-15-2024"},
             {"role": "assistant", "content": "Sure ->-> not a marker on assistant turns"}],
            [{"role": "user", "content": "and then? ->-> 1,2)"}, {"role": "assistant", "content": "Then rest."}],
        ]},
        {"batch_number": 2, "time_anchor": None, "turns": [
            [{"role": "user", "content": "back again ->-> 2,22, 24", "time_anchor": "April-02-2024"},
             {"role": "assistant", "content": "Welcome back."}],
        ]},
    ]
    msgs = beam.load_messages(batches)
    day1, day2 = datetime(2024, 3, 15, tzinfo=UTC), datetime(2024, 4, 2, tzinfo=UTC)
    assert [m["content"] for m in msgs] == ["plan my sprint", "Sure ->-> not a marker on assistant turns",
                                            "and then?", "Then rest.", "back again", "Welcome back."]
    assert [m["occurred_at"].date() for m in msgs] == [day1.date()] * 4 + [day2.date()] * 2
    assert [m["occurred_at"] for m in msgs] == sorted(m["occurred_at"] for m in msgs)


def test_questions_take_answer_or_ideal_answer_and_reject_a_question_without_one():
    raw = {"knowledge_update": [{"question": "q1", "answer": "a1"}],
           "contradiction_resolution": [{"question": "q2", "ideal_answer": "a2"}],
           "summarization": [{"question": "q3", "ideal_summary": "ignored kind"}]}
    assert [(q.kind, q.answer) for q in beam.load_questions(raw)] == [
        ("knowledge_update", "a1"), ("contradiction_resolution", "a2")]
    with pytest.raises(ValueError, match="event_ordering question 0 has no answer"):
        beam.load_questions({"event_ordering": [{"question": "q", "answer": ""}]})


def test_bad_time_anchor_is_an_error():
    with pytest.raises(ValueError):
        beam.parse_anchor("15/03/2024")
