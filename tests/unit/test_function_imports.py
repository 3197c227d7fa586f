"""tools/function_imports.py: every function-level import of the packages is allow-listed (issue 44)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "function_imports.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


def test_the_tree_passes():
    result = run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 unlisted; 0 stale" in result.stdout


def plant(tmp_path: Path, allow: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "memfold" = "memfold", "memfold.core" = "core" }\n')
    (tmp_path / "memfold").mkdir()
    (tmp_path / "memfold" / "__init__.py").write_text("")
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "planted.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from memfold.core import other\n"
        "\n"
        "\n"
        "def f():\n"
        "    from memfold.core import other\n"
        "    import json\n"
        "    return other, json\n")
    (tmp_path / "core" / "other.py").write_text("")
    path = tmp_path / "allow.toml"
    path.write_text(allow)
    return path


def test_a_planted_function_level_import_fails(tmp_path):
    allow = plant(tmp_path, '[allow."memfold.core.planted"]\nheavy = ["memfold.core.other"]\n')
    result = run("--root", str(tmp_path), "--allow", str(allow))
    assert result.returncode == 1
    assert ("core/planted.py:8 imports json inside a function; move it to the top or list it in "
            "tools/function_imports.toml with a reason") in result.stdout
    assert "memfold.core.other inside" not in result.stdout  # listed (submodule resolved), and TYPE_CHECKING skipped
    assert "2 function-level imports: 1 allow-listed" in result.stdout


def test_stale_entries_and_bad_reasons_fail(tmp_path):
    allow = plant(tmp_path, '[extras]\n[allow."memfold.core.planted"]\nheavy = ["memfold.core.other", "json", "csv"]\n'
                            'cycle = ["memfold.core"]\nextra = ["os"]\n')
    result = run("--root", str(tmp_path), "--allow", str(allow))
    assert result.returncode == 1
    assert "memfold.core.planted -> csv (heavy) matches no function-level import any more" in result.stdout
    assert "has reason 'cycle'" in result.stdout
    assert "os is not in [extras]" in result.stdout
