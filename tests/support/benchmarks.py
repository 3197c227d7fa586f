"""Import a script of benchmarks/ as a module, for tests of its pure parts and its end-to-end run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    """Return ``benchmarks/<name>.py`` as module ``name`` (imported once; its siblings importable too)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # memory_quality imports synth and beam by name
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
