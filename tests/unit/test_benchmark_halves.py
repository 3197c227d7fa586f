"""The benchmarks' tuning / held-out split: a function of the conversation id alone, two halves that partition."""

from __future__ import annotations

import hashlib

import pytest
from support.benchmarks import load

halves = load("halves")
synth = load("synth")


def test_the_half_is_the_parity_of_the_ids_hash_and_never_anything_else():
    for cid in ("beam-1", "beam-2", "travel-0042", "x"):
        expected = "held-out" if hashlib.sha256(cid.encode()).digest()[0] % 2 else "tuning"
        assert halves.half_of(cid) == expected == halves.half_of(cid)


def test_the_halves_partition_every_set_and_keep_its_order():
    ids = [f"beam-{i}" for i in range(1, 21)] + [c.conversation_id for c in synth.generate(40, 30, 11)]
    tuning = halves.select(ids, "tuning", str)
    held_out = halves.select(ids, "held-out", str)
    assert tuning and held_out and not set(tuning) & set(held_out)
    assert sorted(tuning + held_out) == sorted(ids) and halves.select(ids, "all", str) == ids
    assert held_out == [i for i in ids if i in set(held_out)]  # order kept


def test_an_unknown_half_is_refused():
    with pytest.raises(ValueError, match="unknown half 'test'"):
        halves.select(["a"], "test", str)
