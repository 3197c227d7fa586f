"""The Kafka log's offset index (a real SQLite file, no broker): exact numbering and de-duplication in bounded memory."""

from __future__ import annotations

import pytest

from memfold.core.errors import LogUnavailableError
from memfold.streams.kafka_index import OffsetIndex


def test_numbering_and_duplicates_are_exact_with_a_tiny_key_cache(tmp_path):
    index = OffsetIndex(tmp_path / "index.sqlite", max_cached_keys=3)
    keys = [f"t/c{i % 7}" for i in range(70)]
    records = [(offset, key, f"id-{offset}") for offset, key in enumerate(keys)]
    seqs: dict[int, int] = {}
    for start in range(0, 70, 10):
        seqs.update(index.extend(0, records[start : start + 10], start + 10))
        assert index.cached_keys() <= 7  # the bound is per batch: the batch's conversations, never the history
    assert [seqs[o] for o in range(70)] == [o // 7 + 1 for o in range(70)]
    # The first id again, 70 offsets later, and a hole at 71: a duplicate (seq 0) and nothing.
    assert index.extend(0, [(70, "t/c0", "id-0"), (72, "t/c0", "id-72")], 73) == {70: 0, 72: 11}
    assert index.next_offset(0) == 73
    assert index.seqs(0, 69, 80) == {69: 10, 70: 0, 72: 11}
    assert index.offsets(0, ["id-0", "id-72", "nowhere"]) == {"id-0": 0, "id-72": 72}
    assert index.find(["id-5", "nowhere"]) == {"id-5": (0, 5)}
    index.close()

    reopened = OffsetIndex(tmp_path / "index.sqlite")  # a restart continues where the file ends
    assert reopened.next_offset(0) == 73 and reopened.last_id(0) == "id-72"
    assert reopened.extend(0, [(73, "t/c3", "id-73")], 74) == {73: 11}
    reopened.close()


def test_two_processes_sharing_a_file_number_alike(tmp_path):
    a, b = OffsetIndex(tmp_path / "index.sqlite"), OffsetIndex(tmp_path / "index.sqlite")
    records = [(o, f"t/c{o % 2}", f"id-{o}") for o in range(6)]
    assert a.extend(0, records[:4], 4) == {0: 1, 1: 1, 2: 2, 3: 2}
    # b had not seen a's rows: it continues from the file, leaves those to seqs(), and numbers the rest alike.
    assert b.extend(0, records, 6) == {4: 3, 5: 3}
    assert b.seqs(0, 0, 6) == {0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3}
    a.close()
    b.close()


def test_a_temporary_index_is_private_and_an_unwritable_path_is_a_clear_error(tmp_path):
    one, two = OffsetIndex(None), OffsetIndex(None)
    one.extend(0, [(0, "t/c", "x")], 1)
    assert one.next_offset(0) == 1 and two.next_offset(0) == 0
    one.close()
    two.close()
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(LogUnavailableError, match="offset index"):
        OffsetIndex(tmp_path / "file" / "index.sqlite")
