"""The service's fold in a process of its own (service.fold_process): same answers, errors, callbacks, restarts.

``memfold serve`` runs this mode by default, so the service tests exercise
it over HTTP; these tests hold the parts HTTP does not show: the remote
engine's answers equal an in-process engine's on the same data dir, errors
keep their class and fields across the socket, a replay's progress is
called back here, the reads answered ahead equal the reads computed on
demand and stop while nobody reads them, a killed fold process is started again with nothing lost, appends
wait (but are kept) while the fold is too far behind, and a killed service
takes its fold process along.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from fixtures.memfold_service import LiveService

from memfold.core.errors import LogUnavailableError, ProjectionBusyError, UnknownMessageError
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.service.context_cache import ContextCache
from memfold.service.fold_process import MAX_UNREAD_ANSWERS, OPERATIONS, RemoteEngine
from memfold.service.schemas import context_body

TURNS = [
    ("user", "My order number is A-7713 and it must ship to Porto before March 3."),
    ("assistant", "Noted: order A-7713, delivery to Porto by March 3."),
    ("user", "Also, the invoice goes to billing@example.org, not to me."),
    ("assistant", "Understood, the invoice will be sent to billing@example.org."),
    ("user", "What was my order number again?"),
]


def _settings(data_dir) -> Settings:
    settings = Settings.load(None, data_dir=data_dir)
    return settings.model_copy(update={"summarizer": settings.summarizer.model_copy(update={"processes": 0})})


def _append(engine, conversation: str, turns, start: int = 0):
    events = [engine.validate({"conversation_id": conversation, "role": role, "content": f"{text} ({start + i})"})
              for i, (role, text) in enumerate(turns)]
    positions = engine.append_events(events)
    engine.wait_for(max(positions))
    return positions


@pytest.fixture
def remote(tmp_path):
    engine = RemoteEngine(_settings(tmp_path / "data"))
    try:
        yield engine
    finally:
        engine.close()


def test_remote_answers_equal_an_in_process_engine_on_the_same_data_dir(tmp_path):
    settings = _settings(tmp_path / "data")
    remote = RemoteEngine(settings)
    try:
        for n in range(6):
            _append(remote, "c1", TURNS, start=5 * n)
        remote.wait_idle(60)
        policy = remote.settings.policy
        served = remote.context("c1", budget=300, query="order number", policy=policy)
        summaries = remote.summaries("c1")
        stored = remote.messages("c1", limit=30)
    finally:
        remote.close()
    assert [m.index for m in stored] == list(range(30))
    with MemoryEngine(settings, start=False) as local:
        assert local.context("c1", budget=300, query="order number", policy=policy) == served
        assert local.summaries("c1") == summaries
    assert any("A-7713" in m.content for m in served)
    assert sum(m.tokens for m in served) <= 300


def test_errors_keep_their_class_and_fields(remote):
    _append(remote, "c1", TURNS[:2])
    with pytest.raises(UnknownMessageError) as caught:
        remote.retract("c1", "no-such-event")
    assert caught.value.field == "event_id"
    assert "no-such-event" in str(caught.value)


def test_only_the_named_operations_reach_the_fold_process(remote):
    """The serving process calls the engine API by name; nothing else of the engine is reachable from it."""
    assert not hasattr(remote, "store") and not hasattr(remote, "projector") and not hasattr(remote, "runner")
    for name in OPERATIONS:
        assert callable(getattr(remote, name)), name
        assert callable(getattr(MemoryEngine, name)), f"{name} is not a method of the engine API"
    with pytest.raises(LookupError, match="'store.path' is not an operation of the fold process"):
        remote.fold.call("store.path")
    _append(remote, "c9", TURNS[:2])
    remote.wait_idle()
    assert remote.conversation("c9")["message_count"] == 2


def test_a_replays_progress_is_called_back_in_this_process(remote):
    _append(remote, "c1", TURNS)
    seen: list[tuple[int, int]] = []
    report = remote.replay("what-if", policy="rolling", progress=lambda done, total: seen.append((done, total)))
    assert report.name == "what-if"
    assert seen and seen[-1][0] == seen[-1][1] > 0
    assert [m["name"] for m in remote.replays()] == ["what-if"]


def test_reads_answered_ahead_equal_reads_computed_on_demand(remote):
    cache = ContextCache(remote)
    _append(remote, "c1", TURNS)
    policy = remote.settings.policy
    remote.context("c1", budget=400, query=None, policy=policy, tenant_id="default")  # the shape to answer ahead
    _append(remote, "c1", TURNS, start=5)
    key = ("default", "c1", 400, None, policy, None)
    ahead = _answer_ahead(cache, key, b"(9)")
    assert b"(9)" in ahead, "the batch's note brought no answer holding the newest turn"
    computed = remote.context("c1", budget=400, query=None, policy=policy, tenant_id="default")
    assert ahead == context_body("c1", policy, 400, computed)


def test_a_read_nobody_reads_is_answered_ahead_a_few_times_then_again_after_a_hit(remote):
    cache = ContextCache(remote)
    answered: list[int] = []
    remote.listen(lambda touched, deleted, answers: answered.append(int(("default", "c1") in answers)), lambda: None)
    _append(remote, "c1", TURNS)
    policy = remote.settings.policy
    remote.context("c1", budget=400, query=None, policy=policy, tenant_id="default")
    for n in range(1, 3 * MAX_UNREAD_ANSWERS):  # a bulk import after one read: its answers go unread
        _append(remote, "c1", TURNS[:1], start=5 + n)
    remote.wait_idle(60)
    assert sum(answered) == MAX_UNREAD_ANSWERS
    key = ("default", "c1", 400, None, policy, None)
    assert cache.get(key, cache.version("default", "c1")) is None  # the last batches were not answered
    remote.context("c1", budget=400, query=None, policy=policy, tenant_id="default")  # a read computed there
    _append(remote, "c1", TURNS[:1], start=100)
    assert b"(100)" in _answer_ahead(cache, key, b"(100)")  # answered ahead again, and this hit is reported back
    before = sum(answered)
    for n in range(2 * MAX_UNREAD_ANSWERS):  # each answer read before the next append: never skipped
        _append(remote, "c1", TURNS[:1], start=200 + n)
        marker = f"({200 + n})".encode()
        assert marker in _answer_ahead(cache, key, marker)
    assert sum(answered) - before >= 2 * MAX_UNREAD_ANSWERS


def _answer_ahead(cache: ContextCache, key: tuple, marker: bytes, timeout: float = 10.0) -> bytes:
    """Return the cached answer once it holds ``marker`` (or the last one seen at the deadline, b"" if none).

    ``wait_for`` answers on the call connection, the batch's note (which bumps the
    conversation's version) comes on the event channel: under load the answer can
    arrive first, and the cache then still holds the previous batch's answer.
    """
    deadline = time.monotonic() + timeout
    ahead = None
    while time.monotonic() < deadline:
        ahead = cache.get(key, cache.version(*key[:2]))
        if ahead is not None and marker in ahead:
            break
        time.sleep(0.02)
    return ahead or b""


def test_a_killed_fold_process_is_started_again_and_loses_nothing(remote):
    _append(remote, "c1", TURNS)
    os.kill(remote.fold._process.pid, signal.SIGKILL)
    # Appends go on meanwhile: the log is written here, the fold process reads it once it is back.
    events = [remote.validate({"conversation_id": "c1", "role": role, "content": text}) for role, text in TURNS]
    positions = remote.append_events(events)
    deadline = time.monotonic() + 90
    while True:
        try:
            remote.wait_for(max(positions))
            break
        except LogUnavailableError:
            assert time.monotonic() < deadline, "the fold process did not come back"
            time.sleep(0.2)
    remote.wait_idle(60)
    messages = remote.messages("c1", limit=101)
    assert [m.index for m in messages] == list(range(10))
    assert [m.event_id for m in messages[5:]] == [e.event_id for e in events]


def test_appends_wait_while_the_fold_is_too_far_behind_and_are_never_refused(tmp_path):
    remote = RemoteEngine(_settings(tmp_path / "data"), max_lag=3, max_lag_wait_s=1.0)
    try:
        _append(remote, "c1", TURNS)
        os.kill(remote.fold._process.pid, signal.SIGSTOP)  # a fold that cannot keep up at all
        try:
            first = remote.append_events([remote.validate({"conversation_id": "c1", "role": "user", "content": "a"})])
            batch = [remote.validate({"conversation_id": "c1", "role": "user", "content": f"b{i}"}) for i in range(4)]
            remote.append_events(batch)
            assert remote._lag() == 5  # over the bound of 3: the next append waits it out, then appends
            started = time.monotonic()
            second = remote.append_events([remote.validate({"conversation_id": "c1", "role": "user", "content": "c"})])
            held = time.monotonic() - started
        finally:
            os.kill(remote.fold._process.pid, signal.SIGCONT)
        assert held >= 1.0  # it waited (a lower bound only: a slow machine cannot fail it)
        remote.wait_for(max(first + second))
        assert remote.conversation("c1")["message_count"] == 11  # nothing refused, nothing lost
    finally:
        remote.close()


def test_a_fold_process_that_cannot_open_the_engine_says_why(tmp_path):
    settings = _settings(tmp_path / "data")
    with MemoryEngine(settings, start=False):  # holds the projection file: no other process may open it
        with pytest.raises(ProjectionBusyError, match="in use by another memfold process"):
            RemoteEngine(settings)  # the fold process's own error, not a generic "it exited"


@pytest.mark.parametrize("flags, folds_here", [((), False), (("--fold-in-process",), True)])
def test_serve_folds_in_a_process_of_its_own_unless_told_otherwise(tmp_path, flags, folds_here):
    service = LiveService.start(tmp_path / "data", *flags)
    try:
        key = service.key("acme", "admin")
        with service.http(key) as http:
            body = {"messages": [{"role": role, "content": text} for role, text in TURNS]}
            assert http.post("/v1/conversations/c1/messages?wait=true", json=body).status_code == 201
            context = http.get("/v1/conversations/c1/context", params={"budget": 500, "query": "order"}).json()
            assert any("A-7713" in m["content"] for m in context["messages"])
            rows = http.post("/v1/sql", json={"query": "SELECT count(*) FROM messages"}).json()["rows"]
            assert rows == [[5]]
        # The projection file is open in the serving process only when it folds there.
        assert _opens_projection(service.proc.pid) is folds_here
    finally:
        service.stop()


def test_a_killed_service_takes_its_fold_process_along_and_the_next_one_has_everything(tmp_path):
    service = LiveService.start(tmp_path / "data")
    key = service.key("acme", "writer")
    with service.http(key) as http:
        body = {"messages": [{"id": f"m{i}", "role": role, "content": text} for i, (role, text) in enumerate(TURNS)]}
        assert http.post("/v1/conversations/c1/messages", json=body).status_code == 201  # answered: in the log
    fold = [pid for pid in os.listdir("/proc") if pid.isdigit() and _parent(int(pid)) == service.proc.pid
            and b"spawn_main" in _cmdline(pid)]
    assert fold, "no fold process under memfold serve"
    service.proc.kill()
    service.proc.wait()
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") and _parent(int(pid)) != -1 for pid in fold):
        assert time.monotonic() < deadline, "the fold process outlived its killed service"
        time.sleep(0.1)
    again = LiveService.start(tmp_path / "data")  # the projection file is free again
    try:
        with again.http(key) as http:
            deadline = time.monotonic() + 30
            while len(http.get("/v1/conversations/c1/messages").json().get("messages", [])) < len(TURNS):
                assert time.monotonic() < deadline, "the messages answered before the kill did not come back"
                time.sleep(0.1)
            assert [m["content"] for m in http.get("/v1/conversations/c1/messages").json()["messages"]] == [
                text for _, text in TURNS]
    finally:
        again.stop()


def _parent(pid: int) -> int:
    """Return the parent of a live process ``pid``, -1 once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return -1
    return -1 if fields[0] == "Z" else int(fields[1])


def _cmdline(pid: int | str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _opens_projection(pid: int) -> bool:
    fds = f"/proc/{pid}/fd"
    return any(_link(os.path.join(fds, fd)).endswith(".duckdb") for fd in os.listdir(fds))


def _link(path: str) -> str:
    """Return where ``path`` points, "" when the descriptor closed since it was listed (sockets come and go)."""
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return ""
