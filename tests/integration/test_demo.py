"""`memfold demo` (what `make demo` runs) in a subprocess: it ingests the bundled sample and scores its facts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

MEMFOLD = str(Path(sys.executable).with_name("memfold"))


def test_the_demo_runs_and_memory_keeps_more_early_facts_than_take_last(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")} | {"COLUMNS": "160"}
    proc = subprocess.run([MEMFOLD, "--data-dir", str(tmp_path / "demo"), "demo"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    m = re.search(r"kept: hierarchical (\d+)/(\d+), (\w+) (\d+)/\2, takeLast (\d+)/\2", proc.stdout)
    assert m, proc.stdout[-2000:]
    hierarchical, total, default, ours, take_last = int(m[1]), int(m[2]), m[3], int(m[4]), int(m[5])
    assert total >= 10 and hierarchical == total and default == "sliding_window"
    assert take_last < ours <= total and ours >= total - 1
    assert "structured facts per policy" in proc.stdout and (tmp_path / "demo" / "events.sqlite").is_file()
