"""Assemble the next prompt's messages from a policy's plan, trimmed to a token budget.

Order: [system prompt][memory system messages][recent verbatim][current user
message]. The budget counts everything. Trimming removes the *oldest
verbatim* messages first; the system prompt, the memory messages and the
current user message are never trimmed (seed 000: leading SystemMessages are
protected). A tool call and the tool results answering it are one unit: they
are kept or dropped together, and a tool result whose call is not in the
context is dropped (an API would reject it).
"""

from __future__ import annotations

from collections.abc import Sequence

from memfold.engine.ports import ContextMessage, ContextPlan, MessageRecord
from memfold.engine.tokens import MESSAGE_OVERHEAD


def tool_groups(messages: Sequence[MessageRecord]) -> list[list[MessageRecord]]:
    """Split messages into units that must stay together: a tool-calling message plus its answers.

    A ``tool`` message joins the nearest earlier message whose ``tool_calls``
    contain its ``tool_call_id``; every other message is a unit of its own.
    An orphan tool result (its call not in ``messages``) forms a unit flagged
    by being a lone ``tool`` message.
    """
    groups: list[list[MessageRecord]] = []
    open_calls: dict[str, list[MessageRecord]] = {}
    for m in messages:
        if m.role == "tool" and m.tool_call_id in open_calls:
            open_calls[m.tool_call_id].append(m)
            continue
        group = [m]
        groups.append(group)
        for tc in m.tool_calls:
            open_calls[tc.id] = group
    return groups


def assemble(
    plan: ContextPlan,
    verbatim: Sequence[MessageRecord],
    *,
    budget: int | None,
    system_prompt: str | None,
    count_tokens,
) -> list[ContextMessage]:
    """Return the context for ``plan`` given its ``verbatim`` messages (oldest first), within ``budget``.

    ``count_tokens(text)`` counts content tokens; each message also costs
    ``MESSAGE_OVERHEAD``. When the fixed part alone (system prompt, memory,
    current message) exceeds the budget, it is returned untrimmed: memory is
    never dropped to make room.
    """
    head: list[ContextMessage] = []
    if system_prompt:
        head.append(ContextMessage("system", system_prompt, "system_prompt", count_tokens(system_prompt) + MESSAGE_OVERHEAD))
    for mem in plan.memory:
        tokens = mem.tokens or count_tokens(mem.content) + MESSAGE_OVERHEAD
        head.append(ContextMessage("system", mem.content, f"memory:{mem.kind}", tokens))
    body = list(verbatim)
    current: MessageRecord | None = None
    if body and body[-1].role == "user":
        current = body.pop()
    fixed = sum(m.tokens for m in head) + (current.tokens if current else 0)
    remaining = None if budget is None else budget - fixed
    kept: list[list[MessageRecord]] = []
    for group in reversed(tool_groups(body)):
        if group[0].role == "tool":  # its call is not in the context: never send a lone result
            break
        cost = sum(m.tokens for m in group)
        if remaining is not None:
            if cost > remaining:
                break
            remaining -= cost
        kept.append(group)
    out = head
    for group in reversed(kept):
        out.extend(_verbatim(m, "verbatim") for m in group)
    if current is not None:
        out.append(_verbatim(current, "current"))
    return out


def _verbatim(m: MessageRecord, kind: str) -> ContextMessage:
    return ContextMessage(
        role=m.role, content=m.content, kind=kind, tokens=m.tokens, index=m.index,
        tool_calls=m.tool_calls, tool_call_id=m.tool_call_id,
    )


def take_last(messages: Sequence[MessageRecord], budget: int | None, system_prompt: str | None, count_tokens) -> list[ContextMessage]:
    """Return the plain takeLast baseline: the newest messages that fit, no memory."""
    return assemble(ContextPlan(fallback="takeLast"), messages, budget=budget, system_prompt=system_prompt, count_tokens=count_tokens)
