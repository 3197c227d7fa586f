"""The fold version covers the text rules folds apply: a change to one of them rebuilds old projections."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from memfold.projections import fold_text
from memfold.projections.fold import FOLD_RULES, FOLD_VERSION, text_rules_hash

# Modules of the offline summarizer: English rules that may change freely (RULES_VERSION, the summary cache
# key, covers them), so no fold may reach them.
SUMMARIZER_RULES = {"memfold.projections.fact_extraction", "memfold.projections.fact_patterns",
                    "memfold.projections.offline_rules", "memfold.projections.salience",
                    "memfold.projections.offline_summarizer"}
FOLDS = ("memfold.projections.fold", "memfold.projections.policies.hierarchical",
         "memfold.projections.policies.chunked", "memfold.projections.policies.sliding_window",
         "memfold.projections.policies.rolling", "memfold.projections.policies.topics")


def test_the_fold_version_is_the_rules_number_and_the_text_rules_hash():
    assert FOLD_VERSION == f"{FOLD_RULES}+{text_rules_hash()}"
    assert text_rules_hash() == text_rules_hash()  # stable: no object ids or addresses in it


def test_editing_any_text_rule_changes_the_fold_version():
    source = Path(fold_text.__file__).read_text(encoding="utf-8")
    before = text_rules_hash(source)
    assert before == text_rules_hash()
    edits = [
        ('    "voucher": "credit",\n', '    "voucher": "credit",\n    "passport": "passport",\n'),  # a table
        ('RETRACT_ORDER_VERBS = {"forget",', 'RETRACT_ORDER_VERBS = {"drop", "forget",'),  # a set
        ("never ?mind|withdraw", "never ?mind|withdraw|drop"),  # a pattern
        ("return key == stem or", "return key == stem and"),  # a function
        ("BARE_KEEP = 4", "BARE_KEEP = 5"),  # a constant
        ("yes ok okay oh", "yes ok okay yep oh"),  # a stop word of the search rows the projector writes
    ]
    for old, new in edits:
        assert old in source, old
        assert text_rules_hash(source.replace(old, new, 1)) != before, new


def _imports(module: str) -> set[str]:
    """Return the memfold modules ``module`` imports anywhere in its source (top level and inside functions)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            for a in node.names:  # "from memfold.projections import fold_text" names a module
                if importlib.util.find_spec(node.module) and _is_module(f"{node.module}.{a.name}"):
                    found.add(f"{node.module}.{a.name}")
    return {m for m in found if m.startswith("memfold.")}


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_no_fold_reaches_the_summarizer_rules_only_the_fold_text_rules():
    """Every text rule a fold can apply is in fold_text, whose source is in the fold version."""
    reached: dict[str, str] = {}
    todo = [(m, m) for m in FOLDS]
    while todo:
        module, via = todo.pop()
        for name in _imports(module):
            if name not in reached:
                reached[name] = f"{via} -> {name}"
                todo.append((name, reached[name]))
    assert "memfold.projections.fold_text" in reached
    assert not SUMMARIZER_RULES & set(reached), [reached[m] for m in SUMMARIZER_RULES & set(reached)]


def test_the_text_rules_import_only_the_ground():
    assert {m for m in _imports("memfold.projections.fold_text") if not m.startswith("memfold.core")} == set()
