"""Replay namespaces: what-if replays beside the live projection, resumable, listed, dropped and promoted."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from support.talk import talk
from support.worker_kit import projection

from memfold.cli.main import main
from memfold.core.errors import ConfigError, UnknownReplayError, ValidationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.projections.store import DuckDBProjectionStore

SETTINGS = {"policy": "hierarchical", "policies": ("hierarchical",),
            "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 3}}


def _talk(engine: MemoryEngine, conversation: str, n: int) -> None:
    talk(engine, conversation, n)


def _live_log(engine: MemoryEngine) -> list[str]:
    return [r.event.model_dump_json() for p in engine.log.partitions() for r in engine.log.read(p, 0, 100_000)]


def _replay_dump(path: Path) -> dict:
    store = DuckDBProjectionStore(path / "projections.duckdb", read_only=True)
    try:
        return store.dump()
    finally:
        store.close()


@pytest.fixture
def live(tmp_path):
    engine = MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **SETTINGS))
    _talk(engine, "c1", 24)
    _talk(engine, "c2", 12)
    yield engine
    engine.close()


def test_replay_with_live_settings_equals_live_and_changed_settings_leave_live_untouched(live):
    before, log_before = live.store.dump(), _live_log(live)
    same = live.replay("same")
    assert same.status == "ready" and same.lag == 0 and same.run.model_calls == 0 and same.run.side_events == 0
    assert _replay_dump(same.path) == before  # with the live settings the replay is the live projection

    changed = live.replay("wide", overrides={"hierarchical.trigger_message_count": 12, "hierarchical.resummarize_every": 6})
    assert changed.run.side_events > 0 and changed.run.answered > 0
    assert live.store.dump() == before and _live_log(live) == log_before  # live untouched, table by table
    replica = _replay_dump(changed.path)
    wide_hash = Settings.load(None, **{**SETTINGS, "hierarchical": {**SETTINGS["hierarchical"],
                              "trigger_message_count": 12, "resummarize_every": 6}}).settings_hash("hierarchical")
    mine = [r for r in replica["summaries"] if wide_hash in r]
    superseded = sum("superseded" in r for r in mine)
    assert changed.run.model_calls == changed.run.cache_misses == changed.run.answered - superseded
    assert mine and all("completed" in r or "superseded" in r for r in mine)
    live_first = min(r[7] for r in before["summaries"] if r[4] == "c1" and r[13] == "completed")
    replay_first = min(r[7] for r in mine if r[4] == "c1" and r[13] == "completed")
    assert replay_first > live_first  # a later trigger: the first summary covers more messages
    # A second run with nothing new costs nothing; the replay's answers came through the shared cache.
    again = live.replay("wide")
    assert again.run.folded == 0 and again.run.model_calls == 0 and again.total.answered == changed.run.answered
    assert _replay_dump(changed.path) == replica
    # Another namespace with the same settings: every answer is a cache hit (read in one query), same memory.
    twin = live.replay("twin", overrides={"hierarchical.trigger_message_count": 12, "hierarchical.resummarize_every": 6})
    assert twin.run.model_calls == twin.run.cache_misses == 0
    assert twin.run.cache_hits == changed.run.model_calls > 0
    twin_dump = _replay_dump(twin.path)
    for table in ("facts", "search_docs", "messages", "policy_state"):
        assert twin_dump[table] == replica[table], table


def test_replays_list_drop_and_refuse_bad_input(live, capsys):
    before = live.store.dump()
    report = live.replay("a", policy="rolling")
    assert live.store.dump() == before
    rolled = [r for r in _replay_dump(report.path)["summaries"] if r[2] == "rolling" and r[13] == "completed"]
    assert rolled and not [r for r in before["summaries"] if r[2] == "rolling"]  # another policy, beside live
    assert [m["name"] for m in live.replays()] == ["a"]
    manifest = live.replays()[0]
    assert manifest["settings"]["policy"] == "rolling" and "rolling" in manifest["hashes"]
    assert manifest["status"] == "ready" and manifest["head"]
    with pytest.raises(ConfigError, match="other settings"):
        live.replay("a", policy="chunked")
    with pytest.raises(ValidationError, match="cannot override"):
        live.replay("b", overrides={"summarizer.model": "x"})
    with pytest.raises(ValidationError, match="trigger_message_count"):
        live.replay("b", overrides={"hierarchical.trigger_message_count": 0})
    with pytest.raises(ValidationError, match="not folded here"):
        live.replay("b", overrides={"rolling.message_threshold": 5})
    with pytest.raises(ValidationError, match="replay name"):
        live.replay("../x")
    assert not (live.settings.data_dir / "replays" / "b").exists()
    live.drop_replay("a")
    assert live.replays() == []
    with pytest.raises(UnknownReplayError):
        live.drop_replay("a")


def test_promote_switches_reads_without_a_gap_and_equals_a_fresh_rebuild(live, tmp_path):
    data = live.settings.data_dir
    live.replay("wide", overrides={"hierarchical.trigger_message_count": 12, "hierarchical.resummarize_every": 6})
    replica = _replay_dump(data / "replays" / "wide")
    seen, errors, stop = [], [], threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.append([m.as_dict() for m in live.context("c1")])
            except Exception as exc:  # noqa: BLE001 - counted and asserted below
                errors.append(exc)

    reader = threading.Thread(target=read)
    calls = live.worker.calls
    reader.start()
    try:
        position = live.promote("wide")
    finally:
        stop.set()
        reader.join()
    assert errors == [] and seen
    kinds = [{m["kind"] for m in ctx} for ctx in seen]
    bad = [k for k in kinds if "verbatim" not in k or "memory:facts" not in k]
    assert not bad, f"a read saw an empty projection: {bad[:3]} {len(bad)}/{len(seen)}"
    assert live.settings.hierarchical.trigger_message_count == 12
    # Audited: the promotion is a SettingsChanged in the log, shown by audit.
    changes = live.audit("c1")["settings"]["changes"]
    assert [c["settings"]["replay"] for c in changes] == ["wide"] and changes[0]["position"] == str(position)
    # The live summaries are the replay's, with no model call at all.
    produced = {r[1]: r[14] for r in live.store.dump()["summaries"] if r[13] == "completed"}
    assert produced == {r[1]: r[14] for r in replica["summaries"] if r[13] == "completed"}
    assert live.verify() == []
    assert live.worker.calls == calls  # the replay's summaries came along on the log: no model call
    live.close()
    # A fresh rebuild of the log (the data dir keeps the promoted settings) gives the same projection.
    fresh = tmp_path / "fresh"
    shutil.copytree(data, fresh, ignore=shutil.ignore_patterns("projections.duckdb*", "replays"))
    with MemoryEngine(Settings.load(None, data_dir=fresh, **SETTINGS)) as engine:
        engine.wait_idle(120)
        assert engine.settings.hierarchical.trigger_message_count == 12
        assert engine.worker.calls == 0
    assert projection(fresh / "projections.duckdb") == projection(data / "projections.duckdb")
    assert json.loads((data / "promoted.json").read_text())["hierarchical.trigger_message_count"] == 12


def test_cli_replay_replays_drop(live, tmp_path, capsys):
    data = str(live.settings.data_dir)
    live.close()
    config = tmp_path / "memfold.toml"
    config.write_text('policy = "hierarchical"\npolicies = ["hierarchical"]\n[hierarchical]\ntrigger_message_count = 6\n'
                      "recent_message_count = 2\nresummarize_every = 3\n")
    base = ["--data-dir", data, "--config", str(config)]
    assert main([*base, "replay", "--name", "w", "--set", "hierarchical.trigger_message_count=12"]) == 0
    out = capsys.readouterr().out
    assert "replay w" in out and "model call" in out
    assert main([*base, "replays"]) == 0
    listing = capsys.readouterr().out
    assert "w" in listing and "ready" in listing
    assert main([*base, "replays", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "w"
    assert main([*base, "replay", "--name", "w", "--set", "nonsense"]) == 2
    assert main([*base, "drop", "w"]) == 0
    assert main([*base, "drop", "w"]) == 2
    assert "no replay named" in capsys.readouterr().err


def test_forget_erases_the_conversation_from_replays_too(live):
    plant = "zq" + "5e1f0c2a9b7d3e"
    for i in range(8):
        live.append_message("secret", "user" if i % 2 == 0 else "assistant", f"turn {i}: my code name is {plant}")
    live.wait_idle(60)
    live.replay("wide", overrides={"hierarchical.trigger_message_count": 4})
    root = live.settings.data_dir
    assert any(plant.encode() in p.read_bytes() for p in (root / "replays").rglob("*") if p.is_file())
    live.forget("secret")
    hits = [str(p) for p in root.rglob("*") if p.is_file() and plant.encode() in p.read_bytes()]
    assert hits == []
    # The replay still holds the others, and shows the erased one as erased when it catches up.
    report = live.replay("wide")
    store = DuckDBProjectionStore(report.path / "projections.duckdb", read_only=True)
    try:
        rows = dict(store.query("SELECT conversation_id, deleted FROM conversations")[1])
        assert rows["secret"] is True and rows["c1"] is False
        assert store.query("SELECT count(*) FROM messages WHERE conversation_id = 'c1'")[1][0][0] == 24
    finally:
        store.close()
    assert not [p for p in root.rglob("*") if p.is_file() and plant.encode() in p.read_bytes()]


def test_promote_after_the_log_grew_still_equals_a_fresh_rebuild(live, tmp_path):
    data = live.settings.data_dir
    first = live.replay("wide", overrides={"hierarchical.trigger_message_count": 12, "hierarchical.resummarize_every": 6})
    _talk(live, "c2", 14)  # the live log moves on: the replay is behind
    _talk(live, "c3", 14)
    assert live.replays()[0]["head"] == {str(p): o for p, o in first.head.items()}
    live.promote("wide")  # catches the replay up (a second round), then folds the grown log under its settings
    assert live.replays()[0]["status"] == "promoted" and live.verify() == []
    assert live.context("c3") and live.settings.hierarchical.resummarize_every == 6
    live.close()
    fresh = tmp_path / "fresh"
    shutil.copytree(data, fresh, ignore=shutil.ignore_patterns("projections.duckdb*", "replays"))
    with MemoryEngine(Settings.load(None, data_dir=fresh, **SETTINGS)) as engine:
        engine.wait_idle(120)
    assert projection(fresh / "projections.duckdb") == projection(data / "projections.duckdb")


def test_summary_inputs_from_folded_messages_equal_inputs_read_from_the_store(tmp_path):
    """A replay builds summary inputs from what it folded (FoldedSource): they must equal the store's, cache keys too."""
    from memfold.engine.worker import FoldedSource, build_input
    from memfold.projections.projector import Projector
    from memfold.projections.summary_cache import cache_key

    engine = MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **SETTINGS))
    try:
        for i in range(30):
            message = {"conversation_id": "c1", "role": "user" if i % 2 == 0 else "assistant",
                       "content": f"turn {i}: order #{900 + i} ships from Leeds",
                       "metadata": {"n": i, "tags": ["a", "b"], "nested": {"x": 1.5}} if i % 3 == 0 else {},
                       "importance": 0.25 * (i % 4) if i % 2 else None, "name": "bob" if i % 5 == 0 else None}
            event = engine.validate(message)
            if i % 4 == 0:  # recorded at append by a remote embedder; the store keeps none
                event = event.model_copy(update={"payload": event.payload.model_copy(
                    update={"embedding": (0.1 * i, 0.2, 0.3)})})
            engine.append_events([event])
            if i == 26:  # late: before it, every input lies in the hot tail
                engine.wait_idle(60)
                engine.retract("c1", engine.store.messages("default", "c1", 7, 7)[0].event_id)
            if i % 5 == 4:
                engine.wait_idle(60)
        engine.wait_idle(60)
        store = DuckDBProjectionStore(tmp_path / "beside.duckdb")
        try:
            projector = Projector(store, dict(engine.policies), engine.counter)
            reads = []

            class Counted:  # the store, counting what FoldedSource still reads from it
                def __getattr__(self, name):
                    reads.append(name)
                    return getattr(store, name)

            source = FoldedSource(projector.tail, Counted(), partition_count=8)
            projector.listeners.append(source.committed)
            requests = []
            for p in engine.log.partitions():
                records = engine.log.read(p, 0, 100_000)
                for i in range(0, len(records), 7):  # small batches: the tail and the summaries follow commits
                    changes, positions, _ = projector.project(records[i : i + 7])
                    store.apply(changes, positions)
                    projector.committed(changes)
                    requests += [r.event for r in records[i : i + 7] if r.event.type == "SummaryRequested"]
                    for r in requests:
                        folded = build_input(r, source, source, engine.settings)
                        stored = build_input(r, store, store, engine.settings)
                        assert folded == stored
                        assert cache_key("s", "m", "h", folded) == cache_key("s", "m", "h", stored)
            built = sum(range(1, len(requests) + 1))
            assert len(requests) >= 5 and source._summaries
            assert len(reads) < built / 2  # most inputs came from what was folded, not from the store
        finally:
            store.close()
    finally:
        engine.close()


def test_a_replay_folded_by_other_fold_rules_is_refused_by_diff_and_folded_again(live, tmp_path, capsys, caplog):
    from memfold.projections.fold import FOLD_VERSION

    overrides = {"hierarchical.trigger_message_count": 12, "hierarchical.resummarize_every": 6}
    live.replay("fresh", overrides=overrides)  # makes the summaries: the next replays take them from the cache
    old = live.replay("old", overrides=overrides)
    cached = _replay_dump(old.path)
    assert not live.replays()[1]["stale"]
    # As an older memfold left it: no fold-rules marker in the manifest, and rows those rules folded.
    manifest = json.loads((old.path / "manifest.json").read_text())
    del manifest["fold_version"]
    (old.path / "manifest.json").write_text(json.dumps(manifest))
    store = DuckDBProjectionStore(old.path / "projections.duckdb")
    store.connection.execute("UPDATE summaries SET text = 'folded by the old rules'")
    store.close()

    assert [(m["name"], m["stale"]) for m in live.replays()] == [("fresh", False), ("old", True)]
    with pytest.raises(ConfigError, match=r"replay 'old' was folded by other fold rules \(version unmarked; .*"
                                          r"memfold replay --name old"):
        live.diff_replay("old")
    live.close()
    config = tmp_path / "memfold.toml"
    config.write_text('policy = "hierarchical"\npolicies = ["hierarchical"]\n[hierarchical]\ntrigger_message_count = 6\n'
                      "recent_message_count = 2\nresummarize_every = 3\n")
    base = ["--data-dir", str(live.settings.data_dir), "--config", str(config)]
    assert main([*base, "replays", "--json"]) == 0
    assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["ready", "stale"]
    assert main([*base, "sql", "--replay", "old", "SELECT count(*) FROM summaries"]) == 2
    assert "fold it again with `memfold replay --name old`" in capsys.readouterr().err

    assert main([*base, "replay", "--name", "old"]) == 0  # resuming folds it from the start with these rules
    assert "folding it again from the start" in caplog.text and "replay old: ready" in capsys.readouterr().out
    assert _replay_dump(old.path) == cached  # every summary from the cache, as the first run had them
    assert json.loads((old.path / "manifest.json").read_text())["fold_version"] == FOLD_VERSION
    assert main([*base, "replays", "--json"]) == 0
    assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["ready", "ready"]
    assert main([*base, "diff", "old", "--json"]) == 0
