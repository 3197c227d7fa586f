"""CLI errors are one line with the documented exit code; a read never changes the data dir."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

MEMFOLD = str(Path(sys.executable).with_name("memfold"))


def run(data_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    proc = subprocess.run([MEMFOLD, "--data-dir", str(data_dir), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memfold: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    data = root / "data"
    proc = run(data, "append", "c1", "user", "Hi, my order #48213 arrived broken")
    assert proc.returncode == 0, proc.stderr
    return data


def snapshot(data: Path) -> dict:
    """What the data dir holds: its files, the log's bytes, every projection table and the policies kept."""
    from memfold.projections.store import DuckDBProjectionStore

    store = DuckDBProjectionStore(data / "projections.duckdb", read_only=True)
    try:
        projection = store.dump()
        policies = store.meta("policies")
    finally:
        store.close()
    log = hashlib.sha256((data / "events.sqlite").read_bytes()).hexdigest()
    return {"files": sorted(p.name for p in data.iterdir()), "log": log, "projection": projection, "policies": policies}


@pytest.mark.parametrize(
    ("args", "code", "needles"),
    [
        (("ingest", "missing.jsonl"), 1, ("missing.jsonl: no such file",)),
        (("ingest", "/"), 1, ("is a directory",)),
        (("ingest",), 2, ("usage:", "file")),
        (("ingest", "x.jsonl", "--batch-size", "0"), 2, ("--batch-size", "at least 1")),
        (("context", "c1", "--budget", "-5"), 2, ("--budget", "at least 1")),
        (("context", "c1", "--budget", "lots"), 2, ("--budget", "not a whole number")),
        (("--policy", "bogus", "context", "c1"), 2, ("unknown policy 'bogus'", "choose from")),
        (("context", "nobody"), 2, ("no conversation 'nobody'", "SELECT tenant_id, conversation_id")),
        (("history", "c1", "--tenant", "other"), 2, ("no conversation 'c1' for tenant 'other'",)),
        (("--policy", "rolling", "context", "c1"), 2, ("does not keep the rolling policy", "--policy rolling rebuild")),
        (("append", "c1", "wizard", "hi"), 2, ("unknown role 'wizard'",)),
        (("frobnicate",), 2, ("usage:", "invalid choice")),
        (("context",), 2, ("usage:", "conversation")),
    ],
)
def test_errors_are_one_line_with_the_documented_code_and_reads_change_nothing(data, args, code, needles):
    before = snapshot(data)
    line = one_line_error(run(data, *args), code, *needles)
    assert "line 1" not in line
    assert snapshot(data) == before, "the data dir changed"


def test_the_command_the_error_names_adds_the_policy(tmp_path):
    data = tmp_path / "d"
    assert run(data, "append", "c1", "user", "hello there").returncode == 0
    line = one_line_error(run(data, "--policy", "rolling", "context", "c1"), 2, "rebuild")
    command = line.split("`")[1].split()
    assert command[0] == "memfold" and run(data, *command[3:]).returncode == 0
    proc = run(data, "--policy", "rolling", "context", "c1", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["messages"][-1]["content"] == "hello there"


def test_a_read_of_a_missing_data_dir_creates_nothing(tmp_path):
    one_line_error(run(tmp_path / "nowhere", "context", "c1"), 2, "no memfold data in")
    assert not (tmp_path / "nowhere").exists()


def test_ingest_report_lists_20_rejections_and_writes_all_with_errors(tmp_path):
    lines = []
    for i in range(60):
        lines.append(json.dumps({"conversation_id": "c", "role": "user", "content": f"m{i}"}) if i % 2 else "{bad")
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    errors = tmp_path / "errors.jsonl"
    proc = run(tmp_path / "d", "ingest", str(path), "--quiet", "--errors", str(errors))
    assert proc.returncode == 2
    assert "ingested 30 messages, duplicates 0, rejected 30" in proc.stdout
    listed = [line for line in proc.stderr.splitlines() if " rejected: " in line]
    assert len(listed) == 20 and listed[0].startswith("memfold: line 1 rejected: not valid JSON")
    assert "and 10 more rejected line(s)" in proc.stderr
    written = [json.loads(line) for line in errors.read_text().splitlines()]
    assert [w["line"] for w in written] == list(range(1, 61, 2))
    again = run(tmp_path / "d", "ingest", str(path), "--quiet", "--resume")
    assert again.returncode == 2, again.stderr  # the bad lines are reported again; nothing stored twice
    assert "the log held 30 line(s), up to line 60" in again.stdout
    assert "ingested 0 messages, duplicates 30, rejected 30" in again.stdout
    rerun = run(tmp_path / "d", "ingest", str(path), "--quiet")
    assert rerun.returncode == 2 and "ingested 0 messages, duplicates 30, rejected 30" in rerun.stdout


def test_clean_ingest_exits_0(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"conversation_id": "c", "role": "user", "content": "hi"}) + "\n\n")
    proc = run(tmp_path / "d", "ingest", str(path), "--quiet", "--no-wait")
    assert proc.returncode == 0 and "ingested 1 messages, duplicates 0, rejected 0" in proc.stdout


def test_readers_during_an_ingest_get_the_answer_or_busy_retry(tmp_path):
    data = tmp_path / "d"
    assert run(data, "append", "c1", "user", "before the ingest").returncode == 0
    path = tmp_path / "big.jsonl"
    with path.open("w") as fh:
        for i in range(10_000):
            fh.write(json.dumps({"conversation_id": f"c{i % 50}", "role": "user", "content": f"message {i}"}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    writer = subprocess.Popen([MEMFOLD, "--data-dir", str(data), "ingest", str(path), "--quiet"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    outcomes = []
    try:
        while writer.poll() is None and len(outcomes) < 3:
            proc = run(data, "context", "c1", "--json", timeout=60)  # bounded: a hang fails the test
            outcomes.append(proc.returncode)
            if proc.returncode == 0:
                assert "before the ingest" in json.loads(proc.stdout)["messages"][0]["content"]  # verbatim or summarized
            else:
                one_line_error(proc, 3, "busy, retry")
            time.sleep(0.2)
    finally:
        if writer.poll() is None:  # enough reads seen: Ctrl-C the writer (its summaries are answered later)
            writer.send_signal(signal.SIGINT)
        out, err = writer.communicate(timeout=300)
    assert writer.returncode in (0, 130) and "Traceback" not in err, err
    assert outcomes, "the ingest ended before any read; the test proved nothing"
    assert run(data, "context", "c1", "--json").returncode == 0
