"""Live versus a replay namespace, conversation by conversation: what ``memfold diff`` prints (composition code).

For each conversation, both sides report their read policy's summary
versions (how many, the newest, the messages it covers), the facts in
force, the tokens of the context assembled at a budget, the answer-content
recall of a question set (:mod:`memfold.projections.answer_recall`) and what
the summaries cost (summarizer calls and tokens, summaries served from the
cache apart). Facts are compared by key: added (only in the replay),
changed (another value), lost (only live). Nothing is written: the replay's
projection is opened read-only, the live one is read through the engine.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memfold.core.errors import InputFileError, UnknownConversationError, ValidationError
from memfold.core.ports import ContextMessage
from memfold.projections.answer_recall import content_words, context_words, recall
from memfold.projections.context import assemble
from memfold.projections.retrieval import OlderFromProjection

if TYPE_CHECKING:
    from memfold.engine.engine import MemoryEngine

Key = tuple[str, str]


@dataclass(frozen=True)
class Question:
    """One question of a ``--questions`` file: the conversation it is asked in, the question and its answer."""

    tenant_id: str
    conversation_id: str
    question: str
    answer: str


@dataclass
class Side:
    """One side (live or replay) of one conversation."""

    policy: str
    messages: int = 0
    versions: int = 0  # completed summary versions of the read policy
    latest: str | None = None  # summary_id of the newest version
    covers_from: int | None = None  # the message range the newest version covers (indices, inclusive)
    covers_to: int | None = None
    facts: int = 0  # facts in force (neither retired nor superseded)
    context_tokens: int = 0  # tokens of the context at the budget
    recall: float | None = None  # mean answer-content recall over the conversation's questions
    calls: int = 0  # summarizer calls (not served from the cache), failures included
    cached: int = 0  # summaries served from the summary cache
    tokens_in: int = 0  # tokens the calls sent
    tokens_out: int = 0  # tokens they returned


@dataclass
class ConversationDiff:
    """Live and replay side by side for one conversation, with the facts that differ."""

    tenant_id: str
    conversation_id: str
    live: Side
    replay: Side
    facts_added: list[tuple[str, str]] = field(default_factory=list)  # (key, value) only in the replay
    facts_changed: list[tuple[str, str, str]] = field(default_factory=list)  # (key, live value, replay value)
    facts_lost: list[tuple[str, str]] = field(default_factory=list)  # (key, value) only live
    questions: int = 0


@dataclass
class ReplayDiff:
    """What :func:`diff` returns: the replay compared, the budget, one entry per conversation."""

    name: str
    live_policy: str
    replay_policy: str
    replay_settings_hash: str
    budget: int
    conversations: list[ConversationDiff]

    def totals(self) -> dict[str, Any]:
        """Return the sums across conversations (recall: the mean over conversations that had questions)."""
        out: dict[str, Any] = {"conversations": len(self.conversations)}
        for side in ("live", "replay"):
            sides = [getattr(c, side) for c in self.conversations]
            scored = [s.recall for s in sides if s.recall is not None]
            out[side] = {
                "versions": sum(s.versions for s in sides), "facts": sum(s.facts for s in sides),
                "context_tokens": sum(s.context_tokens for s in sides),
                "recall": sum(scored) / len(scored) if scored else None,
                "calls": sum(s.calls for s in sides), "cached": sum(s.cached for s in sides),
                "tokens_in": sum(s.tokens_in for s in sides), "tokens_out": sum(s.tokens_out for s in sides),
            }
        out["facts_added"] = sum(len(c.facts_added) for c in self.conversations)
        out["facts_changed"] = sum(len(c.facts_changed) for c in self.conversations)
        out["facts_lost"] = sum(len(c.facts_lost) for c in self.conversations)
        return out

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON shape ``memfold diff --json`` prints."""
        return {
            "name": self.name, "live_policy": self.live_policy, "replay_policy": self.replay_policy,
            "replay_settings_hash": self.replay_settings_hash, "budget": self.budget,
            "conversations": [dataclasses.asdict(c) for c in self.conversations], "totals": self.totals(),
        }


def load_questions(path: str | Path) -> list[Question]:
    """Read a JSONL file of ``{conversation, question, answer}`` (``tenant`` optional, default "default").

    Raises :class:`InputFileError` when unreadable and :class:`ValidationError`
    naming the line for a bad one.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"cannot read questions file {p}: {getattr(exc, 'strerror', None) or exc}") from exc
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValidationError(f"{p} line {n} is not JSON: {exc}", field="questions") from exc
        if not isinstance(row, dict):
            raise ValidationError(f"{p} line {n} must be a JSON object", field="questions")
        missing = [k for k in ("conversation", "question", "answer") if not isinstance(row.get(k), str) or not row[k].strip()]
        if missing:
            raise ValidationError(f"{p} line {n} needs non-empty string(s) {', '.join(missing)}", field="questions")
        out.append(Question(str(row.get("tenant", "default")), row["conversation"], row["question"], row["answer"]))
    return out


def diff(
    engine: MemoryEngine,
    name: str,
    conversation_id: str | None = None,
    *,
    tenant_id: str | None = None,
    budget: int = 4000,
    questions: Sequence[Question] = (),
) -> ReplayDiff:
    """Compare the replay namespace ``name`` with the live projection; return one entry per conversation.

    Conversations: ``conversation_id`` (of ``tenant_id``, default "default")
    or every conversation either side holds (of ``tenant_id`` if given),
    minus erased ones. Raises :class:`UnknownReplayError` for no such replay
    and :class:`UnknownConversationError` for a conversation neither side has.
    """
    from memfold.core import overrides as ov
    from memfold.engine import namespaces as ns
    from memfold.projections.store import DuckDBProjectionStore

    space = ns.Namespace.open(ns.replays_dir(engine.settings.data_dir) / ns.check_name(name))
    space.refuse_stale()
    settings = ov.apply(engine.settings, space.manifest["settings"])
    store = DuckDBProjectionStore(space.store_path, read_only=True)
    try:
        replay = _Reader(store, settings, engine.counter)
        live_keys, replay_keys = _keys(engine.store), _keys(store)
        if conversation_id is not None:
            key = (tenant_id or "default", conversation_id)
            if key not in live_keys and key not in replay_keys:
                raise UnknownConversationError(
                    f"no conversation {conversation_id!r} for tenant {key[0]!r} live or in replay {name!r}",
                    field="conversation")
            keys = [key]
        else:
            keys = sorted(k for k in live_keys | replay_keys if tenant_id is None or k[0] == tenant_id)
        by_conv: dict[Key, list[Question]] = {}
        for q in questions:
            by_conv.setdefault((q.tenant_id, q.conversation_id), []).append(q)
        out = []
        for key in keys:
            asked = by_conv.get(key, [])
            live_policy = engine.settings.policy_for(key[0])
            live = _side(engine.store, live_policy, engine.settings.settings_hash(live_policy), key, budget, asked,
                         lambda query, k=key, p=live_policy: engine.context(k[1], budget=budget, query=query,
                                                                            policy=p, tenant_id=k[0]))
            rpolicy = replay.policy(key[0])
            rside = _side(store, rpolicy, settings.settings_hash(rpolicy), key, budget, asked,
                          lambda query, k=key: replay.context(k, budget, query))
            added, changed, lost = _fact_changes(_facts(engine.store, live.policy, key), _facts(store, rside.policy, key))
            out.append(ConversationDiff(key[0], key[1], live, rside, added, changed, lost, len(asked)))
    finally:
        store.close()
    return ReplayDiff(name, engine.settings.policy, settings.policy, space.manifest["settings_hash"], budget, out)


class _Reader:
    """Assembles contexts from a replay's projection the way ``MemoryEngine.context`` does from the live one."""

    def __init__(self, store: Any, settings: Any, counter: Any):
        from memfold.engine.builders import fold_contexts
        from memfold.projections.projector import Projector

        self.store, self.settings, self.counter = store, settings, counter
        self.policies = fold_contexts(settings)
        self.projector = Projector(store, self.policies, counter)

    def policy(self, tenant_id: str) -> str:
        return self.settings.policy_for(tenant_id)

    def context(self, key: Key, budget: int, query: str | None) -> list[ContextMessage]:
        name = self.policy(key[0])
        impl, ctx = self.policies[name]
        plan = impl.plan(self.projector.state(name, *key), ctx)
        if plan.verbatim_indices is not None:
            verbatim = self.store.messages_at(*key, plan.verbatim_indices)
        else:
            verbatim = self.store.recent_messages(*key, plan.verbatim_from, budget)
        return assemble(
            plan, verbatim, budget=budget, system_prompt=self.settings.system_prompt, count_tokens=self.counter.count,
            older=None if plan.fallback == "deleted" else OlderFromProjection(self.projector.search, key), query=query,
            recall_share=self.settings.context.recall_share,
        )


def _keys(store: Any) -> set[Key]:
    _cols, rows = store.query("SELECT tenant_id, conversation_id FROM conversations WHERE NOT coalesce(deleted, false)")
    return {(t, c) for t, c in rows}


def _side(store: Any, policy: str, settings_hash: str, key: Key, budget: int, questions: Sequence[Question],
          read) -> Side:
    """Fill one :class:`Side` from ``store`` (summaries, facts, counters) and ``read(query)`` (contexts).

    Only summaries made under ``settings_hash`` count: a replay's projection
    also holds the live log's summaries as audit rows.
    """
    side = Side(policy=policy)
    conv = store.conversation(*key)
    side.messages = int(conv["message_count"]) if conv else 0
    _cols, rows = store.query(
        "SELECT summary_id, covers_from, covers_to, status, coalesce(cached, false), coalesce(tokens_in, 0), "
        "coalesce(tokens_out, 0), coalesce(error_type, '') FROM summaries "
        "WHERE policy = ? AND settings_hash = ? AND tenant_id = ? AND conversation_id = ? "
        "ORDER BY requested_seq, covers_to, request_id", [policy, settings_hash, *key])
    for summary_id, covers_from, covers_to, status, cached, t_in, t_out, error_type in rows:
        if status == "completed":
            side.versions += 1
            side.latest, side.covers_from, side.covers_to = summary_id, covers_from, covers_to
        if status not in ("completed", "failed") or error_type == "Superseded":
            continue  # still open, or never sent to a summarizer
        if cached:
            side.cached += 1
        else:
            side.calls += 1
            side.tokens_in += t_in
            side.tokens_out += t_out
    side.facts = sum(len(v) for v in _facts(store, policy, key).values())
    if conv is not None:
        side.context_tokens = sum(m.tokens for m in read(None))
        if questions:
            scores = [recall(content_words(q.answer), context_words(m.content for m in read(q.question)))
                      for q in questions]
            side.recall = sum(scores) / len(scores)
    return side


def _facts(store: Any, policy: str, key: Key) -> dict[str, set[str]]:
    """Return the facts in force: key -> its values."""
    _cols, rows = store.query(
        "SELECT key, value FROM facts WHERE policy = ? AND tenant_id = ? AND conversation_id = ? "
        "AND retired_by IS NULL AND superseded_by IS NULL", [policy, *key])
    out: dict[str, set[str]] = {}
    for k, v in rows:
        out.setdefault(k, set()).add(v)
    return out


def _fact_changes(live: Mapping[str, set[str]], replay: Mapping[str, set[str]]):
    """Return (added, changed, lost) between two fact maps, sorted by key."""
    added = [(k, v) for k in sorted(replay.keys() - live.keys()) for v in sorted(replay[k])]
    lost = [(k, v) for k in sorted(live.keys() - replay.keys()) for v in sorted(live[k])]
    changed = [(k, _joined(live[k]), _joined(replay[k])) for k in sorted(live.keys() & replay.keys()) if live[k] != replay[k]]
    return added, changed, lost


def _joined(values: Iterable[str]) -> str:
    return " | ".join(sorted(values))
