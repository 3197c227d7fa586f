"""memfold export / import: the log leaves and comes back whole, byte for byte in what it folds to.

Real SQLite logs, key stores and DuckDB projections in tmp_path; the CLI run
in-process through ``main``. A source with several tenants, summaries, a
forgotten conversation and a reopened one is exported, imported into a
fresh data dir, verified, and every conversation's context compared.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from memfold.cli.main import main
from memfold.core.errors import UnknownConversationError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
FORGOTTEN_MARKER = "zebra-quartz-4471"
CONVERSATIONS = [("acme", "c-1"), ("acme", "c-2"), ("globex", "c-1"), ("globex", "c-3")]


def _settings(data: Path, **extra) -> Settings:
    return Settings.load(None, data_dir=data, policies=("sliding_window", "hierarchical"), **extra)


def _source(data: Path) -> list[tuple[str, str]]:
    """Fill a data dir: 4 conversations with summaries, one forgotten (with a marker), one reopened; return the live ones."""
    with MemoryEngine(_settings(data)) as engine:
        messages = []
        for n in range(40):
            for tenant, conv in CONVERSATIONS:
                role = "user" if n % 2 == 0 else "assistant"
                messages.append({"tenant_id": tenant, "conversation_id": conv, "role": role,
                                 "content": f"{role} {n} in {conv}: order #{4000 + n} ships to bob@{tenant}.com",
                                 "occurred_at": (T0 + timedelta(hours=n, minutes=len(messages))).isoformat()})
        engine.append_many(messages)
        engine.append_message("gone", "user", f"my secret is {FORGOTTEN_MARKER}", tenant_id="acme")
        engine.append_message("again", "user", f"first life {FORGOTTEN_MARKER}", tenant_id="globex")
        engine.wait_idle()
        engine.forget("gone", tenant_id="acme")
        engine.forget("again", tenant_id="globex")
        engine.reopen("again", tenant_id="globex")
        engine.append_message("again", "user", "second life: the order is #9911", tenant_id="globex")
        engine.wait_idle()
        assert engine.sql("SELECT count(*) FROM summaries WHERE status = 'completed'")[1][0][0] > 4
    return [*CONVERSATIONS, ("globex", "again")]


def _contexts(data: Path, live: list[tuple[str, str]]) -> dict[tuple[str, str, str], list[dict]]:
    out = {}
    with MemoryEngine(_settings(data), policy_changes="refuse") as engine:
        engine.wait_idle()
        for tenant, conv in live:
            for policy in ("sliding_window", "hierarchical"):
                out[(tenant, conv, policy)] = [m.as_dict() for m in engine.context(conv, tenant_id=tenant, policy=policy)]
        with pytest.raises(UnknownConversationError):
            engine.context("gone", tenant_id="acme")
        out[("acme", "gone", "sliding_window")] = [m.content for m in engine.store.messages("acme", "gone")]
    assert FORGOTTEN_MARKER not in json.dumps(list(out.values()))
    return out


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _log_ends(data: Path) -> dict[int, int]:
    with MemoryEngine(_settings(data), role="client") as client:
        return client.log.end_positions()


@pytest.fixture(autouse=True)
def _both_policies(monkeypatch):
    monkeypatch.setenv("MEMFOLD_POLICIES", "sliding_window,hierarchical")  # what the CLI folds, as _settings


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, list[tuple[str, str]]]:
    data = tmp_path_factory.mktemp("source") / "data"
    return data, _source(data)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_plaintext_export_imports_into_a_fresh_data_dir_with_identical_contexts(source, tmp_path, capsys, fmt):
    src, live = source
    exported = tmp_path / "export"
    code, out, err = _run(capsys, "--data-dir", str(src), "--policy", "sliding_window", "export", str(exported),
                          "--plaintext", "--format", fmt)
    assert code == 0, err
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["sealed"] is False and manifest["event_format"] == fmt
    assert set(manifest["settings_hashes"]) == {"sliding_window", "hierarchical"}
    assert sum(manifest["event_counts"].values()) == manifest["events"] == sum(_log_ends(src).values())
    assert sorted(k["scope"] for k in manifest["destroyed_keys"]) == ["acme/gone", "globex/again"]
    for name, meta in manifest["files"].items():
        assert hashlib.sha256((exported / name).read_bytes()).hexdigest() == meta["sha256"]
    # Forgotten stays forgotten: no byte of the export holds what the forgotten conversations said.
    for f in exported.iterdir():
        assert FORGOTTEN_MARKER.encode() not in f.read_bytes(), f.name

    target = tmp_path / "target"
    code, out, err = _run(capsys, "--data-dir", str(target), "import", str(exported))
    assert code == 0, err
    assert f"imported {manifest['events']} events (0 already present)" in out and "verified" in out
    assert _log_ends(target) == _log_ends(src)  # same partitions, same offsets: the events as they were
    assert _contexts(target, live) == _contexts(src, live)
    with MemoryEngine(_settings(target), policy_changes="refuse") as engine:
        assert engine.verify() == []
        ids = engine.sql("SELECT event_id, seq, occurred_at FROM events ORDER BY event_id")[1]
    with MemoryEngine(_settings(src), policy_changes="refuse") as engine:
        assert ids == engine.sql("SELECT event_id, seq, occurred_at FROM events ORDER BY event_id")[1]

    # Idempotent: a second import stores nothing.
    code, out, err = _run(capsys, "--data-dir", str(target), "import", str(exported), "--no-verify")
    assert code == 0, err
    assert f"imported 0 events ({manifest['events']} already present)" in out
    assert _log_ends(target) == _log_ends(src)


def test_a_sealed_export_holds_ciphertext_and_imports_only_where_its_keys_are(source, tmp_path, capsys):
    src, live = source
    exported = tmp_path / "sealed"
    assert _run(capsys, "--data-dir", str(src), "export", str(exported))[0] == 0
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["sealed"] is True and manifest["live_key_ids"]
    payloads = pq.read_table(exported / "events.parquet", columns=["type", "payload"]).to_pylist()
    messages = [json.loads(r["payload"]) for r in payloads if r["type"] == "MessageAppended"]
    assert messages and all(m["encrypted"] is not None and not m["content"] for m in messages)
    assert b"ships to bob@" not in (exported / "events.parquet").read_bytes()

    elsewhere = tmp_path / "elsewhere"
    code, _, err = _run(capsys, "--data-dir", str(elsewhere), "import", str(exported))
    assert code == 2 and "not in the target's key store" in err and "--plaintext" in err
    assert sum(_log_ends(elsewhere).values()) == 0  # refused before anything was appended

    beside = tmp_path / "beside"  # a deployment reaching the source's key store reads the sealed import
    keys = str(src / "keys.sqlite")
    code, out, err = _run(capsys, "--data-dir", str(beside), "import", str(exported), "--no-verify")
    assert code == 2
    with MemoryEngine(_settings(beside, keystore=keys), role="client") as client:
        from memfold.engine.portability import import_into

        report = import_into(client, exported)
    assert report.stored == manifest["events"]
    with MemoryEngine(_settings(beside, keystore=keys)) as engine:
        engine.wait_idle()
        assert engine.verify() == []
        got = {(t, c): [m.as_dict() for m in engine.context(c, tenant_id=t)] for t, c in live}
    with MemoryEngine(_settings(src), policy_changes="refuse") as engine:
        assert got == {(t, c): [m.as_dict() for m in engine.context(c, tenant_id=t)] for t, c in live}


def test_import_refuses_a_damaged_file_and_changes_nothing(source, tmp_path, capsys):
    src, _ = source
    exported = tmp_path / "export"
    assert _run(capsys, "--data-dir", str(src), "export", str(exported), "--plaintext")[0] == 0
    data = bytearray((exported / "events.parquet").read_bytes())
    data[len(data) // 2] ^= 0x01
    (exported / "events.parquet").write_bytes(bytes(data))
    target = tmp_path / "target"
    code, out, err = _run(capsys, "--data-dir", str(target), "import", str(exported))
    assert code == 2 and "checksum mismatch" in err and "nothing was imported" in err
    assert not target.exists()  # checked before the data dir is opened


def test_import_refuses_an_event_schema_it_cannot_upcast(source, tmp_path, capsys):
    src, _ = source
    exported = tmp_path / "export"
    assert _run(capsys, "--data-dir", str(src), "export", str(exported), "--plaintext", "--format", "jsonl")[0] == 0
    lines = (exported / "events.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    row["schema_version"] = 99
    lines[3] = json.dumps(row)
    (exported / "events.jsonl").write_text("\n".join(lines) + "\n")
    manifest = json.loads((exported / "manifest.json").read_text())  # a consistent manifest: only the schema is wrong
    manifest["files"]["events.jsonl"]["sha256"] = hashlib.sha256((exported / "events.jsonl").read_bytes()).hexdigest()
    (exported / "manifest.json").write_text(json.dumps(manifest))
    target = tmp_path / "target"
    code, _, err = _run(capsys, "--data-dir", str(target), "import", str(exported))
    assert code == 2 and "row 4" in err and "schema_version 99" in err and "nothing was imported" in err
    assert sum(_log_ends(target).values()) == 0


def test_export_filters_by_tenant_conversation_and_time(source, tmp_path, capsys):
    src, _ = source
    cut = T0 + timedelta(hours=20)
    assert _run(capsys, "--data-dir", str(src), "export", str(tmp_path / "t"), "--tenant", "globex")[0] == 0
    assert _run(capsys, "--data-dir", str(src), "export", str(tmp_path / "c"), "--tenant", "acme",
                "--conversation", "c-2", "--until", cut.isoformat())[0] == 0
    tenants = pq.read_table(tmp_path / "t" / "events.parquet").to_pylist()
    assert tenants and {r["tenant_id"] for r in tenants} == {"globex"}
    assert len(tenants) == json.loads((tmp_path / "t" / "manifest.json").read_text())["events"]
    one = pq.read_table(tmp_path / "c" / "events.parquet").to_pylist()
    assert one and {(r["tenant_id"], r["conversation_id"]) for r in one} == {("acme", "c-2")}
    assert all(r["occurred_at"] < cut for r in one)
    with MemoryEngine(_settings(src), policy_changes="refuse") as engine:
        expected = engine.sql("SELECT count(*) FROM events WHERE tenant_id = 'acme' AND conversation_id = 'c-2' "
                              "AND occurred_at < ?", [cut])[1][0][0]
    assert len(one) == expected


def test_export_and_import_refuse_url(tmp_path, capsys):
    for command in (["export", str(tmp_path / "x")], ["import", str(tmp_path / "x")], ["snapshot", str(tmp_path)]):
        code, _, err = _run(capsys, "--url", "http://127.0.0.1:9", *command)
        assert code == 2 and "is not supported" in err


def test_the_service_streams_an_export_a_fresh_data_dir_imports(service, tmp_path, capsys):
    import io
    import tarfile

    admin, other = service.key("port-acme", "admin"), service.key("port-other", "admin")
    with service.http(admin) as http:
        for n in range(6):
            http.post("/v1/conversations/p-1/messages", params={"wait": "true"},
                      json={"messages": [{"role": "user", "content": f"turn {n}: ticket #{700 + n} reopened"}]},
                      ).raise_for_status()
        assert http.post("/v1/admin/export", params={"tenant": "port-other"}).status_code == 422  # not its tenant
        response = http.post("/v1/admin/export", params={"plaintext": "true", "format": "jsonl"})
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-tar"
    with service.http(other) as http:
        http.post("/v1/conversations/p-9/messages", json={"messages": [{"role": "user", "content": "elsewhere"}]},
                  ).raise_for_status()
    with service.http() as http:
        assert http.post("/v1/admin/export").status_code == 401
    exported = tmp_path / "export"
    with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
        assert sorted(tar.getnames()) == ["events.jsonl", "manifest.json"]
        tar.extractall(exported, filter="data")
    rows = [json.loads(line) for line in (exported / "events.jsonl").read_text().splitlines()]
    assert {r["tenant_id"] for r in rows} == {"port-acme"}  # an admin key exports its own tenant only
    assert [r["payload"]["content"] for r in rows if r["type"] == "MessageAppended"] == \
        [f"turn {n}: ticket #{700 + n} reopened" for n in range(6)]
    target = tmp_path / "target"
    code, out, err = _run(capsys, "--data-dir", str(target), "--policy", "hierarchical", "import", str(exported))
    assert code == 0, err
    with MemoryEngine(Settings.load(None, data_dir=target, policies=("hierarchical",), policy="hierarchical"),
                      policy_changes="refuse") as engine:
        assert [m.content for m in engine.history("p-1", tenant_id="port-acme")] == \
            [f"turn {n}: ticket #{700 + n} reopened" for n in range(6)]


def test_sql_over_a_snapshot_refuses_url(tmp_path, capsys):
    code, _, err = _run(capsys, "--url", "http://127.0.0.1:9", "--api-key", "k", "sql", "--snapshot", str(tmp_path),
                        "SELECT 1")
    assert code == 2 and "--snapshot reads a local snapshot directory" in err
