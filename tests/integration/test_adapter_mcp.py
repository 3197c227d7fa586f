"""memfold[mcp]: the MCP server's tools against a live service, through the official SDK's client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from fixtures.kafka_broker import free_port
from mcp import Client as McpClient
from mcp import StdioServerParameters

from memfold.adapters.mcp import build_server
from memfold.client import AsyncClient

pytestmark = pytest.mark.timeout(120)


def _data(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content if result.structured_content is not None else json.loads(result.content[0].text)


def test_tools_in_process(service):
    key = service.key("mcp-co", "admin")

    async def main():
        async with AsyncClient(service.url, key) as memfold, McpClient(build_server(memfold)) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert set(tools) == {"memory_append", "memory_context", "memory_search", "memory_audit", "memory_forget",
                                  "memory_user", "memory_user_audit", "memory_forget_user"}
            assert tools["memory_user"].annotations.read_only_hint is True
            assert tools["memory_forget_user"].annotations.destructive_hint is True
            assert tools["memory_context"].annotations.read_only_hint is True
            assert tools["memory_audit"].annotations.read_only_hint is True
            assert tools["memory_forget"].annotations.destructive_hint is True
            assert tools["memory_append"].annotations.read_only_hint is False

            for i, text in enumerate(["I moved to Porto in May", "Noted, Porto.", "My cat is called Miso"]):
                role = "assistant" if i == 1 else "user"
                await mcp.call_tool("memory_append", {"conversation_id": "m-1", "role": role, "content": text,
                                                      "message_id": f"msg-{i}"})
            again = _data(await mcp.call_tool("memory_append", {"conversation_id": "m-1", "role": "user",
                                                               "content": "My cat is called Miso", "message_id": "msg-2"}))
            context = _data(await mcp.call_tool("memory_context", {"conversation_id": "m-1", "budget": 500}))
            assert [m["content"] for m in context["messages"]] == [
                "I moved to Porto in May", "Noted, Porto.", "My cat is called Miso"]  # msg-2 stored once
            assert again["id"] == "msg-2"
            hits = _data(await mcp.call_tool("memory_search", {"query": "cat name"}))["hits"]
            assert hits[0]["content"] == "My cat is called Miso"
            trail = _data(await mcp.call_tool("memory_audit", {"conversation_id": "m-1"}))
            assert trail["conversation"]["message_count"] == 3
            _data(await mcp.call_tool("memory_forget", {"conversation_id": "m-1", "reason": "asked"}))
            missing = await mcp.call_tool("memory_context", {"conversation_id": "m-1"})
            assert missing.is_error and "404" in missing.content[0].text

    asyncio.run(main())


def test_user_scope_tools(service):
    key = service.key("mcp-users", "admin")

    async def main():
        async with AsyncClient(service.url, key) as memfold, McpClient(build_server(memfold)) as mcp:
            for conversation, text in (("u-1", "My cat is called Miso"), ("u-2", "I moved to Porto in May")):
                await mcp.call_tool("memory_append", {"conversation_id": conversation, "role": "user",
                                                      "content": text, "user_id": "ana"})
            await mcp.call_tool("memory_append", {"conversation_id": "o-1", "role": "user",
                                                  "content": "My cat is called Rex", "user_id": "bob"})
            hits = _data(await mcp.call_tool("memory_search", {"query": "cat called", "user_id": "ana"}))["hits"]
            assert [h["conversation_id"] for h in hits] == ["u-1"]
            memory = _data(await mcp.call_tool("memory_user", {"user_id": "ana"}))
            assert {c["conversation_id"] for c in memory["conversations"]} == {"u-1", "u-2"}
            assert _data(await mcp.call_tool("memory_user_audit", {"user_id": "ana"}))["user_id"] == "ana"
            clash = await mcp.call_tool("memory_append", {"conversation_id": "u-1", "role": "user",
                                                          "content": "hi", "user_id": "bob"})
            assert clash.is_error and "409" in clash.content[0].text
            done = _data(await mcp.call_tool("memory_forget_user", {"user_id": "ana"}))
            assert sorted(done["conversations"]) == ["u-1", "u-2"]
            gone = await mcp.call_tool("memory_user", {"user_id": "ana"})
            assert gone.is_error and "404" in gone.content[0].text

    asyncio.run(main())


def test_stdio_and_streamable_http_transports(service):
    key = service.key("mcp-co", "writer")
    env = {**os.environ, "MEMFOLD_URL": service.url, "MEMFOLD_API_KEY": key}
    port = free_port()
    http_server = subprocess.Popen([sys.executable, "-m", "memfold.adapters.mcp", "--transport", "streamable-http",
                                    "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.2)

        async def main():
            stdio = StdioServerParameters(command=sys.executable, args=["-m", "memfold.adapters.mcp"], env=env)
            async with McpClient(stdio) as over_stdio:
                await over_stdio.call_tool("memory_append", {"conversation_id": "t-1", "role": "user",
                                                             "content": "sent over stdio"})
            async with McpClient(f"http://127.0.0.1:{port}/mcp") as over_http:
                await over_http.call_tool("memory_append", {"conversation_id": "t-1", "role": "user",
                                                            "content": "sent over streamable HTTP"})
                context = _data(await over_http.call_tool("memory_context", {"conversation_id": "t-1"}))
            return [m["content"] for m in context["messages"]]

        assert asyncio.run(main()) == ["sent over stdio", "sent over streamable HTTP"]
    finally:
        http_server.terminate()
        http_server.wait(timeout=15)


def test_memory_search_reaches_every_conversation(service):
    key = service.key("mcp-search", "writer")

    async def main():
        async with AsyncClient(service.url, key) as memfold, McpClient(build_server(memfold)) as mcp:
            for i in range(30):
                text = "the violet umbrella is in locker 12" if i == 24 else f"routine status note {i}"
                await memfold.append(f"n-{i:02d}", [{"role": "user", "content": text}])
            for later in range(20):  # n-24: past the first page by id, and outside the 20 most recently active
                await memfold.append(f"n-{later:02d}", [{"role": "user", "content": "another routine note"}])
            assert "n-24" not in [c.conversation_id for c in await memfold.conversations(limit=20)]
            hits = _data(await mcp.call_tool("memory_search", {"query": "violet umbrella locker", "limit": 3}))["hits"]
            assert [(h["conversation_id"], h["content"]) for h in hits] == [("n-24", "the violet umbrella is in locker 12")]

    asyncio.run(main())
