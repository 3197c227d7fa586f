"""A scripted order-support conversation for replay and verify tests (one copy, not one per test file)."""

from __future__ import annotations

from typing import Any


def talk(engine: Any, conversation: str, n: int, *, first_order: int = 900,
         name_conversation: bool = False, timeout: float = 60.0) -> None:
    """Append ``n`` alternating user/assistant turns, waiting for summaries every 5 turns and at the end.

    ``name_conversation`` puts the conversation id into each turn (tests that
    search for one conversation's text among several).
    """
    for i in range(n):
        who = f" for {conversation}" if name_conversation else ""
        engine.append_message(conversation, "user" if i % 2 == 0 else "assistant",
                              f"turn {i}: order #{first_order + i}{who} ships from Leeds for ${i}.99")
        if i % 5 == 4:
            engine.wait_idle(timeout)
    engine.wait_idle(timeout)
