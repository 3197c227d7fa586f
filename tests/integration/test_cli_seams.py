"""The CLI's promises at its seams: --url is remote or refused, output cannot drive a terminal, inputs are not erased.

Every command runs as a real ``memfold`` subprocess; remote ones talk to a
real ``memfold serve`` on loopback (the session ``service`` fixture).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.kafka_broker import free_port

from memfold.cli.main import _parser
from memfold.client import Client

pytestmark = pytest.mark.timeout(300)

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
HOSTILE = "hi \x1b]0;pwned\x07 there \x1b[31mred \u009b2J [bold]markup[/] \u202eevil\r over"


def run(*args: str, env: dict[str, str] | None = None, stdin=None, timeout: float = 120) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    proc = subprocess.run([MEMFOLD, *args], capture_output=True, text=True, timeout=timeout,
                          env={**clean, **(env or {})}, stdin=stdin)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memfold: "), proc.stderr
    return lines[0]


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: its bytes' hash and its mtime."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def commands() -> list[str]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


# ----------------------------------------------------------------- finding 13: --url is remote, or refused

REMOTE = {"append", "ingest", "context", "history", "summaries", "sql", "forget", "reopen", "audit", "verify",
          "replay", "replays", "drop", "promote", "diff", "user", "search"}


def _args(command: str, jsonl: Path) -> tuple[str, ...]:
    return {
        "append": ("append", "c1", "user", "hello"), "ingest": ("ingest", str(jsonl)), "context": ("context", "c1"),
        "history": ("history", "c1"), "summaries": ("summaries", "c1"), "sql": ("sql", "SELECT 1"),
        "schema": ("schema",), "rebuild": ("rebuild",), "project": ("project", "--until-caught-up"),
        "worker": ("worker",), "demo": ("demo",), "forget": ("forget", "c1"), "reopen": ("reopen", "c1"),
        "verify": ("verify",), "audit": ("audit", "c1"), "replay": ("replay", "--name", "r1"),
        "replays": ("replays",), "drop": ("drop", "r1"), "promote": ("promote", "r1"), "diff": ("diff", "r1"),
        "serve": ("serve", "--port", "1"), "keys": ("keys", "list"), "export": ("export", str(jsonl.parent / "out")),
        "import": ("import", str(jsonl.parent / "out")), "snapshot": ("snapshot", str(jsonl.parent / "snap")),
        "user": ("user", "show", "u1"),
        "search": ("search", "order"),
    }[command]


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[Path, Path]:
    """A data dir holding conversation c1 (written by the embedded engine), and a JSONL file beside it."""
    root = tmp_path_factory.mktemp("seams")
    data = root / "data"
    assert run("--data-dir", str(data), "append", "c1", "user", "my order #48213 arrived broken").returncode == 0
    jsonl = root / "in.jsonl"
    jsonl.write_text(json.dumps({"conversation_id": "c1", "role": "user", "content": "more"}) + "\n")
    return data, jsonl


@pytest.mark.parametrize("command", commands())
def test_every_command_with_url_and_no_server_fails_in_one_line_and_leaves_the_data_dir_alone(filled, command):
    data, jsonl = filled
    before = snapshot(data)
    dead = f"http://127.0.0.1:{free_port()}"
    proc = run("--data-dir", str(data), "--url", dead, "--api-key", "mf_x_y", *_args(command, jsonl))
    line = one_line(proc)
    if command in REMOTE:
        assert proc.returncode == 1 and "is `memfold serve` running there?" in line, line
    else:
        assert proc.returncode == 2 and f"{command} works on a local data dir; --url is not supported" in line, line
    assert snapshot(data) == before, "the local data dir changed"
    history = json.loads(run("--data-dir", str(data), "history", "c1", "--json").stdout)
    assert [m["content"] for m in history] == ["my order #48213 arrived broken"]


def test_the_remote_commands_listed_are_the_cli_s(filled):
    from memfold.cli.remote import REMOTE as served

    assert set(served) == REMOTE and REMOTE < set(commands())


def test_memfold_url_from_the_environment_is_refused_by_local_commands_too(filled):
    data, _ = filled
    before = snapshot(data)
    proc = run("--data-dir", str(data), "rebuild", env={"MEMFOLD_URL": f"http://127.0.0.1:{free_port()}"})
    assert proc.returncode == 2 and "MEMFOLD_URL is not supported" in one_line(proc)
    assert snapshot(data) == before


# ----------------------------------------------------------------- finding 10: --errors naming the input

@pytest.mark.parametrize("remote", [False, True], ids=["embedded", "remote"])
def test_ingest_errors_file_naming_the_input_is_refused_and_the_input_kept(tmp_path, remote):
    jsonl = tmp_path / "in.jsonl"
    content = "".join(json.dumps({"conversation_id": "c", "role": "user", "content": f"m{i}"}) + "\n" for i in range(3))
    jsonl.write_text(content + "{broken\n")
    link = tmp_path / "link.jsonl"
    os.link(jsonl, link)
    url = ("--url", f"http://127.0.0.1:{free_port()}", "--api-key", "mf_x_y") if remote else ()
    for errors in (str(jsonl), str(link)):  # the same path, and another name of the same inode
        proc = run("--data-dir", str(tmp_path / "d"), *url, "ingest", str(jsonl), "--errors", errors)
        assert proc.returncode == 2 and "is the input file" in one_line(proc)
        assert jsonl.read_text() == content + "{broken\n"
    with jsonl.open() as stdin:  # the input as /dev/stdin, redirected from the file --errors names
        proc = run("--data-dir", str(tmp_path / "d"), *url, "ingest", "/dev/stdin", "--errors", str(jsonl), stdin=stdin)
    assert proc.returncode == 2 and "is the input file" in one_line(proc)
    assert jsonl.read_text() == content + "{broken\n"
    assert not (tmp_path / "d").exists()


def test_ingest_errors_file_elsewhere_still_gets_the_rejections(tmp_path):
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"conversation_id": "c", "role": "user", "content": "fine"}) + "\n{broken\n")
    proc = run("--data-dir", str(tmp_path / "d"), "ingest", str(jsonl), "--quiet", "--errors", str(tmp_path / "e.jsonl"))
    assert proc.returncode == 2
    assert [json.loads(x)["line"] for x in (tmp_path / "e.jsonl").read_text().splitlines()] == [2]


# ----------------------------------------------------------------- finding 12: terminal-safe output

def _assert_escaped(out: str) -> None:
    for raw in ("\x1b", "\x07", "\u009b", "\u202e", "\r"):
        assert raw not in out, repr(out)
    assert "\\x1b]0;pwned\\x07" in out and "\\x9b2J" in out and "\\u202eevil" in out and "\\x0d over" in out


def test_human_output_shows_control_characters_as_escapes_and_json_escapes_them(tmp_path):
    data = str(tmp_path / "d")
    assert run("--data-dir", data, "append", "c1", "user", HOSTILE).returncode == 0
    for args in (("history", "c1"), ("context", "c1"), ("sql", "SELECT content FROM messages"),
                 ("context", "c1", "--budget", "5")):
        proc = run("--data-dir", data, *args, env={"COLUMNS": "400"})  # a table cut to 80 columns hides the cell
        assert proc.returncode == 0, proc.stderr
        _assert_escaped(proc.stdout)
        assert "[bold]markup[/]" in " ".join(proc.stdout.split())  # content, not rich markup
    for args in (("history", "c1", "--json"), ("context", "c1", "--json"), ("sql", "SELECT content FROM messages", "--json")):
        out = run("--data-dir", data, *args).stdout
        assert not any(c in out for c in ("\x1b", "\u009b", "\u202e", "\r")), repr(out)
        rows = json.loads(out)
        assert HOSTILE in [row["content"] for row in (rows["messages"] if isinstance(rows, dict) else rows)]  # JSON escapes; the value is intact


def test_an_error_line_quoting_content_is_terminal_safe(tmp_path):
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"conversation_id": "c", "role": "\x1b]0;pwned\x07", "content": "x"}) + "\n")
    proc = run("--data-dir", str(tmp_path / "d"), "ingest", str(jsonl), "--quiet")
    assert proc.returncode == 2 and "line 1 rejected" in proc.stderr
    assert "\x1b" not in proc.stderr and "\\x1b]0;pwned" in proc.stderr


# ----------------------------------------------------------------- findings 13/14 against a live service

def _remote(service, key: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return run("--url", service.url, "--api-key", key, *args, **kw)


def test_url_ingest_twice_stores_each_line_once_and_a_read_sees_them_at_once(service, tmp_path):
    key = service.key("seams-ingest", "admin")
    rows = [
        {"conversation_id": "ri-1", "role": "user", "content": "ok"},
        {"conversation_id": "ri-1", "role": "user", "content": "ok"},  # said twice: kept twice
        {"conversation_id": "ri-2", "role": "user", "content": "other conversation", "ts": "2026-02-01T10:00:00Z"},
        {"conversation_id": "ri-1", "role": "user", "content": "not mine", "tenant_id": "someone-else"},
        {"conversation_id": "ri-1", "role": "assistant", "content": "mine", "tenant_id": "seams-ingest"},
    ]
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    errors = tmp_path / "errors.jsonl"
    first = _remote(service, key, "ingest", str(jsonl), "--errors", str(errors))
    assert first.returncode == 2, first.stderr
    assert "ingested 4 messages, duplicates 0, rejected 1" in first.stdout
    assert "line 4 rejected: tenant_id 'someone-else' is not the API key's tenant 'seams-ingest'" in first.stderr
    assert [(e["line"], e["field"]) for e in map(json.loads, errors.read_text().splitlines())] == [(4, "tenant_id")]
    with Client(service.url, key) as mf:  # no wait: the ingest returned once reads see what it stored
        assert [m.content for m in mf.messages("ri-1")] == ["ok", "ok", "mine"]
        assert [m.content for m in mf.messages("ri-2")] == ["other conversation"]
        again = _remote(service, key, "ingest", str(jsonl))
        assert "ingested 0 messages, duplicates 4, rejected 1" in again.stdout, again.stdout
        resumed = _remote(service, key, "ingest", str(jsonl), "--resume")
        assert "ingested 0 messages, duplicates 4, rejected 1" in resumed.stdout, resumed.stdout
        assert len(mf.messages("ri-1")) == 3 and len(mf.messages("ri-2")) == 1
        copy = tmp_path / "copy.jsonl"  # another source: the same lines are other messages
        copy.write_text(jsonl.read_text())
        same_source = _remote(service, key, "ingest", str(copy), "--source", "chat.jsonl")
        assert "ingested 0 messages, duplicates 4" in same_source.stdout, same_source.stdout
        other = _remote(service, key, "ingest", str(copy))
        assert "ingested 4 messages, duplicates 0" in other.stdout, other.stdout
        assert len(mf.messages("ri-1")) == 6


def test_url_ingest_strict_writes_nothing_after_the_first_bad_line(service, tmp_path):
    key = service.key("seams-strict", "writer")
    rows = [
        json.dumps({"conversation_id": "s-a", "role": "user", "content": "a1"}),
        json.dumps({"conversation_id": "s-b", "role": "user", "content": "b1"}),
        json.dumps({"conversation_id": "s-a", "role": "robot", "content": "refused by the service"}),
        json.dumps({"conversation_id": "s-b", "role": "user", "content": "b2 after the bad line"}),
        json.dumps({"conversation_id": "s-a", "role": "user", "content": "a2 after the bad line"}),
    ]
    jsonl = tmp_path / "strict.jsonl"
    jsonl.write_text("\n".join(rows) + "\n")
    proc = _remote(service, key, "ingest", str(jsonl), "--strict")
    assert proc.returncode == 2 and "line 3 rejected" in proc.stderr and "stopped at line 3 (--strict)" in proc.stderr
    with Client(service.url, key) as mf:
        assert [m.content for m in mf.messages("s-a")] == ["a1"]
        assert [m.content for m in mf.messages("s-b")] == ["b1"]


def test_remote_commands_act_on_the_service_not_the_local_data_dir(service, tmp_path):
    key = service.key("seams-remote", "admin")
    local = tmp_path / "local"
    assert run("--data-dir", str(local), "append", "rc-1", "user", "local only").returncode == 0
    before = snapshot(local)
    at = ("--data-dir", str(local))
    assert _remote(service, key, *at, "append", "rc-1", "user", HOSTILE).returncode == 0
    assert _remote(service, key, *at, "append", "rc-1", "assistant", "noted").returncode == 0
    history = _remote(service, key, *at, "history", "rc-1")
    assert history.returncode == 0 and "local only" not in history.stdout
    _assert_escaped(history.stdout)
    _assert_escaped(_remote(service, key, *at, "context", "rc-1").stdout)
    as_json = json.loads(_remote(service, key, *at, "history", "rc-1", "--json").stdout)
    assert [m["content"] for m in as_json] == [HOSTILE, "noted"]
    audit = _remote(service, key, *at, "audit", "rc-1")
    assert audit.returncode == 0 and "seams-remote/rc-1: active, 2 messages" in audit.stdout
    verified = _remote(service, key, *at, "verify", "rc-1")
    assert verified.returncode == 0 and "verified via" in verified.stdout, verified.stderr
    summaries = _remote(service, key, *at, "summaries", "rc-1", "--json")
    assert summaries.returncode == 0 and json.loads(summaries.stdout) == []
    wrong_tenant = _remote(service, key, *at, "history", "rc-1", "--tenant", "other")
    assert wrong_tenant.returncode == 2 and "the API key is tenant 'seams-remote'" in one_line(wrong_tenant)
    replay_sql = _remote(service, key, *at, "sql", "SELECT 1", "--replay", "r")
    assert replay_sql.returncode == 2 and "sql --replay works on a local data dir" in one_line(replay_sql)
    forgot = _remote(service, key, *at, "forget", "rc-1")
    assert forgot.returncode == 0 and "forgot rc-1 via" in forgot.stdout, forgot.stderr
    gone = _remote(service, key, *at, "history", "rc-1")
    assert gone.returncode != 0 and "no conversation 'rc-1'" in one_line(gone)
    missing = _remote(service, key, *at, "forget", "never-was")
    assert missing.returncode != 0 and "never-was" in one_line(missing)
    assert snapshot(local) == before
    assert [m["content"] for m in json.loads(run(*at, "history", "rc-1", "--json").stdout)] == ["local only"]


def test_remote_replay_commands_use_the_service_s_replays(service, tmp_path):
    key = service.key("seams-ops", "operator")
    assert _remote(service, key, "append", "op-1", "user", "hello replay").returncode == 0
    started = _remote(service, key, "replay", "--name", "seams-r", "--set", "hierarchical.trigger_message_count=30",
                      "--json", timeout=300)
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["job"]["state"] == "done"
    listed = json.loads(_remote(service, key, "replays", "--json").stdout)
    assert "seams-r" in [r["name"] for r in listed]
    diff = _remote(service, key, "diff", "seams-r", "op-1")
    assert diff.returncode == 0 and json.loads(diff.stdout)["name"] == "seams-r"
    dropped = _remote(service, key, "drop", "seams-r")
    assert dropped.returncode == 0 and "dropped replay seams-r" in dropped.stdout
    assert "seams-r" not in [r["name"] for r in json.loads(_remote(service, key, "replays", "--json").stdout)]


# ----------------------------------------------------------------- forget, reopen: one line, documented codes

def test_forget_then_append_says_reopen_and_reopen_starts_it_again(tmp_path):
    data = ("--data-dir", str(tmp_path / "d"))
    assert run(*data, "append", "f-1", "user", "my card is 4111 1111 1111 1111").returncode == 0
    assert run(*data, "forget", "f-1").returncode == 0
    refused = run(*data, "append", "f-1", "user", "hello again")
    assert refused.returncode == 2 and "memfold reopen" in one_line(refused) and "forgotten" in one_line(refused)
    reopened = run(*data, "reopen", "f-1")
    assert reopened.returncode == 0 and "reopened default/f-1" in reopened.stdout, reopened.stderr
    assert run(*data, "append", "f-1", "user", "a fresh start").returncode == 0
    history = json.loads(run(*data, "history", "f-1", "--json").stdout)
    assert [m["content"] for m in history] == ["a fresh start"]
    never = run(*data, "forget", "never-was")
    assert never.returncode == 2 and "never-was" in one_line(never)


def test_remote_forget_then_append_says_reopen_and_reopen_starts_it_again(service):
    key = service.key("seams-gone", "admin")
    assert _remote(service, key, "append", "rg-1", "user", "secret").returncode == 0
    assert _remote(service, key, "forget", "rg-1").returncode == 0
    refused = _remote(service, key, "append", "rg-1", "user", "hello again")
    assert refused.returncode == 2 and "memfold reopen" in one_line(refused) and "410" in one_line(refused)
    reopened = _remote(service, key, "reopen", "rg-1")
    assert reopened.returncode == 0 and "reopened rg-1" in reopened.stdout, reopened.stderr
    assert _remote(service, key, "append", "rg-1", "user", "a fresh start").returncode == 0
    history = json.loads(_remote(service, key, "history", "rg-1", "--json").stdout)
    assert [m["content"] for m in history] == ["a fresh start"]
