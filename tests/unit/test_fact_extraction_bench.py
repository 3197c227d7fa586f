"""benchmarks/fact_extraction.py: the fingerprint a speed-up of the extractor is checked against is stable."""

from __future__ import annotations

import re

from support.benchmarks import load as _load


def _run(capsys, *args: str) -> tuple[int, str]:
    _load("fact_extraction").main(["--messages", "400", "--chunk", "50", *args])
    out = capsys.readouterr().out
    facts = int(re.search(r"([\d,]+) facts", out).group(1).replace(",", ""))
    return facts, re.search(r"fingerprint ([0-9a-f]{16})", out).group(1)


def test_the_same_messages_give_the_same_facts_and_fingerprint(capsys):
    facts, fingerprint = _run(capsys)
    assert facts > 0  # a fingerprint of nothing would compare equal to anything
    assert _run(capsys) == (facts, fingerprint)
    assert _run(capsys, "--chunk", "400")[1] != fingerprint  # one book for all: other facts, another print
