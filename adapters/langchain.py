"""LangChain adapters (``pip install 'memfold[langchain]'``): a chat message history and an agent middleware.

- :class:`MemfoldChatMessageHistory` is a ``BaseChatMessageHistory`` for
  ``RunnableWithMessageHistory``: messages are appended to a memfold
  conversation; ``messages`` returns either the stored history or, with
  ``context_budget``, memfold's context (memory + recent turns) so a long
  conversation fits the prompt.
- :class:`MemfoldMiddleware` is the LangChain 1.x path (``create_agent(...,
  middleware=[...])``): ``before_model`` stores the thread's new messages and
  replaces what the model sees with memfold's context for that thread.

Both talk to a running ``memfold serve`` through :class:`memfold.client.Client`.
LangChain message ids become memfold message ids, so storing a message
twice (a retried call, a replayed state) keeps one copy.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from memfold.client import Client, NotFoundError

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
CONTEXT_ID_PREFIX = "memfold:"  # ids of messages the middleware put in the state from memfold's context


def to_memfold(message: BaseMessage) -> dict[str, Any]:
    """Return the memfold message for a LangChain message (role, content, tool fields, id when it has one)."""
    role = _ROLES.get(message.type)
    if role is None:
        raise ValueError(f"memfold stores human, ai, system and tool messages, not {message.type!r}")
    out: dict[str, Any] = {"role": role, "content": message.text if hasattr(message, "text") else str(message.content)}
    if message.id:
        out["id"] = message.id
    if isinstance(message, AIMessage) and message.tool_calls:
        out["tool_calls"] = [{"id": tc["id"], "name": tc["name"], "arguments": json.dumps(tc["args"])}
                             for tc in message.tool_calls]
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
    if message.name:
        out["name"] = message.name
    return out


def to_langchain(role: str, content: str, *, tool_calls=None, tool_call_id=None, id: str | None = None) -> BaseMessage:
    """Return the LangChain message for a memfold message or context message."""
    if role == "user":
        return HumanMessage(content, id=id)
    if role == "assistant":
        calls = [{"id": tc["id"], "name": tc["name"], "args": json.loads(tc.get("arguments") or "{}")}
                 for tc in tool_calls or ()]
        return AIMessage(content, tool_calls=calls, id=id)
    if role == "tool":
        return ToolMessage(content, tool_call_id=tool_call_id or "", id=id)
    return SystemMessage(content, id=id)


class MemfoldChatMessageHistory(BaseChatMessageHistory):
    """The history of one memfold conversation, for ``RunnableWithMessageHistory``.

    ``context_budget`` None: ``messages`` is every stored message, in order.
    Set: ``messages`` is memfold's context within that many tokens (memory
    messages first, then the recent turns), what the next model call should see.
    """

    def __init__(self, conversation_id: str, client: Client, *, context_budget: int | None = None,
                 user_id: str | None = None):
        self.conversation_id = conversation_id
        self.user_id = user_id  # the user the conversation belongs to: its memory spans the user's conversations
        self.client = client
        self.context_budget = context_budget

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        try:
            if self.context_budget is None:
                return [to_langchain(m.role, m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, id=m.id)
                        for m in self.client.messages(self.conversation_id, limit=10_000)]
            context = self.client.context(self.conversation_id, budget=self.context_budget)
        except NotFoundError:
            return []  # a conversation starts with its first message
        return [to_langchain(m.role, m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id)
                for m in context.messages]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one batch (all or nothing); wait until reads see them."""
        if messages:
            self.client.append(self.conversation_id, [to_memfold(m) for m in messages], user_id=self.user_id)

    def clear(self) -> None:
        """memfold's log is append-only and this service has no forget route yet: say so, change nothing."""
        raise NotImplementedError(
            "memfold keeps every message in an append-only log; this service cannot forget a conversation yet. "
            "Start a new conversation id instead."
        )


class MemfoldMiddleware(AgentMiddleware):
    """A LangChain 1.x agent middleware: before each model call, store the thread's messages, show memfold's context.

    The thread is ``config["configurable"]["thread_id"]`` (the checkpointer's
    thread), or ``conversation_id`` when given. Messages are appended with
    their LangChain ids, so the whole state can be sent each time and only
    new messages are stored. The state's messages are then replaced by
    memfold's context within ``budget`` tokens; those carry ids starting
    with ``memfold:`` and are never stored back. The thread belongs to the
    user ``user_id``, or ``config["configurable"]["user_id"]`` when given:
    its context then holds what the user's other threads taught.
    """

    def __init__(self, client: Client, *, budget: int | None = 4000, conversation_id: str | None = None,
                 user_id: str | None = None):
        super().__init__()
        self.client = client
        self.budget = budget
        self.conversation_id = conversation_id
        self.user_id = user_id

    def _user(self) -> str | None:
        if self.user_id:
            return self.user_id
        try:
            user = (get_config().get("configurable") or {}).get("user_id")
        except RuntimeError:  # not inside a runnable: no config to read
            return None
        return str(user) if user else None

    def _thread(self) -> str:
        if self.conversation_id:
            return self.conversation_id
        thread = (get_config().get("configurable") or {}).get("thread_id")
        if not thread:
            raise ValueError("MemfoldMiddleware needs a thread: pass conversation_id= or invoke with "
                             "config={'configurable': {'thread_id': ...}}")
        return str(thread)

    def before_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        """Store the state's new messages (idempotent by id) and replace them with memfold's context."""
        thread = self._thread()
        new = [to_memfold(m) for m in state["messages"]
               if m.type in _ROLES and m.id and not m.id.startswith(CONTEXT_ID_PREFIX)]
        if new:
            self.client.append(thread, new, user_id=self._user())
        context = self.client.context(thread, budget=self.budget)
        shown = [to_langchain(m.role, m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id,
                              id=f"{CONTEXT_ID_PREFIX}{uuid.uuid4().hex}")
                 for m in context.messages]
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *shown]}

    def after_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        """Store the model's answer at once (a final answer has no later ``before_model`` to store it)."""
        last = state["messages"][-1] if state["messages"] else None
        if last is not None and last.type == "ai" and last.id and not last.id.startswith(CONTEXT_ID_PREFIX):
            self.client.append(self._thread(), [to_memfold(last)], user_id=self._user())
        return None
