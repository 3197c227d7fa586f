"""The Summarizer contract: what every summarizer (offline, OpenAI-compatible) promises through the port.

Subclass :class:`DeterministicSummarizerContract` (a pure summarizer) or
:class:`FallibleSummarizerContract` (one behind a network) in a ``test_*.py``
module and provide a ``subject`` fixture returning a :class:`Subject`; a
fallible one also a ``failure`` fixture: each :class:`Failure` scripts the
next call to fail and names the error the port says it raises.

The promises (``memfold.core.ports.Summarizer``, ``streams.worker.answer``):

- it has a name and answers a ``facts`` request with typed facts (``Fact``:
  key, value, one of the categories) and a narrative, a ``text`` request
  with a text, within the request's token cap;
- its answer, recorded by the worker, covers the request's range, names the
  summarizer, model and prompt hash, and counts tokens in and out;
- a deterministic summarizer gives the same output for the same input;
- a failure raises a ``SummarizerError`` of the kind the port names
  (``SummarizerTimeoutError`` for a timeout, ``SummarizerOutputError`` for an
  unusable answer), the worker records it as ``SummaryFailed`` with that
  type (a timeout retryable), and the policy folding it takes its fallback:
  no memory, every message of the failed range shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from memfold.core.errors import SummarizerError
from memfold.core.events import Fact, SummaryFailed, SummaryProduced
from memfold.core.ports import MessageRecord, Summarizer, SummaryInput, SummaryOutput
from memfold.core.settings import HierarchicalSettings
from memfold.core.tokens import counter
from memfold.engine.worker import answer
from memfold.projections import fold
from memfold.projections.policies.hierarchical import HierarchicalPolicy

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
CATEGORIES = {"ENTITY", "DECISION", "CONDITION", "STATE", "NUMERIC", "GENERAL"}
COUNT = counter()

TURNS = (
    ("user", "Hi, I need to change the delivery of order #58213 to next week."),
    ("assistant", "Sure. Order #58213 is for two chairs, total $319.40. Which day suits you?"),
    ("user", "Thursday 14 March works; my email is dana.ruiz@example.org if you need it."),
    ("assistant", "Done: delivery moved to 14 March and a confirmation goes to dana.ruiz@example.org."),
    ("user", "Thanks. Also, can you waive the $25 rebooking fee?"),
    ("assistant", "I have waived the $25 fee as a one-off."),
)


def conversation(turns: tuple[tuple[str, str], ...] = TURNS) -> tuple[MessageRecord, ...]:
    return tuple(
        MessageRecord(tenant_id="t1", conversation_id="c1", index=i, seq=i + 1, event_id=f"m{i}", role=role,
                      content=content, tokens=COUNT.count_message(content), occurred_at=T0 + timedelta(minutes=i))
        for i, (role, content) in enumerate(turns)
    )


@dataclass(frozen=True)
class Failure:
    """A way to make the next call fail: ``arrange()`` scripts it; ``error`` is what the port says is raised."""

    name: str
    arrange: Callable[[], None]
    error: type[SummarizerError]
    retryable: bool


@dataclass(frozen=True)
class Subject:
    """A summarizer under the contract: ``make(**settings)`` builds one (e.g. with a short timeout)."""

    make: Callable[..., Summarizer]


POLICY = HierarchicalPolicy()
CTX_SETTINGS = HierarchicalSettings(trigger_message_count=4, recent_message_count=2)


def _request_for(messages: tuple[MessageRecord, ...]):
    """The hierarchical request a fold decides for ``messages``, and the state it leaves."""
    from support.policy_kit import fold_context

    ctx = fold_context("hierarchical", CTX_SETTINGS)
    state = POLICY.initial("t1", "c1")
    requests = []
    for m in messages:
        state, more = fold.step(POLICY, state, m, ctx)
        requests.extend(more)
    assert requests, "the conversation is long enough for a hierarchical summary"
    return ctx, state, requests[-1]


class SummarizerContract:
    """The port's promises, run against ``subject`` (a fixture the subclass provides)."""

    def test_a_facts_request_gives_typed_facts_and_a_narrative(self, subject: Subject):
        out = subject.make().summarize(SummaryInput(policy="hierarchical", kind="facts", messages=conversation()))
        assert isinstance(out, SummaryOutput) and not out.empty
        assert out.text.strip()
        assert out.facts and all(isinstance(f, Fact) for f in out.facts)
        for f in out.facts:
            assert f.key.strip() and f.value.strip() and f.category in CATEGORIES
        assert "#58213" in {f.value for f in out.facts}  # the order id the conversation states is a fact

    def test_a_text_request_gives_a_text_within_its_token_cap(self, subject: Subject):
        for cap in (40, 400):
            out = subject.make().summarize(SummaryInput(policy="rolling", kind="text", messages=conversation(),
                                                        token_cap=cap))
            assert out.text.strip() and COUNT.count(out.text) <= cap

    def test_the_recorded_answer_covers_the_request_and_counts_its_tokens(self, subject: Subject):
        messages = conversation()
        summarizer = subject.make()
        _, _, request = _request_for(messages)
        p = request.payload
        summary_input = SummaryInput(policy="hierarchical", kind="facts", messages=messages[p.input_from:p.input_to + 1])
        event = answer(request, summary_input, summarizer)
        assert isinstance(event, SummaryProduced)
        e = event.payload
        assert (e.request_id, e.covers_from, e.covers_to) == (p.request_id, p.covers_from, p.covers_to)
        assert e.summarizer == summarizer.name and summarizer.name
        assert e.model and e.prompt_hash
        assert e.tokens_in > 0 and e.tokens_out > 0
        assert event.causation_id == request.event_id



class DeterministicSummarizerContract(SummarizerContract):
    """For a summarizer that is a pure function of its input (the offline one)."""

    def test_the_same_input_gives_the_same_output(self, subject: Subject):
        request = SummaryInput(policy="hierarchical", kind="facts", messages=conversation())
        first = subject.make().summarize(request)
        assert subject.make().summarize(request) == first
        text = SummaryInput(policy="rolling", kind="text", messages=conversation(), token_cap=120)
        assert subject.make().summarize(text) == subject.make().summarize(text)



class FallibleSummarizerContract(SummarizerContract):
    """For a summarizer that can fail (a model behind a network): the subclass parametrizes ``failure``."""

    def test_a_failure_is_the_error_the_port_names_and_the_policy_falls_back(self, subject: Subject, failure: Failure):
        f = failure
        summarizer = subject.make(timeout_s=0.3)
        messages = conversation()
        f.arrange()
        with pytest.raises(f.error):
            summarizer.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=messages))
        ctx, state, request = _request_for(messages)
        p = request.payload
        f.arrange()
        event = answer(request, SummaryInput(policy="hierarchical", kind="facts",
                                             messages=messages[p.input_from:p.input_to + 1]), summarizer)
        assert isinstance(event, SummaryFailed)
        assert event.payload.error_type == f.error.__name__ and event.payload.retryable is f.retryable
        assert event.payload.request_id == p.request_id and event.payload.reason
        state, more = fold.step(POLICY, state, event, ctx)
        assert more == []  # a failed range is not asked again
        plan = POLICY.plan(state, ctx)
        assert plan.fallback is not None and plan.memory == ()
        shown = set(plan.verbatim_indices) if plan.verbatim_indices is not None else set(range(plan.verbatim_from, len(messages)))
        assert set(range(p.covers_from, p.covers_to + 1)) <= shown
