"""Cold reads' values are kept only while no batch of their conversation has committed since they were read."""

from __future__ import annotations

import threading

from memfold.projections.read_cache import ColdReads, Versions


def test_a_value_read_before_a_commit_of_its_conversation_is_refused():
    cache: ColdReads[str] = ColdReads()
    a, b = ("t", "a"), ("t", "b")
    version_a, version_b = cache.version(a), cache.version(b)
    cache.invalidate([a])  # a batch of conversation a committed while both were read
    assert not cache.put(("p", *a), a, "state of a", version_a)
    assert cache.put(("p", *b), b, "state of b", version_b)  # b was not touched
    assert cache.get(("p", *b)) == "state of b" and cache.get(("p", *a)) is None


def test_invalidate_forgets_every_value_of_the_conversation_and_clear_refuses_fills_under_way():
    cache: ColdReads[str] = ColdReads()
    a = ("t", "a")
    for policy in ("p1", "p2"):
        assert cache.put((policy, *a), a, policy, cache.version(a))
    cache.invalidate([a])
    assert (("p1", *a) not in cache) and (("p2", *a) not in cache) and len(cache) == 0
    version = cache.version(a)
    cache.clear()
    assert not cache.put(("p1", *a), a, "late", version)


def test_the_cache_is_bounded_least_recently_used_out():
    cache: ColdReads[int] = ColdReads(max_entries=3)
    keys = [("t", str(i)) for i in range(4)]
    for i, key in enumerate(keys[:3]):
        cache.put(key, key, i, cache.version(key))
    assert cache.get(keys[0]) == 0  # 0 is now the most recently used
    cache.put(keys[3], keys[3], 3, cache.version(keys[3]))
    assert len(cache) == 3 and keys[1] not in cache and cache.get(keys[0]) == 0
    cache.invalidate([keys[1]])  # an evicted conversation's bookkeeping went with it
    assert len(cache) == 3


def test_versions_move_per_slot_and_all_at_once():
    versions = Versions(slots=8)
    a = ("t", "a")
    before = versions.of(a)
    versions.bump(a)
    assert versions.of(a) != before
    now = versions.of(a)
    versions.bump_all()
    assert versions.of(a) != now


def test_concurrent_fills_and_commits_never_keep_a_value_older_than_the_last_commit():
    """Readers fill while a writer commits new versions: whatever is kept is the latest committed value."""
    cache: ColdReads[int] = ColdReads()
    key = ("t", "a")
    committed = [0]  # the 'store'
    stop = threading.Event()
    kept_stale = []

    def reader():
        while not stop.is_set():
            version = cache.version(key)
            value = committed[0]  # read the store
            cache.put(("p", *key), key, value, version)
            now = committed[0]  # before the get: the writer only moves it on
            seen = cache.get(("p", *key))
            if seen is not None and seen < now - 1:  # the writer may be between its store write and invalidate
                kept_stale.append((seen, now))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(20_000):
        committed[0] += 1  # a batch commits ...
        cache.invalidate([key])  # ... and the fold invalidates its conversation
    stop.set()
    for t in threads:
        t.join()
    assert kept_stale == []
    cached = cache.get(("p", *key))
    assert cached is None or cached == committed[0]
