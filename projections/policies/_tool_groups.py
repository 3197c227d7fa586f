"""Track tool-call groups so that no cut ever separates a tool call from its results.

A group is an assistant message carrying ``tool_calls`` (the *head*) plus the
``tool`` messages that follow it. Policies keep groups as ``(head, last)``
index pairs, ascending, and only for the part of the conversation a future
cut can still fall into, so the list stays bounded.
"""

from __future__ import annotations

from memfold.core.ports import MessageRecord

ToolGroups = tuple[tuple[int, int], ...]


def note(groups: ToolGroups, message: MessageRecord) -> ToolGroups:
    """Return ``groups`` updated with ``message`` (folded in index order).

    A ``tool`` message extends the group it directly follows; a ``tool``
    message that follows no group (an orphan result) is glued to the message
    before it, which keeps it next to whatever it answered.
    """
    index = message.index
    if message.role == "assistant" and message.tool_calls:
        return groups + ((index, index),)
    if message.role != "tool":
        return groups
    if groups and groups[-1][1] == index - 1:
        head, _ = groups[-1]
        return groups[:-1] + ((head, index),)
    return groups + ((max(index - 1, 0), index),)


def align(groups: ToolGroups, boundary: int, count: int) -> int:
    """Return ``boundary`` (first index of the later side of a cut) moved back so no group straddles it.

    The later side keeps the whole group: the result is the group's head when
    ``boundary`` falls after the head and inside the group. The group that
    ends the conversation counts as still open (more results may come), so a
    cut right after it moves back too. A boundary outside every group is
    returned unchanged.
    """
    for head, last in reversed(groups):
        end = count if last == count - 1 else last
        if head < boundary <= end:
            return head
        if end < boundary:
            break
    return boundary


def prune(groups: ToolGroups, below: int) -> ToolGroups:
    """Return the groups that end at or after index ``below`` (earlier ones can no longer be cut)."""
    if not groups or groups[0][1] >= below:
        return groups
    return tuple(g for g in groups if g[1] >= below)
