"""The offline summarizer: deterministic, extractive facts + narrative or summary text, no network.

It is a pure function of its :class:`SummaryInput`: regular expressions pull
ids, amounts, dates, contacts, names, decisions, conditions and states out of
the messages into keyed facts; the narrative and the summary text are built
from those facts and the messages; every output is cut to the request's caps
with the one token counter. Same input, byte-for-byte the same output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memfold.engine.events import Fact
from memfold.engine.ports import MessageRecord, SummaryInput, SummaryOutput
from memfold.engine.tokens import DEFAULT_ENCODING, TokenCounter, counter

from .prompts import PROMPT_VERSION, message_text, prompt_hash, render_facts, tool_label, tool_names

# Bump when a rule changes what the summarizer outputs: it is part of prompt_hash, hence of the cache key.
RULES_VERSION = "offline-extractive-1"
MODEL = "offline-extractive-1"
MAX_FACTS = 40
MAX_VALUE_CHARS = 160
MAX_LINE_CHARS = 200

# --------------------------------------------------------------------------- sentences


_ABBREVIATIONS = ("no", "nr", "e.g", "i.e", "mr", "mrs", "ms", "dr", "st", "vs", "approx", "etc")
_BOUNDARY = re.compile(r"[.!?]+[\"')\]]*\s+|\n+")


def _sentences(text: str) -> list[tuple[int, int]]:
    """Return (start, end) spans of the sentences of ``text``; abbreviations like "no." do not end one."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if m.group(0)[0] == ".":
            word = re.search(r"([A-Za-z.]+)$", text[start : m.start()])
            if word and word.group(1).lower().rstrip(".") in _ABBREVIATIONS:
                continue
        if text[start : m.start()].strip():
            spans.append((start, m.end()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def _sentence_at(text: str, spans: list[tuple[int, int]], pos: int) -> tuple[int, int]:
    for s, e in spans:
        if s <= pos < e:
            return s, e
    return 0, len(text)


def _clip(text: str, limit: int) -> str:
    """Return ``text`` on one line, cut at a word boundary to at most ``limit`` characters (with "…")."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:") + "…"


# --------------------------------------------------------------------------- vocabularies

# Words that name what a decision, condition or state is about → the stem of its key.
_SUBJECTS = {
    "refund": "refund",
    "refunds": "refund",
    "replacement": "replacement",
    "exchange": "exchange",
    "return": "return",
    "returns": "return",
    "cancellation": "cancellation",
    "cancel": "cancellation",
    "discount": "discount",
    "credit": "credit",
    "voucher": "credit",
    "compensation": "compensation",
    "upgrade": "upgrade",
    "downgrade": "downgrade",
    "plan": "plan",
    "subscription": "subscription",
    "order": "order",
    "package": "order",
    "parcel": "order",
    "shipment": "order",
    "item": "order",
    "payment": "payment",
    "invoice": "invoice",
    "ticket": "ticket",
    "case": "case",
    "claim": "claim",
    "account": "account",
    "delivery": "delivery",
    "shipping": "delivery",
    "appointment": "appointment",
    "callback": "callback",
    "warranty": "warranty",
    "price": "price",
    "address": "address",
    "payout": "payout",
    "swap": "replacement",
    "booking": "booking",
    "reservation": "booking",
    "flight": "flight",
    "trial": "trial",
    "migration": "migration",
    "cutover": "migration",
    "repair": "repair",
}
_SUBJECT_RE = re.compile(r"\b(" + "|".join(sorted(_SUBJECTS, key=len, reverse=True)) + r")\b", re.I)

_CURRENCY_CODES = "USD|EUR|GBP|JPY|CAD|AUD|CHF|INR|CNY|SEK|NOK|DKK|PLN"
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_AMOUNT_RE = re.compile(
    rf"(?P<sym>[$€£¥₹])\s?(?P<n1>{_NUM})"
    rf"|\b(?P<code1>{_CURRENCY_CODES})\s?(?P<n2>{_NUM})\b"
    rf"|(?<![\w.#-])(?P<n3>{_NUM})\s?(?P<code2>{_CURRENCY_CODES}|dollars?|euros?|pounds?)\b"
)
# Nearest keyword before an amount (else after it) names the amount.
_AMOUNT_KEYS = [
    (re.compile(r"\brefund(?:ed|s)?\b", re.I), "refund_amount"),
    (re.compile(r"\b(?:total fare|fare)\b", re.I), "fare_total"),
    (re.compile(r"\b(?:order total|total(?:s|ing)?|comes? to|came to|sum)\b", re.I), "order_total"),
    (re.compile(r"\b(?:store credit|credit|voucher|gift card)\b", re.I), "credit_amount"),
    (re.compile(r"\b(?:discount|off)\b", re.I), "discount_amount"),
    (re.compile(r"\bcompensation\b", re.I), "compensation_amount"),
    (re.compile(r"\bshipping\b", re.I), "shipping_cost"),
    (re.compile(r"\b(?:fee|fees|surcharge)\b", re.I), "fee_amount"),
    (re.compile(r"\b(?:charged|charge|billed|bill|paid|pay|payment)\b", re.I), "charged_amount"),
    (re.compile(r"\b(?:balance|owe|owed|outstanding)\b", re.I), "balance"),
    (re.compile(r"\bbudget\b", re.I), "budget"),
    (re.compile(r"\b(?:price|cost|costs|priced)\b", re.I), "price"),
]

_MONTHS = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
_DATE_RE = re.compile(
    r"\b(?P<iso>\d{4}-\d{2}-\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2})?Z?)?\b"
    rf"|\b(?P<md>(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?)\b"
    rf"|\b(?P<dm>\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})(?:,?\s+\d{{4}})?)\b"
)
_SUPERSEDED_RE = re.compile(
    r"\b(?:instead of|previously|formerly|originally|down from|up from|compared (?:to|with)|versus|vs\.?)\s+$", re.I
)
_WAS_RE = re.compile(r"\b(?:was|were|used to be)\s+$", re.I)
_BEFORE_RE = re.compile(r"^\s*(?:before|previously|earlier|originally)\b", re.I)
_DATE_KEYS = [
    (re.compile(r"\b(?:deliver(?:y|ed)?|arriv(?:e|al|es|ing)|ship(?:s|ped|ping)?|dispatch(?:ed)?)\b", re.I), "delivery_date"),
    (re.compile(r"\b(?:return(?:ed)?|send (?:it )?back)\b", re.I), "return_date"),
    (re.compile(r"\brefund(?:ed)?\b", re.I), "refund_date"),
    (re.compile(r"\b(?:appointment|meeting|call|visit|schedul(?:e|ed))\b", re.I), "appointment_date"),
    (re.compile(r"\b(?:ordered|purchased|bought|placed)\b", re.I), "order_date"),
    (re.compile(r"\b(?:renew(?:s|al)?|expir(?:e|es|y|ation))\b", re.I), "renewal_date"),
    (re.compile(r"\b(?:deadline|due|until)\b", re.I), "deadline"),
]

_EMAIL_RE = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_PHONE_RE = re.compile(
    r"(?<![\w#-])(?:\+\d[\d\s().-]{6,16}\d|\(\d{3}\)\s?\d{3}[\s.-]\d{4}|\d{3}[\s.-]\d{3}[\s.-]\d{4})(?![\w-])"
)
_NAME_WORD = r"[A-Z][a-z'’-]+"
_NAME_RE = re.compile(
    # "my name is Ann", "call me Ann": one capitalised word is enough after an explicit phrase.
    rf"(?i:\bmy name is|\bi'?m called|\bi am called|\bcall me|\bthe name is)\s+(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})"
    # "I'm Ann Lee", "this is Ann Lee", "it's Ann Lee": only a full name, "I'm Happy" is not one.
    rf"|(?i:\bi'?m|\bi am|\bthis is|\bit'?s)\s+(?P<full>{_NAME_WORD}\s+{_NAME_WORD})\b(?!\s+(?:{_NAME_WORD}))"
    # "Ann Lee here" at the start of a sentence.
    rf"|(?:^|[.!?,]\s+|\b(?i:hi|hello|hey|hello there)\W+)(?P<here>{_NAME_WORD}\s+{_NAME_WORD})\s+here\b"
)
_NOT_NAMES = {"not", "no", "just", "still", "also", "here", "sorry", "good", "happy", "glad", "fine", "the", "so"}

# Codes like ORD-88231, SN-49VH-1453, POL-1277149, E-1960: an upper-case prefix, a dash, 3+ digits in all.
_PREFIXED_ID_RE = re.compile(r"(?<![\w-])(?P<prefix>[A-Z]{1,6})[-_](?P<rest>[A-Z0-9]+(?:-[A-Z0-9]+)*)(?![\w-])")
_PREFIX_KEYS = {
    "sn": "serial_number",
    "pol": "policy_number",
    "acc": "account_id",
    "acct": "account_id",
    "e": "error_code",
    "err": "error_code",
    "cust": "customer_id",
    "sub": "subscription_id",
    "ord": "order_id",
    "order": "order_id",
    "tkt": "ticket_id",
    "tck": "ticket_id",
    "ticket": "ticket_id",
    "case": "case_id",
    "inv": "invoice_id",
    "rma": "rma_id",
    "ref": "reference_id",
    "clm": "claim_id",
}
_WORD_ID_RE = re.compile(
    r"\b(?P<word>order|ticket|case|incident|claim|invoice|booking|reservation|confirmation|reference|account"
    r"|serial|policy|flight)"
    r"(?:\s+(?:number|no\.?|num|nr\.?|id|code|reference|ref))?\s*(?:is\s+)?:?\s*"
    r"(?P<id>#?\d{3,}(?:-\d+)*|[A-Z]{1,5}-?\d{3,}(?:-\d+)*|(?-i:(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,12}))\b",
    re.I,
)
_CODE_KEYS = [
    (re.compile(r"\bserial\b", re.I), "serial_number"),
    (re.compile(r"\berror\b", re.I), "error_code"),
    (re.compile(r"\bpolicy\b", re.I), "policy_number"),
    (re.compile(r"\bclaim\b", re.I), "claim_id"),
    (re.compile(r"\baccount\b", re.I), "account_id"),
    (re.compile(r"\b(?:booking|reservation)\b", re.I), "booking_ref"),
]
_VERSION_RE = re.compile(r"(?<![\w.])v\d+(?:\.\d+){1,3}\b")
_VERSION_KEYS = [(re.compile(r"\bfirmware\b", re.I), "firmware_version"), (re.compile(r"\b(?:app|software)\b", re.I), "app_version")]
_WORD_KEYS = {
    "order": "order_id",
    "ticket": "ticket_id",
    "case": "case_id",
    "incident": "incident_id",
    "claim": "claim_id",
    "invoice": "invoice_id",
    "booking": "booking_ref",
    "reservation": "booking_ref",
    "confirmation": "confirmation_number",
    "reference": "reference_id",
    "account": "account_number",
    "serial": "serial_number",
    "policy": "policy_number",
    "flight": "flight_number",
}
_TRACKING_RE = re.compile(r"\btracking(?:\s+(?:number|no\.?|code|id))?\s*(?:is\s+)?[:#]?\s*(?P<id>[A-Z0-9]{8,})\b", re.I)
_HASH_ID_RE = re.compile(r"(?<![\w&])#(?P<id>\d{3,})\b")

_DECISION_VERB_RE = re.compile(
    r"\b(?P<verb>agreed|approved|confirmed|decided|accepted|authori[sz]ed|declined|denied|rejected)\b", re.I
)
_DECISION_PHRASE_RE = re.compile(
    r"\b(?:go ahead with|i'll go with|let's go with|i'll take (?:it|that|the)|^\W*(?:ok(?:ay)?,?\s+)?deal)\b", re.I
)
_DECISION_VERBS = {"authorised": "approved", "authorized": "approved", "declined": "rejected", "denied": "rejected"}
_HYPOTHETICAL_RE = re.compile(r"\b(?:if|once|when|until|whether|unless)\b", re.I)

_CONDITION_RE = re.compile(
    r"\bwithin\s+\d+\s+(?:business\s+|working\s+|calendar\s+)?(?:days?|hours?|weeks?|months?|years?)"
    r"(?:\s+(?:of|from|after)\s+[^,.;!?]+)?"
    r"|\b(?:provided that|providing that|as long as|on (?:the )?condition that|only if|unless|subject to)\b[^.;!?]*"
    r"|\bif\b[^.;!?,]*",
    re.I,
)
_IDLE_IF_RE = re.compile(
    r"^if (?:you (?:need|have|want|would like|'d like)|there(?:'s| is) anything|possible|so|not|any|that's|this is|you can)\b"
    r"|^if (?:i|we) (?:can|may|could)\b",
    re.I,
)

_STATUS_WORDS = (
    "out for delivery|in transit|on hold|shipped|delivered|cancell?ed|canceled|refunded|returned|processed"
    "|pending|escalated|resolved|closed|reopened|suspended|expired|failed|overdue|lost|damaged|delayed|active"
)
_STATUS_RE = re.compile(rf"\b(?P<status>{_STATUS_WORDS})\b", re.I)
_AUX_RE = re.compile(
    r"(?:\b(?:is|was|has|have|had|been|are|were|got|gets|now|currently|already|still|status(?:\s+is)?)|'s|’s|n't|n’t|:)\s*"
    r"(?:(?:not|never|yet|been|now|already|currently|still|being|just|officially)\s+)*$",
    re.I,
)
_NEGATION_RE = re.compile(r"\b(?:not|never)\b|n't|n’t", re.I)

_TOPICS = [
    (re.compile(r"\bcancel(?:l?ing|l?ation|led|ed)?\b", re.I), "cancellation"),
    (re.compile(r"\brefund", re.I), "refund request"),
    (re.compile(r"\b(?:exchange|swap)\b", re.I), "exchange"),
    (re.compile(r"\b(?:return(?:ing)?|send (?:it |them )?back)\b", re.I), "return"),
    (re.compile(r"\b(?:damaged|broken|defective|faulty|wrong item|missing item)\b", re.I), "damaged or wrong item"),
    (re.compile(r"\b(?:where is|track(?:ing)?|has(?:n't| not) arrived|not arrived|late|delayed)\b", re.I), "delivery status"),
    (re.compile(r"\b(?:charged|billing|invoice|payment|overcharged)\b", re.I), "billing"),
    (re.compile(r"\b(?:password|log ?in|sign in|locked out|2fa)\b", re.I), "account access"),
    (re.compile(r"\b(?:upgrade|downgrade|plan|subscription)\b", re.I), "subscription change"),
    (re.compile(r"\baddress\b", re.I), "address change"),
]
_TOPIC_OBJECT_RE = re.compile(r"\b(order|subscription|booking|reservation|account|plan|membership|flight)\b", re.I)

_REQUEST_RE = re.compile(
    r"\b(?P<lead>i'd like to|i would like to|i want to|i wanna|i need to|i'm trying to|i am trying to|i need|i want"
    r"|can you|could you|would you|please|help me(?: to)?"
    r"|i have (?:a|an) (?:problem|issue|question|complaint) (?:with|about)|i'm writing about|i am writing about)"
    r"\s+(?P<rest>.+)",
    re.I,
)
_ASKING_AUX_RE = re.compile(r"\b(?:do|does|did|should|would|could|can|will|must|if|when|why|what|how|whether)\s+$", re.I)

_RETRACT_RE = re.compile(
    r"\b(?P<verb>forget|ignore|disregard|scratch|never ?mind|withdraw|cancel|remove|delete)\b"
    r"(?P<object>[^.;!?,]{0,40})"
    r"|\b(?:no longer|don't|do not) (?:need|want)\b(?P<object2>[^.;!?,]{0,40})",
    re.I,
)
# What a retraction can name → the key stem it removes. "order" only with a clear retraction verb:
# "cancel my order" is a request about the order, not a retraction of its id.
_RETRACTABLE = {
    "email": "email",
    "e-mail": "email",
    "phone": "phone",
    "refund": "refund",
    "replacement": "replacement",
    "exchange": "exchange",
    "discount": "discount",
    "credit": "credit",
    "voucher": "credit",
    "callback": "callback",
    "call back": "callback",
    "appointment": "appointment",
    "upgrade": "upgrade",
    "downgrade": "downgrade",
    "compensation": "compensation",
    "return": "return",
    "order": "order",
}
_RETRACT_ORDER_VERBS = {"forget", "ignore", "disregard", "scratch", "nevermind"}


# --------------------------------------------------------------------------- the fact book


def category_for(key: str) -> str:
    """Return the category a fact key belongs to (keys are built systematically, so this is total)."""
    if key in ("topic", "user_request"):
        return "GENERAL"
    if key.endswith("_status") or key == "status":
        return "STATE"
    if key.endswith("_condition") or re.fullmatch(r"condition(?:_\d+)?", key):
        return "CONDITION"
    if re.fullmatch(r"decision(?:_\d+)?", key) or re.search(r"_(?:agreed|approved|confirmed|decided|accepted|rejected|chosen)$", key):
        return "DECISION"
    if key.endswith(("_amount", "_total", "_cost")) or key in ("price", "balance", "budget"):
        return "NUMERIC"
    return "ENTITY"


def _norm(value: str) -> str:
    return re.sub(r"[\s#]", "", value).lower()


@dataclass(slots=True)
class _Entry:
    key: str
    value: str
    category: str
    source: int | None  # index of the message that last mentioned it (None: from an earlier summary)


class FactBook:
    """Keyed facts in first-seen order: the latest mention of a key wins; retractions remove by stem."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def put(self, key: str, value: str, source: int | None, category: str | None = None) -> None:
        """Set ``key`` (latest wins). An equal value (ignoring ``#`` and spaces) keeps its spelling."""
        value = _clip(value, MAX_VALUE_CHARS)
        if not value:
            return
        old = self._entries.get(key)
        if old is not None and _norm(old.value) == _norm(value):
            old.source = source if source is not None else old.source
            return
        if old is not None:
            old.value, old.source = value, source
            return
        self._entries[key] = _Entry(key, value, category or category_for(key), source)

    def put_once(self, key: str, value: str, source: int | None) -> None:
        """Set ``key`` only if it is not set yet (topic, the user's first request)."""
        if key not in self._entries:
            self.put(key, value, source)

    def put_numbered(self, stem: str, value: str, source: int | None, category: str) -> None:
        """Add ``value`` under ``stem``, ``stem_2``, ... (the first free one) unless an equal value is there."""
        value = _clip(value, MAX_VALUE_CHARS)
        keys = [k for k in self._entries if k == stem or re.fullmatch(rf"{stem}_\d+", k)]
        for k in keys:
            if _norm(self._entries[k].value) == _norm(value):
                self._entries[k].source = source if source is not None else self._entries[k].source
                return
        n = 1
        while (stem if n == 1 else f"{stem}_{n}") in self._entries:
            n += 1
        self.put(stem if n == 1 else f"{stem}_{n}", value, source, category)

    def get(self, key: str) -> str | None:
        entry = self._entries.get(key)
        return entry.value if entry else None

    def retract(self, stem: str) -> list[str]:
        """Remove every key equal to ``stem`` or starting with ``stem_``; return the removed keys."""
        gone = [k for k in self._entries if k == stem or k.startswith(stem + "_")]
        for k in gone:
            del self._entries[k]
        return gone

    def drop_before(self, window_start: int) -> None:
        """Remove facts last mentioned by a message before ``window_start`` (sliding window)."""
        for k in [k for k, e in self._entries.items() if e.source is not None and e.source < window_start]:
            del self._entries[k]

    def entries(self) -> list[_Entry]:
        return list(self._entries.values())

    def facts(self) -> tuple[Fact, ...]:
        """Return the facts, first-seen order, at most :data:`MAX_FACTS` (the most recently added win)."""
        entries = self.entries()[-MAX_FACTS:]
        return tuple(Fact(key=e.key, value=e.value, category=e.category) for e in entries)

    def by_category(self, category: str) -> list[_Entry]:
        return [e for e in self._entries.values() if e.category == category]


# --------------------------------------------------------------------------- extraction


def _nearest_subject(text: str, pos: int, *, before_only: bool = False) -> str | None:
    best: tuple[int, str] | None = None
    for m in _SUBJECT_RE.finditer(text):
        if before_only and m.start() > pos:
            break
        distance = abs(m.start() - pos)
        if best is None or distance < best[0]:
            best = (distance, _SUBJECTS[m.group(1).lower()])
    return best[1] if best else None


def _keyword_key(rules: list[tuple[re.Pattern[str], str]], sentence: str, pos: int, default: str) -> str:
    """Return the key of the keyword nearest before ``pos`` in ``sentence`` (else the nearest after)."""
    before: tuple[int, str] | None = None
    after: tuple[int, str] | None = None
    for pattern, key in rules:
        for m in pattern.finditer(sentence):
            if m.end() <= pos:
                if before is None or m.end() > before[0]:
                    before = (m.end(), key)
            elif m.start() >= pos:
                if after is None or m.start() < after[0]:
                    after = (m.start(), key)
    if before is not None:
        return before[1]
    return after[1] if after is not None else default


class _Spans:
    def __init__(self) -> None:
        self._taken: list[tuple[int, int]] = []

    def free(self, start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in self._taken)

    def take(self, start: int, end: int) -> None:
        self._taken.append((start, end))


def _is_question(sentence: str) -> bool:
    return sentence.rstrip().rstrip("\"')]").endswith("?")


def _extract_ids(text: str, book: FactBook, source: int | None, spans: _Spans) -> None:
    found: list[tuple[int, str, str]] = []
    for m in _PREFIXED_ID_RE.finditer(text):
        if sum(c.isdigit() for c in m.group("rest")) < 3:
            continue
        key = _PREFIX_KEYS.get(m.group("prefix").lower()) or _keyword_key(_CODE_KEYS, text, m.start(), "reference_id")
        found.append((m.start(), key, m.group(0)))
        spans.take(m.start(), m.end())
    for m in _VERSION_RE.finditer(text):
        if spans.free(m.start(), m.end()):
            found.append((m.start(), _keyword_key(_VERSION_KEYS, text, m.start(), "version"), m.group(0)))
            spans.take(m.start(), m.end())
    for m in _WORD_ID_RE.finditer(text):
        if not spans.free(m.start("id"), m.end("id")):
            continue
        value = m.group("id")
        word = m.group("word").lower()
        if word == "account" and len(re.sub(r"\D", "", value)) < 4:
            continue
        key = _WORD_KEYS[word]
        if word == "reference" and re.search(r"\b(?:booking|reservation|trip)\b", text[max(0, m.start() - 40) : m.start()], re.I):
            key = "booking_ref"
        found.append((m.start(), key, value))
        spans.take(m.start("id"), m.end("id"))
    for m in _TRACKING_RE.finditer(text):
        if spans.free(m.start("id"), m.end("id")) and re.search(r"\d", m.group("id")):
            found.append((m.start(), "tracking_number", m.group("id")))
            spans.take(m.start("id"), m.end("id"))
    for m in _HASH_ID_RE.finditer(text):
        if spans.free(m.start(), m.end()):
            found.append((m.start(), "order_id", m.group(0)))
            spans.take(m.start(), m.end())
    # Several ids of one kind in one message are all kept, in order of appearance.
    grouped: dict[str, list[str]] = {}
    for _, key, value in sorted(found):
        values = grouped.setdefault(key, [])
        if all(_norm(v) != _norm(value) for v in values):
            values.append(value)
    for key, values in grouped.items():
        book.put(key, ", ".join(values), source)


def _extract_amounts(text: str, sentences: list[tuple[int, int]], book: FactBook, source: int | None, spans: _Spans) -> None:
    for m in _AMOUNT_RE.finditer(text):
        if not spans.free(m.start(), m.end()):
            continue
        spans.take(m.start(), m.end())
        before, after = text[max(0, m.start() - 24) : m.start()], text[m.end() : m.end() + 16]
        if _SUPERSEDED_RE.search(before) or (_WAS_RE.search(before) and _BEFORE_RE.search(after)):
            continue  # "(it was 310.40 EUR before)", "instead of $20": an old value, not the current one
        if m.group("sym"):
            value = f"{m.group('sym')}{m.group('n1')}"
        elif m.group("code1"):
            value = f"{m.group('code1')} {m.group('n2')}"
        else:
            value = f"{m.group('n3')} {m.group('code2')}"
        s, e = _sentence_at(text, sentences, m.start())
        key = _keyword_key(_AMOUNT_KEYS, text[s:e], m.start() - s, "amount")
        book.put(key, value, source)


def _extract_dates(text: str, sentences: list[tuple[int, int]], book: FactBook, source: int | None, spans: _Spans) -> None:
    for m in _DATE_RE.finditer(text):
        if not spans.free(m.start(), m.end()):
            continue
        spans.take(m.start(), m.end())
        value = " ".join((m.group("iso") or m.group("md") or m.group("dm")).split())
        s, e = _sentence_at(text, sentences, m.start())
        key = _keyword_key(_DATE_KEYS, text[s:e], m.start() - s, "date")
        book.put(key, value, source)


def _owner_key(text: str, pos: int, role: str, own: str, other: str, value: str, book: FactBook) -> str:
    """Return ``own`` for the user's own contact, ``other`` for one the assistant gives (not "your ...", not theirs)."""
    if role != "assistant":
        return own
    known = book.get(own)
    if known is not None and _norm(known) == _norm(value):
        return own
    return own if re.search(r"\byour\b", text[max(0, pos - 40) : pos], re.I) else other


def _extract_contacts(text: str, role: str, book: FactBook, source: int | None, spans: _Spans) -> None:
    for m in _EMAIL_RE.finditer(text):
        spans.take(m.start(), m.end())
        book.put(_owner_key(text, m.start(), role, "email", "contact_email", m.group(0), book), m.group(0), source)
    for m in _PHONE_RE.finditer(text):
        digits = re.sub(r"\D", "", m.group(0))
        if not 7 <= len(digits) <= 15 or not spans.free(m.start(), m.end()):
            continue
        spans.take(m.start(), m.end())
        phone = " ".join(m.group(0).split())
        book.put(_owner_key(text, m.start(), role, "phone", "contact_phone", phone, book), phone, source)
    for m in _NAME_RE.finditer(text):
        name = m.group("name") or m.group("full") or m.group("here")
        if name.split()[0].lower() in _NOT_NAMES:
            continue
        key = "agent_name" if role == "assistant" else "customer_name"
        book.put(key, name, source)


def _extract_sentence_facts(
    text: str, sentences: list[tuple[int, int]], role: str, book: FactBook, source: int | None, previous: str | None
) -> None:
    for s, e in sentences:
        sentence = text[s:e].strip()
        if not sentence or _is_question(sentence):
            continue
        _decision(sentence, book, source, previous)
        _conditions(sentence, book, source)
        _states(sentence, book, source)


_FILLER_RE = re.compile(
    r"^(?:(?:just so you know|note that|please note(?: that)?|also|meanwhile|so|ok(?:ay)?|great|good news|"
    r"understood|in that case|for the record)\b[,:]?\s*)+",
    re.I,
)


def _statement(sentence: str) -> str:
    """Return a sentence as a fact value: leading fillers and the final full stop removed."""
    return _FILLER_RE.sub("", sentence.strip()).rstrip(" .")


def _clause_before(sentence: str, pos: int) -> str:
    """Return the text of the clause that ends at ``pos`` (after the last comma, semicolon or colon)."""
    head = sentence[:pos]
    cut = max(head.rfind(","), head.rfind(";"), head.rfind(":"))
    return head[cut + 1 :]


def _decision(sentence: str, book: FactBook, source: int | None, previous: str | None) -> None:
    m = _DECISION_VERB_RE.search(sentence) or _DECISION_PHRASE_RE.search(sentence)
    if m is None:
        return
    if _HYPOTHETICAL_RE.search(_clause_before(sentence, m.start())):
        return  # "if approved, ..." is a condition; "If it comes to that, we agreed ..." is still a decision
    verb = m.group("verb").lower() if m.re is _DECISION_VERB_RE else "chosen"
    verb = _DECISION_VERBS.get(verb, verb)
    subject = _nearest_subject(sentence, m.start())
    value = _statement(sentence)
    if len(sentence.split()) < 5 and previous:
        # "Deal, agreed." names nothing: it agrees to what the other side just said.
        subject = subject or _nearest_subject(previous, len(previous))
        value = f"{value} (re: {_clip(previous, 120)})"
    if subject:
        book.put(f"{subject}_{verb}", value, source, "DECISION")
    else:
        book.put_numbered("decision", value, source, "DECISION")


_CONDITION_MARKER_RE = re.compile(
    r"\b(?:(?:one|the|a|only|your|main|our)\s+)?conditions?\s*(?::|\bis\b|\bare\b)\s*:?\s*(?P<rest>\S.*)$", re.I
)
_CONDITION_RE = re.compile(
    r"\bwithin\s+\d+\s+(?:business\s+|working\s+|calendar\s+)?(?:days?|hours?|weeks?|months?|years?)\b"
    r"|\b(?P<provided>provided|providing)(?:\s+that)?\b"
    r"|\bas long as\b(?!\s+(?:needed|necessary|possible|required|you (?:like|want|need)))"
    r"|\bon (?:the )?condition that\b|\bonly if\b|\bunless\b|\bsubject to\b"
    r"|\bonce (?:the|you|your|we|it|they|our)\b"
    r"|\bif\b(?P<if_rest>[^.;!?,]*)",
    re.I,
)
_IDLE_IF_RE = re.compile(
    r"^\s*(?:you (?:need|have|want|would like|'d like)|there(?:'s| is) anything|possible|so|not|any|that's|this is"
    r"|you can|(?:i|we) (?:can|may|could))\b",
    re.I,
)


def _conditions(sentence: str, book: FactBook, source: int | None) -> None:
    marker = _CONDITION_MARKER_RE.search(sentence)
    if marker is not None:
        value = _statement(marker.group("rest"))
        subject = _nearest_subject(value, 0) or _nearest_subject(sentence, marker.start())
    else:
        found = None
        for m in _CONDITION_RE.finditer(sentence):
            if m.group("provided") and re.search(r"\b(?:we|i|they|you|he|she|has|have|had|was|were)\s+$", sentence[: m.start()], re.I):
                continue  # "we provided a label" is not a condition
            if m.group(0).lower().startswith("if") and (
                _IDLE_IF_RE.search(m.group("if_rest") or "")
                or (_SUBJECT_RE.search(sentence) is None and not _DECISION_VERB_RE.search(sentence))
            ):
                continue
            found = m
            break
        if found is None:
            return
        value = _statement(sentence)
        subject = _nearest_subject(sentence, found.start())
    if value:
        book.put(f"{subject}_condition" if subject else "condition", value, source, "CONDITION")


_NOBODY_RE = re.compile(r"\b(?:nothing|none|no one|nobody)\s+\S+\s*$", re.I)


def _states(sentence: str, book: FactBook, source: int | None) -> None:
    for m in _STATUS_RE.finditer(sentence):
        before = sentence[max(0, m.start() - 40) : m.start()]
        if not _AUX_RE.search(before):
            continue  # "I want it cancelled" asks for a state; "it has been cancelled" reports one
        clause = _clause_before(sentence, m.start())
        if _HYPOTHETICAL_RE.search(clause) or _NOBODY_RE.search(clause):
            continue  # "if it is delivered", "so nothing is lost"
        status = m.group("status").lower().replace("canceled", "cancelled")
        if _NEGATION_RE.search(before[-25:]):
            status = f"not {status}"
        subject = _nearest_subject(clause, len(clause), before_only=True)
        if subject is None:
            subject = "order" if book.get("order_id") else None
        book.put(f"{subject}_status" if subject else "status", status, source, "STATE")


def _extract_topic(text: str, book: FactBook, source: int | None) -> None:
    for pattern, topic in _TOPICS:
        if pattern.search(text):
            if topic == "cancellation":
                obj = _TOPIC_OBJECT_RE.search(text)
                topic = f"{obj.group(1).lower()} cancellation" if obj else topic
            book.put_once("topic", topic, source)
            return


_PRONOUNS = [
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
    (re.compile(r"\bI'm\b|\bI am\b", re.I), "they are"),
    (re.compile(r"\bI've\b", re.I), "they have"),
    (re.compile(r"\bI\b"), "they"),
    (re.compile(r"\bme\b", re.I), "them"),
    (re.compile(r"\bmyself\b", re.I), "themselves"),
]


def _third_person(text: str) -> str:
    for pattern, repl in _PRONOUNS:
        text = pattern.sub(repl, text)
    return text


def _extract_request(text: str, book: FactBook, source: int | None) -> None:
    if book.get("user_request") is not None:
        return
    for s, e in _sentences(text):
        m = _REQUEST_RE.search(text[s:e])
        if m is None or _ASKING_AUX_RE.search(text[s:e][: m.start()]):
            continue  # "Do I need the box?" asks, it does not request
        lead = m.group("lead").lower()
        rest = re.split(r"[,;]|\s+(?:but|because|since|as|so that)\s+", m.group("rest"))[0]
        rest = _third_person(rest.strip().rstrip(".!?"))
        if lead in ("can you", "could you", "would you", "please") or lead.startswith("help me"):
            phrase = f"asked for help to {rest}" if lead.startswith("help me") else f"asked to {rest}"
        elif lead in ("i need", "i want"):
            phrase = f"wants {rest}"
        elif lead == "i need to":
            phrase = f"needs to {rest}"
        elif lead.startswith("i have"):
            phrase = "has " + lead.split(" ", 2)[2] + f" {rest}"
        elif "writing about" in lead:
            phrase = f"is writing about {rest}"
        else:
            phrase = f"wants to {rest}"
        book.put("user_request", _clip(phrase, 120), source)
        return


def _retract(text: str, role: str, book: FactBook) -> None:
    if role != "user":
        return
    for s, e in _sentences(text):
        sentence = text[s:e]
        if _is_question(sentence):
            continue
        for m in _RETRACT_RE.finditer(sentence):
            verb = (m.group("verb") or "").lower()
            if verb and re.search(r"(?:\bnot|\bnever|n't|n’t)\s*$", sentence[: m.start()], re.I):
                continue  # "please don't cancel the refund" keeps it
            obj = (m.group("object") or m.group("object2") or "").lower()
            for word, stem in _RETRACTABLE.items():
                if not re.search(rf"\b{re.escape(word)}\b", obj):
                    continue
                if stem == "order" and verb.replace(" ", "") not in _RETRACT_ORDER_VERBS:
                    continue
                book.retract("order_id" if stem == "order" else stem)


def read_message(message: MessageRecord, book: FactBook, names: dict[str, str], previous: str | None = None) -> None:
    """Fold one message's facts into ``book``: retractions first, then every extractor, latest wins."""
    text = message.content
    if message.tool_calls:
        text = f"{text}\n" + "\n".join(c.arguments for c in message.tool_calls)
    source = message.index if message.index >= 0 else None
    _retract(text, message.role, book)
    sentences = _sentences(text)
    spans = _Spans()
    _extract_contacts(text, message.role, book, source, spans)
    _extract_ids(text, book, source, spans)
    _extract_dates(text, sentences, book, source, spans)
    _extract_amounts(text, sentences, book, source, spans)
    if message.role in ("user", "assistant", "summary"):
        _extract_sentence_facts(text, sentences, message.role, book, source, previous)
    if message.role == "user":
        _extract_topic(text, book, source)
        _extract_request(text, book, source)


def extract_facts(messages: Sequence[MessageRecord], existing: Iterable[Fact] = ()) -> tuple[Fact, ...]:
    """Return ``existing`` merged with the facts of ``messages``: added, updated (latest wins), retracted."""
    return _read_all(messages, existing).facts()


def _read_all(messages: Sequence[MessageRecord], existing: Iterable[Fact] = ()) -> FactBook:
    book = FactBook()
    for f in existing:
        book.put(f.key, f.value, None, f.category)
    names = tool_names(messages)
    previous: str | None = None
    for m in messages:
        read_message(m, book, names, previous)
        if m.role in ("user", "assistant") and m.content.strip():
            previous = m.content.strip()
    return book


# --------------------------------------------------------------------------- narrative


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
        first = f"{who} wrote: \u201c{_clip(user_texts[0], 100)}\u201d." if user_texts else "No user request yet."
    decisions = book.by_category("DECISION")[-2:]
    conditions = book.by_category("CONDITION")[-2:]
    if decisions:
        second = "Agreed: " + "; ".join(f"{_humanize(d.key)} ({_clip(d.value, 90)})" for d in decisions)
        if conditions:
            second += "; conditions: " + "; ".join(_clip(c.value, 60) for c in conditions)
        second += "."
    elif conditions:
        second = "Conditions stated: " + "; ".join(_clip(c.value, 60) for c in conditions) + "."
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
            parts.append(f"Last {last.role} message: \u201c{_clip(last.content, 100)}\u201d")
    third = ("; ".join(parts) + ".") if parts else ""
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
        return _clip(f"tool result {tool_label(message, names)}: {message.content}", MAX_LINE_CHARS)
    if message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        said = f" and said: {message.content}" if message.content.strip() else ""
        return _clip(f"{message.role} called {calls}{said}", MAX_LINE_CHARS)
    return _clip(f"{message.role}: {message.content}", MAX_LINE_CHARS)


def _render_text(entries: list[_Entry], story: str, earlier: str | None, lines: list[tuple[int, str]]) -> str:
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
        book = _read_all(request.messages, request.existing_facts)
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
            read_message(_pseudo_message(parsed.earlier), book, {})
        for key, value, idx in parsed.facts:
            book.put(key, value, idx)
        if window is not None:
            book.drop_before(window)
        kept = {i: body for i, body in parsed.lines if window is None or i >= window}
        names = tool_names(messages)
        previous: str | None = None
        for m in messages:
            read_message(m, book, names, previous)
            if m.role in ("user", "assistant") and m.content.strip():
                previous = m.content.strip()
        kept.update((m.index, message_line(m, names)) for m in messages)
        lines = sorted(kept.items())
        story = narrative(book, messages)
        return self._fit_text(book.entries()[-MAX_FACTS:], story, parsed.earlier, lines, request)

    def _fit_text(
        self, entries: list[_Entry], story: str, earlier: str | None, lines: list[tuple[int, str]], request: SummaryInput
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
    spans = _sentences(text)
    return text[spans[0][0] : spans[0][1]].strip() if spans else text


def _pseudo_message(text: str) -> MessageRecord:
    from datetime import datetime, timezone

    return MessageRecord(
        tenant_id="-", conversation_id="-", index=-1, seq=0, event_id="-", role="summary", content=text,
        tokens=0, occurred_at=datetime(1970, 1, 1, tzinfo=timezone.utc),
    )
