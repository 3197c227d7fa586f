"""Reciprocal rank fusion (projections.dense.rrf): the arithmetic and the tie-break."""

from __future__ import annotations

import pytest

from memfold.projections.dense import rrf


def test_scores_are_the_sum_of_reciprocal_ranks():
    # k=60: 1 -> 1/61 + 1/62, 3 -> 1/63 + 1/61, 2 -> 1/62, 4 -> 1/63
    assert rrf([[1, 2, 3], [3, 1, 4]], k=60) == [1, 3, 2, 4]
    # A document both rankings hold beats one that only tops one of them.
    assert rrf([[7, 8], [9, 8]], k=60) == [8, 7, 9]


def test_k_decides_how_much_the_top_ranks_dominate():
    # 1 tops the first ranking only; 2 is third and fourth. k=1: 1/2 > 1/4 + 1/5, and 4's 1/2 ties 1's
    # (the first ranking decides); k=60: 1/61 < 1/63 + 1/64, agreement wins.
    rankings = [[1, 3, 2], [4, 5, 6, 2]]
    assert rrf(rankings, k=1)[:3] == [1, 4, 2]
    assert rrf(rankings, k=60)[0] == 2


def test_empty_and_single_rankings():
    assert rrf([]) == []
    assert rrf([[], [3, 2]]) == [3, 2]
    assert rrf([[3, 2, 1]]) == [3, 2, 1]


@pytest.mark.parametrize("k", [1, 60, 1000])
def test_fusion_of_identical_rankings_is_that_ranking(k):
    ranking = [9, 4, 7, 1]
    assert rrf([ranking, ranking], k=k) == ranking
