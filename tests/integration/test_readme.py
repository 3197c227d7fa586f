"""The README's examples run (and the "Replays" session of docs/replays.md): the Python snippet, the CLI session."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
REPLAYS = (Path(__file__).resolve().parents[2] / "docs" / "replays.md").read_text()
MEMFOLD = str(Path(sys.executable).with_name("memfold"))


def _block(after: str, lang: str, page: str = README) -> str:
    section = page[page.index(after):]
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
    """docs/replays.md's "Replays" block: replay, resume, another policy, list, SQL, diff, drop, promote."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    (tmp_path / "c.jsonl").write_text("".join(
        json.dumps({"conversation_id": "support-1", "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"turn {i}: order #{48200 + i} ships from Leeds on day {i}"}) + "\n" for i in range(30)))
    subprocess.run([MEMFOLD, "ingest", "c.jsonl", "--quiet"], cwd=tmp_path, env=env, check=True, capture_output=True)
    outputs = []
    for line in _block("## Replays", "sh", REPLAYS).splitlines():
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


def _model_call_blocks() -> list[str]:
    section = README[README.index("### Use the context in a model call"):]
    section = section[: section.index("\n## ")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _seeded(tmp_path: Path) -> None:
    """A data dir under ``tmp_path/.memfold`` with a conversation that called a tool."""
    from fixtures.shaped_conversation import OPENAI

    from memfold.engine.engine import MemoryEngine

    with MemoryEngine.open(tmp_path / ".memfold") as engine:
        engine.append_many([{**m, "conversation_id": "support-1"} for m in OPENAI])
        engine.wait_idle(60)


def test_the_openai_model_call_snippet_runs_and_stores_the_reply(tmp_path, openai_server):
    from memfold.engine.engine import MemoryEngine

    _seeded(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFOLD_", "OPENAI_"))}
    env.update(OPENAI_BASE_URL=openai_server.url, OPENAI_API_KEY="test-key")
    before = len(openai_server.requests)
    proc = subprocess.run([sys.executable, "-c", _model_call_blocks()[0]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    sent = [r for r in openai_server.requests[before:] if r.path.endswith("/chat/completions")]
    assert sent and sent[-1].body["messages"][-1] == {"role": "user", "content": "Which order arrived broken?"}
    assert any(m.get("tool_calls") for m in sent[-1].body["messages"])  # the tool turns went in, in OpenAI's shape
    with MemoryEngine.open(tmp_path / ".memfold") as engine:
        engine.wait_idle(60)  # this process folds what the snippet's process appended last
        assert engine.history("support-1")[-1].role == "assistant"  # the reply, stored as the SDK returned it


def test_the_anthropic_model_call_snippet_builds_a_request_the_sdk_types_accept(tmp_path, monkeypatch):
    from anthropic.types import MessageParam
    from fixtures.shaped_conversation import check_sdk_type

    _seeded(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_model_call_blocks()[1], "README.md", "exec"), namespace)  # noqa: S102 - the README's own snippet
    request = namespace["request"]
    for message in request["messages"]:
        check_sdk_type(message, MessageParam)
    blocks = [b for m in request["messages"] if isinstance(m["content"], list) for b in m["content"]]
    assert {b["type"] for b in blocks} >= {"tool_use", "tool_result"}
    assert all(m["role"] in ("user", "assistant") for m in request["messages"])


def test_the_agents_sdk_snippet_keeps_the_turn_in_memfold(tmp_path, service, openai_server):
    import httpx

    key = service.key("readme-agents", "writer")
    code = _model_call_blocks()[2].replace("http://127.0.0.1:8080", service.url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFOLD_", "OPENAI_"))}
    env.update(MEMFOLD_API_KEY=key, OPENAI_BASE_URL=openai_server.url, OPENAI_API_KEY="test-key",
               OPENAI_AGENTS_DISABLE_TRACING="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()  # the agent's answer
    stored = httpx.get(f"{service.url}/v1/conversations/support-1/messages",
                       headers={"Authorization": f"Bearer {key}"}, timeout=30).json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[0]["content"] == "Which order arrived broken?"


ANALYTICS = (Path(__file__).resolve().parents[2] / "docs" / "analytics.md").read_text()


def test_analytics_queries_run_over_a_snapshot(tmp_path):
    """docs/analytics.md: the snapshot commands, then every query of "## Queries" over the snapshot and a replay's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    env["MEMFOLD_POLICIES"] = "sliding_window,hierarchical"
    lines, per_tenant = [], {"acme": 0, "globex": 0}
    for i in range(90):
        tenant = "acme" if i % 3 else "globex"
        per_tenant[tenant] += 1
        lines.append({"tenant_id": tenant, "conversation_id": f"support-{i % 2}", "role": "user" if i % 2 == 0 else
                      "assistant", "occurred_at": f"2026-03-0{1 + i // 30}T10:{i % 60:02d}:00Z",
                      "content": f"turn {i}: my order id is #{48200 + i // 10}, it ships from Leeds on day {i}"})
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    def memfold(*args: str) -> str:
        proc = subprocess.run([MEMFOLD, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (args, proc.stderr)
        return proc.stdout

    memfold("ingest", "c.jsonl", "--quiet")
    memfold("replay", "--name", "window8", "--set", "sliding_window.rolling_window_size=8")
    for line in _block("## Writing snapshots", "sh", ANALYTICS).splitlines():
        memfold(*shlex.split(line.split("  #", 1)[0].strip())[1:])
    queries = re.findall(r"```sql\n(.*?)```", ANALYTICS[ANALYTICS.index("## Queries"):], re.S)
    assert len(queries) == 4
    growth, cost, churn, replay = (json.loads(memfold("sql", "--snapshot", ".memfold/snapshots", "--json", q))
                                   for q in queries)
    assert {t: sum(r["messages"] for r in growth if r["tenant_id"] == t) for t in per_tenant} == per_tenant
    assert {r["date"] for r in growth} == {"2026-03-01", "2026-03-02", "2026-03-03"}
    assert [r["messages_to_date"] for r in growth if r["tenant_id"] == "acme"][-1] == per_tenant["acme"]
    assert {r["policy"] for r in cost} == {"sliding_window", "hierarchical"}
    assert all(r["model_calls"] + r["cache_hits"] > 0 and r["tokens_out"] > 0 for r in cost)
    assert churn and max(r["changes"] for r in churn) >= 1  # the order id changed every ten turns
    assert all(r["conversations"] >= 1 and r["taught_in"] for r in churn)
    windows = [r for r in replay if r["policy"] == "sliding_window"]
    assert windows and all(r["live_hash"] != r["replay_hash"] and r["replay_summaries"] > 0
                           and r["replay_tokens_out"] != r["live_tokens_out"] for r in windows)  # other summaries
    same = [r for r in replay if r["policy"] == "hierarchical"]  # settings unchanged: the same summaries, same hash
    assert same and all(r["live_hash"] == r["replay_hash"] and r["replay_summaries"] == r["live_summaries"] for r in same)
