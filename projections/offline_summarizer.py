"""The offline summarizer: deterministic, extractive facts + narrative or summary text, no network.

It is a pure function of its :class:`SummaryInput`: the rules of
:mod:`memfold.projections.fact_extraction` pull ids, amounts, dates, contacts,
names, decisions, conditions and states out of the messages into keyed facts;
the narrative and the summary text are built from those facts and the
messages; every output is cut to the request's caps with the one token
counter. Same input, byte-for-byte the same output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from memfold.engine.events import Fact
from memfold.engine.ports import MessageRecord, SummaryInput, SummaryOutput
from memfold.engine.tokens import DEFAULT_ENCODING, TokenCounter, counter

from .fact_extraction import MAX_FACTS, FactBook, FactEntry, clip, read_all, read_message, sentence_spans
from .prompts import PROMPT_VERSION, message_text, prompt_hash, render_facts, tool_label, tool_names

# Bump when a rule changes what the summarizer outputs: it is part of prompt_hash, hence of the cache key.
RULES_VERSION = "offline-extractive-2"
MODEL = "offline-extractive-2"
MAX_LINE_CHARS = 200


# --------------------------------------------------------------------------- narrative


def _end(sentence: str) -> str:
    """Return ``sentence`` with a full stop, unless it already ends in one or in a clipped "…"."""
    return sentence if sentence.endswith((".", "…", "!", "?")) else sentence + "."


def _humanize(key: str) -> str:
    return key.replace("_", " ")


def narrative(book: FactBook, messages: Sequence[MessageRecord]) -> str:
    """Return 2-3 sentences: who wants what, what was agreed, the current state."""
    name = book.get("customer_name")
    who = f"The user ({name})" if name else "The user"
    request = book.get("user_request")
    topic = book.get("topic")
    if request:
        first = f"{who} {request}."
    elif topic:
        first = f"{who} is being helped with {topic}."
    else:
        user_texts = [m.content for m in messages if m.role == "user" and m.content.strip()]
        first = f"{who} wrote: \u201c{clip(user_texts[0], 100)}\u201d." if user_texts else "No user request yet."
    decisions = book.by_category("DECISION")[-2:]
    conditions = book.by_category("CONDITION")[-2:]
    if decisions:
        second = "Agreed: " + "; ".join(f"{_humanize(d.key)} ({clip(d.value, 90)})" for d in decisions)
        if conditions:
            second += "; conditions: " + "; ".join(clip(c.value, 60) for c in conditions)
        second = _end(second)
    elif conditions:
        second = _end("Conditions stated: " + "; ".join(clip(c.value, 60) for c in conditions))
    else:
        second = "Nothing has been agreed yet."
    states = book.by_category("STATE")[-3:]
    names = tool_names(messages)
    tools = list(dict.fromkeys([c.name for m in messages for c in m.tool_calls] + [
        tool_label(m, names) for m in messages if m.role == "tool"
    ]))
    parts = []
    if states:
        parts.append("Current state: " + ", ".join(f"{_humanize(s.key)} {s.value}" for s in states))
    if tools:
        parts.append("tools used: " + ", ".join(tools[:4]))
    if not parts:
        last = next((m for m in reversed(messages) if m.role in ("user", "assistant") and m.content.strip()), None)
        if last is not None:
            parts.append(f"Last {last.role} message: \u201c{clip(last.content, 100)}\u201d")
    third = _end("; ".join(parts)) if parts else ""
    return " ".join(p for p in (first, second, third) if p)


# --------------------------------------------------------------------------- caps


def fit(text: str, tokens: TokenCounter, token_cap: int | None, char_cap: int | None = None) -> str:
    """Return ``text`` cut (at a word boundary when possible) so it fits both caps; never over."""
    if char_cap is not None and len(text) > char_cap:
        text = _cut_chars(text, char_cap)
    if token_cap is None or tokens.count(text) <= token_cap:
        return text
    budget = token_cap
    while budget > 0:
        cut = tokens.truncate(text, budget)
        if " " in cut.strip() and not text.startswith(cut + " "):
            cut = cut[: cut.rstrip().rfind(" ")].rstrip()
        cut = cut.rstrip()
        if tokens.count(cut) <= token_cap and (char_cap is None or len(cut) <= char_cap):
            return cut
        budget -= 1
    return ""


def _cut_chars(text: str, char_cap: int) -> str:
    cut = text[:char_cap]
    if len(text) > char_cap and " " in cut[char_cap // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip()


def _fits(text: str, tokens: TokenCounter, token_cap: int | None, char_cap: int | None) -> bool:
    return (char_cap is None or len(text) <= char_cap) and (token_cap is None or tokens.count(text) <= token_cap)


# --------------------------------------------------------------------------- text summaries

_SECTION_FACTS = "Key facts:"
_SECTION_SUMMARY = "Summary: "
_SECTION_EARLIER = "Earlier summary: "
_SECTION_MESSAGES = "Messages:"
_FACT_LINE = re.compile(r"^- (?P<key>[a-z0-9_]+): (?P<value>.*?)(?: \(msg (?P<idx>\d+)\))?$")
_MESSAGE_LINE = re.compile(r"^- \((?P<idx>\d+)\) (?P<rest>.*)$")


@dataclass(slots=True)
class _Parsed:
    facts: list[tuple[str, str, int | None]]
    lines: list[tuple[int, str]]
    earlier: str | None


def _parse_summary(text: str | None) -> _Parsed:
    """Read a summary this module wrote back into facts and message lines; other text is kept whole."""
    if not text or not text.strip():
        return _Parsed([], [], None)
    if not text.startswith((_SECTION_FACTS, _SECTION_SUMMARY, _SECTION_EARLIER, _SECTION_MESSAGES)):
        return _Parsed([], [], text.strip())
    facts: list[tuple[str, str, int | None]] = []
    lines: list[tuple[int, str]] = []
    earlier: str | None = None
    section = None
    for line in text.splitlines():
        if line == _SECTION_FACTS or line == _SECTION_MESSAGES:
            section = line
            continue
        if line.startswith(_SECTION_EARLIER):
            earlier, section = line[len(_SECTION_EARLIER) :], None
            continue
        if line.startswith(_SECTION_SUMMARY):
            section = None
            continue
        if section == _SECTION_FACTS and (m := _FACT_LINE.match(line)):
            facts.append((m.group("key"), m.group("value"), int(m.group("idx")) if m.group("idx") else None))
        elif section == _SECTION_MESSAGES and (m := _MESSAGE_LINE.match(line)):
            lines.append((int(m.group("idx")), m.group("rest")))
    return _Parsed(facts, lines, earlier)


def message_line(message: MessageRecord, names: dict[str, str]) -> str:
    """Return one message as a summary line body: ``user: ...``, ``assistant called f(...)``, ``tool result f: ...``."""
    if message.role == "tool":
        return clip(f"tool result {tool_label(message, names)}: {message.content}", MAX_LINE_CHARS)
    if message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        said = f" and said: {message.content}" if message.content.strip() else ""
        return clip(f"{message.role} called {calls}{said}", MAX_LINE_CHARS)
    return clip(f"{message.role}: {message.content}", MAX_LINE_CHARS)


def _render_text(entries: list[FactEntry], story: str, earlier: str | None, lines: list[tuple[int, str]]) -> str:
    out: list[str] = []
    if entries:
        out.append(_SECTION_FACTS)
        for e in entries:
            marker = f" (msg {e.source})" if e.source is not None else ""
            out.append(f"- {e.key}: {e.value}{marker}")
    if story:
        out.append(_SECTION_SUMMARY + story)
    if earlier:
        out.append(_SECTION_EARLIER + " ".join(earlier.split()))
    if lines:
        out.append(_SECTION_MESSAGES)
        out.extend(f"- ({idx}) {body}" for idx, body in lines)
    return "\n".join(out)


# --------------------------------------------------------------------------- the summarizer


class OfflineSummarizer:
    """Deterministic extractive summarizer (name ``offline``): facts + narrative, or one summary text."""

    name = "offline"

    def __init__(self, encoding: str = DEFAULT_ENCODING):
        self._tokens = counter(encoding)

    def identity(self, request: SummaryInput) -> tuple[str, str]:
        """Return (model, prompt_hash) this summarizer answers ``request`` with, before calling it."""
        return MODEL, prompt_hash(RULES_VERSION, PROMPT_VERSION, request.kind)

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        """Summarize ``request``; pure and deterministic, never over ``token_cap``/``char_cap``."""
        model, phash = self.identity(request)
        tokens_in = self._tokens.total(message_text(m, tool_names(request.messages)) for m in request.messages)
        tokens_in += self._tokens.count(request.existing_summary or "")
        tokens_in += self._tokens.count(render_facts(request.existing_facts))
        if request.kind == "facts":
            text, facts = self._facts(request)
            tokens_out = self._tokens.count(text) + self._tokens.count(render_facts(facts))
        else:
            text, facts = self._text(request), ()
            tokens_out = self._tokens.count(text)
        return SummaryOutput(
            text=text, facts=facts, model=model, prompt_hash=phash, tokens_in=tokens_in, tokens_out=tokens_out
        )

    def _facts(self, request: SummaryInput) -> tuple[str, tuple[Fact, ...]]:
        book = read_all(request.messages, request.existing_facts)
        story = fit(narrative(book, request.messages), self._tokens, request.token_cap, request.char_cap)
        return story, book.facts()

    def _text(self, request: SummaryInput) -> str:
        parsed = _parse_summary(request.existing_summary)
        window = request.window_start
        messages = [m for m in request.messages if window is None or m.index >= window]
        book = FactBook()
        for f in request.existing_facts:
            book.put(f.key, f.value, None, f.category)
        if parsed.earlier:
            read_message(_pseudo_message(parsed.earlier), book)
        for key, value, idx in parsed.facts:
            book.put(key, value, idx)
        if window is not None:
            book.drop_before(window)
        kept = {i: body for i, body in parsed.lines if window is None or i >= window}
        names = tool_names(messages)
        previous: str | None = None
        for m in messages:
            read_message(m, book, previous)
            if m.role in ("user", "assistant") and m.content.strip():
                previous = m.content.strip()
        kept.update((m.index, message_line(m, names)) for m in messages)
        lines = sorted(kept.items())
        story = narrative(book, messages)
        return self._fit_text(book.entries()[-MAX_FACTS:], story, parsed.earlier, lines, request)

    def _fit_text(
        self, entries: list[FactEntry], story: str, earlier: str | None, lines: list[tuple[int, str]], request: SummaryInput
    ) -> str:
        """Render, then shed detail until the caps hold: oldest lines, earlier summary, narrative, oldest facts."""
        tc, cc = request.token_cap, request.char_cap
        text = _render_text(entries, story, earlier, lines)
        while not _fits(text, self._tokens, tc, cc):
            if lines:
                lines = lines[1:]
            elif earlier:
                earlier = None
            elif story != _first_sentence(story):
                story = _first_sentence(story)
            elif len(entries) > 1:
                entries = entries[1:]
            else:
                return fit(text, self._tokens, tc, cc)
            text = _render_text(entries, story, earlier, lines)
        return text


def _first_sentence(text: str) -> str:
    spans = sentence_spans(text)
    return text[spans[0][0] : spans[0][1]].strip() if spans else text


def _pseudo_message(text: str) -> MessageRecord:
    return MessageRecord(
        tenant_id="-", conversation_id="-", index=-1, seq=0, event_id="-", role="summary", content=text,
        tokens=0, occurred_at=datetime(1970, 1, 1, tzinfo=timezone.utc),
    )
