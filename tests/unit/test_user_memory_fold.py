"""The user fold is a pure function of its statements: lineage across conversations, independent of delivery order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from memfold.projections.user_memory import StatedFact, fold_user_facts, stated_before

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def _fact(key: str, value: str, conversation: str, day: int, index: int = 0) -> StatedFact:
    at = T0 + timedelta(days=day)
    return StatedFact("hierarchical", key, value, "ENTITY", conversation, index, at, f"{conversation}-{key}-{value}", at)


def test_a_later_statement_in_another_conversation_supersedes_and_only_the_newest_is_current() -> None:
    rows = fold_user_facts("t", "u", [
        _fact("lives_in", "Munich", "tue", 40), _fact("lives_in", "Berlin", "mon", 0), _fact("order", "#1", "mon", 0),
    ])
    by_value = {r["value"]: r for r in rows}
    assert by_value["Berlin"]["superseded_by"] == "tue-lives_in-Munich" and by_value["Berlin"]["superseded_in"] == "tue"
    assert not by_value["Berlin"]["current"] and by_value["Munich"]["current"] and by_value["#1"]["current"]
    assert by_value["Munich"]["superseded_by"] is None
    assert all(r["user_id"] == "u" and r["tenant_id"] == "t" for r in rows)


def test_a_value_said_again_is_not_superseded_by_itself_and_a_change_back_is_lineage() -> None:
    rows = fold_user_facts("t", "u", [
        _fact("city", "Berlin", "a", 0), _fact("city", "Berlin", "b", 1), _fact("city", "Munich", "c", 2),
        _fact("city", "Berlin", "d", 3),
    ])
    chain = [(r["conversation_id"], r["superseded_in"], r["current"]) for r in rows]
    assert chain == [("a", "c", False), ("b", "c", False), ("c", "d", False), ("d", None, True)]


def test_time_travel_keeps_only_statements_made_by_then() -> None:
    facts = [_fact("city", "Berlin", "a", 0), _fact("city", "Munich", "c", 10)]
    then = fold_user_facts("t", "u", stated_before(facts, T0 + timedelta(days=5)))
    assert [(r["value"], r["current"]) for r in then] == [("Berlin", True)]


_facts = st.lists(
    st.builds(_fact, st.sampled_from(["city", "order", "email"]), st.sampled_from(["x", "y", "z"]),
              st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 5), st.integers(0, 3)),
    max_size=12, unique_by=lambda f: f.fact_id,
)


@given(_facts, st.randoms(use_true_random=False))
def test_the_fold_does_not_depend_on_the_order_statements_arrive_in(facts, random) -> None:
    shuffled = list(facts)
    random.shuffle(shuffled)
    assert fold_user_facts("t", "u", shuffled) == fold_user_facts("t", "u", facts)
    current = [r for r in fold_user_facts("t", "u", facts) if r["current"]]
    assert len(current) == len({(f.policy, f.key) for f in facts})  # one current value per key
