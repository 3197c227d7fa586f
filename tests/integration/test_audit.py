"""The audit trail: summary lineage, bi-temporal facts, settings, erasure; the HTML page in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta

import pytest

from memfold.cli.audit_page import render
from memfold.cli.main import main
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.views import VIEWS

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HIERARCHICAL = {"policy": "hierarchical", "policies": ("hierarchical",)}
LOW_TRIGGER = {"hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 4}}
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _conversation(engine: MemoryEngine, conversation: str = "c1") -> None:
    """Ingest in paced steps so that several summary versions complete; the order id changes midway."""
    lines = [
        "Hi, my name is Dana Whitfield and my order number is #48213.", "Thanks Dana, looking it up.",
        "It arrived broken, I paid $184.50.", "Sorry to hear that.", "Can you refund it?", "Checking the policy.",
        "Any news?", "Still checking.",
        "Correction: my order number is #59177, the other one was my old order.", "Noted, #59177.",
        "So the refund is for #59177.", "Yes.", "When will it arrive?", "Within 14 days.",
        "Great, thanks.", "You're welcome.",
    ]
    for i, text in enumerate(lines):
        engine.append_message(conversation, "user" if i % 2 == 0 else "assistant", text,
                              occurred_at=T0 + timedelta(minutes=i))
        if i % 4 == 3:
            engine.wait_idle(60)
    engine.wait_idle(60)


@pytest.fixture
def engine(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "data", **HIERARCHICAL, **LOW_TRIGGER)) as eng:
        _conversation(eng)
        yield eng


def test_summary_versions_form_a_chain_with_their_lineage(engine):
    report = engine.audit("c1")
    assert report["conversation"]["status"] == "active" and report["conversation"]["message_count"] == 16
    completed = [s for s in report["summaries"] if s["status"] == "completed"]
    assert [s["version"] for s in completed] == list(range(1, len(completed) + 1)) and len(completed) >= 2
    for s in completed:
        assert s["settings_hash"] == report["settings"]["in_force"]["hierarchical"]
        assert s["model"] and s["prompt_hash"] and s["tokens_in"] > 0 and s["tokens_out"] > 0
        assert s["resolved_seq"] > s["requested_seq"]
        assert s["requested_position"] and s["resolved_position"]
        assert s["covers"][0] <= s["covers"][1] < 16
    # Versions grow over the conversation and each names the one it was based on, if any.
    assert [s["covers"][1] for s in completed] == sorted(s["covers"][1] for s in completed)
    for s in completed:
        if s["base_summary_id"]:
            assert s["base_version"] == next(b["version"] for b in completed if b["summary_id"] == s["base_summary_id"])


def test_facts_are_bitemporal_and_a_replaced_value_is_kept_and_marked(engine):
    report = engine.audit("c1")
    facts = {(f["key"], f["value"]): f for f in report["facts"]}
    old = next(f for (k, v), f in facts.items() if v == "#48213")
    new = next(f for (k, v), f in facts.items() if v == "#59177" and k == old["key"])
    # Stated: when the conversation said it (event time of the message); learned: the summary that carried it.
    assert old["stated_in"] == 0 and old["stated_at"] == T0.isoformat()
    assert new["stated_in"] == 8 and new["stated_at"] == (T0 + timedelta(minutes=8)).isoformat()
    assert old["learned_version"] < new["learned_version"]
    assert old["learned_seq"] < new["learned_seq"]
    assert not old["current"] and old["retired_version"] == new["learned_version"]
    assert old["superseded_by"] == new["fact_id"] and new["current"] and new["superseded_by"] is None


def test_audit_of_an_erased_conversation_shows_it_existed_never_its_content(engine):
    before = engine.audit("c1")
    engine.forget("c1", reason="user asked")
    report = engine.audit("c1")
    assert report["conversation"]["status"] == "erased"
    assert report["erasure"]["reason"] == "user asked" and report["erasure"]["position"]
    assert report["events"]["MessageAppended"] == 16
    assert report["events"]["SummaryProduced"] == before["events"]["SummaryProduced"]
    assert report["messages"] == [] and report["summaries"] == [] and report["facts"] == []
    text = json.dumps(report) + render(report)
    assert "Dana" not in text and "59177" not in text and "Erased" in render(report)


def _audit_page(engine, tmp_path, capsys) -> tuple[dict, object]:
    """Run ``memfold audit c1 --json --html`` on the engine's data dir; return the JSON report and the page's path."""
    data = engine.settings.data_dir
    engine.close()
    page = tmp_path / "audit.html"
    config = tmp_path / "memfold.toml"  # the settings the data dir was built with: a read does not rebuild
    config.write_text('policy = "hierarchical"\npolicies = ["hierarchical"]\n'
                      + "".join(f"[{policy}]\n" + "".join(f"{k} = {v}\n" for k, v in knobs.items())
                                for policy, knobs in LOW_TRIGGER.items()))
    assert main(["--data-dir", str(data), "--config", str(config), "audit", "c1", "--json", "--html", str(page)]) == 0
    return json.loads(capsys.readouterr().out), page


def test_cli_writes_the_audit_json_and_a_self_contained_html_page(engine, tmp_path, capsys):
    report, page = _audit_page(engine, tmp_path, capsys)
    assert report["conversation"]["message_count"] == 16
    html = page.read_text()
    assert "src=" not in html and "<link" not in html and "http" not in html.replace("http-equiv", "")  # self-contained
    assert html.count("class='bar ") == len(report["summaries"]) + len(report["facts"]) > 0  # a bar for each


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)")
def test_the_audit_page_renders_in_headless_chromium(engine, tmp_path, capsys):
    report, page = _audit_page(engine, tmp_path, capsys)
    from playwright.sync_api import sync_playwright

    shot = tmp_path / "audit.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"],
        )
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 900})
            tab.goto(page.resolve().as_uri())
            assert tab.title() == "memfold audit: default/c1"
            bars = tab.locator(".timeline .bar")
            assert bars.count() == len([s for s in report["summaries"]]) + len(report["facts"])
            # Every bar is drawn inside the timeline, with a visible width.
            box = tab.locator(".timeline").bounding_box()
            for i in range(bars.count()):
                b = bars.nth(i).bounding_box()
                assert b["width"] >= 4 and box["x"] <= b["x"] and b["x"] + b["width"] <= box["x"] + box["width"] + 1
            assert tab.locator("text=superseded by").count() >= 1
            tab.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 20_000


def test_observability_views_answer_the_specs_questions(engine):
    names = [v.name for v in VIEWS]
    chain = engine.sql("SELECT summary_id, base_summary_id, base_end_seq FROM memory_version_chain WHERE status = 'completed'")[1]
    assert chain and all((base is None) == (end is None) for _sid, base, end in chain)
    engine.sql("UPDATE summaries SET status = 'processing', requested_at = now() - INTERVAL 10 MINUTE "
               "WHERE request_id = (SELECT min(request_id) FROM summaries)", write=True)
    stuck = engine.sql("SELECT request_id, age FROM memory_stuck_processing")[1]
    assert len(stuck) == 1 and stuck[0][1] >= timedelta(minutes=10)
    progression = engine.sql("SELECT window_size FROM memory_window_progression")[1]
    assert progression and all(w >= 1 for (w,) in progression)
    # The view's figures against the latencies the audit trail lists (read after the update above).
    latencies = [s["latency_ms"] for s in engine.audit("c1")["summaries"]
                 if s["status"] == "completed" and s["latency_ms"] is not None]
    timing = engine.sql("SELECT policy, avg_ms, max_ms, total_summaries FROM memory_generation_time")[1]
    assert len(latencies) >= 1
    assert timing == [("hierarchical", pytest.approx(sum(latencies) / len(latencies)), max(latencies), len(latencies))]
    assert set(names) == {"memory_version_chain", "memory_stuck_processing", "memory_window_progression",
                          "memory_generation_time"}


def test_sql_views_lists_every_view_with_its_description(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path / "d"), "sql", "--views", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in listed] == [v.name for v in VIEWS]
    assert all(v["description"] and v["sql"].startswith("SELECT") for v in listed)
    assert main(["--data-dir", str(tmp_path / "d"), "sql"]) == 2
