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
    assert [m["content"] for m in json.loads(ctx)["messages"]] == ["Hi, my order #48213 arrived broken",
                                                                   "Sorry to hear that."]


def test_replay_session_runs(tmp_path):
    """The "Replays" block: replay, resume, another policy, list, SQL over a replay, diff, drop, promote."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    (tmp_path / "c.jsonl").write_text("".join(
        json.dumps({"conversation_id": "support-1", "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"turn {i}: order #{48200 + i} ships from Leeds on day {i}"}) + "\n" for i in range(30)))
    subprocess.run([MEMFOLD, "ingest", "c.jsonl", "--quiet"], cwd=tmp_path, env=env, check=True, capture_output=True)
    outputs = []
    for line in _block("## Replays", "sh").splitlines():
        line = line.split("  #", 1)[0].strip()
        proc = subprocess.run([MEMFOLD, *shlex.split(line)[1:]], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, (line, proc.stderr)
        outputs.append(proc.stdout)
    assert "window8" in outputs[3] and "roll" in outputs[3] and "completed" in outputs[4]
    assert "live vs replay window8" in outputs[5] and "support" in outputs[5]  # the diff table
    assert json.loads((tmp_path / ".memfold" / "promoted.json").read_text())["sliding_window.rolling_window_size"] == 8
    audit = subprocess.run([MEMFOLD, "audit", "support-1", "--json"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, check=True).stdout
    assert [c["settings"]["replay"] for c in json.loads(audit)["settings"]["changes"]] == ["window8"]


def test_readme_and_docs_link_only_inside_the_repository():
    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        text = page.read_text()
        assert "../shared" not in text and "seeds/" not in text, page
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(root) and resolved.exists(), f"{page.name} links to {target}"
            checked += 1
    assert checked >= 5


def test_service_session_runs(tmp_path):
    """The "As a service" block: a key, a live 'memfold serve', the curl calls and the CLI's --url mode."""
    import time

    import httpx
    from fixtures.kafka_broker import free_port

    port = str(free_port())
    lines = [ln.split("  #", 1)[0].strip() for ln in _block("## As a service", "sh").replace("\\\n", " ").splitlines()]
    lines = [ln.replace("8080", port) for ln in lines if ln]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    env["PATH"] = f"{Path(MEMFOLD).parent}:{env['PATH']}"
    key = subprocess.run(shlex.split(lines[0]), cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    env["KEY"] = key
    server = subprocess.Popen(shlex.split(lines[1]), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        outputs = [subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=120, check=True).stdout for line in lines[2:]]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert json.loads(outputs[0])["messages"][0]["id"] == "m1"
    assert json.loads(outputs[1])["messages"][-1]["content"] == "Order #48213 arrived broken"
    assert "Order #48213 arrived broken" in outputs[2]
