"""kill -9 suite (a few trials; benchmarks/crash_trials.py --trials 100 runs the full set).

SIGKILL the ingesting process, the summarizer worker and the projector
(embedded), and a Kafka ingest client and projector node, at random moments;
restart as README says; then nothing acknowledged is lost, nothing is stored
twice, and the projection equals a from-scratch rebuild of the same log.
"""

from __future__ import annotations

import random

import pytest
from support import crash_kit

SEED = 20261123


def _check(result: crash_kit.TrialResult) -> None:
    assert not result.failed, result
    assert result.killed, f"the kill came after the child had finished; the trial proved nothing: {result}"


@pytest.mark.parametrize("phase", ["ingest", "summarize"])
def test_kill_embedded_ingest_or_summarizer_then_resume(tmp_path, phase):
    _check(crash_kit.embedded_trial(tmp_path, random.Random(f"{SEED}-{phase}"), phase, lines=300, conversations=3))


def test_kill_embedded_projector_then_rerun(tmp_path):
    _check(crash_kit.projector_trial(tmp_path, random.Random(SEED), lines=300, conversations=3))


def test_kill_replay_then_rerun_resumes_to_the_same_namespace(tmp_path):
    _check(crash_kit.replay_trial(tmp_path, random.Random(SEED), lines=300, conversations=3))


@pytest.mark.kafka
def test_kill_kafka_ingest_then_projector_node(tmp_path, kafka_bootstrap):
    rnd = random.Random(SEED)
    ingest = crash_kit.kafka_ingest_trial(tmp_path, rnd, kafka_bootstrap, lines=300, conversations=3)
    _check(ingest)
    topic = next(n.split()[1] for n in ingest.notes if n.startswith("topic "))
    _check(crash_kit.kafka_projector_trial(tmp_path, rnd, kafka_bootstrap, topic))
