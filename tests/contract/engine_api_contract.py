"""The engine API contract: what a user of memfold does, with one observable result wherever memfold runs.

Subclass :class:`EngineApiContract` in a ``test_*.py`` module and provide a
``memory`` fixture returning a :class:`MemoryApi` adapter over one
implementation (the embedded ``MemoryEngine``, the service's fold process
reached through ``RemoteEngine``, the HTTP ``memfold.client.Client``)::

    class TestEmbeddedEngine(EngineApiContract):
        @pytest.fixture
        def memory(self, engine): ...

The adapters differ only in how a call is spelled (a ``tenant_id`` keyword,
a client bound to its key's tenant, a caller's message id as the engine's
``event_id`` or the client's ``id``); results are brought to one plain
shape (:class:`Stored`, :class:`Piece`) and errors are left as each
implementation raises them, so the suite asserts on memfold's error classes
themselves. Every implementation must run memfold with :data:`SETTINGS`
(hierarchical memory, summaries from the 6th message on), and each test
works in a conversation of its own, so one engine or service serves them all.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from support.waiting import wait_until

from memfold.core.errors import (
    AlreadyRetractedError,
    ConversationForgottenError,
    EventConflictError,
    UnknownConversationError,
    UnknownMessageError,
    UnknownUserError,
    UserConflictError,
    ValidationError,
)

# What every implementation under the contract runs with: the policy the
# summary test reads, and a trigger low enough to pass in a few messages.
SETTINGS: dict[str, Any] = {
    "policy": "hierarchical",
    "policies": ("hierarchical",),
    "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 4},
}

TRIGGER = SETTINGS["hierarchical"]["trigger_message_count"]


@dataclass(frozen=True)
class Stored:
    """A stored message as history gives it back: tool calls in the flat ``(id, name, arguments)`` form."""

    role: str
    content: str
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    event_id: str = ""

    def without_id(self) -> Stored:
        return Stored(self.role, self.content, self.tool_calls, self.tool_call_id, self.name)


@dataclass(frozen=True)
class Piece:
    """One message of a context in the compact form: role, content and kind (``verbatim``, ``memory:...``)."""

    role: str
    content: str
    kind: str


class MemoryApi(abc.ABC):
    """The operations of the contract over one implementation, for one tenant."""

    #: The error an implementation raises for a conversation it never held (the adapter says which).
    unknown_conversation_error: type[BaseException] = UnknownConversationError
    message_id_field = "event_id"  # what names a message in this API's retract (the client's: message_id)

    @abc.abstractmethod
    def append(self, conversation_id: str, message: Mapping[str, Any]) -> None:
        """Append one OpenAI-shaped message (``id``: the caller's message id); return once reads see it."""

    @abc.abstractmethod
    def append_batch(self, conversation_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """Append OpenAI-shaped messages as one batch, all or nothing; return once reads see them."""

    @abc.abstractmethod
    def history(self, conversation_id: str) -> list[Stored]:
        """Return the stored messages, oldest first."""

    @abc.abstractmethod
    def context(self, conversation_id: str, *, budget: int) -> list[Piece]:
        """Return the context for the next model call in the compact form."""

    @abc.abstractmethod
    def prompt(self, conversation_id: str, *, budget: int) -> list[dict[str, Any]]:
        """Return the chat ``messages`` of the next model call (OpenAI's shape)."""

    @abc.abstractmethod
    def summaries(self, conversation_id: str) -> list[Mapping[str, Any]]:
        """Return the summary requests and outcomes, oldest first."""

    @abc.abstractmethod
    def search(self, conversation_id: str, query: str) -> list[int]:
        """Return the indices of the conversation's messages matching ``query``, best first."""

    @abc.abstractmethod
    def retract(self, conversation_id: str, event_id: str) -> None:
        """Retract the message ``event_id``; return once reads leave it out."""

    @abc.abstractmethod
    def forget(self, conversation_id: str) -> None:
        """Erase the conversation."""

    @abc.abstractmethod
    def reopen(self, conversation_id: str) -> None:
        """Start a forgotten conversation again."""

    @abc.abstractmethod
    def append_of_user(self, conversation_id: str, messages: Sequence[Mapping[str, Any]], user_id: str) -> None:
        """Append messages of a conversation of ``user_id`` as one batch; return once reads see them."""

    @abc.abstractmethod
    def user_facts(self, user_id: str) -> dict[str, tuple[str, str]]:
        """Return the user's current facts: key -> (value, conversation it was stated in)."""

    @abc.abstractmethod
    def search_user(self, user_id: str, query: str) -> list[tuple[str, int]]:
        """Return (conversation, index) of the user's messages matching ``query``, best first."""

    @abc.abstractmethod
    def forget_user(self, user_id: str) -> list[str]:
        """Erase the user; return the conversations forgotten."""


def flat_tool_calls(calls: Sequence[Any]) -> tuple[tuple[str, str, str], ...]:
    """Return tool calls (ToolCall objects, flat or OpenAI-shaped dicts) as ``(id, name, arguments)`` tuples."""
    out = []
    for call in calls or ():
        if not isinstance(call, Mapping):
            call = {"id": call.id, "name": call.name, "arguments": call.arguments}
        function = call.get("function") or call
        out.append((call["id"], function["name"], function["arguments"]))
    return tuple(out)


WEATHER_CALL = {"id": "call_w1", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": "Porto"})}}
TOOL_TURNS = [
    {"role": "user", "content": "What is the weather in Porto?"},
    {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
    {"role": "tool", "tool_call_id": "call_w1", "content": json.dumps({"temp_c": 19, "sky": "clear"})},
    {"role": "assistant", "content": "It is 19 degrees and clear in Porto."},
]


def filler(n: int, start: int = 0) -> list[dict[str, str]]:
    """Return ``n`` alternating user/assistant turns, each naming its number."""
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Turn {i}: we talked about topic {i}."}
            for i in range(start, start + n)]


class EngineApiContract:
    """The operations a user of memfold performs; a subclass provides ``memory`` (a :class:`MemoryApi`)."""

    @pytest.fixture
    def conversation(self, request) -> str:
        """A conversation id of this test alone: the engine or service is shared by the whole class."""
        name = request.node.name.removeprefix("test_")
        return name.replace("_", "-").replace("[", "-").removesuffix("]")

    # ----------------------------------------------------------------- appending and reading back

    def test_one_message_is_read_back_as_appended(self, memory: MemoryApi, conversation: str) -> None:
        memory.append(conversation, {"role": "user", "content": "My order number is A-7713.", "name": "eve"})
        (stored,) = memory.history(conversation)
        assert stored.without_id() == Stored("user", "My order number is A-7713.", name="eve")
        assert stored.event_id

    def test_a_batch_with_tool_calls_is_read_back_in_order_with_its_tool_fields(
        self, memory: MemoryApi, conversation: str
    ) -> None:
        memory.append(conversation, {"role": "system", "content": "You are a weather assistant."})
        memory.append_batch(conversation, TOOL_TURNS)
        assert [m.without_id() for m in memory.history(conversation)] == [
            Stored("system", "You are a weather assistant."),
            Stored("user", "What is the weather in Porto?"),
            Stored("assistant", "", tool_calls=(("call_w1", "get_weather", '{"city": "Porto"}'),)),
            Stored("tool", '{"temp_c": 19, "sky": "clear"}', tool_call_id="call_w1"),
            Stored("assistant", "It is 19 degrees and clear in Porto."),
        ]

    def test_appending_the_same_caller_id_again_stores_the_message_once(
        self, memory: MemoryApi, conversation: str
    ) -> None:
        first = {"id": "msg-1", "role": "user", "content": "Ship it to Porto."}
        memory.append(conversation, first)
        memory.append(conversation, first)  # a retry of an append that landed
        memory.append_batch(conversation, [first, {"id": "msg-2", "role": "assistant", "content": "Will do."}])
        assert [(m.role, m.content) for m in memory.history(conversation)] == [
            ("user", "Ship it to Porto."), ("assistant", "Will do.")]

    def test_a_caller_id_is_kept_per_conversation(self, memory: MemoryApi, conversation: str) -> None:
        memory.append(conversation, {"id": "turn-1", "role": "user", "content": "Hello from the first."})
        memory.append(f"{conversation}-2", {"id": "turn-1", "role": "user", "content": "Hello from the second."})
        assert [m.content for m in memory.history(conversation)] == ["Hello from the first."]
        assert [m.content for m in memory.history(f"{conversation}-2")] == ["Hello from the second."]

    def test_the_same_caller_id_with_other_content_is_an_event_conflict_and_stores_nothing(
        self, memory: MemoryApi, conversation: str
    ) -> None:
        memory.append(conversation, {"id": "msg-1", "role": "user", "content": "Ship it to Porto."})
        with pytest.raises(EventConflictError) as caught:
            memory.append_batch(conversation, [{"id": "msg-2", "role": "user", "content": "Also Faro."},
                                               {"id": "msg-1", "role": "user", "content": "Ship it to Lisbon."}])
        assert caught.value.field == "event_id"
        assert [m.content for m in memory.history(conversation)] == ["Ship it to Porto."]

    # ----------------------------------------------------------------- context

    def test_context_within_a_budget_keeps_the_newest_turns(self, memory: MemoryApi, conversation: str) -> None:
        turns = filler(5)  # 15 tokens each; the last one the user's, waiting for an answer
        memory.append_batch(conversation, turns)
        expected = [Piece(t["role"], t["content"], "verbatim") for t in turns[:-1]]
        expected.append(Piece("user", turns[-1]["content"], "current"))
        assert memory.context(conversation, budget=4000) == expected
        assert memory.context(conversation, budget=40) == expected[-2:]

    def test_the_prompt_is_openai_chat_messages(self, memory: MemoryApi, conversation: str) -> None:
        memory.append_batch(conversation, TOOL_TURNS)
        assert memory.prompt(conversation, budget=4000) == [
            {"role": "user", "content": "What is the weather in Porto?"},
            {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
            {"role": "tool", "tool_call_id": "call_w1", "content": '{"temp_c": 19, "sky": "clear"}'},
            {"role": "assistant", "content": "It is 19 degrees and clear in Porto."},
        ]

    def test_a_conversation_past_the_trigger_gets_a_summary_in_its_context(
        self, memory: MemoryApi, conversation: str
    ) -> None:
        memory.append_batch(conversation, filler(TRIGGER + 2))
        done = wait_until(lambda: [s for s in memory.summaries(conversation) if s["status"] == "completed"],
                          timeout=60, interval=0.05, message="a completed summary")
        assert all(s["policy"] == "hierarchical" for s in done)
        pieces = wait_until(lambda: [p for p in memory.context(conversation, budget=4000)
                                     if p.kind.startswith("memory:")], timeout=30, interval=0.05,
                            message="the summary in the context")
        assert all(p.content.strip() for p in pieces)
        assert memory.context(conversation, budget=4000)[-1] == Piece(
            "assistant", filler(TRIGGER + 2)[-1]["content"], "verbatim")

    # ----------------------------------------------------------------- search and retraction

    def test_search_finds_a_planted_term(self, memory: MemoryApi, conversation: str) -> None:
        turns = filler(4)
        turns.insert(2, {"role": "user", "content": "The locker code is zanzibar-4411."})
        memory.append_batch(conversation, turns)
        assert memory.search(conversation, "zanzibar-4411")[:1] == [2]
        assert memory.search(conversation, "quetzalcoatl") == []

    def test_a_retracted_message_leaves_history(self, memory: MemoryApi, conversation: str) -> None:
        memory.append_batch(conversation, filler(3))
        kept = memory.history(conversation)
        memory.retract(conversation, kept[1].event_id)
        assert memory.history(conversation) == [kept[0], kept[2]]
        assert filler(3)[1]["content"] not in [p.content for p in memory.context(conversation, budget=4000)]

    def test_retracting_a_message_the_conversation_does_not_hold_is_an_unknown_message_error(
        self, memory: MemoryApi, conversation: str
    ) -> None:
        memory.append_batch(conversation, filler(2))
        with pytest.raises(UnknownMessageError) as caught:
            memory.retract(conversation, "no-such-message")
        assert caught.value.field == memory.message_id_field
        assert len(memory.history(conversation)) == 2

    def test_retracting_a_message_twice_is_an_already_retracted_error(self, memory: MemoryApi, conversation: str) -> None:
        memory.append_batch(conversation, filler(2))
        first = memory.history(conversation)[0]
        memory.retract(conversation, first.event_id)
        with pytest.raises(AlreadyRetractedError):
            memory.retract(conversation, first.event_id)

    # ----------------------------------------------------------------- forgetting

    def test_forget_refuses_appends_until_reopened(self, memory: MemoryApi, conversation: str) -> None:
        memory.append_batch(conversation, filler(2))
        memory.forget(conversation)
        with pytest.raises(ConversationForgottenError):
            memory.append(conversation, {"role": "user", "content": "Anyone there?"})
        memory.reopen(conversation)
        memory.append(conversation, {"role": "user", "content": "Starting over."})
        assert [m.content for m in memory.history(conversation)] == ["Starting over."]

    def test_a_forgotten_conversation_reads_as_an_unknown_conversation(self, memory: MemoryApi, conversation: str) -> None:
        memory.append_batch(conversation, filler(2))
        memory.forget(conversation)
        _reads_as_unknown(memory, conversation)

    def test_a_conversation_never_written_reads_as_an_unknown_conversation(
        self, memory: MemoryApi, conversation: str
    ) -> None:
        # A misspelt id is an error, not an empty memory; the HTTP client's class is the engine's.
        _reads_as_unknown(memory, conversation)

    def test_forgetting_an_unknown_conversation_is_an_unknown_conversation_error(
        self, memory: MemoryApi, conversation: str
    ) -> None:
        with pytest.raises(memory.unknown_conversation_error):
            memory.forget(conversation)
        memory.append(conversation, {"role": "user", "content": "Now it exists."})  # nothing was recorded as forgotten
        assert [m.content for m in memory.history(conversation)] == ["Now it exists."]

    def test_forgetting_an_unknown_conversation_raises_the_engines_class(
        self, memory: MemoryApi, conversation: str
    ) -> None:
        # Code written against the embedded engine catches UnknownConversationError: so must it remotely.
        with pytest.raises(UnknownConversationError) as caught:
            memory.forget(conversation)
        assert caught.value.field == "conversation_id"

    # ----------------------------------------------------------------- users

    def test_what_one_conversation_of_a_user_said_the_next_one_knows(self, memory: MemoryApi, conversation: str) -> None:
        user = f"u-{conversation}"
        memory.append_of_user(f"{conversation}-a", [{"role": "user", "content": "My order number is #4471."},
                                                    *filler(TRIGGER, start=1)], user)
        facts = wait_until(lambda: memory.user_facts(user).get("order_id"), timeout=60, message="the user's fact")
        assert facts == ("#4471", f"{conversation}-a")
        memory.append_of_user(f"{conversation}-b", [{"role": "user", "content": "What was my order number?"}], user)
        pieces = memory.context(f"{conversation}-b", budget=1000)
        mine = [p.content for p in pieces if p.kind in ("memory:user", "user_recalled")]
        assert mine and "#4471" in mine[0]
        assert memory.search_user(user, "order number")[0] == (f"{conversation}-a", 0)

    def test_a_conversation_belongs_to_one_user(self, memory: MemoryApi, conversation: str) -> None:
        memory.append_of_user(conversation, [{"role": "user", "content": "I am Ada."}], f"ada-{conversation}")
        with pytest.raises(UserConflictError):
            memory.append_of_user(conversation, [{"role": "user", "content": "I am Bo."}], f"bo-{conversation}")
        assert [m.content for m in memory.history(conversation)] == ["I am Ada."]

    def test_forget_user_erases_every_conversation_of_the_user(self, memory: MemoryApi, conversation: str) -> None:
        user = f"u-{conversation}"
        for part in ("a", "b"):
            memory.append_of_user(f"{conversation}-{part}", filler(2), user)
        assert sorted(memory.forget_user(user)) == [f"{conversation}-a", f"{conversation}-b"]
        with pytest.raises(UnknownUserError):
            memory.user_facts(user)

    def test_an_unknown_user_is_an_unknown_user_error(self, memory: MemoryApi, conversation: str) -> None:
        with pytest.raises(UnknownUserError):
            memory.user_facts(f"nobody-{conversation}")

    # ----------------------------------------------------------------- wrong input

    @pytest.mark.parametrize("message, field", [
        ({"role": "robot", "content": "beep"}, "role"),
        ({"role": "user", "content": ""}, "content"),
        ({"role": "user", "content": "   "}, "content"),
    ], ids=["unknown-role", "empty-content", "blank-content"])
    def test_wrong_input_is_a_validation_error_and_nothing_is_stored(
        self, memory: MemoryApi, conversation: str, message: dict, field: str
    ) -> None:
        memory.append(conversation, {"role": "user", "content": "Before."})
        with pytest.raises(ValidationError) as one:
            memory.append(conversation, message)
        assert one.value.field == field
        with pytest.raises(ValidationError) as batch:
            memory.append_batch(conversation, [{"role": "user", "content": "fine"}, message])
        assert batch.value.field == field
        assert [m.content for m in memory.history(conversation)] == ["Before."]


def _reads_as_unknown(memory: MemoryApi, conversation: str) -> None:
    """Every read of the conversation (history, context, summaries) raises :class:`UnknownConversationError`."""
    for read in (memory.history, lambda c: memory.context(c, budget=500), memory.summaries):
        with pytest.raises(UnknownConversationError):
            read(conversation)
