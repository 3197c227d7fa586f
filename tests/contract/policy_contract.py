"""The Policy contract: the fold laws every memory policy (rolling, hierarchical, chunked, sliding_window, topics) obeys.

One suite, parametrized over :data:`CASES` in ``test_policies.py``: each case
names a policy, the small settings under which a short conversation already
summarizes, and the invariants of its own shape (where its cuts may fall).
The laws:

- the same log folds to the same state and the same derived events (replay
  identity), and folding never changes the state it was given (purity);
- fold ``a`` then ``b`` from the state ``a`` left, written and read back by
  the state codec, equals fold ``a + b``; the codec round-trips any state;
- replaying the log (messages and the derived events interleaved) gives the
  live state and decides nothing that is not already on the log;
- a re-delivered event (message, request, summary, failure) is a no-op;
- requests carry the policy and its settings hash, ids are unique, and every
  summary answers a request on the log with that request's range;
- when every summary fails (or comes back empty) nothing is hidden: every
  message stays in the plan, and no request is asked twice;
- events recorded under other settings change nothing; a deletion empties
  the state, and a message after it decides nothing.

The seeds' worked examples stay in each policy's unit tests
(``tests/unit/test_policy_*.py``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from support.policy_kit import fold_context, record, requests_of, scripted_reply

from memfold.core.errors import ConfigError
from memfold.core.events import (
    ClockTicked,
    ClockTickedPayload,
    ConversationDeleted,
    Event,
    Fact,
    SummaryFailed,
    SummaryProduced,
    SummaryRequested,
    ToolCall,
)
from memfold.core.ids import content_hash
from memfold.core.ports import FoldContext, MessageRecord, Policy
from memfold.core.settings import HierarchicalSettings, RollingSettings
from memfold.projections import fold
from memfold.projections.policies import state_codec

T0 = datetime(2025, 3, 1, tzinfo=UTC)
DAY = 86400.0
DIM = 16


# --------------------------------------------------------------------------- the cases


Invariants = Callable[[Sequence[MessageRecord | Event], Any, Sequence[Event], FoldContext], None]


def _no_invariants(items: Sequence[MessageRecord | Event], state: Any, derived: Sequence[Event], ctx: FoldContext) -> None:
    return None


@dataclass(frozen=True)
class PolicyCase:
    """One policy under the contract.

    ``contexts`` are settings small enough that a conversation of a few dozen
    messages summarizes (the suite draws one); ``invariants(items, state,
    derived, ctx)`` asserts what the policy's own shape promises (where its
    cuts may fall) after any conversation; ``in_view(state, request)`` says
    whether the messages ``request`` asked to summarize belong in the plan's
    verbatim part when it fails (topics: only the active topic's do).
    """

    name: str
    policy: Policy
    contexts: tuple[FoldContext, ...]
    invariants: Invariants = field(default=_no_invariants)
    in_view: Callable[[Any, SummaryRequested], bool] = field(default=lambda state, request: True)

    def __str__(self) -> str:
        return self.name


def bag_of_words(text: str) -> tuple[float, ...]:
    """A small deterministic embedder (for topics): words hashed into DIM buckets, unit length."""
    v = [0.0] * DIM
    for word in text.lower().split():
        v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return tuple(x / n for x in v)


def context(policy: str, settings: Any, **fields: Any) -> FoldContext:
    """The FoldContext of ``policy`` under ``settings``, with the bag-of-words embedder (topics uses it)."""
    return fold_context(policy, settings, embed=bag_of_words, **fields)


# --------------------------------------------------------------------------- conversations


def _basis(k: int) -> tuple[float, ...]:
    return tuple(1.0 if i == k else 0.0 for i in range(DIM))


SAYINGS = (
    "where is my parcel",
    "the invoice total looks wrong",
    "please forget my phone number",  # topics keeps what a user takes back
    "can we move the meeting",
    "tell me about the hotel " + "word " * 200,  # a long message: token thresholds
)


@st.composite
def conversations(draw: st.DrawFn) -> list[MessageRecord | Event]:
    """Rounds of user → [assistant tool call → results]* → assistant, on a few topics, with gaps, ticks and system notes."""
    items: list[MessageRecord | Event] = []
    t = 0.0
    calls = 0

    def message(role: str, content: str, **kw: Any) -> MessageRecord:
        n = sum(isinstance(i, MessageRecord) for i in items)
        return record(n, role, content, at=T0 + timedelta(seconds=t), event_id=f"m-c1-{n}", **kw)

    for r in range(draw(st.integers(0, 24))):
        t += draw(st.sampled_from([1.0, 600.0, DAY, 3 * DAY]))
        kind = draw(st.sampled_from(["round", "round", "round", "tools", "tick", "system"]))
        if kind == "tick":
            now = T0 + timedelta(seconds=t)
            items.append(ClockTicked(event_id=f"tick-{t}", tenant_id="t1", conversation_id="c1", occurred_at=now,
                                     payload=ClockTickedPayload(now=now)))
            continue
        if kind == "system":
            items.append(message("system", f"note {r}"))
            continue
        topic = draw(st.integers(0, 4))
        items.append(message("user", f"{SAYINGS[draw(st.integers(0, len(SAYINGS) - 1))]} {r}", embedding=_basis(topic),
                             importance=draw(st.sampled_from([None, 0.1, 1.0]))))
        if kind == "tools":
            ids = [f"k{calls + j}" for j in range(draw(st.integers(1, 2)))]
            calls += len(ids)
            items.append(message("assistant", "", tool_calls=tuple(ToolCall(id=c, name="lookup") for c in ids)))
            items.extend(message("tool", f"result {c}", tool_call_id=c) for c in ids)
        items.append(message("assistant", f"answer {r} " + "word " * draw(st.integers(0, 30))))
    return items


def messages_of(items: Sequence[MessageRecord | Event]) -> list[MessageRecord]:
    return [i for i in items if isinstance(i, MessageRecord)]


# --------------------------------------------------------------------------- scripted summarizer


FACTS = (Fact(key="phone", value="+1 555 0100", category="ENTITY"), Fact(key="order_id", value="#4417", category="ENTITY"))
STEPS = ("ok", "ok", "fail", "empty", None)


def answer_with(step: str | None, request: SummaryRequested) -> Event | None:
    """The summarizer's answer to ``request`` for one step: "ok", "fail", "empty" or None (left pending)."""
    p = request.payload
    return scripted_reply(request, step, text=f"summary of {p.covers_from}-{p.covers_to}", empty_text="  ",
                          fail_reason="scripted failure", error_type="SummarizerError", latency_ms=1,
                          **({} if step == "empty" else {"facts": FACTS}))


def by_hash(request: SummaryRequested, state: Any = None) -> Event | None:
    """Answer by the request id alone (so replays and resumptions see the same answers)."""
    return answer_with(STEPS[int(request.payload.request_id[-2:], 16) % len(STEPS)], request)


def always(step: str) -> Callable[[SummaryRequested, Any], Event | None]:
    return lambda request, state=None: answer_with(step, request)


def live(case: PolicyCase, ctx: FoldContext, items: Sequence[MessageRecord | Event],
         answer: Callable[[SummaryRequested, Any], Event | None] = by_hash) -> tuple[Any, list[MessageRecord | Event]]:
    """Fold ``items`` as the projector and worker do, one at a time; return the state and the log (items + derived)."""
    state = case.policy.initial("t1", "c1")
    log: list[MessageRecord | Event] = []
    for item in items:
        state, derived = fold.run_sync(case.policy, ctx, [item], answer, state=state)
        log.append(item)
        log.extend(derived)
    return state, log


def derived_of(log: Sequence[MessageRecord | Event]) -> list[Event]:
    return [e for e in log if isinstance(e, Event) and not isinstance(e, ClockTicked)]


# --------------------------------------------------------------------------- the suite


class PolicyContract:
    """The fold laws; ``test_policies.py`` parametrizes ``case`` over every policy."""

    @hsettings(max_examples=40, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_the_same_log_folds_to_the_same_state_and_events(self, case: PolicyCase, items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        state, derived = fold.run_sync(case.policy, ctx, items, by_hash, state=case.policy.initial("t1", "c1"))
        again, derived_again = fold.run_sync(case.policy, ctx, items, by_hash, state=case.policy.initial("t1", "c1"))
        assert again == state and derived_again == derived
        assert state_codec.encode(again) == state_codec.encode(state)
        case.invariants(items, state, derived, ctx)

    @hsettings(max_examples=40, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_folding_never_changes_the_state_it_is_given(self, case: PolicyCase, items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        state = case.policy.initial("t1", "c1")
        for item in items:
            before = state_codec.encode(state)
            after, requests = fold.step(case.policy, state, item, ctx)
            assert state_codec.encode(state) == before
            for request in requests:
                reply = by_hash(request) if isinstance(request, SummaryRequested) else None
                if reply is not None:
                    after, _ = fold.step(case.policy, after, reply, ctx)
            state = after

    @hsettings(max_examples=50, deadline=None)
    @given(items=conversations(), split=st.integers(0, 200), dup=st.booleans(), pick=st.integers(0, 7))
    def test_fold_a_then_b_from_the_decoded_state_equals_fold_a_plus_b(self, case: PolicyCase, items, split, dup, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        if dup:
            items = items + items[-3:]  # re-delivered at the end
        split = split % (len(items) + 1)
        whole, derived_whole = fold.run_sync(case.policy, ctx, items, by_hash, state=case.policy.initial("t1", "c1"))
        a, derived_a = fold.run_sync(case.policy, ctx, items[:split], by_hash, state=case.policy.initial("t1", "c1"))
        resumed = state_codec.decode(case.policy.State, state_codec.encode(a))
        assert resumed == a
        b, derived_b = fold.run_sync(case.policy, ctx, items[split:], by_hash, state=resumed)
        assert b == whole
        assert [e.event_id for e in derived_a + derived_b] == [e.event_id for e in derived_whole]

    @hsettings(max_examples=40, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_replaying_the_log_equals_live_and_decides_nothing_new(self, case: PolicyCase, items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        state, log = live(case, ctx, items)
        replayed = case.policy.initial("t1", "c1")
        decided: list[Event] = []
        for item in log:
            replayed, more = fold.step(case.policy, replayed, item, ctx)
            decided.extend(more)
        assert replayed == state
        assert state_codec.encode(replayed) == state_codec.encode(state)
        logged = [e.event_id for e in derived_of(log)]
        assert {e.event_id for e in decided} <= set(logged)
        assert [e.event_id for e in requests_of(decided)] == [e.event_id for e in requests_of(log)]

    @hsettings(max_examples=40, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_a_redelivered_event_is_a_no_op(self, case: PolicyCase, items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        state, log = live(case, ctx, items)
        for item in log:
            if isinstance(item, ClockTicked):
                continue  # a tick is a time, not a fact: a second delivery of an old time changes nothing either way
            after, more = fold.step(case.policy, state, item, ctx)
            assert more == [], f"re-delivered {type(item).__name__} decided {more}"
            assert after == state, f"re-delivered {type(item).__name__} changed the state"

    @hsettings(max_examples=30, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_the_state_codec_round_trips_any_state(self, case: PolicyCase, items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        state, _ = live(case, ctx, items)
        text = state_codec.encode(state)
        back = state_codec.decode(case.policy.State, text)
        assert back == state and state_codec.encode(back) == text
        assert type(back) is case.policy.State and case.policy.name == case.name

    @hsettings(max_examples=40, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_requests_name_their_policy_and_every_summary_answers_one(self, case: PolicyCase, items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        _, log = live(case, ctx, items)
        requests = {r.payload.request_id: r for r in requests_of(log)}
        assert len(requests) == len(requests_of(log)), "a request was decided twice"
        for r in requests.values():
            assert (r.payload.policy, r.payload.settings_hash) == (case.name, ctx.settings_hash)
            assert r.event_id == r.payload.request_id and r.payload.covers_from <= r.payload.covers_to
        for e in log:
            if isinstance(e, (SummaryProduced, SummaryFailed)):
                request = requests[e.payload.request_id]
                assert e.causation_id == request.event_id
            if isinstance(e, SummaryProduced):
                assert (e.payload.covers_from, e.payload.covers_to) == (request.payload.covers_from,
                                                                        request.payload.covers_to)
                assert e.payload.summary_id == fold.summary_id_for(request.payload.request_id)

    @pytest.mark.parametrize("outcome", ["fail", "empty"])
    @hsettings(max_examples=30, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_when_every_summary_fails_nothing_asked_for_is_hidden_or_asked_twice(self, case: PolicyCase, outcome,
                                                                                 items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        state, log = live(case, ctx, items, always(outcome))
        requests = requests_of(log)
        assert len({r.payload.request_id for r in requests}) == len(requests)
        plan = case.policy.plan(state, ctx)
        n = len(messages_of(items))
        shown = set(plan.verbatim_indices) if plan.verbatim_indices is not None else set(range(plan.verbatim_from, n))
        for r in requests:
            if not case.in_view(state, r):
                continue
            p = r.payload
            asked = set(p.input_indices) if p.input_indices is not None else set(range(p.covers_from, p.covers_to + 1))
            assert asked <= shown, f"messages {sorted(asked - shown)} are hidden after their summary's {outcome}"
        assert not any("summary of" in m.content for m in plan.memory)

    @hsettings(max_examples=25, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_events_recorded_under_other_settings_change_nothing(self, case: PolicyCase, items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        msgs = messages_of(items)
        if len(msgs) < 2:
            return
        state, _ = live(case, ctx, items)
        other = FoldContext(policy=ctx.policy, settings=ctx.settings, settings_hash=content_hash("other settings"),
                            count_tokens=ctx.count_tokens, embed=ctx.embed)
        foreign = fold.make_request(other, msgs[-1], covers=(0, 1), inputs=(0, 1), input_indices=(0, 1),
                                    topic_id=getattr(state, "active_topic_id", None))
        for event in (foreign, answer_with("ok", foreign), answer_with("fail", foreign)):
            after, more = fold.step(case.policy, state, event, ctx)
            assert after == state and more == []

    @hsettings(max_examples=25, deadline=None)
    @given(items=conversations(), pick=st.integers(0, 7))
    def test_a_deletion_empties_the_state_and_a_later_message_decides_nothing(self, case: PolicyCase, items, pick):
        ctx = case.contexts[pick % len(case.contexts)]
        state, _ = live(case, ctx, items)
        deleted = ConversationDeleted(event_id="del", tenant_id="t1", conversation_id="c1", occurred_at=T0)
        state, more = fold.step(case.policy, state, deleted, ctx)
        assert more == []
        plan = case.policy.plan(state, ctx)
        assert plan.memory == () and plan.fallback == "deleted"
        assert plan.verbatim_indices == () or (plan.verbatim_indices is None and plan.verbatim_from >= len(messages_of(items)))
        n = len(messages_of(items))
        later = record(n, "user", "are you still there", at=T0 + timedelta(days=30), event_id=f"m-c1-{n}",
                       embedding=_basis(0))
        assert fold.step(case.policy, state, later, ctx)[1] == []

    def test_settings_of_another_policy_are_a_config_error(self, case: PolicyCase):
        own = case.contexts[0]
        wrong = HierarchicalSettings() if isinstance(own.settings, RollingSettings) else RollingSettings()
        ctx = FoldContext(policy=case.name, settings=wrong, settings_hash="x", count_tokens=own.count_tokens,
                          embed=bag_of_words)
        m = record(0, "user", "hello", at=T0, event_id="m-c1-0", embedding=_basis(0))
        with pytest.raises(ConfigError):
            case.policy.decide(case.policy.evolve(case.policy.initial("t1", "c1"), m, ctx), ctx, m)
