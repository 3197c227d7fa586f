"""An OpenAI Agents SDK session stored in memfold (``pip install 'memfold[agents]'``).

:class:`MemfoldSession` implements the SDK's ``Session`` protocol over a
running ``memfold serve``: every item becomes a memfold message (its text for
memory, role and tool fields mapped) with the item itself kept verbatim in the
message metadata, so ``get_items`` returns exactly what ``add_items`` was
given. ``run_compaction`` (the hook the Runner calls after a turn) switches
the session to memfold's memory: from then on ``get_items`` returns the
policy's memory messages followed by the items memfold still keeps verbatim,
instead of the whole history.

memfold's log is append-only: ``pop_item`` appends a ``MessageRetracted``
event for the newest item, which memfold then leaves out of every read
(``get_items``, the context, summaries requested afterwards); a summary
produced before keeps its content. ``clear_session`` erases the
conversation (admin keys).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from agents.memory.session import SessionABC

from memfold.client import AsyncClient, ConflictError, NotFoundError

ITEM_KEY = "agents_item"  # metadata key holding the verbatim item
log = logging.getLogger("memfold.adapters.agents")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict)).strip()
    return ""


def to_message(item: dict[str, Any]) -> dict[str, Any]:
    """Return the memfold message for one Agents SDK input item (the item itself rides in metadata)."""
    kind = item.get("type", "message")
    meta = {ITEM_KEY: item}
    if kind == "function_call":
        call = {"id": item["call_id"], "name": item["name"], "arguments": item.get("arguments") or "{}"}
        return {"role": "assistant", "content": "", "tool_calls": [call], "metadata": meta}
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        return {"role": "tool", "content": text or "(empty)", "tool_call_id": item["call_id"], "metadata": meta}
    role = item.get("role")
    if kind == "message" and role in ("user", "assistant", "system", "developer"):
        text = _text(item.get("content"))
        return {"role": "system" if role == "developer" else role, "content": text or f"[{role} message]", "metadata": meta}
    return {"role": "assistant", "content": f"[{kind}]", "metadata": meta}  # reasoning and other items: kept, not read


class MemfoldSession(SessionABC):
    """An Agents SDK session whose items live in the memfold conversation ``session_id``."""

    def __init__(self, session_id: str, client: AsyncClient, *, budget: int | None = 4000,
                 compaction_wait: float = 10.0, compaction_quiet: float = 0.25, user_id: str | None = None):
        self.session_id = session_id
        # The user the session belongs to: memfold's context then holds what the user's other sessions taught.
        self.user_id = user_id
        self.client = client
        self.budget = budget
        self.compaction_wait = compaction_wait
        self.compaction_quiet = compaction_quiet
        self.compacted = False
        self.pending_summaries = 0  # what the last run_compaction found still on its way
        self.memory_ready = False

    async def _stored(self) -> list[Any]:
        """Return the stored messages that are items of the session (memfold leaves retracted ones out)."""
        try:
            messages = await self.client.messages(self.session_id, limit=10_000)
        except NotFoundError:
            return []
        return [m for m in messages if ITEM_KEY in m.metadata]

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Return the session's items in order (the latest ``limit``); after compaction, memory first."""
        stored = await self._stored()
        items = [m.metadata[ITEM_KEY] for m in stored]
        if self.compacted and stored:
            context = await self.client.context(self.session_id, budget=self.budget)
            memory = [m for m in context.messages if m.kind.startswith("memory")]
            if memory:
                shown = {m.index for m in context.messages if m.index is not None}
                kept = [m.metadata[ITEM_KEY] for m in stored if m.index in shown]
                items = [{"role": "system", "content": m.content} for m in memory] + kept
        return items[-limit:] if limit else items

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        """Append ``items`` in order, all or nothing."""
        if items:
            await self.client.append(self.session_id, [to_message(dict(item)) for item in items], user_id=self.user_id)

    async def pop_item(self) -> dict[str, Any] | None:
        """Retract the newest item (a ``MessageRetracted`` event; the log keeps both) and return it, or None if empty."""
        stored = await self._stored()
        if not stored:
            return None
        last = stored[-1]
        try:
            await self.client.retract(self.session_id, last.event_id, reason="pop_item")
        except ConflictError:
            pass  # already retracted: a retry whose first attempt got through (or a concurrent pop_item)
        return last.metadata[ITEM_KEY]

    async def clear_session(self) -> None:
        """Erase the conversation (needs an admin key); a session that never stored anything is already clear."""
        try:
            await self.client.forget(self.session_id, reason="clear_session")
        except NotFoundError:
            pass
        self.compacted = False

    async def run_compaction(self, args: dict[str, Any] | None = None) -> None:
        """Let memfold's memory stand in for old items: ``get_items`` returns memory + the verbatim tail from now on.

        memfold summarizes as messages arrive, so no model is called here and
        ``args`` (response id, mode) are not needed; but a summary the last
        turn triggered may still be on its way. This waits for pending
        summaries up to ``compaction_wait`` seconds (the session's setting),
        (nothing processing, nothing new for ``compaction_quiet`` seconds),
        then records what it found: ``pending_summaries`` (0 once memory is
        current) and ``memory_ready`` (memory exists to stand in for old
        items). When summaries are still pending it logs a warning saying so:
        ``get_items`` returns the full history until the memory arrives.
        """
        self.compacted = True
        now = time.monotonic()
        deadline, quiet_since, last = now + self.compaction_wait, now, None
        while True:
            try:
                rows = await self.client.summaries(self.session_id)
            except NotFoundError:
                rows = []
            self.pending_summaries = sum(1 for r in rows if r.get("status") == "processing")
            self.memory_ready = any(r.get("status") == "completed" for r in rows)
            # The request a turn triggers is appended just after the turn is projected: done once nothing is
            # processing and nothing new has appeared for ``compaction_quiet`` seconds.
            shape = [(r.get("request_id"), r.get("status")) for r in rows]
            now = time.monotonic()
            if shape != last or self.pending_summaries:
                quiet_since, last = now, shape
            elif now - quiet_since >= self.compaction_quiet:
                break
            if now >= deadline:
                break
            await asyncio.sleep(0.05)
        if self.pending_summaries:
            log.warning("memfold session %r: %d summaries still pending after %.1f s; get_items returns the full "
                        "history until they arrive", self.session_id, self.pending_summaries, self.compaction_wait)
