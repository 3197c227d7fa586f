"""The memfold CLI end to end, in subprocesses, against real files."""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

MEMFOLD = str(Path(sys.executable).with_name("memfold"))


def run(data_dir: Path, *args: str, check: bool = True, timeout: float = 120,
        config: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    options = ["--config", str(config)] if config else []
    proc = subprocess.run(
        [MEMFOLD, *options, "--data-dir", str(data_dir), *args], capture_output=True, text=True, timeout=timeout,
        env=env,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture()
def jsonl(tmp_path) -> Path:
    lines = []
    for i in range(30):
        lines.append(json.dumps({"conversation_id": "conv-a", "role": "user" if i % 2 == 0 else "assistant",
                                 "content": f"line {i}: order #7781 status check", "ts": f"2026-02-01T10:{i:02d}:00Z"}))
    bad = {
        3: "{not json",
        7: json.dumps({"conversation_id": "conv-a", "role": "robot", "content": "beep"}),
        11: json.dumps({"conversation_id": "conv-a", "role": "user", "content": ""}),
        15: json.dumps(["a", "list"]),
        19: json.dumps({"role": "user", "content": "no conversation"}),
    }
    for line_no, text in sorted(bad.items()):
        lines.insert(line_no - 1, text)
    path = tmp_path / "messages.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ingest_reports_bad_lines_by_number_and_keeps_the_rest(tmp_path, jsonl):
    data = tmp_path / "data"
    proc = run(data, "ingest", str(jsonl), "--quiet", check=False)
    assert proc.returncode == 2
    assert "ingested 30 messages" in proc.stdout and "messages/s" in proc.stdout
    for line_no in (3, 7, 11, 15, 19):
        assert f"line {line_no} rejected" in proc.stderr
    assert "unknown role 'robot'" in proc.stderr
    history = json.loads(run(data, "history", "conv-a", "--json").stdout)
    assert [h["content"] for h in history] == [f"line {i}: order #7781 status check" for i in range(30)]
    assert [h["seq"] for h in history] == list(range(1, 31))


def test_append_context_sql_and_schema(tmp_path):
    data = tmp_path / "data"
    run(data, "append", "c1", "user", "Hello, I need help with invoice INV-2231")
    run(data, "append", "c1", "assistant", "Sure, let me look that up.")
    run(data, "append", "c1", "user", "Thanks")
    ctx = json.loads(run(data, "context", "c1", "--json", "--format", "compact").stdout)["messages"]
    assert [set(m) for m in ctx] == [{"role", "content", "kind", "tokens", "index", "occurred_at"}] * 3
    assert [m["index"] for m in ctx] == [0, 1, 2] and all(m["tokens"] > 4 for m in ctx)
    assert [m["kind"] for m in ctx] == ["verbatim", "verbatim", "current"]
    assert ctx[0]["content"] == "Hello, I need help with invoice INV-2231"
    rows = json.loads(run(data, "sql", "SELECT role, count(*) AS n FROM messages GROUP BY role ORDER BY role", "--json").stdout)
    assert rows == [{"role": "assistant", "n": 1}, {"role": "user", "n": 2}]
    out = run(data, "sql", "SELECT idx, role FROM messages ORDER BY idx", "--csv").stdout
    assert list(csv.reader(io.StringIO(out))) == [["idx", "role"], ["0", "user"], ["1", "assistant"], ["2", "user"]]
    human = run(data, "context", "c1", "--budget", "40").stdout
    assert "Thanks" in human and "-token budget" in human and "over it" not in human
    tiny = " ".join(run(data, "context", "c1", "--budget", "3").stdout.split())
    assert "1 messages, 5 tokens of a 3-token budget: over it, because the system prompt and the current" in tiny
    schema = json.loads(run(data, "schema").stdout)
    assert {"MessageAppended", "SummaryProduced", "SummaryFailed", "SummaryRequested", "ConversationDeleted",
            "SettingsChanged", "ClockTicked"} <= set(schema)


def test_invalid_append_is_a_clear_error(tmp_path):
    proc = run(tmp_path / "d", "append", "c1", "wizard", "hi", check=False)
    assert proc.returncode == 2
    assert "unknown role 'wizard'" in proc.stderr


def test_sql_errors_are_reported_plainly(tmp_path):
    data = tmp_path / "data"
    run(data, "append", "c1", "user", "hi")
    proc = run(data, "sql", "SELECT nope FROM nowhere", check=False)
    assert proc.returncode == 1 and "query failed" in proc.stderr


def test_busy_projection_gives_a_clear_message(tmp_path):
    data = tmp_path / "data"
    run(data, "append", "c1", "user", "hi")
    holder = duckdb.connect(str(data / "projections.duckdb"))  # another process-like writer holds the file
    try:
        proc = subprocess.run(
            [sys.executable, "-c",
             "import sys; from memfold.cli.main import main; sys.exit(main(sys.argv[1:]))",
             "--data-dir", str(data), "context", "c1"],
            capture_output=True, text=True, timeout=60,
        )
    finally:
        holder.close()
    assert proc.returncode == 3, proc.stderr
    assert "in use by another memfold process" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_conversation_with_no_summary_yet_says_so_instead_of_an_empty_table(tmp_path):
    data = tmp_path / "d"
    run(data, "append", "c1", "user", "Hi, my order #48213 arrived broken")
    summaries = run(data, "summaries", "c1").stdout
    assert "no summary requested yet" in summaries and "┏" not in summaries
    audit = run(data, "audit", "c1").stdout
    assert "summary versions: none yet" in audit and "facts: none yet" in audit and "┏" not in audit


def test_a_table_piped_to_a_file_keeps_its_rows_on_one_line(tmp_path):
    """Off a terminal rich assumes 80 columns; memfold prints tables 200 wide there (COLUMNS still decides)."""
    data = tmp_path / "data"
    run(data, "append", "c1", "user", "Hello")
    value = "a description longer than a quarter of eighty columns, so that four such cells would fold"
    query = f"SELECT '{value}' AS first_description, '{value[:40]}' AS second_description, 1 AS n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_") and k != "COLUMNS"}
    out = subprocess.run([MEMFOLD, "--data-dir", str(data), "sql", query], capture_output=True, text=True,
                         timeout=120, env=env, check=True).stdout
    assert any(value in line and value[:40] in line.replace(value, "") for line in out.splitlines()), out
    narrow = subprocess.run([MEMFOLD, "--data-dir", str(data), "sql", query], capture_output=True, text=True,
                            timeout=120, env={**env, "COLUMNS": "80"}, check=True).stdout
    assert not any(value in line for line in narrow.splitlines())  # folded, as asked


def test_ingest_in_each_shape_and_context_json_in_each_format(tmp_path):
    from fixtures.shaped_conversation import INPUTS

    data = tmp_path / "data"
    # A window wider than the conversations: every turn stays verbatim, so the shapes can be compared turn by turn.
    config = tmp_path / "memfold.toml"
    config.write_text("[sliding_window]\nrolling_window_size = 50\nsummarize_after_seq = 40\n")
    run_ = functools.partial(run, config=config)
    for fmt, items in INPUTS.items():
        path = tmp_path / f"{fmt}.jsonl"
        path.write_text("".join(json.dumps({**m, "conversation_id": fmt}) + "\n" for m in items))
        # Line by line: each Responses function_call is its own message (8); the chat shape merges them back.
        n = 8 if fmt == "responses" else 6
        out = run_(data, "ingest", str(path), "--quiet", "--format", fmt).stdout
        assert f"ingested {n} messages, duplicates 0, rejected 0" in out
        # An Anthropic line holding three messages keys each by the line plus its position: a re-run stores none.
        assert f"ingested 0 messages, duplicates {n}" in run_(data, "ingest", str(path), "--quiet", "--format", fmt).stdout
    chats = {fmt: json.loads(run_(data, "context", fmt, "--json").stdout) for fmt in INPUTS}
    assert chats["anthropic"]["messages"] == chats["openai"]["messages"]
    # Responses lines are stored one call per message; context pairs each result with its call, still valid chat.
    calls = [(m["role"], m.get("content"), [c["id"] for c in m.get("tool_calls", [])], m.get("tool_call_id"))
             for m in chats["responses"]["messages"]]
    assert calls == [("user", "Weather in Paris and Rome?", [], None), ("assistant", "Checking both.", ["call_1"], None),
                     ("tool", "sunny", [], "call_1"), ("assistant", None, ["call_2"], None), ("tool", "rain", [], "call_2"),
                     ("user", "Thanks. Umbrella?", [], None), ("assistant", "Only in Rome.", [], None)]
    chat = chats["openai"]
    assert chat["messages"][1]["tool_calls"][1] == {"id": "call_2", "type": "function",
                                                    "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}
    assert chat["messages"][-1] == {"role": "assistant", "content": "Only in Rome."}
    assert chat["format"] == "openai" and len(chat["memfold"]) == len(chat["messages"])
    assert [n["kind"] for n in chat["memfold"]][-1] == "verbatim" and chat["memfold"][-1]["conversation"] == "openai"
    assert all(set(m) <= {"role", "content", "name", "tool_calls", "tool_call_id"} for m in chat["messages"])
    compact = json.loads(run_(data, "context", "openai", "--json", "--format", "compact").stdout)
    assert compact["memfold"] == [] and compact["messages"][-1]["kind"] == "verbatim"
    anthropic = json.loads(run_(data, "context", "openai", "--json", "--format", "anthropic").stdout)
    assert anthropic["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}
    responses = json.loads(run_(data, "context", "openai", "--json", "--format", "responses").stdout)
    assert [i.get("type") for i in responses["messages"]].count("function_call") == 2


def test_ingest_rejects_an_unstorable_shape_by_line_and_field(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"conversation_id": "c", "role": "assistant",
                                "content": [{"type": "thinking", "thinking": "hm"}]}) + "\n")
    proc = run(tmp_path / "data", "ingest", str(path), "--quiet", "--format", "anthropic", check=False)
    assert proc.returncode != 0 and "line 1 rejected: content[0].type" in proc.stderr
