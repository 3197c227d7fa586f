"""Ingest from streams (a pipe into /dev/stdin, a FIFO, a process substitution) loses no line; an over-long line is never held whole.

Real subprocesses: ``memfold ingest`` as a user runs it, and a child that
measures its own peak memory around one ingest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

MEMFOLD = str(Path(sys.executable).with_name("memfold"))


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}


def _lines(n: int) -> bytes:
    return "".join(json.dumps({"conversation_id": f"c{i % 5}", "role": "user", "content": f"message {i}"}) + "\n"
                   for i in range(n)).encode()


def _contents(data: Path) -> list[str]:
    with MemoryEngine(Settings.load(None, data_dir=data), role="client") as engine:
        return sorted(r.event.payload.content for p in engine.log.partitions() for r in engine.log.read(p, 0, 100_000))


def _ingest(data: Path, target: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([MEMFOLD, "--data-dir", str(data), "ingest", target, "--quiet", "--no-wait"],
                          capture_output=True, timeout=300, env=_env(), **kw)


@pytest.mark.parametrize("n", [40, 1000])
def test_a_pipe_into_dev_stdin_stores_every_line(tmp_path, n):
    data = tmp_path / "data"
    proc = _ingest(data, "/dev/stdin", input=_lines(n))
    assert proc.returncode == 0, proc.stderr.decode()
    assert f"ingested {n} messages, duplicates 0, rejected 0" in proc.stdout.decode()
    assert _contents(data) == sorted(f"message {i}" for i in range(n))
    again = _ingest(data, "/dev/stdin", input=_lines(n))  # the same input piped again: named by content, not by file
    assert f"ingested 0 messages, duplicates {n}, rejected 0" in again.stdout.decode(), again.stderr.decode()


def test_a_fifo_stores_every_line(tmp_path):
    data, fifo = tmp_path / "data", tmp_path / "in.fifo"
    os.mkfifo(fifo)
    payload = _lines(3000)

    def feed() -> None:
        with open(fifo, "wb") as fh:  # blocks until the ingest opens the FIFO for reading
            fh.write(payload)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    proc = _ingest(data, str(fifo))
    writer.join(timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "ingested 3000 messages, duplicates 0, rejected 0" in proc.stdout.decode()
    assert len(_contents(data)) == 3000


@pytest.mark.skipif(shutil.which("bash") is None, reason="process substitution needs bash")
def test_a_process_substitution_stores_every_line_and_reports_the_right_line(tmp_path):
    data, src = tmp_path / "data", tmp_path / "src.jsonl"
    lines = _lines(1000).decode().splitlines()
    lines[499] = "{not json"
    src.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(["bash", "-c", '"$0" --data-dir "$1" ingest <(cat "$2") --quiet --no-wait',
                           MEMFOLD, str(data), str(src)], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 2, proc.stderr
    assert "ingested 999 messages, duplicates 0, rejected 1" in proc.stdout
    assert "line 500 rejected" in proc.stderr
    assert len(_contents(data)) == 999


MEASURE = """
import json, resource, sys
from pathlib import Path
from memfold.engine.engine import MemoryEngine
from memfold.cli.ingest import ingest_file
from memfold.core.settings import Settings

settings = Settings.load(None, data_dir=Path(sys.argv[1]), max_message_chars=100)
with MemoryEngine(settings, role="client") as engine:
    ingest_file(engine, Path(sys.argv[2]), progress=False)  # warm up: imports, connections, keys
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = ingest_file(engine, Path(sys.argv[3]), progress=False)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kib": after - before, "accepted": report.accepted,
                  "rejected": [[r.line, r.reason] for r in report.rejected]}))
"""


def test_an_overlong_line_without_a_newline_is_rejected_in_bounded_memory(tmp_path):
    warm = tmp_path / "warm.jsonl"
    warm.write_bytes(_lines(3))
    big = tmp_path / "big.jsonl"
    line = json.dumps({"conversation_id": "c1", "role": "user", "content": "before"}).encode() + b"\n"
    head = b'{"conversation_id": "c1", "role": "user", "content": "'
    chunk = b"x" * (1 << 20)
    with big.open("wb") as fh:  # 30 MiB on line 2, then 30 MiB on line 4 with no newline; the limit is 4 * 100 + 2 MiB
        fh.write(line)
        fh.write(head + chunk * 30 + b'"}\r\n')
        fh.write(line.replace(b"before", b"after"))
        fh.write(head + chunk * 30)
    sizes = [len(head) + 30 * len(chunk) + 4, len(head) + 30 * len(chunk)]
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "data"), str(warm), str(big)],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["accepted"] == 2
    assert [n for n, _ in out["rejected"]] == [2, 4]
    for (_, reason), size in zip(out["rejected"], sizes):
        assert reason == f"line is {size} bytes; the limit is {4 * 100 + 2 * 1024 * 1024}"
    assert out["grew_kib"] < 16 * 1024, out  # each line is 30 MiB: held whole, the peak would grow by that at least
