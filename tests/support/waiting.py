"""Waiting in tests: poll a condition until a deadline, instead of sleeping a fixed time and hoping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.01,
               message: str | Callable[[], str] = "condition") -> T:
    """Call ``predicate`` until it returns a truthy value, and return that value.

    The first call is made at once; then one every ``interval`` seconds, and a
    last one at the deadline, so a condition met just before ``timeout``
    seconds still passes. ``timeout`` is a deadline for a slow machine, not a
    figure under test: pick one far above the expected wait. On timeout raise
    ``AssertionError`` naming ``message`` (a string, or a callable called then
    to describe the state) and the last value returned. Exceptions raised by
    ``predicate`` propagate at once: they are not retried.
    """
    deadline = time.monotonic() + timeout
    while True:
        last_call = time.monotonic() >= deadline
        value = predicate()
        if value:
            return value
        if last_call:
            what = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last value: {value!r})")
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
