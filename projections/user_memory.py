"""User memory: the pure fold of a user's facts over all of that user's conversations.

A user's facts are the facts rows its conversations' folds already keep
(``facts``: what each conversation's summaries carried, with their own
lineage). Across conversations, a later statement of a key supersedes an
earlier one even when it was said in another conversation. "Later" is event
time: ``at`` (when the value was stated, else when the summary carrying it
was requested), ties broken by conversation id, message index and value, so
the result depends only on the set of rows, never on the order the log
delivered them in (two partitions, a replay, a rebuild all agree).

The user's own summary is made by the summarizers (``SummaryRequested`` of
scope "user", answered by the worker): :func:`user_summary_input` is what
they are given, the user's notes and current facts as of the request's time.

Nothing here reads a clock, a file or a model: :func:`fold_user_facts` is a
function of its rows, called by the store inside the projector's transaction
(current user memory) and by reads with ``as_of`` (the rows stated by then).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from memfold.core.events import Fact
from memfold.core.ports import MessageRecord, SummaryInput

# The ``policy`` a user summary's input names (the summarizers' view; the request keeps the real policy).
USER_SCOPE = "user"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

USER_FACT_COLUMNS = (
    "policy", "tenant_id", "user_id", "key", "value", "category", "conversation_id", "stated_in", "stated_at",
    "fact_id", "superseded_by", "superseded_in", "current",
)


class StatedFact(msgspec.Struct, frozen=True):
    """One conversation's facts row, as the user fold reads it.

    ``at`` orders statements across conversations: the stated time, else the
    time its summary was requested (a model's summary names no message).
    """

    policy: str
    key: str
    value: str
    category: str
    conversation_id: str
    stated_in: int | None
    stated_at: datetime | None
    fact_id: str
    at: datetime | None


def _order(f: StatedFact) -> tuple[Any, ...]:
    # A fact of unknown time sorts first: it cannot be shown to be the newer statement.
    return (f.at is not None, f.at or datetime.min, f.conversation_id, -1 if f.stated_in is None else f.stated_in,
            f.value, f.fact_id)


def fold_user_facts(tenant_id: str, user_id: str, facts: Iterable[StatedFact]) -> list[dict[str, Any]]:
    """Return the ``user_facts`` rows of a user from its conversations' facts rows (pure, order-independent).

    One row per statement (a value said in two conversations is two rows,
    each naming where it came from). Per (policy, key), in statement order:
    a statement is ``superseded_by`` the next statement of another value
    (its ``fact_id``; ``superseded_in`` names that statement's conversation);
    the newest statement of the key is ``current``, and only it.
    """
    groups: dict[tuple[str, str], list[StatedFact]] = {}
    for f in facts:
        groups.setdefault((f.policy, f.key), []).append(f)
    out: list[dict[str, Any]] = []
    for (policy, key), group in sorted(groups.items()):
        group.sort(key=_order)
        # The next statement of another value, for each position: one pass from the newest.
        nxt: list[StatedFact | None] = [None] * len(group)
        later: StatedFact | None = None
        for i in range(len(group) - 1, -1, -1):
            f = group[i]
            nxt[i] = later if later is not None and later.value != f.value else (
                nxt[i + 1] if i + 1 < len(group) and group[i + 1].value == f.value else None)
            later = f
        for i, f in enumerate(group):
            successor = nxt[i]
            out.append({
                "policy": policy, "tenant_id": tenant_id, "user_id": user_id, "key": key, "value": f.value,
                "category": f.category, "conversation_id": f.conversation_id, "stated_in": f.stated_in,
                "stated_at": f.stated_at, "fact_id": f.fact_id,
                "superseded_by": successor.fact_id if successor is not None else None,
                "superseded_in": successor.conversation_id if successor is not None else None,
                "current": i == len(group) - 1,
            })
    return out


def stated_before(facts: Sequence[StatedFact], as_of: datetime) -> list[StatedFact]:
    """Return the statements made at or before ``as_of`` (time travel: the user memory as it stood then).

    A statement of unknown time is left out: it cannot be shown to have been made by then.
    """
    return [f for f in facts if f.at is not None and f.at <= as_of]


def user_summary_input(
    tenant_id: str, conversation_id: str, notes: Sequence[dict[str, Any]], facts: Sequence[dict[str, Any]],
    *, token_cap: int | None, model: str | None = None,
) -> SummaryInput:
    """Return what a summarizer is given for the user's summary (pure): the user's notes and current facts.

    Each note (a conversation's newest summary, oldest conversation first) is
    one input message naming its conversation and day; the current facts are
    the existing facts. Every message is of the conversation its note
    summarizes (also in its metadata: what the summary ``covers``), so the
    summary cache files the entry under every one of them and forgetting any
    drops it. ``conversation_id`` is the conversation the request was asked in.
    """
    messages = tuple(
        MessageRecord(
            tenant_id=tenant_id, conversation_id=n["conversation_id"], index=i, seq=0, event_id=n["summary_id"],
            role="user", content=f"Conversation {n['conversation_id']} ({_day(n.get('at'))}): {n['text']}",
            tokens=0, occurred_at=n.get("at") or _EPOCH, metadata={"conversation_id": n["conversation_id"]},
        )
        for i, n in enumerate(notes)
    )
    existing = tuple(
        Fact(key=f["key"], value=f["value"], category=f["category"], stated_at=f.get("stated_at"))
        for f in facts if f["current"]
    )
    return SummaryInput(policy=USER_SCOPE, kind="text", messages=messages, existing_facts=existing,
                        token_cap=token_cap, model=model)


def user_summary_covers(summary_input: SummaryInput) -> dict[str, tuple[str, ...]]:
    """Return the ``covers_summaries`` / ``covers_conversations`` of a user summary made from ``summary_input``."""
    return {
        "covers_summaries": tuple(m.event_id for m in summary_input.messages),
        "covers_conversations": tuple(m.metadata["conversation_id"] for m in summary_input.messages),
    }


def _day(at: datetime | None) -> str:
    return at.date().isoformat() if at is not None else "undated"
