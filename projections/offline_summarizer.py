"""The offline summarizer: deterministic, extractive facts + narrative or summary text, no network.

It is a pure function of its :class:`SummaryInput`: the rules of
:mod:`memfold.projections.fact_extraction` pull ids, amounts, dates, contacts,
names, decisions and the user's first-person statements out of the messages
into keyed facts; :mod:`memfold.projections.salience` picks the statements
later questions ask about (numbers, dates, names, the user's plans,
preferences and decisions, rare words), not the first sentences of each
message. Statements are kept with their message index and grouped under the
date they were made, so a later round (rolling, chunked, sliding window) reads
its own previous summary back and re-ranks it together with the new messages.
Every output is cut to the request's caps with the one token counter; a text
request with no cap gets :data:`DEFAULT_TOKEN_CAP`. Same input, byte-for-byte
the same output.
"""

from __future__ import annotations

import inspect
import itertools
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from memfold.core.events import Fact
from memfold.core.ids import content_hash
from memfold.core.ports import MessageRecord, SummaryInput, SummaryOutput
from memfold.core.tokens import DEFAULT_ENCODING, MESSAGE_OVERHEAD, TokenCounter, counter
from memfold.projections import fact_extraction, fact_keys, fact_patterns, fold_text, salience
from memfold.projections.fact_extraction import (
    FactBook,
    FactEntry,
    entry_facts,
    forget_traces,
    read_all,
    read_message,
    specific_request,
)
from memfold.projections.fact_keys import MAX_FACTS, SHORT_VALUE_CHARS, clip
from memfold.projections.fold_text import sentence_spans
from memfold.projections.offline_rules import TABLE_HASH
from memfold.projections.prompts import PROMPT_VERSION, message_text, prompt_hash, render_facts, tool_label, tool_names
from memfold.projections.salience import (
    Statement,
    forget_statements,
    rank,
    says_nothing,
    select,
    statements_from_text,
    statements_of,
)


def _rules_version() -> str:
    """Return the version of the rules this summarizer answers by: the rule table's hash and the rest's.

    The table (:mod:`memfold.projections.offline_rules`) holds the typed entities and salience rules with
    their examples; the fact patterns and extractors not in it yet are hashed by their source. Any change
    to either is a new version, so a cached summary is never served for rules that would write another.
    """
    rest = [inspect.getsource(m) for m in (fact_patterns, fact_extraction, salience, fold_text, fact_keys)]
    rest.append(inspect.getsource(sys.modules[__name__]))
    return f"offline-{TABLE_HASH}-{content_hash(*rest, length=8)}"


# The version of the rules: part of prompt_hash, hence of the summary cache key, and the model label.
RULES_VERSION = _rules_version()
MODEL = RULES_VERSION
MAX_LINE_CHARS = 200
DEFAULT_TOKEN_CAP = 500
FACTS_SHARE = 0.25  # at most this share of a text summary goes to the key facts
# A sliding window that keeps its facts (``keep_facts``): they are the memory of everything before the
# window, so they get the larger share (planted facts in every context at 600 tokens, seed 11: share
# 0.25 68%, 0.4 80%, 0.5 82%; BEAM unchanged within 0.2 points; docs/quality.md).
KEPT_FACTS_SHARE = 0.5
# Text summaries of one chain, each version built on the one before, return their facts as structured
# facts, so the next version gets them all back (``existing_facts``), not only those its text had room
# for. Not topics (a summary per topic, each with its own facts), a sliding window only when it keeps
# its facts (``SummaryInput.keep_facts``): those return the facts their text lists.
CARRYING_POLICIES = frozenset({"rolling", "chunked"})
LINE_TOKENS = 6  # what "- (123) user: " and a joint cost around a statement, for the selection's estimate
LINE_CHARS = 16


# --------------------------------------------------------------------------- narrative


def _end(sentence: str) -> str:
    """Return ``sentence`` with a full stop, unless it already ends in one or in a clipped "…"."""
    return sentence if sentence.endswith((".", "…", "!", "?")) else sentence + "."


def _humanize(key: str) -> str:
    return key.replace("_", " ")


def narrative(book: FactBook, messages: Sequence[MessageRecord], flow: bool = True) -> str:
    """Return 1-4 sentences: who wants what, what was agreed, the current state (what is known of each).

    In a long conversation the user has moved on from what they opened it for: when their
    latest request differs, ``flow`` tells both ("The user wants X. Lately, they asked Y.");
    without it (a text summary keeps the first sentence only, its key facts hold the first
    request as ``user_request``) it tells the latest alone ("Lately, the user asked Y.").
    """
    name = book.get("customer_name")
    who = f"The user ({name})" if name else "The user"
    request = book.get("user_request")
    topic = book.get("topic")
    latest = _latest_request(messages) if request else None  # scanned only when there is a first to compare
    if latest and latest != request:
        first = f"{who} {request}. Lately, they {latest}." if flow else f"Lately, {who[0].lower()}{who[1:]} {latest}."
    elif request:
        first = f"{who} {request}."
    elif topic:
        first = f"{who} is being helped with {topic}."
    else:
        # The first user turn that says something ("Thanks, that clears it up." says nothing to recall).
        user_texts = [m.content for m in messages if m.role == "user" and m.content.strip()]
        said = next((t for t in user_texts if not says_nothing(t.strip())), None)
        if said is not None:
            first = f"{who} wrote: \u201c{clip(said, 100)}\u201d."
        else:
            first = "The user only thanked or agreed." if user_texts else "No user request yet."
    decisions = book.by_category("DECISION")[-2:]
    conditions = book.by_category("CONDITION")[-2:]
    second = ""
    if decisions:
        second = "Agreed: " + "; ".join(f"{_humanize(d.key)} ({clip(d.value, 90)})" for d in decisions)
        if conditions:
            second += "; conditions: " + "; ".join(clip(c.value, 60) for c in conditions)
        second = _end(second)
    elif conditions:
        second = _end("Conditions stated: " + "; ".join(clip(c.value, 60) for c in conditions))
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
    third = _end("; ".join(parts)) if parts else ""
    return " ".join(p for p in (first, second, third) if p)


LATEST_REQUEST_SCAN = 12  # user turns searched, newest first, for the latest request


def _latest_request(messages: Sequence[MessageRecord]) -> str | None:
    """Return what the newest user turn that asks for something specific asks, among the last few user turns."""
    turns = (m.content for m in reversed(messages) if m.role == "user" and m.content.strip())
    return next(filter(None, map(specific_request, itertools.islice(turns, LATEST_REQUEST_SCAN))), None)


# --------------------------------------------------------------------------- caps


def fit(text: str, tokens: TokenCounter, token_cap: int | None, char_cap: int | None = None) -> str:
    """Return ``text`` cut (at a word boundary when possible) so it fits both caps; never over."""
    if char_cap is not None and len(text) > char_cap:
        text = _cut_chars(text, char_cap)
    if token_cap is None or tokens.count_lines(text) <= token_cap:
        return text
    budget = token_cap
    while budget > 0:
        cut = tokens.truncate(text, budget)
        if " " in cut.strip() and not text.startswith(cut + " "):
            cut = cut[: cut.rstrip().rfind(" ")].rstrip()
        cut = cut.rstrip()
        if tokens.count_lines(cut) <= token_cap and (char_cap is None or len(cut) <= char_cap):
            return cut
        budget -= 1
    return ""


def _cut_chars(text: str, char_cap: int) -> str:
    cut = text[:char_cap]
    if len(text) > char_cap and " " in cut[char_cap // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip()


def _fits(text: str, tokens: TokenCounter, token_cap: int | None, char_cap: int | None) -> bool:
    return (char_cap is None or len(text) <= char_cap) and (token_cap is None or tokens.count_lines(text) <= token_cap)


# --------------------------------------------------------------------------- statements as lines

_SECTION_FACTS = "Key facts:"
_SECTION_SUMMARY = "Summary: "
_SECTION_EARLIER = "Earlier summary: "
_SECTION_MESSAGES = "Messages:"
_JOIN = " \u2026 "
_FACT_LINE = re.compile(r"^- (?P<key>[a-z0-9_]+): (?P<value>.*?)(?: \(msg (?P<idx>\d+)\))?$")
_MESSAGE_LINE = re.compile(r"^- \((?P<idx>\d+)\) (?P<role>user|assistant|system|tool|summary)(?:: | (?=called |result ))(?P<rest>.*)$")
_DAY_LINE = re.compile(r"^\[(?P<day>\d{4}-\d{2}-\d{2})\]$")


def render_lines(statements: Sequence[Statement]) -> list[str]:
    """Return ``statements`` as summary lines: a ``[YYYY-MM-DD]`` line per new date, one line per message.

    Statements of one message share its line (``- (12) user: first … second``),
    in conversation order.
    """
    out: list[str] = []
    day: str | None = None
    current: tuple[int, str] | None = None
    parts: list[str] = []

    def flush() -> None:
        if current is not None:
            idx, role = current
            body = _JOIN.join(parts)
            sep = " " if body.startswith(("called ", "result ")) else ": "
            out.append(f"- ({idx}) {role}{sep}{body}")

    for s in sorted(statements, key=lambda s: (s.index, s.order)):
        if s.index < 0:
            continue
        if s.day is not None and s.day != day:
            flush()
            current, parts = None, []
            day = s.day
            out.append(f"[{day}]")
        if current != (s.index, s.role):
            flush()
            current, parts = (s.index, s.role), []
        parts.append(s.text)
    flush()
    return out


@dataclass(slots=True)
class _Parsed:
    facts: list[tuple[str, str, int | None]]
    statements: list[Statement]
    earlier: str | None


def _parse_summary(text: str | None, tokens: TokenCounter) -> _Parsed:
    """Read a summary this module wrote back into facts and statements; other text is kept whole as ``earlier``."""
    if not text or not text.strip():
        return _Parsed([], [], None)
    if not text.startswith((_SECTION_FACTS, _SECTION_SUMMARY, _SECTION_EARLIER, _SECTION_MESSAGES)):
        return _Parsed([], [], text.strip())
    facts: list[tuple[str, str, int | None]] = []
    statements: list[Statement] = []
    earlier: str | None = None
    section = None
    day: str | None = None
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
        elif section == _SECTION_MESSAGES and (d := _DAY_LINE.match(line)):
            day = d.group("day")
        elif section == _SECTION_MESSAGES and (m := _MESSAGE_LINE.match(line)):
            idx, role = int(m.group("idx")), m.group("role")
            for order, part in enumerate(m.group("rest").split(_JOIN)):
                statements.append(Statement(idx, role, day, order, part, tokens.count_lines(part)))
    return _Parsed(facts, statements, earlier)


def _message_statements(message: MessageRecord, names: dict[str, str], tokens: TokenCounter) -> list[Statement]:
    """Return a message's statements; a tool call or tool result is one statement of its own."""
    day = message.occurred_at.date().isoformat() if message.occurred_at is not None else None
    if message.role == "tool":
        text = clip(f"result {tool_label(message, names)}: {message.content}", MAX_LINE_CHARS)
        return [Statement(message.index, "tool", day, 0, text, tokens.count_lines(text))]
    if message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        text = clip(f"called {calls}", MAX_LINE_CHARS)
        head = [Statement(message.index, message.role, day, 0, text, tokens.count_lines(text))]
        rest = statements_from_text(message.content, message.index, message.role, day, tokens)
        return head + [Statement(s.index, s.role, s.day, s.order + 1, s.text, s.tokens) for s in rest]
    return statements_of(message, tokens)


# --------------------------------------------------------------------------- the summarizer


# A bare agreement's value quotes the turn it answers ("Deal (re: I've set up a refund of 310.40 EUR.
# One condition: ...)"): that turn's own facts hold its substance, so among kept facts it goes early.
_RE_OFFER = "(re: "


def _carries(request: SummaryInput) -> bool:
    """True when ``request``'s summary returns its facts for the next version: a window that keeps them, rolling, chunked."""
    return request.keep_facts or request.policy in CARRYING_POLICIES


def _stated(e: FactEntry) -> int:
    """Return the index of the message that first stated ``e`` (-1 when unknown: from an earlier summary)."""
    return e.stated_in if e.stated_in is not None else -1


class OfflineSummarizer:
    """Deterministic extractive summarizer (name ``offline``): facts + narrative, or one summary text."""

    name = "offline"

    def __init__(self, encoding: str = DEFAULT_ENCODING):
        self._tokens = counter(encoding)

    def identity(self, request: SummaryInput) -> tuple[str, str]:
        """Return (model, prompt_hash) this summarizer answers ``request`` with, before calling it."""
        return MODEL, prompt_hash(RULES_VERSION, PROMPT_VERSION, request.kind)

    def drop_text_caches(self) -> None:
        """Empty the caches that keep conversation text for speed in this process (erasure calls it).

        The fact book's traces, the messages' statements and the line counts
        of summaries: they are rebuilt as messages are read again.
        """
        forget_traces()
        forget_statements()
        self._tokens.forget_lines()

    def close(self) -> None:
        """Nothing to release: the offline summarizer runs in this process."""

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        """Summarize ``request``; pure and deterministic, never over ``token_cap``/``char_cap``."""
        model, phash = self.identity(request)
        names = tool_names(request.messages)  # once, not once per message: quadratic in a long conversation
        # A plain message's text is its content, counted once at append (``tokens``, with MESSAGE_OVERHEAD).
        tokens_in = sum(
            m.tokens - MESSAGE_OVERHEAD if m.tokens > MESSAGE_OVERHEAD and m.role != "tool" and not m.tool_calls
            else self._tokens.count_lines(message_text(m, names))
            for m in request.messages
        )
        tokens_in += self._tokens.count_lines(request.existing_summary or "")
        tokens_in += self._tokens.count_lines(render_facts(request.existing_facts))
        if request.kind == "facts":
            text, facts = self._facts(request)
            tokens_out = self._tokens.count_lines(text) + self._tokens.count_lines(render_facts(facts))
        else:
            text, carried, listed = self._text(request)
            facts = carried if _carries(request) else listed
            tokens_out = self._tokens.count_lines(text)
        return SummaryOutput(
            text=text, facts=facts, model=model, prompt_hash=phash, tokens_in=tokens_in, tokens_out=tokens_out
        )

    # ----------------------------------------------------------------- facts + narrative (seed 000)

    def _facts(self, request: SummaryInput) -> tuple[str, tuple[Fact, ...]]:
        """Return (narrative, facts): the narrative's opening sentences, then the salient statements by date."""
        book = read_all(request.messages, request.existing_facts)
        tc, cc = request.token_cap, request.char_cap
        opener = fit(narrative(book, request.messages), self._tokens, tc, cc)
        names = tool_names(request.messages)
        pool = [s for m in request.messages for s in _message_statements(m, names, self._tokens)]
        lines_budget = None if tc is None else tc - self._tokens.count_lines(opener) - 1
        chars_budget = None if cc is None else cc - len(opener) - 1
        chosen = self._fill(pool, lines_budget, chars_budget, lambda st: "\n".join(render_lines(st)))
        lines = render_lines(chosen)
        story = "\n".join([opener, *lines]) if lines else opener
        return fit(story, self._tokens, tc, cc), book.facts()

    # ----------------------------------------------------------------- one summary text (seeds 001-004)

    def _text(self, request: SummaryInput) -> tuple[str, tuple[Fact, ...], tuple[Fact, ...]]:
        """Return the summary text, every fact it stands on, and the facts its text lists (its facts share).

        A sliding window drops what only messages before ``window_start`` said,
        facts too, unless the request keeps facts: then the earlier facts stay
        (latest value per key) and the text shows as many as :data:`KEPT_FACTS_SHARE`
        holds. :meth:`summarize` returns the facts of those and of
        :data:`CARRYING_POLICIES`, so the next version gets them as
        ``existing_facts`` even when this text had no room for them; any
        other text summary returns the facts its text lists (with the values
        they replaced), as a model's text summary does (a topic's, a window
        that keeps no facts).
        """
        tokens = self._tokens
        parsed = _parse_summary(request.existing_summary, tokens)
        window = request.window_start
        messages = [m for m in request.messages if window is None or m.index >= window]
        book = FactBook()
        for f in request.existing_facts:
            book.put_fact(f)
        earlier: list[Statement] = []
        if parsed.earlier:
            read_message(_pseudo_message(parsed.earlier, messages), book)
            earlier = statements_from_text(parsed.earlier, -1, "summary", None, tokens)
        for key, value, idx in parsed.facts:
            book.put(key, value, idx)
        if window is not None and not request.keep_facts:
            book.drop_before(window)
        seen = {m.index for m in messages}
        kept = [s for s in parsed.statements if (window is None or s.index >= window) and s.index not in seen]
        names = tool_names(messages)
        previous: str | None = None
        # Facts come from every input message when they are kept (a catch-up's inputs start after its
        # base, before the window: an import's first memory covers 0-5, the next the last window); the
        # narrative only from the window.
        for m in request.messages if request.keep_facts else messages:
            read_message(m, book, previous)
            if m.role in ("user", "assistant") and m.content.strip():
                previous = m.content.strip()
        pool = earlier + kept + [s for m in messages for s in _message_statements(m, names, tokens)]
        tc, cc = request.token_cap, request.char_cap
        if tc is None and cc is None:
            tc = DEFAULT_TOKEN_CAP
        all_entries = book.entries()[-MAX_FACTS:]
        share = KEPT_FACTS_SHARE if request.keep_facts else FACTS_SHARE
        carried = _carries(request)  # carried facts give way in their own order (_drop_order)
        entries = self._fit_facts(all_entries, tc, cc, share, carried)
        story = _first_sentence(narrative(book, messages, flow=False))
        head = _render_text(entries, story, None, [])
        lines_tc = None if tc is None else tc - tokens.count_lines(head) - 2
        lines_cc = None if cc is None else cc - len(head) - 2

        def render(st: Sequence[Statement]) -> str:
            return _render_text(entries, story, _earlier_text(st), render_lines(st))

        chosen = self._fill(pool, lines_tc, lines_cc, lambda st: render(st)[len(head) :])
        text, entries, story, kept_statements = self._shed(entries, story, chosen, tc, cc)
        # What the statements left of the caps goes back to the older facts the share cut.
        kept_ids = {id(e) for e in entries}
        dropped = [e for e in self._drop_order(all_entries, carried) if id(e) not in kept_ids]
        for e in reversed(dropped):  # the last to go comes back first
            kept_ids.add(id(e))
            wider = [x for x in all_entries if id(x) in kept_ids]
            candidate = _render_text(wider, story, _earlier_text(kept_statements), render_lines(kept_statements))
            if not _fits(candidate, tokens, tc, cc):
                break
            entries, text = wider, candidate
        return text, book.facts(), tuple(f for e in entries for f in entry_facts(e))

    def _fill(
        self, pool: list[Statement], tc: int | None, cc: int | None, rendered: Callable[[Sequence[Statement]], str]
    ) -> list[Statement]:
        """Return the salient statements of ``pool`` that fill ``tc``/``cc`` once rendered, in conversation order.

        The selection estimates each line's overhead; one more round spends
        what the estimate left over.
        """
        if (tc is not None and tc <= 0) or (cc is not None and cc <= 0):
            return []
        chosen = select(pool, tc, cc, line_tokens=LINE_TOKENS, line_chars=LINE_CHARS)
        for _ in range(2):
            text = rendered(chosen)
            slack_t = None if tc is None else tc - self._tokens.count_lines(text)
            slack_c = None if cc is None else cc - len(text)
            if (slack_t is not None and slack_t < 12) or (slack_c is not None and slack_c < 48) or (slack_t is None and slack_c is None):
                break
            more_t = None if tc is None else tc + slack_t * 3 // 4
            more_c = None if cc is None else cc + slack_c * 3 // 4
            wider = select(pool, more_t, more_c, line_tokens=LINE_TOKENS, line_chars=LINE_CHARS)
            if len(wider) <= len(chosen):
                break
            chosen = wider
            tc = more_t if tc is not None else None
            cc = more_c if cc is not None else None
        return chosen

    def _fit_facts(
        self, entries: list[FactEntry], tc: int | None, cc: int | None, share: float, carried: bool = False
    ) -> list[FactEntry]:
        """Return the ``entries`` whose block fits ``share`` of the caps, in their order.

        Sentence-long values (a condition, a decision, a request: the
        statements carry them too) go first, oldest first, then the oldest
        short ones (ids, amounts, dates, contacts, names); ``carried`` facts go
        in :meth:`_drop_order`'s other order.
        """
        order = self._drop_order(entries, carried)
        for k in range(len(order) + 1):
            gone = {id(e) for e in order[:k]}
            kept = [x for x in entries if id(x) not in gone]
            block = _render_text(kept, "", None, [])
            if (tc is None or self._tokens.count_lines(block) <= tc * share) and (cc is None or len(block) <= cc * share):
                return kept
        return []

    @staticmethod
    def _drop_order(entries: list[FactEntry], carried: bool = False) -> list[FactEntry]:
        """Return ``entries`` in the order the fact share lets them go (the first to go first).

        Plain facts: sentences (over SHORT_VALUE_CHARS: conditions, decisions, requests), oldest first,
        then short values. Carried facts (a sliding window's kept facts, the memory of everything
        before it; rolling's and chunked's, carried from version to version): first a value another
        key already holds (``version`` after ``firmware_version``), then the GENERAL facts (the topic,
        the user's first request: the summary's opening sentence says it) and bare agreements quoting
        the offer they answer (its own facts hold it), then sentences, the last stated first (the
        latest turns are told by the text's statements; an agreement made early is only in the
        facts), then short values. Measured (docs/quality.md), planted facts at 600 / 1k / 2k tokens,
        sliding_window: seed 23 79/81/83% -> 87/89/90%, seed 11 82/84/87% -> 90/92/94%; rolling seed
        23 73/76/81% -> 78/80/83%; BEAM within 0.3 points either way.
        """
        def sentence_last(e: FactEntry) -> int:
            return 0 if len(e.value) > SHORT_VALUE_CHARS else 1

        if not carried:
            return sorted(entries, key=sentence_last)  # stable: oldest first in each
        seen: set[str] = set()
        repeated: set[int] = set()
        for k, e in enumerate(entries):
            value = " ".join(e.value.lower().split())
            if value in seen:
                repeated.add(k)
            seen.add(value)

        def order(k: int) -> tuple[int, int, int]:
            e = entries[k]
            group = 0 if k in repeated else 1 if e.category == "GENERAL" or _RE_OFFER in e.value else 2 + sentence_last(e)
            # Sentences stated last go first: the text's statements tell them, while the early ones (the
            # agreed refund condition at message 7) only the carried facts still hold.
            return (group, -_stated(e), -k) if sentence_last(e) == 0 else (group, 0, 0)

        return [entries[k] for k in sorted(range(len(entries)), key=order)]

    def _shed(
        self, entries: list[FactEntry], story: str, chosen: list[Statement], tc: int | None, cc: int | None
    ) -> tuple[str, list[FactEntry], str, list[Statement]]:
        """Render, then shed until the caps hold: least salient statements, narrative, oldest facts.

        Returns the text and what it kept: facts, narrative, statements.
        """
        order = rank(chosen)
        keep = list(chosen)

        def render() -> str:
            return _render_text(entries, story, _earlier_text(keep), render_lines(keep))

        text = render()
        while not _fits(text, self._tokens, tc, cc):
            if keep:
                gone = order.pop(0)
                keep.remove(gone)
            elif story:
                story = ""
            elif entries:
                entries = entries[1:]
            else:
                return fit(text, self._tokens, tc, cc), entries, story, keep
            text = render()
        return text, entries, story, keep


def _earlier_text(statements: Sequence[Statement]) -> str | None:
    parts = [s.text for s in statements if s.index < 0]
    return " ".join(parts) if parts else None


def _render_text(entries: list[FactEntry], story: str, earlier: str | None, lines: list[str]) -> str:
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
        out.extend(lines)
    return "\n".join(out)


def _first_sentence(text: str) -> str:
    spans = sentence_spans(text)
    return text[spans[0][0] : spans[0][1]].strip() if spans else text


def _pseudo_message(text: str, messages: Sequence[MessageRecord]) -> MessageRecord:
    """Return an earlier summary's text as a message to read facts from (dated like the first new message)."""
    at = messages[0].occurred_at if messages else datetime(1970, 1, 1, tzinfo=UTC)
    return MessageRecord(
        tenant_id="-", conversation_id="-", index=-1, seq=0, event_id="-", role="summary", content=text,
        tokens=0, occurred_at=at,
    )
