"""An MCP server over a memfold service (``pip install 'memfold[mcp]'``; the official ``mcp`` SDK, 2.x).

Tools: ``memory_append``, ``memory_context``, ``memory_search``,
``memory_audit``, ``memory_user`` and ``memory_user_audit`` (read-only
hints set), ``memory_forget`` and ``memory_forget_user`` (destructive). The
user scope: ``memory_append`` takes the ``user_id`` a conversation belongs
to, ``memory_search`` searches one user's conversations, ``memory_user``
returns what memfold knows of a user across conversations.
Each calls a running ``memfold serve`` with one API key, so the tenant and
what the tools may do are the key's. Transports: stdio (an MCP client
launches ``python -m memfold.adapters.mcp``) or streamable HTTP (``python -m memfold.adapters.mcp --transport
streamable-http --port 8765``, endpoint ``/mcp``).
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from memfold.client import ApiError, AsyncClient

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ERASE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def _reported(tool):
    """Return ``tool`` answering the service's errors (404, 403, 422, ...) as tool errors the model can read."""

    @functools.wraps(tool)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await tool(*args, **kwargs)
        except ApiError as exc:
            raise ToolError(str(exc)) from exc

    return call


def build_server(client: AsyncClient, *, name: str = "memfold") -> MCPServer:
    """Return an MCP server whose tools call ``client`` (a :class:`memfold.client.AsyncClient`)."""
    server = MCPServer(name, instructions=(
        "Long-term conversation memory. Append each turn with memory_append; before answering, call "
        "memory_context for the conversation to get its memory and recent turns within a token budget."
    ))

    @server.tool(annotations=WRITE)
    @_reported
    async def memory_append(conversation_id: str, role: str, content: str, message_id: str | None = None,
                            user_id: str | None = None) -> dict[str, Any]:
        """Append one message (role: user, assistant, system or tool). Sending the same message_id again stores it once.
        user_id names the user the conversation belongs to: its memory then joins the user's."""
        done = await client.append(conversation_id, [{"role": role, "content": content, "id": message_id}],
                                   user_id=user_id)
        return done[0].model_dump()

    @server.tool(annotations=READ)
    @_reported
    async def memory_context(conversation_id: str, budget: int | None = None, query: str | None = None) -> dict[str, Any]:
        """Return the messages for the next model call: memory (facts, summary), recalled and recent turns, within budget tokens."""
        context = await client.context(conversation_id, budget=budget, query=query)
        return {"tokens": context.tokens, "policy": context.policy,
                "messages": [m.model_dump(exclude_none=True) for m in context.messages]}

    @server.tool(annotations=READ)
    @_reported
    async def memory_search(query: str, conversation_ids: list[str] | None = None, limit: int = 10,
                            user_id: str | None = None) -> dict[str, Any]:
        """Find past messages matching a query: in one user's conversations (user_id), the given conversations, or all."""
        if user_id:
            return {"hits": await client.search_user(user_id, query, limit=limit)}
        if conversation_ids:
            return {"hits": await client.search(query, conversation_ids=conversation_ids, limit=limit)}
        hits: list[dict[str, Any]] = []
        offset = 0
        while True:  # every conversation, 100 per search (the service's most per request)
            page = await client.conversations(limit=100, offset=offset)
            if not page:
                break
            hits += await client.search(query, conversation_ids=[c.conversation_id for c in page], limit=limit)
            offset += len(page)
        hits.sort(key=lambda h: -h["score"])
        return {"hits": hits[:limit]}

    @server.tool(annotations=READ)
    @_reported
    async def memory_audit(conversation_id: str) -> dict[str, Any]:
        """Return how the conversation's memory evolved: summary versions, facts (stated, changed, retired), erasure."""
        return await client.audit(conversation_id)

    @server.tool(annotations=READ)
    @_reported
    async def memory_user(user_id: str, as_of: str | None = None) -> dict[str, Any]:
        """Return what memfold knows of a user across conversations: current facts (each with the conversation and
        time it was stated in), the user's summary and conversations; as_of (ISO-8601 time) for the past."""
        return await client.user_memory(user_id, as_of=as_of)

    @server.tool(annotations=READ)
    @_reported
    async def memory_user_audit(user_id: str) -> dict[str, Any]:
        """Return how a user's memory evolved: which conversation taught each fact, when, and what replaced it."""
        return await client.audit_user(user_id)

    @server.tool(annotations=ERASE)
    @_reported
    async def memory_forget_user(user_id: str, reason: str | None = None) -> dict[str, Any]:
        """Erase a user for good (needs an admin key): every conversation of the user and the user's memory."""
        return await client.forget_user(user_id, reason=reason)

    @server.tool(annotations=ERASE)
    @_reported
    async def memory_forget(conversation_id: str, reason: str | None = None) -> dict[str, Any]:
        """Erase a conversation for good (needs an admin key): its messages and memory can no longer be read."""
        await client.forget(conversation_id, reason=reason)
        return {"conversation_id": conversation_id, "forgotten": True}

    return server


def main(argv: list[str] | None = None) -> int:
    """Run the MCP server (``python -m memfold.adapters.mcp``) until the client disconnects or the process is stopped."""
    p = argparse.ArgumentParser(prog="python -m memfold.adapters.mcp", description="MCP server over a memfold service.")
    p.add_argument("--url", default=os.environ.get("MEMFOLD_URL", "http://127.0.0.1:8080"))
    p.add_argument("--api-key", default=os.environ.get("MEMFOLD_API_KEY"))
    p.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    args = p.parse_args(argv)
    server = build_server(AsyncClient(args.url, args.api_key))
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
