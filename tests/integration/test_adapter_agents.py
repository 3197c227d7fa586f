"""memfold[agents]: an OpenAI Agents SDK session in memfold, with a Runner against the loopback OpenAI server."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from memfold.adapters.agents import MemfoldSession
from memfold.client import AsyncClient, ConflictError, NotFoundError

pytestmark = pytest.mark.timeout(120)
set_tracing_disabled(True)  # no trace export: there is no network here

ITEMS = [
    {"role": "user", "content": "Book me a table for two, my loyalty number is #77120"},
    {"type": "function_call", "call_id": "call_1", "name": "book_table", "arguments": '{"people": 2}'},
    {"type": "function_call_output", "call_id": "call_1", "output": '{"booked": true, "ref": "T-9"}'},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "Booked: reference T-9.", "annotations": []}]},
    {"type": "reasoning", "id": "rs_1", "summary": []},
]


def test_items_round_trip_pop_and_clear(service):
    key = service.key("agents-co", "admin")

    async def main():
        async with AsyncClient(service.url, key) as mf:
            session = MemfoldSession("s-roundtrip", mf)
            assert await session.get_items() == [] and await session.pop_item() is None
            await session.add_items(ITEMS[:3])
            await session.add_items(ITEMS[3:])
            assert await session.get_items() == ITEMS
            assert await session.get_items(limit=2) == ITEMS[-2:]
            popped = [m.event_id for m in await mf.messages("s-roundtrip")][-1:]
            assert await session.pop_item() == ITEMS[-1]
            assert await session.get_items() == ITEMS[:-1]
            assert await session.pop_item() == ITEMS[-2]
            assert await session.get_items() == ITEMS[:-2]
            stored = await mf.messages("s-roundtrip")
            assert [m.role for m in stored] == ["user", "assistant", "tool"]  # retracted: gone, and no note appended
            assert stored[1].tool_calls[0]["name"] == "book_table" and stored[2].tool_call_id == "call_1"
            context = await mf.context("s-roundtrip")
            assert [m.kind for m in context.messages if m.role == "system"] in ([], ["system_prompt"])
            assert all("Booked: reference" not in m.content and "[reasoning]" not in m.content for m in context.messages)
            audit = await mf.audit("s-roundtrip")
            assert audit["events"]["MessageRetracted"] == 2  # the log keeps both the items and their retractions
            with pytest.raises(ConflictError):
                await mf.retract("s-roundtrip", popped[0])
            with pytest.raises(NotFoundError):
                await mf.retract("s-roundtrip", "no-such-message")
            await session.clear_session()
            assert await session.get_items() == []

    asyncio.run(main())


def test_a_session_of_a_user_joins_the_users_memory(service):
    key = service.key("agents-users", "admin")

    async def main():
        async with AsyncClient(service.url, key) as mf:
            await MemfoldSession("s-mon", mf, user_id="ada").add_items([ITEMS[0]])
            tuesday = MemfoldSession("s-tue", mf, user_id="ada")
            await tuesday.add_items([{"role": "user", "content": "What was my loyalty number again?"}])
            assert {h["conversation_id"] for h in await mf.search_user("ada", "loyalty number")} == {"s-mon", "s-tue"}
            context = await mf.context("s-tue", budget=1000)
            recalled = [m.content for m in context.messages if m.kind == "user_recalled"]
            assert recalled and "#77120" in recalled[0] and "conversation s-mon" in recalled[0]

    asyncio.run(main())


def test_runner_keeps_history_and_compacts_into_memfold_memory(service, openai_server):
    key = service.key("agents-co", "writer")
    model = OpenAIResponsesModel(model="gpt-test", openai_client=AsyncOpenAI(base_url=openai_server.url, api_key="k"))
    agent = Agent(name="concierge", instructions="Answer briefly.", model=model)

    async def main():
        async with AsyncClient(service.url, key) as mf:
            session = MemfoldSession("s-runner", mf, budget=250)
            first = await Runner.run(agent, "My loyalty number is #77120.", session=session)
            assert first.final_output
            await Runner.run(agent, "What is my loyalty number?", session=session)
            sent = openai_server.requests[-1].body["input"]
            texts = [i["content"] if isinstance(i.get("content"), str) else str(i.get("content")) for i in sent]
            assert any("#77120" in t for t in texts[:-1]), sent  # the first turn came back from memfold
            assert session.compacted  # the Runner called run_compaction after a turn with a response id
            stored = await mf.messages("s-runner")
            assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]

            await session.add_items([{"role": "user" if i % 2 == 0 else "assistant", "content": f"small talk {i}"}
                                     for i in range(24)])
            for _ in range(400):  # 28 messages pass the summary trigger: wait for memfold's memory
                summaries = await mf.summaries("s-runner")
                if summaries and all(s["status"] != "processing" for s in summaries):
                    break
                await asyncio.sleep(0.05)
            items = await session.get_items()
            assert items[0]["role"] == "system" and "#77120" in items[0]["content"]  # memory, not the raw turn
            assert len(items) < 28 and items[-1] == {"role": "assistant", "content": "small talk 23"}

    asyncio.run(main())


def test_run_compaction_waits_for_the_summaries_it_stands_on(service):
    key = service.key("agents-co", "writer")

    async def main():
        async with AsyncClient(service.url, key) as mf:
            session = MemfoldSession("s-compact", mf, budget=250, compaction_wait=60)
            await session.add_items([{"role": "user", "content": "My loyalty number is #66031."}])
            await session.add_items([{"role": "user" if i % 2 == 0 else "assistant", "content": f"small talk {i}"}
                                     for i in range(1, 28)])
            await session.run_compaction()  # right after the batch that triggers a summary: no polling here
            assert session.compacted and session.pending_summaries == 0 and session.memory_ready
            assert all(s["status"] != "processing" for s in await mf.summaries("s-compact"))
            items = await session.get_items()
            assert items[0]["role"] == "system" and "#66031" in items[0]["content"]  # memory, at once
            assert len(items) < 28

    asyncio.run(main())
