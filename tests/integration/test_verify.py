"""verify proves the live projection is what the log folds to; rebuild builds beside the live one and swaps."""

from __future__ import annotations

import threading
from pathlib import Path

from support.talk import talk

from memfold.cli.main import main
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

SETTINGS = {"policy": "hierarchical", "policies": ("hierarchical", "rolling"),
            "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 3}}


def _talk(engine: MemoryEngine, conversation: str, n: int) -> None:
    talk(engine, conversation, n)


def test_verify_passes_on_live_and_names_each_difference(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **SETTINGS)) as engine:
        _talk(engine, "c1", 24)
        _talk(engine, "c2", 12)
        before = engine.store.dump()
        assert engine.verify() == []
        assert engine.verify("c1") == []
        assert engine.store.dump() == before  # verify never writes the live projection
        assert not list(engine.settings.data_dir.glob("projections.verify*"))
        engine.sql("UPDATE summaries SET text = 'tampered' WHERE conversation_id = 'c1' AND status = 'completed' "
                   "AND summary_id = (SELECT min(summary_id) FROM summaries WHERE conversation_id = 'c1' AND status = 'completed')", write=True)
        engine.sql("DELETE FROM facts WHERE conversation_id = 'c2' AND key = (SELECT min(key) FROM facts WHERE conversation_id = 'c2')", write=True)
        diffs = {d.table: d for d in engine.verify()}
        assert set(diffs) == {"summaries", "facts"}
        assert [r for r in diffs["summaries"].only_live if "tampered" in r] and len(diffs["summaries"].only_replay) == 1
        assert diffs["facts"].only_live == [] and len(diffs["facts"].only_replay) >= 1
        assert {d.table for d in engine.verify("c2")} == {"facts"}
        assert "only in the replay" in diffs["facts"].describe()
    config = tmp_path / "memfold.toml"
    config.write_text('policy = "hierarchical"\npolicies = ["hierarchical", "rolling"]\n[hierarchical]\ntrigger_message_count = 6\n'
                      "recent_message_count = 2\nresummarize_every = 3\n")
    assert main(["--data-dir", str(tmp_path / "d"), "--config", str(config), "verify", "c1"]) == 1
    assert main(["--data-dir", str(tmp_path / "d"), "--config", str(config), "verify", "c1", "--tenant", "t9"]) == 0


def test_rebuild_swaps_in_a_projection_built_beside_and_reads_never_see_it_empty(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d", **SETTINGS)) as engine:
        _talk(engine, "c1", 30)
        before = engine.store.dump()
        expected = [m.as_dict() for m in engine.context("c1", budget=500)]
        seen, errors, stop = [], [], threading.Event()

        def read() -> None:
            while not stop.is_set():
                try:
                    seen.append((len(engine.history("c1")), [m.as_dict() for m in engine.context("c1", budget=500)]))
                except Exception as exc:  # noqa: BLE001 - counted and asserted below
                    errors.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            calls = engine.worker.calls
            engine.rebuild()
        finally:
            stop.set()
            reader.join()
        assert engine.worker.calls == calls
        assert engine.store.dump() == before
        assert seen and all(n == 30 and ctx == expected for n, ctx in seen), "a read saw a partial projection"
        assert errors == []
        assert engine.verify() == []


def test_a_difference_prints_each_row_cut_to_a_readable_width():
    from memfold.engine.replay import DESCRIBE_WIDTH, Difference

    state = ("default", "c1", "sliding_window", '{"memories": [' + ", ".join(['{"ordinal": 1}'] * 400) + "]}")
    text = Difference("policy_state", [state], [("default", "c1", "sliding_window", "{}")]).describe()
    lines = text.splitlines()
    assert lines[0] == "policy_state: 1 row(s) only in live, 1 only in the replay"
    assert lines[1].startswith("  live:   ('default', 'c1', 'sliding_window'")
    assert f"… ({len(str(state)):,} characters)" in lines[1] and len(lines[1]) < DESCRIBE_WIDTH + 40
    assert lines[2] == "  replay: ('default', 'c1', 'sliding_window', '{}')"  # a short row is printed whole


def test_a_projection_folded_by_other_fold_rules_is_folded_again_and_a_read_refuses_it(tmp_path, caplog):
    import pytest

    from memfold.core.errors import ConfigError
    from memfold.projections.fold import FOLD_VERSION

    settings = Settings.load(None, data_dir=tmp_path / "d", **SETTINGS)
    with MemoryEngine(settings) as engine:
        _talk(engine, "c1", 24)
        assert engine.store.meta("fold_version") == str(FOLD_VERSION)
        before = engine.store.dump()
        engine.sql("UPDATE store_meta SET value = '1' WHERE key = 'fold_version'", write=True)  # as an older memfold left it
        engine.sql("UPDATE summaries SET text = 'folded by the old rules' WHERE conversation_id = 'c1'", write=True)
    with pytest.raises(ConfigError, match=r"other fold rules \(version 1; .* rebuild"):
        MemoryEngine(settings, policy_changes="refuse")  # a read does not change the data dir
    with MemoryEngine(settings) as engine:
        engine.wait_idle(timeout=60)
        assert "rebuilding it from the log" in caplog.text
        assert engine.store.meta("fold_version") == str(FOLD_VERSION)
        assert engine.store.dump() == before and engine.worker.calls == 0  # the log's summaries, folded again
        assert engine.verify() == []
    with MemoryEngine(settings, policy_changes="refuse") as engine:  # now current: reads open it
        assert len(engine.history("c1")) == 24


CHANGED_RULE = """
import importlib.util, json, sys
import memfold.projections
# The fold's text rules with one edit (sys.argv[2]): "passport" is a new word a user can take back.
spec = importlib.util.spec_from_file_location("memfold.projections.fold_text", sys.argv[2])
edited = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = edited
spec.loader.exec_module(edited)
memfold.projections.fold_text = edited
from memfold.engine.engine import MemoryEngine
from memfold.core.errors import ConfigError
from memfold.core.settings import Settings
from memfold.projections.fold import FOLD_VERSION
settings = Settings.load(None, data_dir=sys.argv[1], policy="topics", policies=("topics",))
try:
    MemoryEngine(settings, policy_changes="refuse")
    refused = ""
except ConfigError as exc:
    refused = str(exc)
with MemoryEngine(settings) as engine:
    engine.wait_idle(timeout=60)
    state = engine.sql("SELECT state FROM policy_state WHERE policy = 'topics' AND conversation_id = 'c1'")[1][0][0]
    print(json.dumps({"version": FOLD_VERSION, "refused": refused, "stored": engine.store.meta("fold_version"),
                      "state": state, "verify": [d.table for d in engine.verify()]}))
"""


def test_a_changed_text_rule_changes_the_fold_version_and_the_projection_is_folded_again(tmp_path):
    """A fold reads text rules (what a user takes back): editing one is a new fold version, so an engine
    running the edited rules refuses to read the old projection and folds it again from the log."""
    import json
    import subprocess
    import sys

    from memfold.projections.fold import FOLD_VERSION

    data = tmp_path / "d"
    settings = Settings.load(None, data_dir=data, policy="topics", policies=("topics",))
    with MemoryEngine(settings) as engine:
        for content in ("my passport number is X1234567", "noted", "please forget my passport number", "done"):
            engine.append_message("c1", "user" if content[0] in "mp" else "assistant", content)
        engine.wait_idle(timeout=60)
        before = engine.sql("SELECT state FROM policy_state WHERE policy = 'topics' AND conversation_id = 'c1'")[1][0][0]
    assert "passport" not in json.dumps(json.loads(before)["retractions"])

    from memfold.projections import fold_text

    source = Path(fold_text.__file__).read_text(encoding="utf-8")
    assert '    "voucher": "credit",\n' in source
    edited = tmp_path / "fold_text.py"
    edited.write_text(source.replace('    "voucher": "credit",\n', '    "voucher": "credit",\n    "passport": "passport",\n'))
    child = subprocess.run([sys.executable, "-c", CHANGED_RULE, str(data), str(edited)], capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["version"] != FOLD_VERSION and out["version"].split("+")[0] == FOLD_VERSION.split("+")[0]
    assert f"other fold rules (version {FOLD_VERSION};" in out["refused"] and "rebuild" in out["refused"]
    assert out["stored"] == out["version"]  # folded again by the edited rules
    assert ["passport", 2] in json.loads(out["state"])["retractions"]  # which now take the passport back
    assert out["verify"] == []
