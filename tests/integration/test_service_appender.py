"""Group commit (memfold.service.appender) over a real engine: requests queued together share one transaction.

The writer's first transaction is held at a gate so the test knows which
requests queue behind it; everything else is the real engine and log.
"""

from __future__ import annotations

import threading

import pytest

from memfold.core.errors import EventConflictError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.service.appender import GroupAppender

pytestmark = pytest.mark.timeout(60)


class _Gated:
    """The real engine; its first append waits for ``gate`` (so later requests pile up behind it)."""

    def __init__(self, engine: MemoryEngine):
        self.engine = engine
        self.gate = threading.Event()
        self.sizes: list[int] = []
        self.first_started = threading.Event()

    def check_conflicts(self, events, lines=None):
        return self.engine.check_conflicts(events, lines=lines)

    def append_events(self, events):
        self.sizes.append(len(events))
        if len(self.sizes) == 1:
            self.first_started.set()
            assert self.gate.wait(20)
        return self.engine.append_events(events)


def _events(engine: MemoryEngine, conversation: str, *messages: tuple[str, str]):
    return [engine.validate({"tenant_id": "t", "conversation_id": conversation, "role": "user", "content": text,
                             "event_id": f"e-{conversation}-{mid}"}, line=i + 1)
            for i, (mid, text) in enumerate(messages)]


def test_requests_queued_together_are_one_transaction_and_each_stays_all_or_nothing(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d")) as engine:
        gated = _Gated(engine)
        appender = GroupAppender(gated)
        try:
            first = appender.submit(_events(engine, "c1", ("a", "first")))
            assert gated.first_started.wait(20)
            ok_1 = appender.submit(_events(engine, "c1", ("b", "second"), ("c", "third")))
            clash = appender.submit(_events(engine, "c1", ("d", "new"), ("c", "other text")))  # c taken just ahead
            stored = appender.submit(_events(engine, "c1", ("a", "not what a said")))  # a is in the log by then
            ok_2 = appender.submit(_events(engine, "c2", ("a", "another conversation")))
            same = appender.submit(_events(engine, "c1", ("b", "second")))  # a retry: stored once
            gated.gate.set()
            positions = {name: f.result(20) for name, f in
                         (("first", first), ("ok_1", ok_1), ("ok_2", ok_2), ("same", same))}
            for future, line in ((clash, 2), (stored, 1)):
                with pytest.raises(EventConflictError) as err:
                    future.result(20)
                assert err.value.line == line
        finally:
            appender.close()
        # One transaction for the first request, one for everything queued behind it (conflicts left out).
        assert gated.sizes == [1, 2 + 1 + 1]
        assert positions["same"] == positions["ok_1"][:1]
        engine.wait_idle()
        assert [m.content for m in engine.history("c1", tenant_id="t")] == ["first", "second", "third"]
        assert [m.content for m in engine.history("c2", tenant_id="t")] == ["another conversation"]


def test_a_request_withdrawn_before_its_group_is_written_stores_nothing(tmp_path):
    with MemoryEngine(Settings.load(None, data_dir=tmp_path / "d")) as engine:
        gated = _Gated(engine)
        appender = GroupAppender(gated)
        try:
            appender.submit(_events(engine, "c1", ("a", "kept")))
            assert gated.first_started.wait(20)
            withdrawn = appender.submit(_events(engine, "c1", ("b", "withdrawn")))
            assert withdrawn.cancel()  # what a client that went away does (asyncio cancels the wrapped future)
            gated.gate.set()
        finally:
            appender.close()
        engine.wait_idle()
        assert [m.content for m in engine.history("c1", tenant_id="t")] == ["kept"]
