"""Packaging: a built wheel installs its import packages under memfold.* and nothing generic."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checkout_copy(dest: Path) -> Path:
    """Copy the files git tracks to ``dest``: setuptools writes build/ and *.egg-info beside the source it builds."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def test_wheel_contains_only_memfold_packages_and_runs(tmp_path):
    source = _checkout_copy(tmp_path / "source")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(source)],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    )
    assert (source / "build").is_dir()  # setuptools' scratch went to the copy, not the checkout
    wheel = next(tmp_path.glob("memfold-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"memfold", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for package in ("core", "cli", "engine", "projections", "projections/policies", "streams", "service", "client", "adapters"):
        assert f"memfold/{package}/__init__.py" in names
    assert "memfold/cli/data/sample.jsonl" in names
    assert "memfold/cli/data/sample.truth.json" in names  # `memfold demo` scores recall against it
    assert "memfold/service/static/ui.html" in names
    assert "memfold/__init__.py" in names  # `from memfold import MemoryEngine, Client`
    assert "console_scripts" in zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))
    ).decode()
    # Install the wheel alone into a target dir; dependencies come from this environment.
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True, capture_output=True, text=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c",
         "import memfold.cli.main as c, memfold.streams.sqlite_log, memfold.projections.policies.topics;"
         "import memfold.client, memfold.service.app;"
         "print(c.__file__)"],
        check=True, capture_output=True, text=True, env=env, cwd=tmp_path,
    ).stdout
    assert out.strip().startswith(str(target))
