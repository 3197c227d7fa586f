"""Replays, promote and verify over HTTP: the engine's replay namespaces (``MemoryEngine.replay`` and kin).

A replay folds the whole log (every tenant) with other settings into a
namespace of the data dir, and promoting one changes the settings every
tenant's memory is folded with. Those act on the data dir, not on one
tenant, so they need an ``operator`` key; a tenant's ``admin`` may verify
its own conversations (the comparison only covers that tenant's rows).

A replay runs in a background thread of the service (``POST /v1/replays``
answers 202 at once); its progress and outcome are read with
``GET /v1/replays/{name}``. The engine's replays are resumable, so one cut
short by a restart is finished by posting the same name again.
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from pydantic import Field, field_validator, model_validator

from memfold.core.errors import UnknownConversationError, UnknownReplayError
from memfold.service.deps import Admin, Operator, services
from memfold.service.routes import existing
from memfold.service.schemas import ErrorResponse, _Body

_ERRORS = {401: {"model": ErrorResponse}, 403: {"model": ErrorResponse}, 404: {"model": ErrorResponse},
           422: {"model": ErrorResponse}, 429: {"model": ErrorResponse}}
router = APIRouter(prefix="/v1", responses=_ERRORS)
ReplayName = Path(min_length=1, max_length=64, description="the replay namespace")
_SAMPLE_ROWS = 5  # differing rows shown per table; the counts are always complete
# Each question assembles one context per side, so a request's questions are bounded like a batch.
MAX_DIFF_QUESTIONS = 500


class ReplayRequest(_Body):
    """A replay to start (or resume, with ``name`` alone): the live settings changed by these."""

    name: str = Field(min_length=1, max_length=64, description="letters, digits, '_', '.', '-'")
    policy: str | None = Field(None, description="the replay's read policy (folded too)")
    overrides: dict[str, Any] | None = Field(
        None, description='dotted policy settings, e.g. {"hierarchical.trigger_message_count": 30}')
    conversations: list[str] | None = Field(None, min_length=1, description="replay only these conversation ids")


class DiffQuestion(_Body):
    """One question of a diff's question set and its reference answer (scored by answer-content recall)."""

    conversation_id: str | None = Field(None, min_length=1, max_length=200,
                                        description="the key tenant's conversation it is asked in (default: the "
                                                    "request's conversation_id)")
    question: str = Field(min_length=1, max_length=10_000, description="asked as each side's context query")
    answer: str = Field(min_length=1, max_length=10_000, description="the reference answer")

    @field_validator("question", "answer")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


class DiffRequest(_Body):
    """A diff with a question set: ``memfold diff NAME [CONV] --questions FILE`` over HTTP."""

    conversation_id: str | None = Field(None, min_length=1, max_length=200,
                                        description="one conversation of the key's tenant (default: every "
                                                    "conversation of the data dir)")
    budget: int = Field(4000, ge=1, description="the budget both sides' contexts are assembled at")
    questions: list[DiffQuestion] = Field(min_length=1, max_length=MAX_DIFF_QUESTIONS)

    @model_validator(mode="after")
    def _asked_somewhere(self) -> DiffRequest:
        for i, q in enumerate(self.questions):
            if q.conversation_id is None and self.conversation_id is None:
                raise ValueError(f"questions[{i}] names no conversation_id and the request names none either")
            if None not in (q.conversation_id, self.conversation_id) and q.conversation_id != self.conversation_id:
                raise ValueError(f"questions[{i}] is asked in {q.conversation_id!r}, but the diff covers only "
                                 f"{self.conversation_id!r}")
        return self


class ReplayJobs:
    """The replays this process runs: name -> progress and outcome (the manifest on disk has the rest)."""

    def __init__(self, engine):
        self.engine = engine
        self._jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def start(self, body: ReplayRequest) -> dict[str, Any]:
        """Start ``body``'s replay in a thread; raise 409 while one of that name runs."""
        from memfold.engine.namespaces import check_name

        check_name(body.name)
        with self._lock:
            if self._jobs.get(body.name, {}).get("state") == "running":
                raise HTTPException(409, f"replay {body.name!r} is running; GET /v1/replays/{body.name} follows it")
            job = self._jobs[body.name] = {"state": "running", "done": 0, "total": None}
        threading.Thread(target=self._run, args=(body, job), name=f"memfold-replay-{body.name}", daemon=True).start()
        return dict(job)

    def _run(self, body: ReplayRequest, job: dict[str, Any]) -> None:
        def progress(done: int, total: int) -> None:
            job["done"], job["total"] = done, total

        try:
            report = self.engine.replay(body.name, policy=body.policy, overrides=body.overrides,
                                        conversations=body.conversations, progress=progress)
        except Exception as exc:  # the outcome is the job's status; nothing else waits for it
            job.update(state="failed", error={"type": type(exc).__name__, "message": str(exc)})
            return
        job.update(state="done", report={k: v for k, v in asdict(report).items() if k != "path"})

    def running(self, name: str) -> bool:
        return self._jobs.get(name, {}).get("state") == "running"

    def status(self, name: str) -> dict[str, Any] | None:
        job = self._jobs.get(name)
        return dict(job) if job is not None else None

    def names(self) -> list[str]:
        return list(self._jobs)

    def forget(self, name: str) -> None:
        """Drop the record of a finished job (its namespace was dropped)."""
        with self._lock:
            if not self.running(name):
                self._jobs.pop(name, None)


def _jobs(request: Request) -> ReplayJobs:
    return services(request).replays


def _described(manifest: dict[str, Any], job: dict[str, Any] | None) -> dict[str, Any]:
    return jsonable_encoder({**manifest, "job": job})


def _differences(found: list) -> dict[str, Any]:
    return jsonable_encoder({"identical": not found, "differences": [
        {"table": d.table, "only_live": len(d.only_live), "only_replay": len(d.only_replay),
         "live_rows": [list(r) for r in d.only_live[:_SAMPLE_ROWS]],
         "replay_rows": [list(r) for r in d.only_replay[:_SAMPLE_ROWS]]}
        for d in found
    ]})


@router.post("/replays", status_code=202, tags=["replays"], responses={409: {"model": ErrorResponse}})
def start_replay(request: Request, body: ReplayRequest, key: Operator) -> dict:
    """Fold the log with other settings into the namespace ``name``, in the background (operator keys).

    Answers 202 with the job; ``GET /v1/replays/{name}`` follows it. Posting
    ``name`` alone resumes an interrupted replay or catches a finished one up
    with the log; other settings than the namespace's fail the job.
    """
    return {"name": body.name, "job": _jobs(request).start(body)}


@router.get("/replays", tags=["replays"])
def list_replays(request: Request, key: Operator) -> dict:
    """Every replay namespace of the data dir: settings, status, position, stats, and this process's job."""
    jobs = _jobs(request)
    manifests = services(request).engine.replays()
    listed = [_described(m, jobs.status(m["name"])) for m in manifests]
    named = {m["name"] for m in manifests}
    # A job that failed before its namespace existed (e.g. an unknown policy) is listed too.
    listed += [{"name": n, "job": jobs.status(n)} for n in jobs.names() if n not in named]
    return {"replays": listed}


@router.get("/replays/{name}", tags=["replays"])
def get_replay(request: Request, key: Operator, name: str = ReplayName) -> dict:
    """One replay: its manifest (status, head, stats) and the job's progress or error in this process."""
    job = _jobs(request).status(name)
    found = [m for m in services(request).engine.replays() if m["name"] == name]
    if not found and job is None:
        raise UnknownReplayError(f"no replay {name!r}; GET /v1/replays lists them", field="name")
    return _described(found[0] if found else {"name": name}, job)


@router.delete("/replays/{name}", tags=["replays"], responses={409: {"model": ErrorResponse}})
def drop_replay(request: Request, key: Operator, name: str = ReplayName) -> dict:
    """Delete a replay namespace (its projection and side log); the live projection is untouched."""
    jobs = _jobs(request)
    if jobs.running(name):
        raise HTTPException(409, f"replay {name!r} is running; drop it once it is done")
    try:
        services(request).engine.drop_replay(name)
    finally:
        jobs.forget(name)  # a job that failed before making its namespace goes too
    return {"name": name, "dropped": True}


@router.post("/replays/{name}/promote", tags=["replays"], responses={409: {"model": ErrorResponse}})
def promote_replay(request: Request, key: Operator, name: str = ReplayName) -> dict:
    """Make a replay's settings live for every tenant; answers once reads use them.

    Catches the replay up, records a ``SettingsChanged`` event (the audit
    record) and the replay's summaries on the live log, then swaps in a
    projection folded with the new settings; reads never see a gap.
    """
    svc = services(request)
    if svc.replays.running(name):
        raise HTTPException(409, f"replay {name!r} is running; promote it once it is done")
    position = svc.engine.promote(name)
    svc.contexts.clear()  # every cached answer came from the projection just replaced
    return {"name": name, "promoted": True, "partition": position.partition, "offset": position.offset,
            "policy": svc.engine.settings.policy}


@router.get("/replays/{name}/diff", tags=["replays"])
def diff_replay(
    request: Request, key: Operator, name: str = ReplayName,
    conversation_id: str | None = Query(None, min_length=1, max_length=200,
                                        description="one conversation of the key's tenant (default: every "
                                                    "conversation of the data dir)"),
    budget: int = Query(4000, ge=1, description="the budget both sides' contexts are assembled at"),
) -> dict:
    """Compare a replay with live, per conversation: summary versions and coverage, facts in force and the facts
    the replay added, changed or lost, context tokens at ``budget``, summarizer calls and tokens; with totals."""
    return _diff(request, key, name, conversation_id, budget, ())


@router.post("/replays/{name}/diff", tags=["replays"])
def diff_replay_with_questions(request: Request, body: DiffRequest, key: Operator, name: str = ReplayName) -> dict:
    """The diff of ``GET`` plus the answer-content recall of a question set on each side (operator keys).

    Each question is the query of a context per side at ``budget``; a
    side's ``recall`` is the mean share of the reference answers' content
    words its contexts hold, ``questions`` how many were asked per
    conversation. Questions are asked in conversations of the key's tenant
    (404 for one it does not have, as a missing one).
    """
    from memfold.engine.replay_diff import Question

    questions = [Question(key.tenant_id, q.conversation_id or body.conversation_id, q.question, q.answer)
                 for q in body.questions]
    return _diff(request, key, name, body.conversation_id, body.budget, questions)


def _diff(request: Request, key, name: str, conversation_id: str | None, budget: int, questions: list) -> dict:
    found = services(request).engine.diff_replay(name, conversation_id, budget=budget, questions=questions,
                                                 tenant_id=key.tenant_id if conversation_id is not None else None)
    covered = {(c.tenant_id, c.conversation_id) for c in found.conversations}
    for q in questions:  # a question the diff did not score would silently read as "no recall"
        if (q.tenant_id, q.conversation_id) not in covered:
            raise UnknownConversationError(f"no conversation {q.conversation_id!r}", field="questions")
    return jsonable_encoder(found.as_dict())


@router.post("/verify", tags=["replays"])
def verify_all(request: Request, key: Operator) -> dict:
    """Fold the whole log again with the live settings and compare with the live projection (operator keys).

    ``identical`` true proves the projection is exactly what the log folds
    to; otherwise each differing table with its row counts and a few rows.
    """
    return _differences(services(request).engine.verify())


@router.post("/conversations/{conversation_id:path}/verify", tags=["replays"])
def verify_conversation(request: Request, key: Admin,
                        conversation_id: str = Path(min_length=1, max_length=200)) -> dict:
    """Verify one conversation of the key's tenant: its projection is what its events fold to (admin keys)."""
    existing(request, key.tenant_id, conversation_id)
    return {"conversation_id": conversation_id,
            **_differences(services(request).engine.verify(conversation_id, tenant_id=key.tenant_id))}

