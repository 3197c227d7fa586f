"""``memfold diff``: live versus a replay namespace, per conversation, on real SQLite and DuckDB files."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from memfold.cli.main import main
from memfold.core.errors import UnknownConversationError, ValidationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.engine.replay_diff import Question, diff, load_questions
from memfold.projections.store import DuckDBProjectionStore

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
LIVE = {"policy": "hierarchical", "policies": ("hierarchical",),
        "hierarchical": {"trigger_message_count": 8, "recent_message_count": 3, "resummarize_every": 4}}
WIDER = {"hierarchical.trigger_message_count": 24, "hierarchical.recent_message_count": 6}


def _text(conv: str, i: int) -> str:
    said = [f"my order #{4100 + i} from {conv} was charged ${30 + i}.00", f"please email me at {conv}-{i}@example.com",
            f"we agreed the refund is due by day {i + 2}", f"the courier left parcel P{900 + i} at the depot"]
    return said[i % 4]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A live data dir with two conversations and two replays: 'same' (live settings) and 'wider' (later summaries)."""
    root = tmp_path_factory.mktemp("diff") / "d"
    with MemoryEngine(Settings.load(None, data_dir=root, **LIVE)) as engine:
        for i in range(30):
            for conv in ("alpha", "beta"):
                engine.append_message(conv, "user" if i % 2 == 0 else "assistant", _text(conv, i),
                                      occurred_at=T0 + timedelta(minutes=i))
            if i % 4 == 3:
                engine.wait_idle(120)  # paced as live talk: each due summary is made, none superseded
        engine.wait_idle(120)
        engine.replay("same")
        engine.replay("wider", overrides=WIDER)
    return root


def _cli_base(root, tmp_path) -> list[str]:
    """The CLI's global options for the fixture's data dir: its settings in a memfold.toml."""
    config = tmp_path / "memfold.toml"
    config.write_text('policy = "hierarchical"\npolicies = ["hierarchical"]\n[hierarchical]\n'
                      "trigger_message_count = 8\nrecent_message_count = 3\nresummarize_every = 4\n")
    return ["--data-dir", str(root), "--config", str(config)]


def _engine(root):
    return MemoryEngine(Settings.load(None, data_dir=root, **LIVE))


def test_a_replay_with_the_live_settings_differs_in_nothing(data_dir):
    questions = [Question("default", "alpha", "where did the courier leave the parcel?", "at the depot, parcel P927")]
    with _engine(data_dir) as engine:
        result = diff(engine, "same", budget=300, questions=questions)
    assert [c.conversation_id for c in result.conversations] == ["alpha", "beta"]
    for c in result.conversations:
        assert c.live == c.replay, c.conversation_id
        assert c.live.versions >= 3 and c.live.facts > 0 and c.live.context_tokens > 0
        assert not (c.facts_added or c.facts_changed or c.facts_lost)
    alpha = result.conversations[0]
    assert alpha.questions == 1 and alpha.live.recall is not None and 0 < alpha.live.recall <= 1
    assert result.conversations[1].live.recall is None  # no question asked there


def test_a_replay_with_other_settings_shows_fewer_versions_other_facts_and_its_cost(data_dir):
    with _engine(data_dir) as engine:
        live_rows = engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed'")[1][0][0]
        result = engine.diff_replay("wider", "alpha", budget=4000)
    (alpha,) = result.conversations
    lv, rp = alpha.live, alpha.replay
    assert rp.versions < lv.versions and rp.versions >= 1  # a summary every 4 messages after 8 vs after 24
    assert lv.covers_to is not None and rp.covers_to is not None
    assert lv.messages == rp.messages == 30
    # The replay's summaries were made for it: the offline summarizer's calls and their tokens are counted.
    assert rp.calls == rp.versions and rp.tokens_in > 0 and rp.tokens_out > 0 and rp.cached == 0
    assert lv.calls + lv.cached == live_rows // 2 or lv.calls > 0
    # Facts in force: the replay's newest summary covers other messages, so the key sets differ somewhere.
    assert alpha.facts_added or alpha.facts_changed or alpha.facts_lost
    assert result.totals()["facts_added"] == len(alpha.facts_added)
    assert result.replay_policy == "hierarchical" and result.budget == 4000


def test_a_replay_keeps_facts_of_its_own_summaries_only(data_dir):
    # The replay reads the live log's summaries too: they stay audit rows, never its facts.
    store = DuckDBProjectionStore(data_dir / "replays" / "wider" / "projections.duckdb", read_only=True)
    try:
        _cols, rows = store.query(
            "SELECT DISTINCT s.settings_hash FROM facts f JOIN summaries s ON s.summary_id = f.introduced_by")
        _cols, audit = store.query("SELECT count(DISTINCT settings_hash) FROM summaries")
    finally:
        store.close()
    manifest = json.loads((data_dir / "replays" / "wider" / "manifest.json").read_text())
    assert rows == [(manifest["hashes"]["hierarchical"],)]
    assert audit[0][0] == 2  # both settings' summaries are there, as audit rows


def test_cli_diff_table_json_and_questions(data_dir, tmp_path, capsys):
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"conversation": "beta", "question": "what email did I give?",
                                 "answer": "beta-29@example.com"}) + "\n\n")
    base = _cli_base(data_dir, tmp_path)
    assert main([*base, "diff", "wider", "--json", "--budget", "500", "--questions", str(qfile)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == "wider" and out["budget"] == 500 and len(out["conversations"]) == 2
    beta = next(c for c in out["conversations"] if c["conversation_id"] == "beta")
    assert beta["questions"] == 1 and beta["live"]["recall"] is not None and beta["replay"]["recall"] is not None
    assert out["totals"]["live"]["versions"] > out["totals"]["replay"]["versions"]
    assert main([*base, "diff", "wider", "--facts"]) == 0
    table = capsys.readouterr().out
    assert "alpha" in table and "beta" in table and "versions" in table and "facts" in table


def test_bad_input_is_a_clear_error(data_dir, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversation": "alpha", "question": "q?"}\n')
    with pytest.raises(ValidationError, match="line 1 needs non-empty string"):
        load_questions(bad)
    base = _cli_base(data_dir, tmp_path)
    assert main([*base, "diff", "wider", "--questions", str(bad)]) == 2
    assert "line 1" in capsys.readouterr().err
    assert main([*base, "diff", "nosuch"]) == 2
    assert "no replay named 'nosuch'" in capsys.readouterr().err
    with _engine(data_dir) as engine, pytest.raises(UnknownConversationError):
        diff(engine, "wider", "gamma")
