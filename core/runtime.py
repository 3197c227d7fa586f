"""Process settings for memfold's own processes: the CLI, ``memfold serve``, workers and the benchmarks.

An application that embeds :class:`~memfold.engine.engine.MemoryEngine`
owns its process and decides for itself; it may call :func:`tune_gc` too.
"""

from __future__ import annotations

import gc
import sys

# Generation 0 collects after 50,000 net allocations instead of 700, and the older generations
# after 20 and 100 of the younger's collections instead of 10 and 10.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc(thresholds: tuple[int, int, int] = GC_THRESHOLDS) -> tuple[int, int, int]:
    """Make CPython's cyclic garbage collector run far less often; return the thresholds it had.

    An engine holds millions of long-lived objects (the hot tail, the
    recall index, time-travel history). With the default thresholds the
    collector walks them again and again while the projector folds: a
    cached replay of 20,000 messages ran 6,329 messages/s with them, 8,031
    tuned and 8,733 with no collection at all (10 full collections in the
    default run), and each full collection is a pause every thread waits
    out. Reference counting still frees everything that is not in a cycle
    at once; cycles wait longer. ``gc.freeze()`` first moves what exists
    now (imported modules, schemas) out of the collector's sight for good.
    """
    previous = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return previous


def pause_gc() -> None:
    """Turn CPython's cyclic garbage collector off while a short-lived process loads its code (:func:`resume_gc`).

    Loading pydantic, DuckDB and the engine makes ~250,000 objects that
    live as long as the process; the collector walked them ~90 times during
    a CLI ``append`` (~12 ms of a ~0.3 s command) and freed nothing.
    """
    gc.disable()


def resume_gc() -> None:
    """Turn the collector back on after :func:`pause_gc`, what exists now frozen out of its sight for good.

    Nothing when it is on (a library caller's process, or already resumed).
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


# How long a thread may hold CPython's interpreter lock while another waits for it (the default is 5 ms).
SERVICE_SWITCH_INTERVAL = 0.001


def tune_switch_interval(seconds: float = SERVICE_SWITCH_INTERVAL) -> float:
    """Let a waiting thread have the interpreter lock sooner; return the interval it had.

    ``memfold serve`` answers requests on its event loop while the projector
    and the appender fold and write in threads of the same process. Each
    time the loop waits for a socket it gives the lock up, and getting it
    back waits out the interval of whichever thread holds it then: with 5 ms,
    a context read under a mixed load spent most of its time so. 1 ms
    costs the folding threads a few more hand-overs.
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    return previous
