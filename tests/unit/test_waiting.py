"""The tests' deadline-polling helper: returns what the condition returned, fails naming what it waited for."""

from __future__ import annotations

import itertools

import pytest
from support.waiting import wait_until


def test_returns_the_first_truthy_value_and_stops_calling():
    calls = itertools.count(1)
    answers = iter([None, 0, {"k": 1}, "never asked"])
    assert wait_until(lambda: (next(calls), next(answers))[1], timeout=60, interval=0) == {"k": 1}
    assert next(calls) == 4  # three calls made


def test_a_zero_timeout_asks_once_then_fails_with_the_message_and_the_last_value():
    calls = []
    with pytest.raises(AssertionError, match=r"timed out after 0 s waiting for the key to go \(last value: \[\]\)"):
        wait_until(lambda: calls.append(1) or [], timeout=0, message="the key to go")
    assert calls == [1]


def test_a_callable_message_describes_the_state_at_the_deadline():
    state = {"seen": 3}
    with pytest.raises(AssertionError, match="waiting for 5 records, saw 3"):
        wait_until(lambda: False, timeout=0, message=lambda: f"5 records, saw {state['seen']}")


def test_an_error_in_the_condition_is_not_retried():
    calls = []

    def broken():
        calls.append(1)
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        wait_until(broken, timeout=60)
    assert calls == [1]
