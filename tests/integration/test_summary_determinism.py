"""The offline summarizer is a pure function of its input, in any process (real SQLite + DuckDB, subprocesses)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from memfold.cli.ingest import ingest_file
from memfold.core.events import SummaryRequested
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.worker import build_input

SAMPLE = Path(__file__).resolve().parents[2] / "cli" / "data" / "sample.jsonl"


@pytest.fixture(scope="module")
def ingested_here(tmp_path_factory):
    """The sample ingested with every policy, summarized in this process."""
    settings = Settings.load(None, data_dir=tmp_path_factory.mktemp("here"), policies=POLICY_NAMES)
    with MemoryEngine(settings) as engine:
        report = ingest_file(engine, SAMPLE, progress=False)
        assert report.accepted > 600 and not report.rejected
        engine.wait_idle(timeout=300)
        yield engine


def test_the_offline_summarizer_answers_the_same_whatever_the_hash_seed(ingested_here, tmp_path):
    """Every process has its own string hash seed (a worker process, a replay next week): same answers.

    Seeds 1 and 6 gave one hierarchical summary of the sample a different
    statement when a float sum followed a set's order.
    """
    requests = [r.event for p in ingested_here.log.partitions() for r in ingested_here.log.read(p, 0, limit=100_000)
                if isinstance(r.event, SummaryRequested)]
    inputs = tmp_path / "inputs.pickle"
    inputs.write_bytes(pickle.dumps([build_input(r, ingested_here.store, ingested_here.store, ingested_here.settings)
                                     for r in requests]))
    code = (
        "import pickle, sys\n"
        "from memfold.projections.offline_summarizer import OfflineSummarizer\n"
        "s = OfflineSummarizer()\n"
        "sys.stdout.buffer.write(pickle.dumps([s.summarize(r) for r in pickle.loads(open(sys.argv[1], 'rb').read())]))\n"
    )
    answers = [
        pickle.loads(subprocess.run([sys.executable, "-c", code, str(inputs)], capture_output=True, check=True,
                                    env={**os.environ, "PYTHONHASHSEED": seed}).stdout)
        for seed in ("1", "6")
    ]
    assert len(answers[0]) == len(requests) > 30
    differing = [i for i, (a, b) in enumerate(zip(*answers)) if a != b]
    assert not differing, f"{len(differing)} summaries depend on the hash seed, e.g. {requests[differing[0]].payload}"
