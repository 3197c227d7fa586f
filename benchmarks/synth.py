"""Generate long, realistic, seeded conversations with planted facts and their ground truth.

Each conversation belongs to one domain (order/refund support, travel booking,
SaaS account migration, insurance claim, tech support with tool calls). The
opening plants facts (ids, amounts, dates, contact details, an agreed condition,
a decision); a long middle of varied small talk and troubleshooting mentions
them rarely; later updates change some of them (a new date, a revised amount,
a changed email). The last message is usually a user question about one fact
that does not state its value, so answering it needs memory.

Output is the ingest format, one message per line::

    {"conversation_id", "tenant_id", "role", "content", "ts", "model_variant"?,
     "metadata"?, "tool_calls"?: [{"id", "name", "arguments"}], "tool_call_id"?}

and a sidecar ``FILE.truth.json`` keyed by conversation id (plus ``_meta``)
with, per conversation, every fact's key, kind, LATEST value and the turn
(0-based message index) where that value first appeared, plus its history.
A "turn" here is one message of any role.

Deterministic: the same arguments give byte-identical files (``random.Random``
seeded from strings, no clock, no hashing of ``id()``).

    python benchmarks/synth.py --conversations 6 --turns 300 --seed 7 --out /tmp/conv.jsonl
    python benchmarks/synth.py --preset sample --seed 4711 --out cli/data/sample.jsonl
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

try:  # run as ``python -m benchmarks.synth`` or imported from the package
    from . import synth_domains as domains
except ImportError:  # run as ``python benchmarks/synth.py`` or with benchmarks/ on sys.path
    import synth_domains as domains

FORMAT = "memfold-synth/1"
MODEL_VARIANTS = ("arco", "arco-pro", "deep-dive")
TENANTS = ("acme", "globex", "initech", "umbrella")
MIN_TURNS = 14  # the opening (10 messages), one update and the closing question


# --------------------------------------------------------------------------- template grammar

@lru_cache(maxsize=8192)
def _compile(template: str) -> tuple:
    """Parse ``template`` into nested parts: str | ("alt", alternatives) | ("slot", name)."""
    return _parse_seq(template, 0, top=True)[0]


def _parse_seq(t: str, i: int, *, top: bool) -> tuple[tuple, int]:
    parts: list = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            parts.append("".join(buf))
            buf.clear()

    while i < len(t):
        c = t[i]
        if c == "[":
            flush()
            alts: list[tuple] = []
            i += 1
            while True:
                seq, i = _parse_seq(t, i, top=False)
                alts.append(seq)
                if i >= len(t):
                    raise ValueError(f"unclosed '[' in template {t!r}")
                i += 1
                if t[i - 1] == "]":
                    break
            parts.append(("alt", tuple(alts)))
            continue
        if not top and c in "]|":
            break
        if c == "{":
            j = t.index("}", i)
            flush()
            parts.append(("slot", t[i + 1 : j]))
            i = j + 1
            continue
        buf.append(c)
        i += 1
    flush()
    return tuple(parts), i


def _render_parts(parts: tuple, rng: random.Random, slots: Mapping[str, str], out: list[str]) -> None:
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif part[0] == "alt":
            _render_parts(rng.choice(part[1]), rng, slots, out)
        elif part[1].startswith("@"):
            _render_parts(_compile(domains.MACROS[part[1][1:]]), rng, slots, out)
        else:
            out.append(str(slots[part[1]]))


_SPACE_BEFORE_PUNCT = re.compile(r"[ \t]+([,.!?;:)])")
_DOUBLE_PUNCT = re.compile(r"([.!?])[.]+")


def render(template: str, rng: random.Random, slots: Mapping[str, str]) -> str:
    """Expand ``template``: ``[a|b]`` picks one, ``{name}`` inserts ``slots[name]``, ``{@m}`` a macro."""
    out: list[str] = []
    _render_parts(_compile(template), rng, slots, out)
    text = " ".join("".join(out).split())
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _DOUBLE_PUNCT.sub(r"\1", text)
    text = text.replace(",.", ".").replace(".,", ",")
    return text[:1].upper() + text[1:] if text else text


class _Slots(dict):
    """Slot values for one message: facts and names given, filler variables drawn on first use."""

    def __init__(self, rng: random.Random, base: Mapping[str, str]):
        super().__init__(base)
        self._rng = rng

    def __missing__(self, key: str) -> str:
        rng = self._rng
        if key in domains.FILLER_CHOICES:
            value = rng.choice(domains.FILLER_CHOICES[key])
        elif key == "n":
            value = str(rng.randint(2, 6))
        elif key == "n2":
            value = str(rng.randint(7, 12))
        elif key == "n3":
            value = str(rng.randint(0, 9))
        elif key == "mins":
            value = str(rng.choice((5, 10, 15, 20, 25, 30, 40, 45)))
        elif key == "hours":
            value = str(rng.choice((2, 4, 6, 12, 24, 48)))
        elif key == "clock":
            value = f"{rng.randint(7, 22):02d}:{rng.choice((0, 10, 15, 30, 40, 45)):02d}"
        else:
            raise KeyError(f"template slot {{{key}}} has no value")
        self[key] = value
        return value


# --------------------------------------------------------------------------- ground truth

@dataclass
class FactTruth:
    """One planted fact: its latest value and where each value first appeared (message index)."""

    key: str
    kind: str
    value: str
    history: list[dict[str, Any]] = field(default_factory=list)  # [{"turn": int | None, "value": str}]

    @property
    def turn(self) -> int:
        """Return the message index where the latest value first appeared."""
        return self.history[-1]["turn"]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "value": self.value, "turn": self.turn,
                "planted_turn": self.history[0]["turn"], "updated": len(self.history) > 1, "history": self.history}


@dataclass
class Conversation:
    conversation_id: str
    tenant_id: str
    domain: str
    messages: list[dict[str, Any]]
    facts: dict[str, FactTruth]
    final_question: str | None  # the fact key the last user message asks about, if any

    def truth_json(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id, "tenant_id": self.tenant_id, "domain": self.domain,
                "messages": len(self.messages), "final_question": self.final_question,
                "facts": [f.to_json() for f in self.facts.values()]}


# --------------------------------------------------------------------------- generation

@dataclass
class _Unit:
    kind: str  # "update" | "reference"
    target: int  # message index at or after which it is emitted
    spec: Any = None


class _Writer:
    """Appends messages to one conversation and records when each fact value first appears."""

    def __init__(self, rng: random.Random, domain: domains.Domain, ctx: domains.Ctx,
                 conversation_id: str, tenant_id: str):
        self.rng, self.domain, self.ctx = rng, domain, ctx
        self.conversation_id, self.tenant_id = conversation_id, tenant_id
        self.messages: list[dict[str, Any]] = []
        self.clock = ctx.start
        self.variant = rng.choice(MODEL_VARIANTS)
        self.customer = f"{ctx.first} {ctx.last}"
        facts: domains.Facts = {"customer_name": ("name", self.customer), "email": ("email", ctx.email()),
                                "phone": ("phone", ctx.phone())}
        facts.update(domain.facts(ctx))
        self.facts = {k: FactTruth(k, kind, value, [{"turn": None, "value": value}]) for k, (kind, value) in facts.items()}
        self.used: dict[tuple[str, int], int] = {}
        self.memo: dict[str, Any] = {}  # tool answers that must stay consistent (carrier, seat, ...)

    # -- slots and messages

    def slots(self, **extra: str) -> _Slots:
        base = {k: f.value for k, f in self.facts.items()}
        base.update(self.ctx.extra)
        base.update(first=self.ctx.first, **extra)
        return _Slots(self.rng, base)

    def say(self, role: str, template: str, slots: Mapping[str, str] | None = None, **fields: Any) -> dict[str, Any]:
        return self.emit(role, render(template, self.rng, slots if slots is not None else self.slots()), **fields)

    def emit(self, role: str, content: str, **fields: Any) -> dict[str, Any]:
        """Append one message: advance the clock, stamp it, note which pending fact values it shows."""
        if not content.strip():
            raise RuntimeError(f"a {role} template rendered empty at message {len(self.messages)}")
        rng = self.rng
        self.clock += dt.timedelta(seconds=rng.randint(2, 8) if role == "tool" else rng.randint(30, 90))
        msg: dict[str, Any] = {"conversation_id": self.conversation_id, "tenant_id": self.tenant_id, "role": role,
                               "content": content}
        if role == "assistant":
            msg["model_variant"] = self.variant if rng.random() < 0.85 else rng.choice(MODEL_VARIANTS)
        msg.update(fields)
        msg["ts"] = self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")
        turn = len(self.messages)
        folded = content.casefold()
        for fact in self.facts.values():
            if fact.history[-1]["turn"] is None and fact.value.casefold() in folded:
                fact.history[-1]["turn"] = turn
        self.messages.append(msg)
        return msg

    def pick(self, options: Sequence, tag: str) -> Any:
        """Pick one of the least-used options, so a long conversation cycles through all wording before repeating."""
        counts = [self.used.get((tag, i), 0) for i in range(len(options))]
        low = min(counts)
        i = self.rng.choice([i for i, n in enumerate(counts) if n == low])
        self.used[(tag, i)] = low + 1
        return options[i]

    # -- units

    def exchange(self, pair: tuple[str, str], slots: Mapping[str, str] | None = None, *, chatty: bool = False) -> None:
        """Emit a user message and the assistant's answer; ``chatty`` adds the asides real replies carry."""
        slots = slots if slots is not None else self.slots()
        user, assistant = pair
        if chatty:
            rng = self.rng
            if rng.random() < 0.15:
                aside = self.pick(domains.USER_ASIDES, "u")
                user = f"{aside} {user}" if rng.random() < 0.5 else f"{user} {aside}"
            pool = (*self.domain.asides, *domains.GENERIC_ASIDES)
            extra = rng.choices((0, 1, 2, 3), weights=(25, 45, 22, 8))[0]
            assistant = " ".join((assistant, *(self.pick(pool, "a") for _ in range(extra))))
        self.say("user", user, slots)
        self.say("assistant", assistant, slots)

    def filler(self) -> None:
        if self.rng.random() < 0.4:
            self.exchange(self.pick(domains.GENERIC_EXCHANGES, "g"), chatty=True)
        else:
            self.exchange(self.pick(self.domain.exchanges, "d"), chatty=True)

    def reference(self, keys: Iterable[str] = ()) -> None:
        refs = self.domain.references
        wanted = [r for r in refs if any("{" + k + "}" in r[0] + r[1] for k in keys)]
        self.exchange(self.pick(wanted or refs, "r"))

    def _call(self, tool: domains.ToolSpec) -> tuple[dict[str, Any], dict[str, Any]]:
        values = {k: f.value for k, f in self.facts.items()}
        call = {"id": f"call_{self.rng.getrandbits(96):024x}", "name": tool.name,
                "arguments": json.dumps(tool.args(values), ensure_ascii=False)}
        return call, tool.result(self.rng, values, self.memo)

    def _answer(self, call: dict[str, Any], result: dict[str, Any]) -> None:
        self.emit("tool", json.dumps(result, ensure_ascii=False), tool_call_id=call["id"])

    def _reply(self, tools_results: list[tuple[domains.ToolSpec, dict[str, Any]]]) -> None:
        parts = []
        for tool, result in tools_results:
            parts.append(render(self.rng.choice(tool.reply), self.rng, self.slots(**_result_slots(result))))
        self.emit("assistant", " ".join(parts))

    def tool_exchange(self, calls: int = 1, parallel: bool = False) -> None:
        """Emit user ask, assistant tool call(s), tool answer(s) by ``tool_call_id``, assistant reply."""
        tools = self.rng.sample(self.domain.tools, calls)
        self.say("user", self.rng.choice(tools[0].ask))
        done: list[tuple[domains.ToolSpec, dict[str, Any]]] = []
        if parallel:
            pairs = [self._call(t) for t in tools]
            self.say("assistant", self.rng.choice(tools[0].pre), tool_calls=[c for c, _ in pairs])
            for (call, result), tool in zip(pairs, tools):
                self._answer(call, result)
                done.append((tool, result))
        else:
            for n, tool in enumerate(tools):
                call, result = self._call(tool)
                pre = self.rng.choice(tool.pre) if n == 0 else "[While I'm at it, one more check.|Let me also check one more thing.|And one more lookup.]"
                self.say("assistant", pre, tool_calls=[call])
                self._answer(call, result)
                done.append((tool, result))
        self._reply(done)

    def update(self, spec: domains.UpdateSpec) -> None:
        fact = self.facts[spec.key]
        old = fact.value
        fact.value = spec.new_value(self.ctx, {k: f.value for k, f in self.facts.items()})
        fact.history.append({"turn": None, "value": fact.value})
        self.exchange(self.rng.choice(spec.exchanges), self.slots(old=old))
        if fact.history[-1]["turn"] is None:
            raise RuntimeError(f"update template for {spec.key!r} does not show the new value")


def _result_slots(result: Mapping[str, Any]) -> dict[str, str]:
    """Flatten a tool result into ``r_<field>`` slots; lists of dicts expose their first item as ``r_first_<field>``."""
    slots: dict[str, str] = {}
    for key, value in result.items():
        if isinstance(value, list):
            if value and isinstance(value[0], dict):
                slots.update({f"r_first_{k}": str(v) for k, v in value[0].items()})
            slots[f"r_{key}"] = ", ".join(str(v).replace("_", " ") for v in value) or "nothing"
        elif isinstance(value, bool):
            slots[f"r_{key}"] = "yes" if value else "no"
        else:
            text = str(value)
            slots[f"r_{key}"] = text.replace("_", " ") if re.fullmatch(r"[a-z0-9_]+", text) else text  # status codes
    return slots


def _plan_middle(rng: random.Random, domain: domains.Domain, turns: int, opening: int) -> tuple[list[_Unit], int, bool]:
    """Return (scheduled units, closing length, whether one 5-message parallel tool exchange is needed)."""
    n_updates = 1 if turns < 60 else 2 if turns < 150 else 3
    specs = rng.sample(domain.updates, min(n_updates, len(domain.updates)))
    units = [_Unit("update", int(turns * rng.uniform(0.4, 0.88)), s) for s in specs]
    if turns >= 150:
        units.append(_Unit("reference", int(turns * rng.uniform(0.6, 0.8))))
    units.sort(key=lambda u: u.target)
    closing = 1
    while True:
        middle = turns - opening - closing
        reserved = 2 * len(units)
        free = middle - reserved
        if middle % 2 == 0 and free >= 0:
            return units, closing, False
        if middle % 2 == 1 and free >= 5:
            return units, closing, True
        if middle % 2 == 1 and closing == 1:
            closing = 2
            continue
        if not units:
            raise ValueError(f"cannot fit a conversation of {turns} messages")
        units.pop()  # too short for everything planned: drop the latest unit


def generate_conversation(seed: str | int, domain: str, turns: int, *, conversation_id: str, tenant_id: str = "default",
                          start: dt.datetime | None = None, final_question: str | None = None) -> Conversation:
    """Generate one conversation of exactly ``turns`` messages in ``domain``, deterministically from ``seed``.

    ``final_question`` picks the fact the closing user question asks about
    (default: a seeded choice, sometimes a general recap question).

    Raises ``ValueError`` for unknown domains or fewer than :data:`MIN_TURNS` messages.
    """
    if domain not in domains.DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; choose from {', '.join(domains.DOMAINS)}")
    if turns < MIN_TURNS:
        raise ValueError(f"a conversation needs at least {MIN_TURNS} messages, got {turns}")
    spec = domains.DOMAINS[domain]
    rng = random.Random(f"memfold-synth:{seed}:{conversation_id}:{domain}:{turns}")
    start = start or dt.datetime(2025, 3, 3, 9, 0, tzinfo=dt.UTC)
    currency = rng.choice(("USD", "USD", "EUR", "GBP"))
    ctx = domains.Ctx(rng=rng, start=start, currency=currency,
                      money_style="code" if currency == "EUR" and rng.random() < 0.7 else "symbol",
                      date_style=rng.choice(("us", "eu", "iso") if currency != "USD" else ("us", "us", "iso")),
                      first=rng.choice(domains.FIRST_NAMES), last=rng.choice(domains.LAST_NAMES))
    w = _Writer(rng, spec, ctx, conversation_id, tenant_id)

    # 1. Opening: every fact is planted here.
    opening = 2 * len(spec.opening)
    for n, pair in enumerate(spec.opening):
        slots = w.slots()
        w.say("user", pair[0], slots, **({"metadata": {"channel": rng.choice(("chat", "web", "app", "email")),
                                                       "locale": rng.choice(("en-US", "en-GB", "en-IE"))}} if n == 0 else {}))
        w.say("assistant", pair[1], slots)
    missing = [k for k, f in w.facts.items() if f.history[0]["turn"] is None]
    if missing:
        raise RuntimeError(f"{domain} opening never states {missing}")

    # 2. Middle: filler, rare references and tool calls, scheduled updates.
    units, closing, need_parallel = _plan_middle(rng, spec, turns, opening)
    end = turns - closing
    while len(w.messages) < end:
        free = end - len(w.messages) - 2 * len(units)
        if units and (len(w.messages) >= units[0].target or free <= 0):
            unit = units.pop(0)
            if unit.kind == "update":
                w.update(unit.spec)
            else:
                w.reference(spec.key_facts)
            continue
        if need_parallel and (free == 5 or (free >= 5 and rng.random() < 0.04)):
            w.tool_exchange(calls=2, parallel=True)
            need_parallel = False
            continue
        floor = 5 if need_parallel else 0
        roll = rng.random()
        if roll < 0.015 and free - 6 >= floor:
            w.tool_exchange(calls=2)
        elif roll < 0.075 and free - 4 >= floor:
            w.tool_exchange()
        elif roll < 0.095:
            w.reference()
        else:
            w.filler()

    # 3. Closing: a question about one fact that does not state it, or a goodbye.
    if closing == 1:
        keys = [k for k in spec.recalls if k in w.facts]
        if final_question is None and rng.random() < 0.85:
            final_question = rng.choice(keys)
        if final_question is not None:
            w.say("user", rng.choice(spec.recalls[final_question]))
        else:
            w.say("user", rng.choice(domains.GENERIC_RECALLS))
    else:
        final_question = None
        w.say("user", "[Thanks, that's everything for now.|Okay, that's all I needed, thanks!|Great, thanks for the help.]")
        w.say("assistant", "[You're welcome|Glad I could help|My pleasure], {first}. [Have a good {time_of_day}!|Take care.|Talk soon.]")
    assert len(w.messages) == turns, (len(w.messages), turns)
    return Conversation(conversation_id, tenant_id, domain, w.messages, w.facts, final_question)


def _base_start(seed: str | int) -> dt.datetime:
    rng = random.Random(f"memfold-synth-start:{seed}")
    return dt.datetime(2025, 1, 6, 8, 0, tzinfo=dt.UTC) + dt.timedelta(days=rng.randrange(0, 300))


def _parse_turns(turns: int | str) -> tuple[int, int]:
    if isinstance(turns, int):
        return turns, turns
    lo, _, hi = str(turns).partition("-")
    return int(lo), int(hi or lo)


def generate(conversations: int, turns: int | str, seed: str | int, *, tenants: int = 2,
             domain_names: Sequence[str] | None = None) -> list[Conversation]:
    """Generate ``conversations`` conversations cycling through the domains.

    ``turns`` is a message count, or ``"MIN-MAX"`` for a seeded count per conversation.
    Tenants are assigned round-robin from :data:`TENANTS`.
    """
    names = list(domain_names or domains.DOMAINS)
    rng = random.Random(f"memfold-synth-plan:{seed}")
    lo, hi = _parse_turns(turns)
    offset = rng.randrange(len(names))
    start = _base_start(seed)
    out: list[Conversation] = []
    used: set[str] = set()
    for i in range(conversations):
        domain = names[(i + offset) % len(names)]
        while True:
            cid = f"{domain}-{rng.randint(1000, 9999)}"
            if cid not in used:
                used.add(cid)
                break
        start = start + dt.timedelta(hours=rng.randint(1, 30), minutes=rng.randint(0, 59))
        out.append(generate_conversation(seed, domain, rng.randint(lo, hi), conversation_id=cid,
                                         tenant_id=TENANTS[i % max(1, min(tenants, len(TENANTS)))], start=start))
    return out


# The bundled demo sample: one long support conversation plus shorter ones of every domain, two tenants.
SAMPLE_PLAN: tuple[tuple[str, str, int, str, str | None], ...] = (
    ("support-4711", "support", 236, "acme", "refund_amount"),
    ("travel-2208", "travel", 84, "acme", None),
    ("saas-3390", "saas", 66, "globex", None),
    ("insurance-5172", "insurance", 112, "globex", None),
    ("tech-6045", "tech", 47, "globex", None),
    ("support-1187", "support", 28, "acme", None),
    ("tech-8821", "tech", 95, "acme", None),
)


def generate_sample(seed: str | int) -> list[Conversation]:
    """Generate the bundled demo sample (:data:`SAMPLE_PLAN`)."""
    start = _base_start(seed)
    rng = random.Random(f"memfold-synth-sample:{seed}")
    out = []
    for cid, domain, turns, tenant, question in SAMPLE_PLAN:
        start = start + dt.timedelta(hours=rng.randint(1, 20), minutes=rng.randint(0, 59))
        out.append(generate_conversation(seed, domain, turns, conversation_id=cid, tenant_id=tenant, start=start,
                                         final_question=question))
    return out


# --------------------------------------------------------------------------- files

def truth_path(out: str | Path) -> Path:
    """Return the sidecar path: ``x.jsonl`` -> ``x.truth.json``."""
    out = Path(out)
    return out.with_name(out.name[: -len(".jsonl")] + ".truth.json") if out.name.endswith(".jsonl") else out.with_name(out.name + ".truth.json")


def write(conversations: Sequence[Conversation], out: str | Path, meta: Mapping[str, Any]) -> tuple[Path, Path]:
    """Write the messages as JSONL to ``out`` and the ground truth next to it; return both paths."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="\n") as fh:
        for conv in conversations:
            for msg in conv.messages:
                fh.write(json.dumps(msg, ensure_ascii=False) + "\n")
    truth = truth_path(out)
    doc: dict[str, Any] = {"_meta": {"format": FORMAT, **meta, "turn": "0-based message index within the conversation"}}
    doc.update((c.conversation_id, c.truth_json()) for c in conversations)
    truth.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return out, truth


def read_truth(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Return ``{conversation_id: [fact, ...]}`` from a truth sidecar."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    return {cid: conv["facts"] for cid, conv in doc.items() if cid != "_meta"}


# --------------------------------------------------------------------------- scoring

def normalize(text: str) -> str:
    """Return ``text`` case-folded with whitespace runs collapsed to one space."""
    return " ".join(text.casefold().split())


_NUM = r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
_CUR_WORDS = {"$": "USD", "usd": "USD", "dollar": "USD", "dollars": "USD", "€": "EUR", "eur": "EUR", "euro": "EUR",
              "euros": "EUR", "£": "GBP", "gbp": "GBP", "pound": "GBP", "pounds": "GBP"}
_MONEY_PATTERNS = (
    re.compile(r"(?P<cur>[$€£]|\b(?:usd|eur|gbp)\b)\s?" + _NUM, re.I),
    re.compile(_NUM + r"\s?(?P<cur>[$€£]|(?:usd|eur|gbp|dollars?|euros?|pounds?)\b)", re.I),
)


def money_mentions(text: str) -> set[tuple[str, Decimal]]:
    """Return every (currency, amount) written in ``text``: ``$184.50``, ``184.5 USD``, ``EUR 1,240``."""
    found: set[tuple[str, Decimal]] = set()
    for pattern in _MONEY_PATTERNS:
        for m in pattern.finditer(text):
            number = next(g for g in m.groups() if g and g[0].isdigit())
            try:
                found.add((_CUR_WORDS[m.group("cur").casefold()], Decimal(number.replace(",", ""))))
            except (InvalidOperation, KeyError):
                continue
    return found


_MONTH_RE = "|".join(m[:3] for m in domains.MONTHS)
_DATE_PATTERNS = (
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), ("y", "m", "d")),
    (re.compile(rf"\b({_MONTH_RE})[a-z]*\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I), ("mon", "d", "y")),
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})[a-z]*\.?,?\s+(\d{{4}})\b", re.I), ("d", "mon", "y")),
)


def date_mentions(text: str) -> set[dt.date]:
    """Return every calendar date written in ``text`` as ISO, ``March 14, 2025`` or ``14 March 2025``."""
    found: set[dt.date] = set()
    months = [m[:3].casefold() for m in domains.MONTHS]
    for pattern, order in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            parts = dict(zip(order, m.groups()))
            month = int(parts["m"]) if "m" in parts else months.index(parts["mon"][:3].casefold()) + 1
            try:
                found.add(dt.date(int(parts["y"]), month, int(parts["d"])))
            except ValueError:
                continue
    return found


_PHONE = re.compile(r"\+?\(?\d[\d\s().-]{6,}\d")


def _phone_key(digits: str) -> str:
    return digits[-10:]


def fact_present(kind: str, value: str, text: str) -> bool:
    """Return whether ``value`` (a fact of ``kind``) is stated in ``text``.

    Case-insensitive with whitespace normalized. Amounts also match the same
    number in the same currency written differently (``$184.50`` = ``184.5 USD``),
    dates the same calendar day in another format, phone numbers the same
    last ten digits, counts (``45 seats``) the number next to the unit.
    """
    if normalize(value) in normalize(text):
        return True
    if kind == "amount":
        wanted = money_mentions(value)
        return bool(wanted) and not wanted.isdisjoint(money_mentions(text))
    if kind == "date":
        wanted_dates = date_mentions(value)
        return bool(wanted_dates) and not wanted_dates.isdisjoint(date_mentions(text))
    if kind == "phone":
        key = _phone_key(re.sub(r"\D", "", value))
        return any(_phone_key(re.sub(r"\D", "", m.group())) == key for m in _PHONE.finditer(text))
    if kind == "count":
        number, _, unit = value.partition(" ")
        stem = re.escape(unit.rstrip("s"))
        pattern = rf"\b{number}\s+(?:\w+\s+){{0,2}}{stem}s?\b|\b{stem}s?\b\W{{1,3}}(?:\w+\W+)?{number}\b"
        return re.search(pattern, text, re.I) is not None
    return False


def score(facts: Iterable[Mapping[str, Any]], text: str) -> dict[str, bool]:
    """Return ``{fact key: present}`` for truth facts (dicts with ``key``, ``kind``, ``value``) in ``text``."""
    return {f["key"]: fact_present(f["kind"], f["value"], text) for f in facts}


# --------------------------------------------------------------------------- CLI

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--turns", default="300", help="messages per conversation, or MIN-MAX (default 300)")
    parser.add_argument("--seed", default="7")
    parser.add_argument("--tenants", type=int, default=2)
    parser.add_argument("--domains", default=None, help=f"comma-separated subset of {','.join(domains.DOMAINS)}")
    parser.add_argument("--preset", choices=("sample",), default=None,
                        help="'sample': the bundled demo sample (ignores --conversations/--turns/--tenants/--domains)")
    parser.add_argument("--out", required=True, help="output .jsonl; ground truth goes to <out>.truth.json")
    args = parser.parse_args(argv)
    if args.preset == "sample":
        convs = generate_sample(args.seed)
        meta: dict[str, Any] = {"preset": "sample", "seed": args.seed}
    else:
        names = [d.strip() for d in args.domains.split(",")] if args.domains else None
        convs = generate(args.conversations, args.turns, args.seed, tenants=args.tenants, domain_names=names)
        meta = {"seed": args.seed, "conversations": args.conversations, "turns": args.turns, "tenants": args.tenants,
                "domains": names or list(domains.DOMAINS)}
    out, truth = write(convs, args.out, meta)
    total = sum(len(c.messages) for c in convs)
    print(f"wrote {total} messages in {len(convs)} conversations to {out} (ground truth: {truth})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
