"""The memfold command keeps the garbage collector off while its code loads, and on while a command works."""

from __future__ import annotations

import gc

import pytest

from memfold.cli import ingest as cli_ingest
from memfold.cli.main import main
from memfold.core.runtime import pause_gc
from memfold.engine import engine as engine_module


@pytest.fixture
def paused():
    """The collector as memfold.cli.main.run leaves it for main(); restored afterwards."""
    pause_gc()
    yield
    gc.enable()
    gc.unfreeze()


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "data"
    assert main(["--data-dir", str(path), "append", "c1", "user", "Order A-7713 arrived broken"]) == 0
    return path


def test_a_quick_command_turns_it_back_on_once_its_engine_is_open(data_dir, paused, monkeypatch, capsys):
    seen = []
    opened = engine_module.MemoryEngine.__init__

    def spy(self, *args, **kwargs):
        seen.append(gc.isenabled())  # the engine's code loads and its parts are built with the collector off
        opened(self, *args, **kwargs)

    monkeypatch.setattr(engine_module.MemoryEngine, "__init__", spy)
    assert main(["--data-dir", str(data_dir), "context", "c1"]) == 0
    assert "A-7713" in capsys.readouterr().out
    assert seen == [False]
    assert gc.isenabled()  # and on from there: the read itself ran with it


def test_any_other_command_works_with_it_on(data_dir, tmp_path, paused, monkeypatch):
    seen = []
    ingest = cli_ingest.ingest_file

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return ingest(*args, **kwargs)

    monkeypatch.setattr(cli_ingest, "ingest_file", spy)
    lines = tmp_path / "more.jsonl"
    lines.write_text('{"conversation_id": "c2", "role": "user", "content": "a long import"}\n')
    assert main(["--data-dir", str(data_dir), "ingest", str(lines), "--quiet"]) == 0
    assert seen == [True]
