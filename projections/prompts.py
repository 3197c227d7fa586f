"""Prompt rendering shared by summarizers: one template per seed, turn grouping, and prompt hashes.

Every template is a module constant; :func:`prompt_hash` hashes a template's
text with :data:`PROMPT_VERSION`, so editing a template (or bumping the
version) changes ``prompt_hash`` on every ``SummaryProduced`` and misses the
summary cache instead of serving answers to an older prompt.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime

import msgspec

from memfold.core.events import Fact
from memfold.core.ports import MessageRecord, SummaryInput
from memfold.projections.fact_keys import MAX_VALUE_CHARS, SHORT_VALUE_CHARS, category_for, clip

PROMPT_VERSION = "1"

# --------------------------------------------------------------------------- seed 000: facts + narrative

FACTS_TEMPLATE = """You are a conversation summarizer. Extract structured facts and a brief
narrative summary from the conversation below.

Return JSON:
{{
  "facts": [
    {{"key": "...", "value": "...", "category": "ENTITY|DECISION|CONDITION|STATE|NUMERIC|GENERAL"}}
  ],
  "narrative": "2-3 sentence summary of conversation flow and tone"
}}
{narrative_limit}
## Existing facts (merge, update, or remove as needed):
{existing_facts}

## Conversation:
{conversation}"""

NARRATIVE_LIMIT_LINE = "\nKeep the narrative under {token_cap} tokens.\n"

# --------------------------------------------------------------------------- seed 001: chunked global summary

# The hosted prompt holds the instructions; this is only the ``input`` string, in the seed's exact format.
CHUNKED_INPUT_TEMPLATE = """=== EXISTING_SUMMARY ===
{existing_summary}
=== END_EXISTING_SUMMARY ===

=== NEW_TURNS ===
{turns}
=== END_NEW_TURNS ==="""

# Used when the chunked input goes through chat completions instead of the hosted prompt.
CHUNKED_INSTRUCTIONS = """You maintain the global summary of a conversation.
Update the conversation summary in EXISTING_SUMMARY to include the NEW_TURNS.
Preserve important goals, decisions, constraints, recurring issues, and facts that may matter later.
Keep the updated summary within {token_cap} tokens and avoid redundant restatement.
Answer with the updated summary text only."""

# --------------------------------------------------------------------------- seed 002: sliding window

# The incremental templates (sliding window, rolling) share their second line and their inputs.
_COMBINE = "Combine the previous summary with the new messages into one updated summary.\n"
_PREVIOUS_AND_NEW = """

## Previous summary:
{previous_summary}

## New messages:
{conversation}"""
_WINDOW = "You maintain a memory of a conversation over a sliding window of messages.\n" + _COMBINE

SLIDING_WINDOW_TEMPLATE = _WINDOW + """The window now starts at message {window_start}: drop content before window start
(anything that only came from messages numbered below {window_start}).
Keep names, ids, amounts, dates, decisions and open questions that are still in the window.{limit}""" + _PREVIOUS_AND_NEW

# The same with ``sliding_window.keep_facts`` (the default): the narrative slides, the key facts stay.
SLIDING_WINDOW_FACTS_TEMPLATE = _WINDOW + """The window now starts at message {window_start}: drop the narrative of messages numbered below {window_start},
but keep every key fact of the previous summary (names, ids, amounts, dates, conditions, decisions)
under "Key facts:", one line each: "- key: value (msg N)", N the number of the message that stated it,
replacing a value only when the new messages change it.
Add the key facts of the new messages and keep the open questions that are still in the window.{limit}""" + _PREVIOUS_AND_NEW

# --------------------------------------------------------------------------- seed 003: rolling

# Used by topics too (one summary per topic). The key facts come first, as the sliding window's: the
# policies show them as structured facts (parse_key_facts) beside the text.
ROLLING_TEMPLATE = "You summarize a conversation so it can continue without its older messages.\n" + _COMBINE + """\
List the key facts (names, ids, amounts, dates, conditions, decisions) first, under "Key facts:",
one line each: "- key: value (msg N)", N the number of the message that stated it; keep those of
the previous summary unless the new messages change them.
Then keep preferences and open questions.{limit}""" + _PREVIOUS_AND_NEW

TEMPLATES: dict[str, str] = {
    "facts": FACTS_TEMPLATE,
    "chunked": CHUNKED_INPUT_TEMPLATE + "\n" + CHUNKED_INSTRUCTIONS,
    "sliding_window": SLIDING_WINDOW_TEMPLATE,
    "sliding_window_facts": SLIDING_WINDOW_FACTS_TEMPLATE,
    "rolling": ROLLING_TEMPLATE,
}

NO_SUMMARY = "NONE"
NO_FACTS = "(none)"


def prompt_hash(template: str, version: str = PROMPT_VERSION, *extra: str | None) -> str:
    """Return the sha256 hex of a template's text and ``version`` (plus ``extra`` parts, e.g. a hosted prompt id).

    ``template`` is a name from :data:`TEMPLATES` or any other text (the
    offline summarizer hashes its rule-set name). Same inputs, same hash.
    """
    text = TEMPLATES.get(template, template)
    h = hashlib.sha256()
    for part in (text, version, *extra):
        h.update(b"\x00" if part is None else part.encode("utf-8"))
        h.update(b"\x1f")
    return h.hexdigest()


# --------------------------------------------------------------------------- messages and turns


class Turn(msgspec.Struct, frozen=True):
    """One user message and everything that answered it (assistant replies, tool calls and results)."""

    messages: tuple[MessageRecord, ...]

    @property
    def user(self) -> str | None:
        """Return the user text of the turn, or None when the turn has no user message."""
        parts = [m.content for m in self.messages if m.role == "user"]
        return "\n".join(parts) if parts else None


def group_turns(messages: Sequence[MessageRecord]) -> list[Turn]:
    """Group messages into turns, oldest first: each user message opens a turn.

    Assistant, tool and system messages belong to the turn they appear in;
    messages before the first user message form a turn without a user line.
    """
    turns: list[list[MessageRecord]] = []
    for m in messages:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return [Turn(tuple(t)) for t in turns]


def tool_names(messages: Sequence[MessageRecord]) -> dict[str, str]:
    """Return tool call id → tool name for every tool call in ``messages``."""
    names: dict[str, str] = {}
    for m in messages:
        for call in m.tool_calls:
            names[call.id] = call.name
    return names


def describe_tool_calls(message: MessageRecord) -> str:
    """Return the tool calls of an assistant message as text: ``[tool call lookup({"id": 1})]``."""
    return " ".join(f"[tool call {c.name}({c.arguments})]" for c in message.tool_calls)


def tool_label(message: MessageRecord, names: dict[str, str]) -> str:
    """Return the name a tool result answers: the message's name, its call's tool name, or its call id."""
    return message.name or names.get(message.tool_call_id or "", "") or message.tool_call_id or "tool"


def message_text(message: MessageRecord, names: dict[str, str]) -> str:
    """Return a message's content with its tool calls or tool-result label spelled out."""
    if message.role == "tool":
        return f"[tool result {tool_label(message, names)}] {message.content}".rstrip()
    text = message.content
    if message.tool_calls:
        text = f"{text} {describe_tool_calls(message)}".strip()
    return text


def render_message_lines(messages: Sequence[MessageRecord], *, numbered: bool = False) -> str:
    """Render messages as seed 000's ``[role]: content`` lines (``[12][role]: ...`` when ``numbered``)."""
    names = tool_names(messages)
    lines = []
    for m in messages:
        prefix = f"[{m.index}]" if numbered else ""
        lines.append(f"{prefix}[{m.role}]: {message_text(m, names)}")
    return "\n".join(lines)


def render_facts(facts: Sequence[Fact]) -> str:
    """Render the current facts as ``- key: value`` lines (seed 000's facts layer); superseded values are lineage, left out."""
    return "\n".join(f"- {f.key}: {f.value}" for f in facts if f.current)


def render_facts_dated(facts: Sequence[Fact]) -> str:
    """Render the current facts for a context: ``- key: value (was: old)`` lines under ``[YYYY-MM-DD]`` dates.

    Facts are grouped by the date they were stated (undated ones first, in
    their order); a fact that superseded earlier values names those of at
    most ``SHORT_VALUE_CHARS`` characters, so a knowledge update reads as one
    line ("- phone: +1 415-555-0153 (was: +1 720-555-0100)") and a reworded
    condition does not cost its old sentence again.
    """
    earlier: dict[str, list[str]] = {}
    for f in facts:
        if not f.current:
            earlier.setdefault(f.key, []).append(f.value)
    current = [f for f in facts if f.current]
    ordered = sorted(enumerate(current), key=lambda p: (p[1].stated_at is not None, p[1].stated_at or 0, p[0]))
    out: list[str] = []
    day: str | None = None
    for _, f in ordered:
        if f.stated_at is not None and f.stated_at.date().isoformat() != day:
            day = f.stated_at.date().isoformat()
            out.append(f"[{day}]")
        # A value that came back is no change; an earlier sentence (a condition, a decision) is left
        # to the narrative: "was:" is for values a question may ask about (an old amount, date, address).
        old = [v for v in dict.fromkeys(earlier.get(f.key, ())) if v != f.value and len(v) <= SHORT_VALUE_CHARS]
        was = f" (was: {'; '.join(old)})" if old else ""
        out.append(f"- {f.key}: {f.value}{was}")
    return "\n".join(out)


# --------------------------------------------------------------------------- facts of a text summary

_FACTS_HEADER = re.compile(r"^[#*_\s]*key facts[*_\s]*:?[*_\s]*$", re.I)
_FACT_ITEM = re.compile(
    r"^\s*(?:[-*\u2022]|\d+[.)])\s+(?P<key>[^:\n]{1,60}?)\s*:\s*(?P<value>\S.*?)"
    r"\s*(?:\((?:msg|message)s?\s*#?(?P<idx>\d+)[^)]*\))?\s*$",
    re.I,
)
_KEY = re.compile(r"[^a-z0-9]+")


def parse_key_facts(text: str, stated: Mapping[int, datetime] | None = None) -> list[Fact]:
    """Return the facts a text summary lists under its ``Key facts:`` heading, in order (none when it has none).

    Each item is ``- key: value``, optionally ending ``(msg N)``: the number
    of the message that stated it (the sliding-window prompt numbers its
    messages and asks for it, the offline summarizer writes it), which dates
    the fact when ``stated`` (message index -> when it was said) has N. Keys are normalised as the offline extractor builds them
    (``Order number`` -> ``order_number``) and categorised the same way;
    values are clipped to ``MAX_VALUE_CHARS``. The list ends at the first
    line that is not an item; an item that is not ``key: value`` is skipped.
    A key listed twice keeps its last value.
    """
    stated = stated or {}
    found: dict[str, Fact] = {}
    lines = text.splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if _FACTS_HEADER.match(line)), None)
    if start is None:
        return []
    for line in lines[start:]:
        if not line.strip():
            if found:
                break
            continue
        m = _FACT_ITEM.match(line)
        if m is None:
            if re.match(r"^\s*(?:[-*\u2022]|\d+[.)])\s", line):
                continue  # an item with no "key: value"
            break
        key = _KEY.sub("_", m["key"].strip("*_ ").lower()).strip("_")[:48]
        value = clip(m["value"].strip("*_ "), MAX_VALUE_CHARS)
        if not key or not key[0].isalpha() or not value:
            continue
        idx = int(m["idx"]) if m["idx"] else None
        found.pop(key, None)
        found[key] = Fact(
            key=key, value=value, category=category_for(key),
            stated_at=stated.get(idx) if idx is not None else None,
            stated_in=idx if idx is not None and idx in stated else None,
        )
    return list(found.values())


def without_key_facts(text: str) -> str:
    """Return ``text`` without its ``Key facts:`` list (the heading and its items, as :func:`parse_key_facts` reads them)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _FACTS_HEADER.match(line)), None)
    if start is None:
        return text
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or re.match(r"^\s*(?:[-*\u2022]|\d+[.)])\s", lines[end])):
        end += 1
    return "\n".join(lines[:start] + lines[end:])


# --------------------------------------------------------------------------- rendered prompts


def render_facts_prompt(
    messages: Sequence[MessageRecord], existing_facts: Sequence[Fact] = (), token_cap: int | None = None
) -> str:
    """Return seed 000's single prompt asking for JSON ``{facts, narrative}``."""
    return FACTS_TEMPLATE.format(
        narrative_limit=NARRATIVE_LIMIT_LINE.format(token_cap=token_cap) if token_cap else "",
        existing_facts=render_facts(existing_facts) or NO_FACTS,
        conversation=render_message_lines(messages),
    )


def render_chunked_input(existing_summary: str | None, messages: Sequence[MessageRecord]) -> str:
    """Return seed 001's ``input`` string exactly: EXISTING_SUMMARY (or NONE), then numbered NEW_TURNS.

    Each turn renders as ``Turn N:`` then ``User: ...`` and ``Assistant: ...``;
    several assistant messages, tool calls and tool results of one turn are
    joined into the one ``Assistant:`` block (newline-separated), system
    messages get a ``System:`` line, and a side the turn lacks is left out.
    """
    names = tool_names(messages)
    blocks = []
    for number, turn in enumerate(group_turns(messages), start=1):
        lines = [f"Turn {number}:"]
        if turn.user is not None:
            lines.append(f"User: {turn.user}")
        system = [m.content for m in turn.messages if m.role == "system"]
        if system:
            lines.append("System: " + "\n".join(system))
        answer = [message_text(m, names) for m in turn.messages if m.role in ("assistant", "tool")]
        if answer:
            lines.append("Assistant: " + "\n".join(answer))
        blocks.append("\n".join(lines))
    summary = existing_summary if existing_summary and existing_summary.strip() else NO_SUMMARY
    return CHUNKED_INPUT_TEMPLATE.format(existing_summary=summary, turns="\n\n".join(blocks))


def _limit(token_cap: int | None, char_cap: int | None) -> str:
    parts = []
    if token_cap:
        parts.append(f"{token_cap} tokens")
    if char_cap:
        parts.append(f"{char_cap} characters")
    return f"\nKeep the summary under {' and '.join(parts)}." if parts else ""


def render_window_prompt(
    previous_summary: str | None,
    messages: Sequence[MessageRecord],
    window_start: int,
    token_cap: int | None = None,
    char_cap: int | None = None,
    keep_facts: bool = False,
) -> str:
    """Return seed 002's incremental prompt: previous summary + new numbered messages + drop before window start.

    With ``keep_facts`` the key facts from before the window are kept (only the narrative slides).
    """
    template = SLIDING_WINDOW_FACTS_TEMPLATE if keep_facts else SLIDING_WINDOW_TEMPLATE
    return template.format(
        window_start=window_start,
        limit=_limit(token_cap, char_cap),
        previous_summary=previous_summary or NO_SUMMARY,
        conversation=render_message_lines(messages, numbered=True),
    )


def render_rolling_prompt(
    previous_summary: str | None,
    messages: Sequence[MessageRecord],
    token_cap: int | None = None,
    char_cap: int | None = None,
) -> str:
    """Return seed 003's prompt: previous summary + new numbered messages → one updated summary, key facts first."""
    return ROLLING_TEMPLATE.format(
        limit=_limit(token_cap, char_cap),
        previous_summary=previous_summary or NO_SUMMARY,
        conversation=render_message_lines(messages, numbered=True),
    )


class Prompt(msgspec.Struct, frozen=True):
    """A rendered prompt: the system instructions (may be empty), the user text, and its template's hash."""

    template: str
    system: str
    user: str
    hash: str


def template_for(request: SummaryInput) -> str:
    """Return the template name a request renders with: facts, chunked, sliding_window(_facts) or rolling."""
    if request.kind == "facts":
        return "facts"
    if request.prompt_format == "chunked":
        return "chunked"
    if request.window_start is not None:
        return "sliding_window_facts" if request.keep_facts else "sliding_window"
    return "rolling"


def render(request: SummaryInput) -> Prompt:
    """Render ``request`` with the template :func:`template_for` picks, as chat messages would carry it."""
    template = template_for(request)
    if template == "facts":
        user = render_facts_prompt(request.messages, request.existing_facts, request.token_cap)
        system = ""
    elif template == "chunked":
        user = render_chunked_input(request.existing_summary, request.messages)
        system = CHUNKED_INSTRUCTIONS.format(token_cap=request.token_cap or 500)
    elif template in ("sliding_window", "sliding_window_facts"):
        assert request.window_start is not None
        user = render_window_prompt(
            request.existing_summary, request.messages, request.window_start, request.token_cap, request.char_cap,
            keep_facts=request.keep_facts,
        )
        system = ""
    else:
        user = render_rolling_prompt(request.existing_summary, request.messages, request.token_cap, request.char_cap)
        system = ""
    return Prompt(template=template, system=system, user=user, hash=prompt_hash(template))
