"""The README's examples run: the Python snippet and the CLI session under "Using it"."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
MEMFOLD = str(Path(sys.executable).with_name("memfold"))


def _block(after: str, lang: str) -> str:
    section = README[README.index(after):]
    match = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert match, f"no {lang} block after {after!r}"
    return match.group(1)


def test_readme_starts_with_the_two_commands():
    first = _block("", "sh").splitlines()
    assert first[0].startswith("make demo") and first[1].startswith("make test")


def test_python_example_runs(tmp_path):
    code = _block("From Python:", "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, capture_output=True, text=True)
    assert (tmp_path / ".memfold" / "events.sqlite").is_file()


def test_cli_session_runs(tmp_path):
    (tmp_path / "conversations.jsonl").write_text(
        json.dumps({"conversation_id": "support-1", "role": "assistant", "content": "Sorry to hear that."}) + "\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    ran = 0
    for line in _block("## Using it", "sh").splitlines():
        line = line.split("  #", 1)[0].strip()
        if not line.startswith("memfold "):
            continue
        proc = subprocess.run([MEMFOLD, *shlex.split(line)[1:]], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, (line, proc.stderr)
        ran += 1
    assert ran >= 8
    ctx = subprocess.run([MEMFOLD, "context", "support-1", "--json"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=True).stdout
    assert [m["content"] for m in json.loads(ctx)] == ["Hi, my order #48213 arrived broken", "Sorry to hear that."]
