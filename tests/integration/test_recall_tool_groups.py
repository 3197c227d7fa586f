"""Recall keeps tool groups whole and valid: every openai-shaped context of a long tool-using conversation,
at budgets from tiny to roomy, passes the chat API's own message rules (the loopback server's checker)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from fixtures.openai_server import chat_messages_error

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

T0 = datetime(2024, 3, 1, 9, tzinfo=UTC)
CITIES = ["Paris", "Rome", "Lisbon", "Oslo", "Vienna", "Prague", "Dublin", "Madrid"]
# Over EXCERPT_OVER tokens: a message carrying it is recalled as an excerpt when it stands alone.
LONG = " ".join(f"The forecast for day {d} mentions wind from the north, humidity at {40 + d} percent and a "
                f"pressure of {1000 + d} hectopascals near the harbour." for d in range(30))
BUDGETS = (60, 120, 200, 350, 600, 1000, 1800, 3000, 6000)
QUERIES = (None, "Which city had rain and 12 degrees?", "humidity and pressure near the harbour",
           "Was Paris sunny?", "the weather in Lisbon for trip 9")


def openai_rounds(rounds: int = 36) -> list[dict]:
    """Chat-shaped turns: parallel calls in one assistant message, long named user turns and long tool results."""
    out = []
    for r in range(rounds):
        city, other = CITIES[r % 8], CITIES[(r + 3) % 8]
        out.append({"role": "user", "name": "alice",
                    "content": f"What is the weather in {city} and {other} for trip {r}? " + (LONG if r % 5 == 2 else "")})
        if r % 3 == 0:
            out.append({"role": "assistant", "content": f"Checking {city} and {other}.", "tool_calls": [
                {"id": f"c{r}a", "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": city})}},
                {"id": f"c{r}b", "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": other})}},
            ]})
            out.append({"role": "tool", "tool_call_id": f"c{r}a", "content": f"{city}: sunny, 21 degrees. " + LONG})
            out.append({"role": "tool", "tool_call_id": f"c{r}b", "content": f"{other}: rain, 12 degrees."})
        elif r % 3 == 1:
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{r}", "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": city})}},
            ]})
            out.append({"role": "tool", "tool_call_id": f"c{r}", "content": f"{city}: cloudy. " + LONG})
        out.append({"role": "assistant", "content": f"In {city} it is fine for trip {r}. " + (LONG if r % 4 == 0 else "")})
    return out


def responses_rounds(rounds: int = 36) -> list[dict]:
    """Responses items as an Agents SDK session stores them, appended one at a time (each call its own message),
    results answering out of order."""
    out = []
    for r in range(rounds):
        city, other = CITIES[r % 8], CITIES[(r + 3) % 8]
        out.append({"role": "user", "content": f"What is the weather in {city} and {other} for trip {r}?"})
        if r % 2 == 0:
            out.append({"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": f"Checking {city} and {other}. " + (LONG if r % 4 == 0 else "")}]})
            out.append({"type": "function_call", "call_id": f"c{r}a", "name": "weather",
                        "arguments": json.dumps({"city": city})})
            out.append({"type": "function_call", "call_id": f"c{r}b", "name": "weather",
                        "arguments": json.dumps({"city": other})})
            out.append({"type": "function_call_output", "call_id": f"c{r}b", "output": f"{other}: rain, 12 degrees. " + LONG})
            out.append({"type": "function_call_output", "call_id": f"c{r}a", "output": f"{city}: sunny, 21 degrees."})
        out.append({"role": "assistant", "content": f"In {city} it is fine for trip {r}. " + (LONG if r % 3 == 0 else "")})
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["sliding_window", "hierarchical"])
def test_recalled_tool_groups_stay_whole_at_every_budget(tmp_path, policy):
    settings = Settings.load(None, data_dir=tmp_path / "data", policy=policy, policies=(policy,),
                             system_prompt="Be brief.")
    question = {"role": "user", "content": "Which city had rain and 12 degrees?"}
    with MemoryEngine(settings) as engine:
        chat = [*openai_rounds(), question]
        engine.append_many([{**m, "conversation_id": "chat", "occurred_at": (T0 + timedelta(minutes=37 * i)).isoformat()}
                            for i, m in enumerate(chat)])
        for i, item in enumerate([*responses_rounds(), question]):
            engine.append_many([{**item, "conversation_id": "agent",
                                 "occurred_at": (T0 + timedelta(minutes=41 * i)).isoformat()}], format="responses")
        engine.wait_idle(120)
        recalled_results = named_excerpts = 0
        for conversation in ("chat", "agent"):
            for budget in BUDGETS:
                for query in QUERIES:
                    out = engine.prompt(conversation, format="openai", budget=budget, query=query)
                    where = (conversation, budget, query)
                    assert chat_messages_error(out.messages) is None, (where, chat_messages_error(out.messages))
                    assert all(m["tool_call_id"] is not None for m in out.messages if m["role"] == "tool"), where
                    fixed = sum(n["tokens"] for n in out.memfold if n["kind"] in ("system_prompt", "current"))
                    assert sum(n["tokens"] for n in out.memfold) <= max(budget, fixed), where
                    for m, note in zip(out.messages, out.memfold):
                        if note["kind"] != "recalled":
                            continue
                        recalled_results += m["role"] == "tool"
                        named_excerpts += "(excerpt)" in (m["content"] or "") and m.get("name") == "alice"
    # The reads did recall tool groups and named long turns as excerpts: the checks above were not vacuous.
    assert recalled_results > 0 and named_excerpts > 0
