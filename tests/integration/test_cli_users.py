"""The user commands of the CLI, in subprocesses: on a data dir and with --url against a live service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
pytestmark = pytest.mark.timeout(240)


def run(*args: str, code: int = 0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    # One partition: the user summary reads the user's conversations on its request's partition, so both meet.
    env |= {"MEMFOLD_POLICY": "hierarchical", "MEMFOLD_POLICIES": "hierarchical", "MEMFOLD_PARTITIONS": "1"}
    proc = subprocess.run([MEMFOLD, *args], capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    return proc


def _lines(conversation: str, user: str, first: str, day: str) -> str:
    rows = [{"conversation_id": conversation, "user_id": user, "role": "user" if i % 2 == 0 else "assistant",
             "content": first if i == 0 else "Thanks, noted.", "ts": f"{day}T09:{i:02d}:00Z"} for i in range(22)]
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def test_user_commands_on_a_data_dir(tmp_path):
    data = ["--data-dir", str(tmp_path / "d")]
    source = tmp_path / "in.jsonl"
    source.write_text(_lines("mon", "dana", "I live in Berlin and my order number is #4471.", "2024-03-01")
                      + _lines("tue", "dana", "Big news: I moved to Munich last week.", "2024-04-10"))
    run(*data, "ingest", str(source), "--quiet")
    shown = json.loads(run(*data, "user", "show", "dana", "--json").stdout)
    assert {f["key"]: (f["value"], f["conversation_id"]) for f in shown["facts"]} == {
        "lives_in": ("Munich", "tue"), "order_id": ("#4471", "mon")}
    text = run(*data, "user", "show", "dana").stdout
    assert "lives_in: Munich  (conversation tue, message 0" in text
    # The user's own summary, over both conversations, with its text.
    mine = shown["user_summary"]
    assert mine["covers"] == ["mon", "tue"] and "Munich" in mine["text"]
    assert f"user summary ({mine['summary_id']}, over 2 conversation(s)" in text
    assert next(line.strip() for line in mine["text"].splitlines() if line.strip()) in text
    then = json.loads(run(*data, "user", "show", "dana", "--as-of", "2024-03-05T00:00:00Z", "--json").stdout)
    assert {f["key"]: f["value"] for f in then["facts"]}["lives_in"] == "Berlin"
    # A conversation not started yet, read as Dana's: it begins with what the others taught.
    context = json.loads(run(*data, "context", "wed", "--user", "dana", "--budget", "1500", "--query",
                             "where do I live", "--json", "--format", "compact").stdout)
    kinds = [m["kind"] for m in context["messages"]]
    assert kinds[:2] == ["memory:user", "user_recalled"] and "Munich" in context["messages"][0]["content"]
    run(*data, "append", "wed", "user", "hello", "--user", "dana")
    assert "belongs to user 'dana'" in run(*data, "append", "wed", "user", "hi", "--user", "eve", code=2).stderr
    hits = json.loads(run(*data, "search", "order number", "--user", "dana", "--json").stdout)
    assert hits[0]["conversation_id"] == "mon" and "#4471" in hits[0]["content"]
    everyone = json.loads(run(*data, "search", "Munich", "--json").stdout)
    assert [h["conversation_id"] for h in everyone] == ["tue"]
    audit = run(*data, "audit", "--user", "dana").stdout
    assert "lives_in: Berlin taught by conversation mon" in audit and "-> Munich (conversation tue)" in audit
    assert "CONVERSATION or --user" in run(*data, "audit", code=2).stderr
    assert "CONVERSATION or --user" in run(*data, "forget", "mon", "--user", "dana", code=2).stderr
    assert "3 conversation(s)" in run(*data, "forget", "--user", "dana").stdout
    assert "no conversation of tenant 'default' belongs to user 'dana'" in run(*data, "user", "show", "dana",
                                                                               code=2).stderr


def test_user_commands_with_url(service, tmp_path):
    key = service.key("cli-users", "admin")
    remote = ["--url", service.url, "--api-key", key]
    source = tmp_path / "in.jsonl"
    source.write_text(_lines("r-mon", "rita", "My order number is #5150.", "2024-03-01"))
    run(*remote, "ingest", str(source), "--quiet")
    run(*remote, "append", "r-tue", "user", "What was my order number?", "--user", "rita")
    hits = json.loads(run(*remote, "search", "order number", "--user", "rita", "--json").stdout)
    assert {h["conversation_id"] for h in hits} == {"r-mon", "r-tue"}
    deadline = time.monotonic() + 60  # the service summarizes in the background: poll until the fact is folded
    while True:
        shown = json.loads(run(*remote, "user", "show", "rita", "--json").stdout)
        if {f["key"]: f["value"] for f in shown["facts"]}.get("order_id") == "#5150":
            break
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)
    context = json.loads(run(*remote, "context", "r-new", "--user", "rita", "--budget", "1500", "--query",
                             "order number", "--json", "--format", "compact").stdout)
    assert "#5150" in "\n".join(m["content"] for m in context["messages"])  # a new conversation knows it already
    assert "--format compact" in run(*remote, "context", "r-new", "--user", "rita", "--json", code=2).stderr
    audit = json.loads(run(*remote, "audit", "--user", "rita", "--json").stdout)
    assert {c["conversation_id"] for c in audit["conversations"]} == {"r-mon", "r-tue"}
    assert "2 conversation(s)" in run(*remote, "forget", "--user", "rita").stdout
