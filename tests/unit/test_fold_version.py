"""The fold version covers the text rules folds apply: a change to one of them rebuilds old projections."""

from __future__ import annotations

from memfold.projections import fact_extraction as fx
from memfold.projections.fold import FOLD_RULES, FOLD_VERSION, TEXT_RULES, text_rules_hash


def test_the_fold_version_is_the_rules_number_and_the_text_rules_hash():
    assert FOLD_VERSION == f"{FOLD_RULES}+{text_rules_hash()}"
    assert text_rules_hash() == text_rules_hash()  # stable: no object ids or addresses in it


def test_changing_a_retraction_table_a_pattern_or_a_function_changes_the_fold_version(monkeypatch):
    before = text_rules_hash()
    monkeypatch.setitem(fx.RETRACTABLE, "passport", "passport")
    assert text_rules_hash() != before
    monkeypatch.undo()
    assert text_rules_hash() == before

    monkeypatch.setattr(fx, "RETRACT_ORDER_VERBS", {*fx.RETRACT_ORDER_VERBS, "drop"})
    assert text_rules_hash() != before
    monkeypatch.undo()

    def retracts(stem: str, key: str) -> bool:  # same name, other rule
        return key == stem

    monkeypatch.setattr(fx, "retracts", retracts)
    assert text_rules_hash() != before


def test_every_text_rule_a_fold_imports_is_covered():
    """The folds' imports from fact_extraction (topics, topic memory, projector) are all in TEXT_RULES."""
    import ast
    import importlib
    import inspect

    used = set()
    for module in ("memfold.projections.policies.topics", "memfold.projections.policies._topic_memory",
                   "memfold.projections.projector"):
        tree = ast.parse(inspect.getsource(importlib.import_module(module)))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("fact_extraction"):
                used |= {alias.name for alias in node.names}
    assert used and used <= set(TEXT_RULES), used - set(TEXT_RULES)


def _globals_read(fn) -> set[str]:
    """The module-level names of fact_extraction that ``fn``'s source reads (not modules, classes or imports)."""
    import ast
    import inspect
    import textwrap
    import types

    found = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn)))):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in vars(fx):
            value = vars(fx)[node.id]
            if isinstance(value, (types.ModuleType, type)):
                continue
            if callable(value) and getattr(value, "__module__", fx.__name__) != fx.__name__:
                continue  # a function of another module (re, typing helpers): not a text rule of this one
            found.add(node.id)
    return found


def test_every_name_a_text_rule_reads_is_a_text_rule_too():
    """A pattern or table a hashed rule reads is hashed as well, so editing it changes the fold version."""
    seen: set[str] = set()
    todo = list(TEXT_RULES)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        value = getattr(fx, name)
        if callable(value) and hasattr(value, "__code__"):
            todo.extend(_globals_read(value))
    assert seen == set(TEXT_RULES), f"read by a text rule but not hashed: {sorted(seen - set(TEXT_RULES))}"
