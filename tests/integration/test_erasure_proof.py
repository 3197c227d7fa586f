"""The erasure proof: after ``forget`` no byte under the data dir (or the broker's) holds anything the user said.

Distinct markers go into every field a message and a tool call can carry
(content, name, model variant, metadata keys and values, tool-call ids,
names and arguments, the tool result's ``tool_call_id``, a retraction's
reason, an ingested line), with all five policies folding (summaries, facts,
topic titles, search terms, fold states, state history, the summary cache),
a replay namespace made before the forget and one made after it. Then every
file is searched, raw bytes, for every marker. The same after a ``forget``
killed at random points and re-run, and after one stopped by a full disk.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memfold.cli.ingest import ingest_file, line_key
from memfold.core.errors import ConversationForgottenError, ErasureIncompleteError, UnknownConversationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.erasure_kit import SETTINGS, files_with, ingest_line, markers, plant, run_child  # noqa: E402


def _erased(engine, conversation_id: str, tenant_id: str = "default") -> bool:
    """True when reading the conversation is an unknown conversation and the projection holds none of it."""
    with pytest.raises(UnknownConversationError):
        engine.history(conversation_id, tenant_id=tenant_id)
    return engine.store.messages(tenant_id, conversation_id) == []

def _engine(data: Path, **extra) -> MemoryEngine:
    return MemoryEngine(Settings.load(None, data_dir=data, **{**SETTINGS, **extra}))


def _planted(root: Path, **extra) -> tuple[Path, dict[str, str], dict[str, str]]:
    """A data dir under ``root`` with conversation "secret" (markers ``m``) and "kept" (markers ``k``), folded."""
    data, m, k = root / "data", markers("s"), markers("k")
    source = root / "input"  # the user's own file: outside the data dir
    source.mkdir(parents=True)
    (source / "chat.jsonl").write_bytes(ingest_line("secret", m) + ingest_line("kept", k))
    with _engine(data, **extra) as engine:
        plant(engine, "secret", m)
        plant(engine, "kept", k)
        report = ingest_file(engine, source / "chat.jsonl", progress=False)
        assert report.accepted == 2, report
        engine.wait_idle(120)
        # Sanity: the planted text is where erasure has to reach, or the search below proves nothing.
        assert any(m["ingested"] in r.content for r in engine.history("secret"))
        for policy in SETTINGS["policies"]:
            assert engine.summaries("secret", policy=policy), f"{policy} made no summary of the planted turns"
        _cols, titles = engine.sql("SELECT payload FROM events WHERE type = 'TopicAssigned' AND conversation_id = 'secret'")
        assert any(m["content"] in t for (t,) in titles)
        engine.sql("CHECKPOINT", write=True)
    before = files_with([data], m)
    assert any(p.endswith("projections.duckdb") for p in before), before
    return data, m, k


def _owner_only(data: Path) -> list[str]:
    """Files under ``data`` that group or others may read, and the data dir itself if it is not 0700."""
    loose = [str(p) for p in data.rglob("*") if p.is_file() and p.stat().st_mode & 0o077
             and (p.name.startswith(("keys.sqlite", "projections")) or p.suffix in (".duckdb", ".wal"))]
    if data.stat().st_mode & 0o777 != 0o700:
        loose.append(f"{data} is {oct(data.stat().st_mode & 0o777)}")
    return loose


def test_forget_leaves_no_marker_of_any_field_in_any_file_for_every_policy(tmp_path):
    data, m, k = _planted(tmp_path)
    with _engine(data) as engine:
        ingested = next(r for r in engine.history("secret") if m["ingested"] in r.content)
        line = ingest_line("secret", m).strip()
        assert ingested.event_id != line_key("chat.jsonl", line, 1)  # the id is keyed, not a hash of the line
        engine.replay("before")  # a namespace that exists when the forget runs
        engine.forget("secret")
        assert engine.verify() == []
        engine.replay("after")  # and one made after it: folded from the log, whose keys are gone
        assert _erased(engine, "secret")
        with pytest.raises(ConversationForgottenError):
            engine.append_message("secret", "user", "one more thing")
        with pytest.raises(ConversationForgottenError):  # nor can an id be computed for it: no oracle
            engine.keyed_event_id("secret", line_key("chat.jsonl", line, 1))
        kept = engine.history("kept")
        assert any(k["content"] in r.content for r in kept) and any(k["ingested"] in r.content for r in kept)
        assert engine.audit("secret")["conversation"]["status"] == "erased"
    assert files_with([data], m) == {}
    assert files_with([data], {"kept": k["content"]})  # the other conversation's text is still there (sealed or not)
    assert _owner_only(data) == []


def test_a_reopened_conversation_takes_new_messages_and_can_be_forgotten_again(tmp_path):
    data = tmp_path / "data"
    first, second = markers("a"), markers("b")
    with _engine(data) as engine:
        plant(engine, "c", first, turns=4)
        engine.wait_idle(60)
        engine.forget("c")
        assert engine.reopen("c") is not None
        assert engine.reopen("c") is None  # open already: nothing appended
        plant(engine, "c", second, turns=4)
        engine.wait_idle(60)
        assert all(first["content"] not in r.content for r in engine.history("c"))
        assert any(second["content"] in r.content for r in engine.history("c"))
        assert engine.audit("c")["conversation"]["status"] == "active"
        assert engine.verify() == []
        engine.forget("c")
        assert engine.verify() == [] and _erased(engine, "c")
    assert files_with([data], {**first, **{f + "2": v for f, v in second.items()}}) == {}


def _run_forget(data: Path, settings_file: Path, *, kill_after: float | None = None) -> subprocess.CompletedProcess | None:
    """Run the kit's forget child; with ``kill_after``, SIGKILL it that long after it opened the engine."""
    return run_child("forget", data, settings_file, "secret", kill_after=kill_after)


def _kill_trials(tmp_path: Path, new_log, searched: list[Path], trials: int = 4) -> None:
    """Plant, forget once to time it, then ``trials`` times: plant, SIGKILL a forget at a random point, re-run it.

    ``new_log()`` returns the settings of a fresh log for each planting (a
    new Kafka topic; nothing for SQLite, whose log is in the data dir).
    After each re-run no file under the data dir or ``searched`` holds a
    marker, ``verify`` passes and the audit shows the erasure finished.
    """

    def planted(name: str) -> tuple[Path, Path, dict[str, str]]:
        extra = new_log()
        data, m, _k = _planted(tmp_path / name, **extra)
        with _engine(data, **extra) as engine:
            engine.replay("standing")  # a namespace the killed forget has to reach too
        settings_file = tmp_path / name / "settings.json"
        settings_file.write_text(json.dumps({**SETTINGS, **extra}))
        return data, settings_file, m

    data, settings_file, m = planted("probe")
    started = time.monotonic()
    done = _run_forget(data, settings_file)  # how long one forget takes: the window the kills are spread over
    window = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert files_with([data, *searched], m) == {}
    rng = random.Random(43)
    for trial in range(trials):
        data, settings_file, m = planted(f"trial{trial}")
        _run_forget(data, settings_file, kill_after=rng.uniform(0.0, window))
        again = _run_forget(data, settings_file)
        assert again.returncode == 0, again.stderr
        assert files_with([data, *searched], m) == {}, f"trial {trial}"
        with _engine(data, **json.loads(settings_file.read_text())) as engine:
            assert engine.verify() == []
            report = engine.audit("secret")
            assert report["conversation"]["status"] == "erased" and not report["erasure"]["pending"]


def test_a_forget_killed_at_random_points_is_finished_by_the_next(tmp_path):
    _kill_trials(tmp_path, dict, [])


def _fill(path: Path, leave: int) -> Path:
    """Fill the file system of ``path`` until ``leave`` bytes are free; return the filler file."""
    filler = path / "filler"
    with open(filler, "wb") as fh:
        while True:
            free = shutil.disk_usage(path).free - leave
            if free <= 0:
                break
            try:
                fh.write(b"\0" * min(free, 1 << 20))
                fh.flush()
            except OSError:
                break
    return filler


def _full_disk_forget(tmp_path: Path, extra: dict, searched: list[Path]) -> None:
    """On a tmpfs that the compaction's copy does not fit in (a real full disk: ENOSPC), then with room again."""
    planted, m, _k = _planted(tmp_path / "seed", **extra)
    size = sum(p.stat().st_size for p in planted.rglob("*") if p.is_file())
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size * 2 + (8 << 20)}", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs for the full-disk test: {mounted.stderr.strip()}")
    try:
        data = disk / "data"
        shutil.copytree(planted, data)
        filler = _fill(disk, leave=256 << 10)  # room for the log and key store writes, not for a copy of the file
        with _engine(data, **extra) as engine:
            with pytest.raises(ErasureIncompleteError, match="forget it again"):
                engine.forget("secret")
            assert engine.audit("secret")["conversation"]["status"] == "erasure pending"
            with pytest.raises(ConversationForgottenError):
                engine.append_message("secret", "user", "still here?")  # the key is destroyed already
        filler.unlink()  # the operator frees the disk
        with _engine(data, **extra) as engine:
            engine.forget("secret")
            assert engine.audit("secret")["conversation"]["status"] == "erased"
            assert engine.verify() == []
        assert files_with([data, *searched], m) == {}
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_a_forget_on_a_full_disk_says_so_and_the_next_finishes(tmp_path):
    _full_disk_forget(tmp_path, {}, [])


def _broker_dirs(tmp_path_factory) -> list[Path]:
    if os.environ.get("MEMFOLD_KAFKA_BOOTSTRAP"):
        pytest.skip("an external broker: its data dir is not on this machine to search")
    brokers = [p for p in tmp_path_factory.getbasetemp().glob("kafka-broker*") if p.is_dir()]
    assert brokers, "the session's local broker keeps its data under the pytest base temp dir"
    return brokers


def _kafka_log(bootstrap: str) -> dict:
    import uuid

    return dict(log=f"kafka://{bootstrap}", topic=f"memfold.erasure.{uuid.uuid4().hex[:8]}", partitions=2)


@pytest.mark.kafka
def test_on_kafka_a_forget_killed_at_random_points_is_finished_by_the_next(tmp_path, kafka_bootstrap, tmp_path_factory):
    """The key store is the Kafka key topic beside the events (the default on Kafka)."""
    _kill_trials(tmp_path, lambda: _kafka_log(kafka_bootstrap), _broker_dirs(tmp_path_factory), trials=3)


@pytest.mark.kafka
def test_on_kafka_a_forget_on_a_full_disk_says_so_and_the_next_finishes(tmp_path, kafka_bootstrap, tmp_path_factory):
    _full_disk_forget(tmp_path, _kafka_log(kafka_bootstrap), _broker_dirs(tmp_path_factory))


@pytest.mark.kafka
def test_forget_on_kafka_leaves_no_marker_in_the_broker_segments_or_the_data_dir(
    tmp_path, kafka_bootstrap, tmp_path_factory
):
    brokers = _broker_dirs(tmp_path_factory)
    extra = _kafka_log(kafka_bootstrap)
    data, m, k = _planted(tmp_path, **extra)
    with _engine(data, **extra) as engine:
        engine.forget("secret")
        assert engine.verify() == []
        assert any(k["content"] in r.content for r in engine.history("kept"))
    assert files_with([data, *brokers], m) == {}


def test_files_the_memfold_command_creates_are_owner_only_whatever_the_umask(tmp_path):
    data = tmp_path / "data"
    memfold = Path(sys.executable).with_name("memfold")
    env = {**os.environ, "MEMFOLD_DATA_DIR": str(data)}
    for args in (["append", "c1", "user", "my card ends 4242"], ["append", "c2", "user", "hello"], ["forget", "c1"],
                 ["replay", "--name", "r1", "--policy", "rolling"], ["history", "c2"]):
        done = subprocess.run([str(memfold), *args], env=env, capture_output=True, text=True, timeout=120,
                              preexec_fn=lambda: os.umask(0o022))
        assert done.returncode == 0, (args, done.stderr)
    loose = [f"{p.relative_to(data)} {oct(p.stat().st_mode & 0o777)}" for p in [data, *data.rglob("*")]
             if p.stat().st_mode & 0o077]
    assert loose == []


def test_forget_removes_what_killed_commands_left_beside_the_projection(tmp_path):
    """A killed rebuild leaves its beside file, a killed compaction its copy, a killed verify its namespace: plaintext."""
    data, m, _k = _planted(tmp_path)
    child = subprocess.Popen(["true"])
    child.wait()
    dead = child.pid  # a process that has exited: its verify namespace is nobody's
    live = data / "projections.duckdb"
    leftovers = [data / "projections.rebuild.duckdb", data / "projections.duckdb.compact",
                 data / "replays" / f".verify-{dead}-1" / "projections.duckdb"]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(live, path)
    assert all(m["content"].encode() in p.read_bytes() for p in leftovers)  # each holds the planted text
    with _engine(data) as engine:
        engine.forget("secret")
    assert not any(p.exists() for p in leftovers)
    assert files_with([data], m) == {}


def test_the_agents_session_and_http_delete_leave_no_marker_in_the_service_data_dir(service):
    """Finding 3: the Agents SDK session keeps whole items in metadata; HTTP DELETE left tool-call arguments."""
    import asyncio

    from memfold.adapters.agents import MemfoldSession
    from memfold.client import AsyncClient

    m = markers("svc")
    items = [
        {"role": "user", "content": f"My codename is {m['content']}, write to {m['name']}@example.com"},
        {"type": "function_call", "call_id": m["callid"], "name": m["callname"],
         "arguments": json.dumps({"email": m["callargs"]})},
        {"type": "function_call_output", "call_id": m["callid"], "output": json.dumps({"found": m["metaval"]})},
    ]
    key = service.key("erasure-proof", "admin")

    async def main() -> None:
        async with AsyncClient(service.url, key) as mf:
            session = MemfoldSession("s-erase", mf)
            await session.add_items(items)
            assert await session.get_items() == items
            await mf.append("direct", [{"role": "assistant", "content": "",
                                        "tool_calls": [{"id": m["reason"], "name": "lookup",
                                                        "arguments": json.dumps({"codename": m["variant"]})}]}],
                            wait=True)
            await session.clear_session()
            await mf.forget("direct")

    asyncio.run(main())
    assert files_with([service.data_dir], m) == {}
