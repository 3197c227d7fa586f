"""benchmarks/memory_quality.py end to end on a small corpus: real embedded engine, offline summarizer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_small_run_scores_every_policy_and_the_baseline(tmp_path):
    mq = _load("memory_quality")
    report = mq.measure(2, 80, seed=3, budgets=(300, 4000), policies=("hierarchical", "rolling"), step=10,
                        timeout=120, data_dir=tmp_path)
    assert report["messages"] == 160 and report["facts"] > 0
    assert list(report["policies"]) == ["takeLast", "hierarchical", "rolling"]
    baseline = report["policies"]["takeLast"]
    assert baseline["summarizer"]["calls"] == 0
    # takeLast at a budget larger than the whole conversation keeps every latest value
    assert baseline["budgets"]["4000"]["fraction"] == 1.0
    assert baseline["budgets"]["300"]["fraction"] < 1.0
    for policy in ("hierarchical", "rolling"):
        cost = report["policies"][policy]["summarizer"]
        assert cost["calls"] > 0 and cost["tokens_in"] > 0 and cost["unanswered"] == 0
        for res in report["policies"][policy]["budgets"].values():
            assert 0.0 <= res["fraction"] <= 1.0 and res["facts_total"] == report["facts"]


def test_table_renders(capsys):
    mq = _load("memory_quality")
    report = {
        "conversations": 1, "turns": 20, "seed": 1, "facts": 2, "summarizer": "offline", "budgets": [1000],
        "messages": 20, "step": 10, "seconds": {"append": 0.1, "until_idle": 0.0, "score": 0.1},
        "policies": {"takeLast": {
            "budgets": {"1000": {"fraction": 0.5, "contexts_over_budget": 0, "updated_kept": 1, "updated_total": 1}},
            "summarizer": {"calls_per_1k_turns": 0.0, "tokens_per_1k_turns": 0.0, "unanswered": 0}}},
    }
    mq.render_table(report)
    out = capsys.readouterr().out
    assert "takeLast" in out and "50%" in out and "1/1" in out
