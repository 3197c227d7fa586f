"""The engine API contract on the embedded engine, the service's fold process and the HTTP client.

One engine (a data dir in tmp), one fold process (``RemoteEngine``, as
``memfold serve`` runs it) and one live service (``memfold serve`` on
loopback), each started once for the module with the contract's settings;
every test works in a conversation of its own.

``RemoteEngine`` is called by the engine's method names, as code written
for ``MemoryEngine`` would call it: ``append_message`` and ``append_many``
then run in the fold process (``RemoteEngine`` forwards what it does not
define), reads there too. The service's own append path (``validate`` and
``append_events`` in the serving process) is what the HTTP variant exercises.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from fixtures.memfold_service import LiveService

from contract.engine_api_contract import SETTINGS, EngineApiContract, MemoryApi, Piece, Stored, flat_tool_calls
from memfold.client import Client
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine
from memfold.service.fold_process import RemoteEngine

# One worker under xdist (make test): the module's engine, fold process and service are started once.
pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("engine-api")]

TENANT = "contract"


def _settings(data_dir: Path) -> Settings:
    settings = Settings.load(None, data_dir=data_dir, **SETTINGS)
    # The summarizer on the pool's threads, as a library call runs it: no process of its own to start.
    return settings.model_copy(update={"summarizer": settings.summarizer.model_copy(update={"processes": 0})})


def _env() -> dict[str, str]:
    """Return :data:`SETTINGS` as the ``MEMFOLD_*`` variables ``memfold serve`` reads."""
    env = {"MEMFOLD_POLICY": SETTINGS["policy"], "MEMFOLD_POLICIES": ",".join(SETTINGS["policies"])}
    for name, value in SETTINGS["hierarchical"].items():
        env[f"MEMFOLD_HIERARCHICAL__{name.upper()}"] = str(value)
    return env


class EngineApi(MemoryApi):
    """The engine's own API (``MemoryEngine``, or ``RemoteEngine`` standing in for it) in one tenant.

    A caller's message ``id`` becomes the event id ``keyed_event_id`` gives
    it, as the service and ``memfold ingest`` name messages: a caller's id is
    kept once per conversation, while a raw ``event_id`` is one for the
    whole log (the same ``event_id`` in two conversations is a conflict).
    """

    def __init__(self, engine: MemoryEngine | RemoteEngine, tenant_id: str):
        self.engine = engine
        self.tenant_id = tenant_id

    def _message(self, conversation_id: str, message: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(message)
        if "id" in out:
            out["event_id"] = self.engine.keyed_event_id(conversation_id, out.pop("id"), tenant_id=self.tenant_id)
        return out

    def append(self, conversation_id: str, message: Mapping[str, Any]) -> None:
        fields = self._message(conversation_id, message)
        position = self.engine.append_message(conversation_id, fields.pop("role"), fields.pop("content", None),
                                              tenant_id=self.tenant_id, **fields)
        self.engine.wait_for(position)

    def append_batch(self, conversation_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        positions = self.engine.append_many(
            [{**self._message(conversation_id, m), "conversation_id": conversation_id, "tenant_id": self.tenant_id} for m in messages])
        self.engine.wait_for(max(positions))

    def history(self, conversation_id: str) -> list[Stored]:
        return [Stored(m.role, m.content, flat_tool_calls(m.tool_calls), m.tool_call_id, m.name, m.event_id)
                for m in self.engine.history(conversation_id, tenant_id=self.tenant_id)]

    def context(self, conversation_id: str, *, budget: int) -> list[Piece]:
        return [Piece(m.role, m.content, m.kind)
                for m in self.engine.context(conversation_id, budget=budget, tenant_id=self.tenant_id)]

    def prompt(self, conversation_id: str, *, budget: int) -> list[dict[str, Any]]:
        return self.engine.prompt(conversation_id, budget=budget, tenant_id=self.tenant_id).messages

    def summaries(self, conversation_id: str) -> list[Mapping[str, Any]]:
        return self.engine.summaries(conversation_id, tenant_id=self.tenant_id)

    def search(self, conversation_id: str, query: str) -> list[int]:
        return [h.idx for h in self.engine.search(conversation_id, query, kinds=("message",),
                                                     tenant_id=self.tenant_id)]

    def retract(self, conversation_id: str, event_id: str) -> None:
        self.engine.retract(conversation_id, event_id, tenant_id=self.tenant_id)

    def forget(self, conversation_id: str) -> None:
        self.engine.forget(conversation_id, tenant_id=self.tenant_id)

    def reopen(self, conversation_id: str) -> None:
        self.engine.reopen(conversation_id, tenant_id=self.tenant_id)

    def append_of_user(self, conversation_id: str, messages: Sequence[Mapping[str, Any]], user_id: str) -> None:
        positions = self.engine.append_many([{**m, "conversation_id": conversation_id, "tenant_id": self.tenant_id,
                                              "user_id": user_id} for m in messages])
        self.engine.wait_for(max(positions))

    def user_facts(self, user_id: str) -> dict[str, tuple[str, str]]:
        memory = self.engine.user_memory(user_id, tenant_id=self.tenant_id)
        return {f["key"]: (f["value"], f["conversation_id"]) for f in memory["facts"]}

    def search_user(self, user_id: str, query: str) -> list[tuple[str, int]]:
        return [(h["conversation_id"], h["index"]) for h in self.engine.search_user(user_id, query,
                                                                                   tenant_id=self.tenant_id)]

    def forget_user(self, user_id: str) -> list[str]:
        return self.engine.forget_user(user_id, tenant_id=self.tenant_id)


class ClientApi(MemoryApi):
    """``memfold.client.Client``: the tenant is its key's."""

    message_id_field = "message_id"

    def __init__(self, client: Client):
        self.client = client

    def append(self, conversation_id: str, message: Mapping[str, Any]) -> None:
        self.client.append(conversation_id, [message])

    def append_batch(self, conversation_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        self.client.append(conversation_id, messages)

    def history(self, conversation_id: str) -> list[Stored]:
        return [Stored(m.role, m.content, flat_tool_calls(m.tool_calls), m.tool_call_id, m.name, m.event_id)
                for m in self.client.messages(conversation_id)]

    def context(self, conversation_id: str, *, budget: int) -> list[Piece]:
        return [Piece(m.role, m.content, m.kind)
                for m in self.client.context(conversation_id, budget=budget).messages]

    def prompt(self, conversation_id: str, *, budget: int) -> list[dict[str, Any]]:
        return self.client.prompt(conversation_id, budget=budget).messages

    def summaries(self, conversation_id: str) -> list[Mapping[str, Any]]:
        return self.client.summaries(conversation_id)

    def search(self, conversation_id: str, query: str) -> list[int]:
        return [h["index"] for h in self.client.search(query, conversation_ids=[conversation_id])]

    def retract(self, conversation_id: str, event_id: str) -> None:
        self.client.retract(conversation_id, event_id)

    def forget(self, conversation_id: str) -> None:
        self.client.forget(conversation_id)

    def reopen(self, conversation_id: str) -> None:
        self.client.reopen(conversation_id)

    def append_of_user(self, conversation_id: str, messages: Sequence[Mapping[str, Any]], user_id: str) -> None:
        self.client.append(conversation_id, messages, user_id=user_id)

    def user_facts(self, user_id: str) -> dict[str, tuple[str, str]]:
        return {f["key"]: (f["value"], f["conversation_id"]) for f in self.client.user_memory(user_id)["facts"]}

    def search_user(self, user_id: str, query: str) -> list[tuple[str, int]]:
        return [(h["conversation_id"], h["index"]) for h in self.client.search_user(user_id, query)]

    def forget_user(self, user_id: str) -> list[str]:
        return self.client.forget_user(user_id)["conversations"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[MemoryEngine]:
    with MemoryEngine(_settings(tmp_path_factory.mktemp("embedded"))) as engine:
        yield engine


@pytest.fixture(scope="module")
def remote(tmp_path_factory) -> Iterator[RemoteEngine]:
    remote = RemoteEngine(_settings(tmp_path_factory.mktemp("fold-process")))
    try:
        yield remote
    finally:
        remote.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[LiveService]:
    service = LiveService.start(tmp_path_factory.mktemp("service"), env=_env())
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module")
def client(live: LiveService) -> Iterator[Client]:
    with Client(live.url, live.key(TENANT, "admin")) as client:
        yield client


class TestEmbeddedEngine(EngineApiContract):
    @pytest.fixture
    def memory(self, engine: MemoryEngine) -> MemoryApi:
        return EngineApi(engine, TENANT)


class TestFoldProcess(EngineApiContract):
    @pytest.fixture
    def memory(self, remote: RemoteEngine) -> MemoryApi:
        return EngineApi(remote, TENANT)


class TestHttpClient(EngineApiContract):
    @pytest.fixture
    def memory(self, client: Client) -> MemoryApi:
        return ClientApi(client)

