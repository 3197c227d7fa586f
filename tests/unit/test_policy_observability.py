"""Policies never log (a replay would repeat it); the summarizer worker and context reads log what the seeds ask."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.policy_kit import Messages, fold_context

from memfold.core.ports import ContextPlan, SummaryInput
from memfold.core.settings import POLICY_SETTINGS
from memfold.engine.engine import load_policy, log_budget_decisions
from memfold.engine.worker import answer
from memfold.projections import fold, policies
from memfold.projections.embedders import LocalHashEmbedder
from memfold.projections.offline_summarizer import OfflineSummarizer

T0 = datetime(2026, 1, 1, tzinfo=UTC)
msg = Messages(T0, lambda i, role: f"{role} {i}: the invoice #{1000 + i} is due on March {i % 28 + 1} " + "word " * 60)
LOCAL = LocalHashEmbedder(dimensions=32)


def _answer(request, state):
    return fold.produced(request, text=f"summary to {request.payload.covers_to}", summarizer="s", model="m", prompt_hash="p")


def test_no_policy_module_imports_logging():
    for path in Path(policies.__file__).parent.glob("*.py"):
        assert "import logging" not in path.read_text(), f"{path.name} logs inside a fold"


@pytest.mark.parametrize("name", sorted(POLICY_SETTINGS))
def test_folding_a_long_conversation_logs_nothing(name, caplog):
    ctx = fold_context(name, POLICY_SETTINGS[name](), embed=lambda text: LOCAL.embed([text])[0])
    with caplog.at_level(logging.DEBUG):
        state, derived = fold.run_sync(load_policy(name), ctx, msg.chat(120), _answer)
    assert derived, "the conversation is long enough for every policy to summarize"
    assert caplog.records == []


def test_the_worker_logs_each_summarization_it_runs(caplog):
    items = msg.chat(6)
    ctx = fold_context("chunked", POLICY_SETTINGS["chunked"]())
    request = fold.make_request(ctx, items[-1], covers=(0, 5), inputs=(0, 5), kind="text", token_cap=200)
    summary_input = SummaryInput(policy="chunked", kind="text", messages=tuple(items), token_cap=200)
    with caplog.at_level(logging.INFO, logger="memfold.worker"):
        outcome = answer(request, summary_input, OfflineSummarizer())
    [record] = [r for r in caplog.records if r.getMessage().startswith("summary produced")]
    assert (record.messages, record.user_turns, record.policy) == (6, 3, "chunked")
    assert record.tokens_in == outcome.payload.tokens_in > record.tokens_out == outcome.payload.tokens_out > 0


def test_reads_log_the_budget_decisions_a_plan_reports(caplog):
    policy = load_policy("chunked")
    ctx = fold_context("chunked", POLICY_SETTINGS["chunked"](prompt_token_budget=300, chunk_summarize_threshold=200))
    state, _ = fold.run_sync(policy, ctx, msg.chat(12), _answer)
    plan = policy.plan(state, ctx)
    assert plan.notes["turns_dropped"] > 0
    with caplog.at_level(logging.INFO, logger="memfold.engine"):
        log_budget_decisions("chunked", "c1", plan)
        log_budget_decisions("chunked", "c2", ContextPlan(notes={"turns_dropped": 0, "tail_turns": 3}))  # nothing cut
    [record] = caplog.records
    assert record.turns_dropped == plan.notes["turns_dropped"] and record.policy == "chunked"
