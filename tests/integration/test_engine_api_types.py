"""Every public method of the engine answers wrong types and values with memfold's own errors, never a TypeError
or a driver exception; ``sql`` is read-only unless asked otherwise."""

from __future__ import annotations

import pytest

from memfold.core.errors import MemfoldError, ProjectionError, UnknownConversationError, ValidationError
from memfold.engine.engine import MemoryEngine


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with MemoryEngine.open(tmp_path_factory.mktemp("types")) as e:
        e.append_message("c", "user", "my order #4711 is late")
        e.wait_idle(30)
        yield e


WRONG = [
    ("append_many(None)", lambda e: e.append_many(None)),
    ("append_many(5)", lambda e: e.append_many(5)),
    ("append_many('text')", lambda e: e.append_many("not a list")),
    ("append_many([5])", lambda e: e.append_many([5])),
    ("append_message(5, ...)", lambda e: e.append_message(5, "user", "x")),
    ("append_message(role=None)", lambda e: e.append_message("c", None, "x")),
    ("context(budget='100')", lambda e: e.context("c", budget="100")),
    ("context(budget=0)", lambda e: e.context("c", budget=0)),
    ("context(budget=-5)", lambda e: e.context("c", budget=-5)),
    ("context(budget=True)", lambda e: e.context("c", budget=True)),
    ("context(query=5)", lambda e: e.context("c", query=5)),
    ("context(None)", lambda e: e.context(None)),
    ("search(c, None)", lambda e: e.search("c", None)),
    ("search(limit=0)", lambda e: e.search("c", "order", limit=0)),
    ("search(kinds='message')", lambda e: e.search("c", "order", kinds="message")),
    ("history(5)", lambda e: e.history(5)),
    ("history(tenant_id=5)", lambda e: e.history("c", tenant_id=5)),
    ("summaries(None)", lambda e: e.summaries(None)),
    ("audit('')", lambda e: e.audit("")),
    ("retract(c, None)", lambda e: e.retract("c", None)),
    ("forget(5)", lambda e: e.forget(5)),
    ("reopen(None)", lambda e: e.reopen(None)),
    ("sql(5)", lambda e: e.sql(5)),
    ("sql(params='x')", lambda e: e.sql("SELECT ?", "x")),
    ("keyed_event_id(c, None)", lambda e: e.keyed_event_id("c", None)),
]


@pytest.mark.parametrize(("call", "fn"), WRONG, ids=[c for c, _ in WRONG])
def test_a_wrong_type_or_value_is_a_validation_error(engine, call, fn):
    with pytest.raises(ValidationError):
        fn(engine)


def test_sql_is_read_only_unless_asked(engine):
    before = engine.sql("SELECT count(*) FROM messages")[1][0][0]
    for statement in ("DELETE FROM messages", "SELECT 1; DELETE FROM messages", "DROP TABLE messages",
                      "UPDATE messages SET content = 'x'", "ATTACH ':memory:' AS other", "CHECKPOINT"):
        with pytest.raises(ProjectionError, match="read-only"):
            engine.sql(statement)
    assert engine.sql("SELECT count(*) FROM messages")[1][0][0] == before == 1
    assert engine.sql("WITH m AS (SELECT * FROM messages) SELECT count(*) FROM m")[1][0][0] == 1
    assert engine.sql("EXPLAIN SELECT * FROM messages")[1]
    engine.sql("CHECKPOINT", write=True)  # maintenance, asked for


def test_a_bad_query_is_a_projection_error_not_a_driver_exception(engine):
    with pytest.raises(ProjectionError):
        engine.sql("SELEC nonsense")
    with pytest.raises(MemfoldError):
        engine.sql("SELECT * FROM no_such_table")


def test_forgetting_an_id_that_never_existed_is_an_error_and_appends_stay_possible(engine):
    with pytest.raises(UnknownConversationError, match="nothing to forget"):
        engine.forget("never-was")
    engine.append_message("never-was", "user", "now I exist")  # the failed forget refused nothing
    engine.wait_idle(30)
    assert [m.content for m in engine.history("never-was")] == ["now I exist"]
