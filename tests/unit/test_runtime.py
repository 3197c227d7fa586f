"""tune_gc: memfold's own processes collect cyclic garbage rarely; the thresholds it replaced come back."""

import gc

from memfold.engine.runtime import GC_THRESHOLDS, tune_gc


def test_tune_gc_sets_the_thresholds_and_returns_the_previous_ones():
    before = gc.get_threshold()
    try:
        assert tune_gc() == before
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0  # what existed is out of the collector's sight
        assert tune_gc((1_000, 5, 5)) == GC_THRESHOLDS
        assert gc.get_threshold() == (1_000, 5, 5)
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_collection_still_frees_cycles_after_tuning():
    before = gc.get_threshold()
    try:
        tune_gc()

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        assert gc.collect() >= 2  # rare, not never: an explicit or threshold collection still frees cycles
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_tune_switch_interval_sets_it_and_returns_the_previous_one():
    import sys

    from memfold.engine.runtime import SERVICE_SWITCH_INTERVAL, tune_switch_interval

    before = sys.getswitchinterval()
    try:
        assert tune_switch_interval() == before
        assert sys.getswitchinterval() == SERVICE_SWITCH_INTERVAL
    finally:
        sys.setswitchinterval(before)
