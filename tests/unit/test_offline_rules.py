"""Every rule of the offline summarizer's table finds what it is for and leaves alone what it is not for."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfold.projections import offline_rules
from memfold.projections.offline_rules import RULE, RULES, Rule

EXAMPLES = [(rule.name, "matches", text) for rule in RULES for text in rule.matches] + [
    (rule.name, "misses", text) for rule in RULES for text in rule.misses
]


@pytest.mark.parametrize("name, side, text", EXAMPLES, ids=[f"{n}-{s}-{i}" for i, (n, s, _) in enumerate(EXAMPLES)])
def test_every_example(name, side, text):
    assert RULE[name].hits(text) is (side == "matches"), f"rule {name!r} should {'match' if side == 'matches' else 'miss'} {text!r}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_has_examples_both_ways_and_says_why(rule: Rule):
    assert len(rule.matches) >= 2 and len(rule.misses) >= 2 and len(rule.why) > 30


def test_the_table_hash_changes_with_any_entry(monkeypatch):
    from memfold.core.ids import content_hash

    def table_hash(rules):
        return content_hash(*[(r.name, r.body, r.flags, r.mode, r.matches, r.misses, r.why) for r in rules], length=12)

    assert table_hash(RULES) == offline_rules.TABLE_HASH
    first = RULES[0]
    edited = Rule(first.name, first.body + "|never-said", first.flags, first.matches, first.misses, first.why)
    assert table_hash((edited, *RULES[1:])) != offline_rules.TABLE_HASH


def test_the_summarizer_version_and_cache_key_carry_the_table_hash():
    from memfold.core.ports import SummaryInput
    from memfold.projections.offline_summarizer import RULES_VERSION, OfflineSummarizer

    assert RULES_VERSION.startswith(f"offline-{offline_rules.TABLE_HASH}-")
    model, _ = OfflineSummarizer().identity(SummaryInput(policy="rolling", kind="text", messages=()))
    assert model == RULES_VERSION


def _measured_text() -> str:
    root = Path(__file__).resolve().parents[2]
    parts = [p.read_text(errors="ignore") for p in (root / "engine" / "data").glob("*.jsonl")]
    parts += [p.read_text(errors="ignore") for p in (root / "benchmarks").glob("synth*.py")]
    return " ".join(" ".join(parts).lower().split())


def test_no_example_is_taken_from_the_data_the_rules_are_measured_on():
    """Examples are written for the rules: none is a sentence of the bundled sample or the generators."""
    measured = _measured_text()
    copied = [text for rule in RULES for text in (*rule.matches, *rule.misses) if len(text) > 12 and text.lower() in measured]
    assert copied == []
