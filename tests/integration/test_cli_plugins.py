"""The short commands run without pydantic plugins unless the user says otherwise; the others load them as before.

A real installed plugin: a distribution on ``PYTHONPATH`` whose ``pydantic`` entry point
writes a marker file when pydantic loads it; the real ``memfold`` console script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MEMFOLD = str(Path(sys.executable).with_name("memfold"))

PLUGIN = '''
import os
from pathlib import Path

Path(os.environ["PLUGIN_MARKER"]).write_text("loaded")


class Plugin:
    def new_schema_validator(self, *args, **kwargs):
        return None, None, None


plugin = Plugin()
'''


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    """An environment where a pydantic plugin is installed; loading it creates ``tmp_path/marker``."""
    site = tmp_path / "site"
    dist = site / "spyplugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: spyplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pydantic]\nspy = spyplugin:plugin\n")
    (site / "spyplugin.py").write_text(PLUGIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFOLD_", "PYDANTIC_"))}
    return {**env, "PYTHONPATH": str(site), "PLUGIN_MARKER": str(tmp_path / "marker")}


def memfold(env: dict[str, str], data: Path, *args: str) -> None:
    done = subprocess.run([MEMFOLD, "--data-dir", str(data), *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_short_command_does_not_load_them(plugin_env, tmp_path):
    marker = tmp_path / "marker"
    memfold(plugin_env, tmp_path / "data", "append", "c1", "user", "order #7781 arrived cracked")
    memfold(plugin_env, tmp_path / "data", "history", "c1")
    assert not marker.exists()


def test_the_users_setting_is_kept(plugin_env, tmp_path):
    marker = tmp_path / "marker"
    memfold({**plugin_env, "PYDANTIC_DISABLE_PLUGINS": ""}, tmp_path / "data", "append", "c1", "user", "hello")
    assert marker.read_text() == "loaded"


def test_other_commands_load_them(plugin_env, tmp_path):
    marker = tmp_path / "marker"
    memfold(plugin_env, tmp_path / "data", "schema")
    assert marker.read_text() == "loaded"
