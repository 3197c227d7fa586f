"""benchmarks/memory_quality.py end to end on a small corpus: real embedded engine, offline summarizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.benchmarks import load as _load


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
    # the closing question's fact: every conversation asking one is counted, and takeLast at 4,000 holds it
    asked = baseline["budgets"]["4000"]
    assert asked["asked_total"] == sum(1 for c in mq.synth.generate(2, 80, 3) if c.final_question)
    assert asked["asked_kept"] == asked["asked_total"] > 0
    for policy in ("hierarchical", "rolling"):
        cost = report["policies"][policy]["summarizer"]
        assert cost["calls"] > 0 and cost["tokens_in"] > 0 and cost["unanswered"] == 0
        for res in report["policies"][policy]["budgets"].values():
            # the fraction is the facts found in the context over every fact the conversations hold
            assert res["facts_total"] == report["facts"]
            assert res["fraction"] == pytest.approx(res["facts_kept"] / report["facts"])
        budgets = report["policies"][policy]["budgets"]
        # with room for the whole conversation nothing is lost; at 300 tokens the summary keeps facts
        # that the last messages alone (takeLast) have no room for
        assert budgets["4000"]["fraction"] == 1.0
        assert budgets["300"]["facts_kept"] > baseline["budgets"]["300"]["facts_kept"]


def test_table_renders(capsys):
    mq = _load("memory_quality")
    report = {
        "conversations": 1, "turns": 20, "seed": 1, "facts": 2, "summarizer": "offline", "budgets": [1000],
        "messages": 20, "step": 10, "seconds": {"append": 0.1, "until_idle": 0.0, "score": 0.1},
        "policies": {"takeLast": {
            "budgets": {"1000": {"fraction": 0.5, "contexts_over_budget": 0, "updated_kept": 1, "updated_total": 1,
                                 "asked_kept": 0, "asked_total": 3}},
            "summarizer": {"calls_per_1k_turns": 0.0, "tokens_per_1k_turns": 0.0, "unanswered": 0}}},
    }
    mq.render_table(report)
    out = capsys.readouterr().out
    assert "takeLast" in out and "50%" in out and "1/1" in out and "0/3" in out and "asked @1k" in out


# ------------------------------------------------------------------ BEAM (a tiny fixture in BEAM's file shape)

FILLER = ("Could you also suggest a few ways to keep the weekly report tidy, with headings, short paragraphs "
          "and one table per team, so the reviewers can skim it quickly?")


def _write_chat(root: Path, name: str, sessions: list[tuple[str, list[str]]], questions: dict) -> None:
    """Write one chat folder: each session is (time anchor, user messages); every user turn gets an answer."""
    batches = []
    for number, (anchor, said) in enumerate(sessions, 1):
        turns = []
        for i, text in enumerate(said):
            user = {"role": "user", "content": f"{text} ->-> {number},{i + 1}"}
            if i == 0:
                user["time_anchor"] = anchor
            turns.append([user, {"role": "assistant", "content": f"Noted. {FILLER.replace('Could you', 'I can')}"}])
        batches.append({"batch_number": number, "time_anchor": None, "turns": turns})
    folder = root / name
    (folder / "probing_questions").mkdir(parents=True)
    (folder / "chat.json").write_text(json.dumps(batches))
    (folder / "probing_questions" / "probing_questions.json").write_text(json.dumps(questions))


@pytest.fixture
def beam_dir(tmp_path):
    root = tmp_path / "beam"
    _write_chat(root, "1", [
        ("March-15-2024", ["My sister Alice is moving to Lisbon in June.", *[FILLER] * 12]),
        ("April-02-2024", ["The dashboard API now answers in 250ms after caching.", *[FILLER] * 12]),
    ], {
        "information_extraction": [{"question": "Where is my sister moving?", "answer": "Alice is moving to Lisbon."}],
        "knowledge_update": [{"question": "How fast is the dashboard API?", "answer": "It answers in 250ms after caching"}],
        "contradiction_resolution": [{"question": "Have I a sister?", "ideal_answer":
                                      "I notice you've mentioned contradictory information: your sister Alice. "
                                      "Could you clarify which is correct?"}],
        "summarization": [{"question": "Summarize.", "ideal_summary": "not scored"}],
    })
    _write_chat(root, "2", [("May-02-2024", ["We launch the beta on July 9 with 40 testers.", *[FILLER] * 14])], {
        "temporal_reasoning": [{"question": "When is the beta launch?", "answer": "July 9, with 40 testers."}],
    })
    return root


def test_beam_scores_every_policy_takelast_and_full_history(beam_dir, tmp_path):
    mq = _load("memory_quality")
    report = mq.measure_beam(beam_dir, budgets=(300, 100_000), policies=("hierarchical", "rolling"), step=10,
                             timeout=120, data_dir=tmp_path / "engine")
    assert report["chats"] == ["1", "2"] and report["messages"] == 2 * 26 + 2 * 15 and report["questions"] == 4
    assert list(report["policies"]) == ["takeLast", "hierarchical", "rolling"]
    by_question = {(d["chat"], d["kind"]): d["recall"] for d in report["details"]}
    assert set(by_question) == {("1", "information_extraction"), ("1", "knowledge_update"),
                                ("1", "contradiction_resolution"), ("2", "temporal_reasoning")}
    for recall in by_question.values():
        # every answer word was said in its chat; takeLast with room for everything sees it all
        assert recall["full history"]["all"] == 1.0
        assert recall["takeLast"]["100000"] == 1.0
    # the first session's fact is out of takeLast's reach at 300 tokens
    assert by_question[("1", "information_extraction")]["takeLast"]["300"] < 1.0
    baseline = report["policies"]["takeLast"]
    assert baseline["summarizer"]["calls"] == 0 and baseline["budgets"]["300"]["contexts_over_budget"] == 0
    assert baseline["budgets"]["300"]["avg_context_tokens"] <= 300
    assert set(baseline["budgets"]["100000"]["by_kind"]) == {"information_extraction", "knowledge_update",
                                                             "contradiction_resolution", "temporal_reasoning"}
    for policy in ("hierarchical", "rolling"):
        assert report["policies"][policy]["summarizer"]["calls"] > 0
        for budget, res in report["policies"][policy]["budgets"].items():
            # a policy's recall is the mean over the questions of its recall on each
            per_question = [d["recall"][policy][budget] for d in report["details"]]
            assert len(per_question) == report["questions"]
            assert res["recall"] == pytest.approx(sum(per_question) / len(per_question))
        # room for every message loses nothing; at 300 tokens the summary holds the first session's
        # fact that takeLast has no room for
        assert report["policies"][policy]["budgets"]["100000"]["recall"] == 1.0
        first = by_question[("1", "information_extraction")]
        assert first[policy]["300"] > first["takeLast"]["300"]
    assert report["full_history"]["recall"] == 1.0
    assert report["headline"].startswith("best at 300 tokens: ")
    assert report["targets"]["top_two"] and set(report["targets"]["top_two"]) <= {"hierarchical", "rolling"}


def test_beam_table_and_cli(beam_dir, tmp_path, capsys):
    mq = _load("memory_quality")
    with pytest.raises(SystemExit):  # chat 2 is in the tuning half, and the held-out half is the default
        mq.main(["--dataset", "beam", "--path", str(beam_dir), "--chats", "2"])
    assert "no chat folders of the held-out half" in capsys.readouterr().err
    assert mq.main(["--dataset", "beam", "--path", str(beam_dir), "--chats", "2", "--half", "tuning", "--policies", "rolling",
                    "--budgets", "200,4000", "--data-dir", str(tmp_path / "engine"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["chats"] == ["2"] and report["questions"] == 1
    mq.render_beam(report)
    out = capsys.readouterr().out
    for text in ("takeLast", "rolling", "full history", "temporal", "4,000", "100%", report["headline"][:40]):
        assert text in out
    with pytest.raises(SystemExit):
        mq.main(["--dataset", "beam"])  # --path is required
    assert "needs --path" in capsys.readouterr().err


def test_beam_dense_adds_a_fused_row_per_policy_from_the_same_ingest(beam_dir, tmp_path, capsys):
    mq = _load("memory_quality")
    assert mq.main(["--dataset", "beam", "--path", str(beam_dir), "--chats", "2", "--half", "all", "--policies", "rolling",
                    "--budgets", "200,4000", "--data-dir", str(tmp_path / "engine"), "--dense", "local", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dense"] == "local"
    assert list(report["policies"]) == ["takeLast", "rolling", "rolling + local-hash"]
    fused = report["policies"]["rolling + local-hash"]
    assert fused["budgets"]["4000"]["recall"] == 1.0 and fused["budgets"]["200"]["avg_context_tokens"] <= 200
    assert fused["budgets"]["200"]["read_ms"]["p99"] >= fused["budgets"]["200"]["read_ms"]["p50"] > 0
    assert fused["summarizer"] == report["policies"]["rolling"]["summarizer"], "one ingest serves both rows"
    mq.render_beam(report)
    assert "rolling + local-hash" in capsys.readouterr().out
