"""User memory: the pure fold of a user's facts over all of that user's conversations.

A user's facts are the facts rows its conversations' folds already keep
(``facts``: what each conversation's summaries carried, with their own
lineage). Across conversations, a later statement of a key supersedes an
earlier one even when it was said in another conversation. "Later" is event
time: ``at`` (when the value was stated, else when the summary carrying it
was requested), ties broken by conversation id, message index and value, so
the result depends only on the set of rows, never on the order the log
delivered them in (two partitions, a replay, a rebuild all agree).

Nothing here reads a clock, a file or a model: :func:`fold_user_facts` is a
function of its rows, called by the store inside the projector's transaction
(current user memory) and by reads with ``as_of`` (the rows stated by then).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

USER_FACT_COLUMNS = (
    "policy", "tenant_id", "user_id", "key", "value", "category", "conversation_id", "stated_in", "stated_at",
    "fact_id", "superseded_by", "superseded_in", "current",
)


@dataclass(frozen=True, slots=True)
class StatedFact:
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
