"""The offline summarizer's text rules as one declarative table: each a pattern, the text it must and must not match, and why.

The offline summarizer is memfold's small, explainable fallback (the
OpenAI-compatible summarizer is the quality path). What it keeps is decided
by typed entities (ids, emails, phones, amounts, dates, names, versions) and
by salience (numbers, first-person plans and decisions, thanks and assent
that say nothing). Each of those rules is one :class:`Rule` here: its
pattern, examples it must match, examples it must not, and why it is there.
``tests/unit/test_offline_rules.py`` walks every example, so a change to a
pattern that breaks what it was for fails there first, and
:data:`TABLE_HASH` (part of the summarizer's ``RULES_VERSION``, hence of
the summary cache key) changes with any entry.

The examples are written for these rules: none is taken from the bundled
sample or the benchmark generators, whose phrases the rules must not fit.
:mod:`memfold.projections.fact_patterns` and
:mod:`memfold.projections.salience` take their patterns from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memfold.core.ids import content_hash
from memfold.projections.fold_text import RETRACTION_FLAGS, RETRACTION_PATTERN


@dataclass(frozen=True, slots=True)
class Rule:
    """One text rule: ``pattern`` compiled from ``body`` and ``flags``; ``matches`` it finds a match in, ``misses`` not.

    ``mode`` is how the code applies it: ``search`` (anywhere), ``match`` (at the start of the text)
    or ``fullmatch`` (the whole text).
    """

    name: str
    body: str
    flags: int
    matches: tuple[str, ...]
    misses: tuple[str, ...]
    why: str
    mode: str = "search"

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compiled(self.body, self.flags)

    def hits(self, text: str) -> bool:
        """True when the rule finds a match in ``text`` the way the code applies it (``mode``)."""
        return getattr(self.pattern, self.mode)(text) is not None


_COMPILED: dict[tuple[str, int], re.Pattern[str]] = {}


def _compiled(body: str, flags: int) -> re.Pattern[str]:
    key = (body, flags)
    if key not in _COMPILED:
        _COMPILED[key] = re.compile(body, flags)
    return _COMPILED[key]


# --------------------------------------------------------------------------- shared pieces

CURRENCY_CODES = "USD|EUR|GBP|JPY|CAD|AUD|CHF|INR|CNY|SEK|NOK|DKK|PLN"
NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
MONTHS = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
NAME_WORD = r"[A-Z][a-z'’-]+"
ID_WORDS = (
    "order|ticket|case|incident|claim|invoice|booking|reservation|confirmation|reference|account|serial|policy|flight"
)
CONNECTIVES = r"(?:and|but|so|which|because|while|although|since)\s"


RULES: tuple[Rule, ...] = (
    # ----------------------------------------------------------------- typed entities
    Rule(
        "amount",
        rf"(?P<sym>[$€£¥₹])\s?(?P<n1>{NUM})"
        rf"|\b(?P<code1>{CURRENCY_CODES})\s?(?P<n2>{NUM})\b"
        rf"|(?<![\w.#-])(?P<n3>{NUM})\s?(?P<code2>{CURRENCY_CODES}|dollars?|euros?|pounds?)\b",
        0,
        matches=("the lamp was $74.90", "a deposit of €1,250", "pay GBP 300 upfront", "it came to 42 euros",
                 "roughly 1,800 USD in total"),
        misses=("room 42 on floor 3", "version 2.5 of the app", "order #4471", "gate 12"),
        why="An amount is a value people come back to (what was paid, refunded, quoted); a bare number is not one.",
    ),
    Rule(
        "date",
        r"\b(?P<iso>\d{4}-\d{2}-\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2})?Z?)?\b"
        rf"|\b(?P<md>(?:{MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?)\b"
        rf"|\b(?P<dm>\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{MONTHS})(?:,?\s+\d{{4}})?)\b",
        0,
        matches=("due on 2025-07-01", "see you Oct 3rd", "from 12 of September 2024", "on Feb. 9, 2026",
                 "starts 2024-11-30T08:15Z"),
        misses=("in may we trust", "12 months ago", "the march was long", "version 2025.07"),
        why="A calendar date anchors when something happens; temporal questions ask for it.",
    ),
    Rule(
        "email",
        r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
        0,
        matches=("write to j.okafor+bills@mailhost.net", "cc ops@north-wind.co.uk please"),
        misses=("@channel ping me", "user@localhost", "a@b.c"),
        why="A contact address is a fact the user gives once and expects to be kept.",
    ),
    Rule(
        "phone",
        r"(?<![\w#-])(?:\+\d[\d\s().-]{6,16}\d|\(\d{3}\)\s?\d{3}[\s.-]\d{4}|\d{3}[\s.-]\d{3}[\s.-]\d{4})(?![\w-])",
        0,
        matches=("call +33 1 70 36 98 12", "my cell is (312) 555-0198", "reach me at 604.555.0142"),
        misses=("order #555-0142-77", "the score was 3-1", "ISBN 978-3-16-148410-0"),
        why="A phone number is a contact detail the user gives once and expects to be kept.",
    ),
    Rule(
        "name",
        rf"(?i:\bmy name is|\bi'?m called|\bi am called|\bcall me|\bthe name is)\s+(?P<name>{NAME_WORD}(?:\s+{NAME_WORD}){{0,2}})"
        rf"|(?i:\bi'?m|\bi am|\bthis is|\bit'?s)\s+(?P<full>{NAME_WORD}\s+{NAME_WORD})\b(?!\s+(?:{NAME_WORD}))"
        rf"|(?:^|[.!?,]\s+|\b(?i:hi|hello|hey)\W+)(?P<here>{NAME_WORD}\s+{NAME_WORD})\s+here\b",
        0,
        matches=("Hi, my name is Ines Okafor.", "You can call me Teo", "This is Priya Raman from accounts",
                 "Morning. Lars Vik here, about the lease"),
        misses=("I'm happy with it", "I'm Really Tired Now", "my name is on the list", "this is Paris"),
        why="Who the user is: the name a later turn or question refers to; a lone capitalised word is not enough.",
    ),
    Rule(
        "prefixed_id",
        r"(?<![\w-])(?P<prefix>[A-Z]{1,6})[-_](?P<rest>[A-Z0-9]+(?:-[A-Z0-9]+)*)(?![\w-])",
        0,
        matches=("ticket TKT-20931 is open", "serial SN-7QX-2210", "error E-1960 again"),
        misses=("a well-known fix", "x-ray results", "pre-order now"),
        why="Codes a system issued (tickets, serials, error codes) are what support turns come back to.",
    ),
    Rule(
        "word_id",
        rf"\b(?P<word>{ID_WORDS})"
        r"(?:\s+(?:number|no\.?|num|nr\.?|id|code|reference|ref))?\s*(?:is\s+)?:?\s*"
        r"(?P<id>#?\d{3,}(?:-\d+)*|[A-Z]{1,5}-?\d{3,}(?:-\d+)*|(?-i:(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,12}))\b",
        re.I,
        matches=("my booking reference is QX7H2L", "claim no. 88120", "invoice 4471-2", "flight BA2490"),
        misses=("the order arrived", "claim 12 days", "booking for two"),
        why="An id named by what it identifies (order, claim, booking): the key of the facts about it.",
    ),
    Rule(
        "hash_id",
        r"(?<![\w&])#(?P<id>\d{3,})\b",
        0,
        matches=("it's #30917", "see #4410 above"),
        misses=("#12", "&#8217;", "issue#4410"),
        why="A '#'-numbered reference is an id someone will ask about again.",
    ),
    Rule(
        "tracking",
        r"\btracking(?:\s+(?:number|no\.?|code|id))?\s*(?:is\s+)?[:#]?\s*(?P<id>[A-Z0-9]{8,})\b",
        re.I,
        matches=("tracking number is 1Z999AA10123456784", "tracking: JD0146000033"),
        misses=("tracking is slow today", "tracking code pending"),
        why="A tracking code is the handle of a delivery; long, so only taken after its name.",
    ),
    Rule(
        "version",
        r"(?<![\w.])v\d+(?:\.\d+){1,3}\b",
        0,
        matches=("upgraded to v3.12.1", "still on v2.0"),
        misses=("v2 is out", "dev3.1", "1.2.3"),
        why="A version string pins what the user runs; an upgrade makes it a changed value.",
    ),
    # ----------------------------------------------------------------- decisions and what a user takes back
    Rule(
        "decision_verb",
        r"\b(?P<verb>agreed|approved|confirmed|decided|accepted|authori[sz]ed|declined|denied|rejected)\b",
        re.I,
        matches=("the bank approved the loan", "we decided on oak", "my claim was denied"),
        misses=("I agree it's odd", "awaiting approval", "a decisive win"),
        why="A decision is the outcome a conversation reaches; later turns build on it and questions ask for it.",
    ),
    Rule(
        "decision_phrase",
        r"\b(?:go ahead with|i'll go with|let's go with|i'll take (?:it|that|the)|^\W*(?:ok(?:ay)?,?\s+)?deal)\b",
        re.I,
        matches=("Let's go with the 3 pm slot", "I'll take the green one", "Okay, deal."),
        misses=("how do we deal with rust", "I'll go home", "a good deal on tyres"),
        why="A user accepting an offer in their own words decides as much as 'agreed' does.",
    ),
    Rule(
        "hypothetical",
        r"\b(?:if|once|when|until|whether|unless)\b",
        re.I,
        matches=("if the part arrives", "unless it rains", "once you sign"),
        misses=("the gift arrived", "wherever you are", "the lift is slow"),
        why="A decision said under a condition ('approved if the part arrives') is not yet one.",
    ),
    Rule(
        "negation",
        r"\b(?:not|never)\b|n't|n’t",
        re.I,
        matches=("it was not approved", "they never called", "I don't want it"),
        misses=("nothing to add", "a notable case", "the knot held"),
        why="A negated decision or state is the opposite value; it must not be read as the plain one.",
    ),
    Rule(
        "retraction",
        RETRACTION_PATTERN,
        RETRACTION_FLAGS,
        matches=("please forget my phone number", "scratch the callback", "I no longer need the voucher"),
        misses=("I forgot my keys", "the removal van", "we need a refund"),
        why="What a user takes back leaves memory at once; the verb and its object name the fact (topics' fold uses it).",
    ),
    Rule(
        "code_block",
        r"```.*?(?:```|\Z)",
        re.S,
        matches=("see ```x = 1``` above", "```\nopen block"),
        misses=("`inline` code", "no code here"),
        why="Code is not what anyone said: no facts or statements are read inside a fenced block.",
    ),
    Rule(
        "filler",
        r"^(?:(?:just so you know|note that|please note(?: that)?|also|meanwhile|so|ok(?:ay)?|great|good news|"
        r"understood|in that case|for the record)\b[,:]?\s*)+",
        re.I,
        matches=("Good news: the part shipped", "For the record, I paid twice", "Okay so the van is booked"),
        misses=("The van is booked", "Sonia paid twice", "Greatly reduced"),
        why="Discourse openers carry no value: a decision or condition is kept without them.",
        mode="match",
    ),
    # ----------------------------------------------------------------- salience
    Rule(
        "markup",
        r"^\s*(?:#{1,6}\s+|[-*+•]\s+|\d{1,2}[.)]\s+|>\s*)|\*\*|__|`",
        0,
        matches=("## Plan", "- buy milk", "3) call back", "**bold** move", "run `make`"),
        misses=("plain words", "3.5 stars", "C# code"),
        why="Markdown marks (headings, bullets, emphasis) are layout, stripped before a statement is weighed.",
    ),
    Rule(
        "assent_or_thanks",
        r"^\W*(?:(?:ok(?:ay)?|great|perfect|awesome|cool|nice|wonderful|excellent|yes|yeah|sure|"
        r"thank you(?: so much| very much)?|thanks?|(?:that )?makes (?:a lot of |total )?sense|sounds (?:good|great|perfect)"
        r"|got it|i see|that's (?:helpful|great|perfect|clear)"
        r"|you(?:'re|’re| are) (?:very )?welcome|no problem|my pleasure|i (?:really |truly )?appreciate)\b[\s,.!]*)+",
        re.I,
        matches=("Thanks!", "Okay, great.", "Makes sense, thank you so much.", "You're welcome!", "Got it, perfect"),
        misses=("Greatness takes time", "Surely not", "Nicely done", "The invoice is wrong"),
        why="Thanks and assent open many turns and say nothing; what follows them is weighed on its own.",
        mode="match",
    ),
    Rule(
        "courtesy",
        r"\b(?:thank|thanks|glad|welcome|appreciate|no problem|my pleasure)\b",
        re.I,
        matches=("thanks, Noor", "glad to hear", "much appreciate it"),
        misses=("thankful", "gladly", "problematic"),
        why="Only thanks and courtesy take a vocative name after them ('Thanks, Noor.'), which then says nothing.",
    ),
    Rule(
        "vocative",
        r"[A-Z][a-z'’-]+(?:\s+[A-Z][a-z'’-]+)?\s*[.!]*\s*",
        0,
        matches=("Noor.", "Ana Lima!"),
        misses=("noor.", "Lima is lovely"),
        why="A name said alone after thanks addresses the listener (and says nothing): the whole rest of the turn.",
        mode="fullmatch",
    ),
    Rule(
        "connective",
        CONNECTIVES,
        re.I,
        matches=("but the van came late", "so we moved it"),
        misses=("sofa", "button", "whichever"),
        why="A run-on sentence is cut before the words its clauses open with, so each clause is weighed apart.",
        mode="match",
    ),
    Rule(
        "clause_break",
        rf";\s+|,\s+(?={CONNECTIVES})",
        re.I,
        matches=("the van came; it was late", "it rained, so we stayed"),
        misses=("apples, pears", "one;two"),
        why="Where a run-on sentence splits into clauses: a semicolon, or a comma before a connective.",
    ),
    Rule(
        "number",
        r"(?<![\w.])\d+(?:[.,:/]\d+)*(?:\s?(?:%|ms|s|k|m|gb|mb|kb|x|h|hrs?|hours?|days?|weeks?|months?|years?|"
        r"minutes?|mins?|seconds?|km|kg|lbs?|miles?|users?|commits?))?\b",
        re.I,
        matches=("it took 45 minutes", "up 12%", "we have 3,200 users", "at 7:30"),
        misses=("route66", "abc123", "no numbers here"),
        why="Numbers (counts, durations, percentages) are what questions about details ask for.",
    ),
    Rule(
        "first_person",
        r"\b(?:i|i'm|i’m|i've|i’ve|i'd|i’d|i'll|i’ll|my|mine|me|we|we're|we've|we'll|our|us)\b",
        re.I,
        matches=("I moved last year", "our plan changed", "tell me later"),
        misses=("the iPhone", "mymail", "usual"),
        why="The user speaking about themselves: later questions are mostly about what the user said of themselves.",
    ),
    Rule(
        "commitment",
        r"\b(?:decid(?:e|ed|ing)|chose|chosen|choos(?:e|ing)|prefer(?:s|red|ence)?|plan(?:s|ned|ning)?|going to|will|"
        r"deadline|due|goal|target|aim(?:ing)?|want(?:ed)? to|need(?:ed)? to|moved?|switch(?:ed)?|chang(?:e|ed)|"
        r"start(?:ed|ing)?|finish(?:ed)?|complet(?:e|ed)|launch(?:ed)?|schedul(?:e|ed)|budget|agreed|promised|"
        r"favou?rite|love|hate|allergic|married|born|live|living|work(?:ing)? (?:at|as|for)|sister|brother|wife|"
        r"husband|partner|daughter|son|mother|father|mom|dad|friend|boss|manager|team|never|always|now|instead|"
        r"updated?|increased|decreased|improved|reduced|grown)\b",
        re.I,
        matches=("I decided on the blue one", "my sister lives in Porto", "we switched banks", "the deadline is Friday"),
        misses=("the sky is grey", "a planet far away", "lovely weather"),
        why="Plans, preferences, decisions, changes and the people in the user's life are what later turns ask about.",
    ),
    Rule(
        "relative_day",
        r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|yesterday|"
        r"next (?:week|month|year)|last (?:week|month|year))\b",
        re.I,
        matches=("see you Thursday", "it broke yesterday", "due next month"),
        misses=("a weekly sync", "the last straw", "monthly fee"),
        why="A weekday or a relative day dates a plan as much as a calendar date does.",
    ),
)

RULE: dict[str, Rule] = {r.name: r for r in RULES}
assert len(RULE) == len(RULES), "rule names are unique"

# The table's content: a change to any entry (pattern, examples, why) is a new offline summarizer version.
TABLE_HASH = content_hash(
    *[(r.name, r.body, r.flags, r.mode, r.matches, r.misses, r.why) for r in RULES], length=12
)
