"""The user projection on a real broker: a worker folds what embedded mode folds, across partitions and a SIGKILL.

A user's conversations are keyed by conversation, so they land on different
partitions (asserted below); the user fold is a function of the set of
their facts, not of the order partitions deliver them in, so the same log
gives the same ``user_facts`` and ``user_notes`` in both modes.
"""

from __future__ import annotations

import pytest
from support.worker_kit import conversation, embedded_reference, interleaved, run_with_kills

from memfold.core.events import MessageAppended, replaced
from memfold.core.partitioner import partition_for

pytestmark = pytest.mark.kafka

PARTITIONS = 8
NAMES = ("support-4711", "travel-2208", "saas-3390")


def _of_user(messages: list[MessageAppended], user: str) -> list[MessageAppended]:
    return [replaced(m, payload=replaced(m.payload, user_id=user)) for m in messages]


def test_a_worker_folds_the_user_projection_embedded_mode_folds_across_partitions_and_a_kill(kafka_bootstrap, tmp_path):
    assert len({partition_for(f"default/{c}", PARTITIONS) for c in NAMES}) > 1  # the user's conversations meet nowhere
    messages = interleaved(*(_of_user(conversation(c, 14), "dana") for c in NAMES))
    ref_events, ref_projection = embedded_reference(tmp_path / "embedded", messages, PARTITIONS)
    assert any(r for r in ref_projection["user_facts"]), "no user fact folded: the parity would prove nothing"
    assert {r[3] for r in ref_projection["user_notes"]} == set(NAMES)
    run = run_with_kills(kafka_bootstrap, tmp_path / "run", messages, {17}, partitions=PARTITIONS, seed=5)
    assert [(e.event_id, e.seq) for e in run["events"]] == [(e.event_id, e.seq) for e in ref_events]
    assert {r[3] for r in ref_projection["user_summaries"]} == set(NAMES)  # each asked the user's summary
    for table in ("conversations", "facts", "user_facts", "user_notes", "user_summaries"):
        assert run["projection"][table] == ref_projection[table], f"{table} differs from embedded mode"
