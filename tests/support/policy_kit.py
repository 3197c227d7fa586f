"""Helpers shared by the policy unit tests (tests/unit/test_policy_*.py).

Message builders, FoldContext builders, scripted summarizer answers and a projector-like
driver. Each test file keeps its own data (T0, texts, settings, policy) and passes it in.
Import as ``from support.policy_kit import ...`` (``tests/`` is on sys.path under pytest).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from memfold.core.events import Event, SummaryRequested, ToolCall
from memfold.core.ids import content_hash
from memfold.core.ports import FoldContext, MessageRecord
from memfold.core.tokens import counter
from memfold.projections import fold

COUNT = counter()


# --------------------------------------------------------------------------- messages


def record(
    index: int,
    role: str,
    content: str,
    *,
    at: datetime,
    conversation_id: str = "c1",
    tenant_id: str = "t1",
    event_id: str | None = None,
    **fields: Any,
) -> MessageRecord:
    """A message at ``index`` (seq ``index + 1``, event id ``m{index}`` unless given) costing its real token count."""
    return MessageRecord(
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        index=index,
        seq=index + 1,
        event_id=event_id if event_id is not None else f"m{index}",
        role=role,
        content=content,
        tokens=COUNT.count_message(content),
        occurred_at=at,
        **fields,
    )


class Messages:
    """``msg(i, role=None, content=None, **fields)``: a message at index ``i``, ``i`` seconds after ``t0``.

    Roles alternate user/assistant from index 0; ``default_content(i, role)`` is the content when none is
    given; ``msg.chat(n, start)`` is ``n`` such messages from index ``start``.
    """

    def __init__(self, t0: datetime, default_content: Callable[[int, str], str]):
        self.t0 = t0
        self.default_content = default_content

    def __call__(self, i: int, role: str | None = None, content: str | None = None, **fields: Any) -> MessageRecord:
        role = role or ("user" if i % 2 == 0 else "assistant")
        content = content if content is not None else self.default_content(i, role)
        return record(i, role, content, at=self.t0 + timedelta(seconds=i), **fields)

    def chat(self, n: int, start: int = 0) -> list[MessageRecord]:
        return [self(i) for i in range(start, start + n)]


def call_and_result(msg: Callable[..., MessageRecord], i: int) -> list[MessageRecord]:
    """An assistant tool call at ``i`` (call id ``t{i}``) and its result at ``i + 1``."""
    return [
        msg(i, "assistant", "", tool_calls=(ToolCall(id=f"t{i}", name="f"),)),
        msg(i + 1, "tool", f"result {i}", tool_call_id=f"t{i}"),
    ]


def requests_of(derived) -> list[SummaryRequested]:
    return [e for e in derived if isinstance(e, SummaryRequested)]


# --------------------------------------------------------------------------- fold contexts


def fold_context(policy: str, settings: BaseModel, **fields: Any) -> FoldContext:
    """The FoldContext of ``policy`` under ``settings`` (hash as the engine computes it, real token counts)."""
    return FoldContext(
        policy=policy,
        settings=settings,
        settings_hash=content_hash(policy, settings.model_dump(mode="json"), length=16),
        count_tokens=COUNT.count,
        **fields,
    )


def context_builder(policy: str, settings_cls: type[BaseModel]) -> Callable[..., FoldContext]:
    """``ctx_for(**overrides)``: the FoldContext of ``policy`` under ``settings_cls(**overrides)``."""

    def ctx_for(**overrides: Any) -> FoldContext:
        return fold_context(policy, settings_cls(**overrides))

    return ctx_for


# --------------------------------------------------------------------------- scripted summarizer


def scripted_reply(
    request: SummaryRequested,
    how: str | None,
    *,
    text: str,
    empty_text: str = "",
    fail_reason: str = "model timed out",
    error_type: str = "SummarizerTimeoutError",
    **fields: Any,
):
    """The summarizer's answer to ``request`` for one script step.

    ``how``: None (still pending: no answer), "fail", "empty" (``empty_text``) or anything else (``text``);
    ``fields`` go to the produced summary only.
    """
    if how is None:
        return None
    if how == "fail":
        return fold.failed(request, reason=fail_reason, error_type=error_type)
    return fold.produced(
        request,
        text=empty_text if how == "empty" else text,
        summarizer="scripted",
        model="scripted",
        prompt_hash="x",
        **fields,
    )


class ScriptedSummarizer:
    """A fake summarizer worker: answers requests in order from a script ("ok", "empty", "fail", None = pending).

    ``answer(request, how)`` turns a script step into the answer; ``default`` is the step once the script is used up.
    """

    def __init__(self, answer: Callable[[SummaryRequested, str | None], Any], *script: str | None,
                 default: str | None = "ok"):
        self.answer = answer
        self.script = list(script)
        self.default = default
        self.requests: list[SummaryRequested] = []

    def __call__(self, request: SummaryRequested, state):
        self.requests.append(request)
        return self.answer(request, self.script.pop(0) if self.script else self.default)


HASH_SCRIPT = ("ok", "ok", "fail", "empty", None)


def answer_by_hash(answer: Callable[[SummaryRequested, str | None], Any]):
    """A worker answering ``answer(request, step)``, the step of HASH_SCRIPT picked by the request id alone.

    Replays and resumptions see the same answers.
    """

    def by_hash(request: SummaryRequested, state):
        return answer(request, HASH_SCRIPT[int(request.payload.request_id[-2:], 16) % len(HASH_SCRIPT)])

    return by_hash


def id_step(request: SummaryRequested, buckets: int) -> tuple[int, str | None]:
    """``(k, step)``: bucket ``k`` of ``request`` by its id alone and its script step.

    Bucket 0 is "fail", 1 pending (None), 2 "empty", the rest "ok".
    """
    k = int(request.payload.request_id[-4:], 16) % buckets
    return k, ("fail", None, "empty", "ok")[min(k, 3)]


def fold_runner(policy, ctx_for: Callable[[], FoldContext], worker_factory: Callable[[], Any]):
    """``run(items, ctx=None, worker=None, state=None) -> (state, derived)``: ``items`` folded by ``policy``.

    ``ctx`` defaults to ``ctx_for()``, ``worker`` to a fresh ``worker_factory()``.
    """

    def run(items, ctx=None, worker=None, state=None):
        return fold.run_sync(policy, ctx or ctx_for(), items, worker or worker_factory(), state=state)

    return run


# --------------------------------------------------------------------------- projector-like driver


class FoldDriver:
    """Folds items one at a time like the projector, recording the log and the derived events; answers on demand.

    Subclasses set ``policy`` and how the scripted summarizer answers: ``latency_ms`` (produced),
    ``fail_reason`` and ``error_type`` (failed).
    """

    policy: Any
    latency_ms: int
    fail_reason: str
    error_type: str
    tenant_id = "t1"

    def __init__(self, ctx: FoldContext, conv: str = "c1"):
        self.ctx = ctx
        self.state = self.policy.initial(self.tenant_id, conv)
        self.log: list = []
        self.derived: list[Event] = []

    def feed(self, item) -> list[Event]:
        self.log.append(item)
        self.state, out = fold.step(self.policy, self.state, item, self.ctx)
        self.log.extend(out)
        self.derived.extend(out)
        return out

    def produce(self, request: SummaryRequested, text: str = "S", latency_ms: int | None = None):
        latency_ms = self.latency_ms if latency_ms is None else latency_ms
        return self.feed(scripted_reply(request, "ok", text=text, latency_ms=latency_ms))

    def fail(self, request: SummaryRequested, reason: str | None = None):
        reason = self.fail_reason if reason is None else reason
        return self.feed(scripted_reply(request, "fail", text="", fail_reason=reason, error_type=self.error_type))

    def plan(self):
        return self.policy.plan(self.state, self.ctx)
