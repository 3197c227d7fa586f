"""The ``memfold`` console script ends without CPython's teardown, and loses no output and no exit code doing so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}


def memfold(data: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([MEMFOLD, "--data-dir", str(data), *args], capture_output=True, text=True, env=ENV,
                          timeout=120, **kw)


def test_every_line_of_a_long_answer_is_written_before_the_process_ends(tmp_path):
    data = tmp_path / "data"
    assert memfold(data, "append", "c1", "user", "order #7781 arrived cracked").returncode == 0
    done = memfold(data, "sql", "SELECT range AS n, repeat('x', 100) AS pad FROM range(20000)", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)  # cut short, the JSON would not parse
    assert [r["n"] for r in rows] == list(range(20000))
    # what the engine wrote is there for the next process: the appended message was folded and committed
    assert json.loads(memfold(data, "history", "c1", "--json").stdout)[0]["content"] == "order #7781 arrived cracked"


def test_the_exit_code_and_error_line_of_a_failing_command_are_kept(tmp_path):
    done = memfold(tmp_path / "none", "history", "c1")
    assert done.returncode == 2
    assert done.stderr.startswith("memfold: no memfold data in ")


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    data = tmp_path / "data"
    assert memfold(data, "append", "c1", "user", "hello").returncode == 0
    proc = subprocess.Popen([MEMFOLD, "--data-dir", str(data), "sql", "SELECT range FROM range(200000)", "--csv"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    assert proc.stdout.readline().strip() == b"range"
    proc.stdout.close()  # as `| head -1` does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert b"Traceback" not in err and b"Exception ignored" not in err, err


def test_output_that_cannot_be_written_is_an_error_not_a_success(tmp_path):
    data = tmp_path / "data"
    assert memfold(data, "append", "c1", "user", "hello").returncode == 0
    with open("/dev/full", "w") as full:  # every write fails with ENOSPC
        done = subprocess.run([MEMFOLD, "--data-dir", str(data), "sql", "SELECT 1 AS one"], stdout=full,
                              stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith("memfold: error") and "No space left on device" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
