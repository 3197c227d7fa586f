"""tune_gc / tune_switch_interval: memfold's own processes collect cyclic garbage rarely and hand the lock on sooner."""

import gc
import sys

import pytest

from memfold.core.runtime import GC_THRESHOLDS, SERVICE_SWITCH_INTERVAL, tune_gc, tune_switch_interval


@pytest.fixture
def gc_before():
    """The collector's thresholds before the test; they (and an unfrozen heap) come back after it."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)
    gc.unfreeze()


def test_tune_gc_sets_the_thresholds_and_returns_the_previous_ones(gc_before):
    assert tune_gc() == gc_before
    assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_freeze_count() > 0  # what existed is out of the collector's sight
    assert tune_gc((1_000, 5, 5)) == GC_THRESHOLDS
    assert gc.get_threshold() == (1_000, 5, 5)


def test_collection_still_frees_cycles_after_tuning(gc_before):
    tune_gc()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2  # rare, not never: an explicit or threshold collection still frees cycles


def test_tune_switch_interval_sets_it_and_returns_the_previous_one():
    before = sys.getswitchinterval()
    try:
        assert tune_switch_interval() == before
        assert sys.getswitchinterval() == SERVICE_SWITCH_INTERVAL
    finally:
        sys.setswitchinterval(before)
