"""The offline summarizer's vocabulary: the regular expressions and keyword tables facts are extracted with.

Data only, no logic: :mod:`memfold.projections.fact_extraction` applies these.
The typed entities (amounts, dates, emails, phones, names, ids, versions) come
from the rule table, :mod:`memfold.projections.offline_rules`, with their
examples; the rest are here until each is a table entry. ``RULES_VERSION``
(:mod:`memfold.projections.offline_summarizer`) hashes both, so no bump by hand.
"""

from __future__ import annotations

import re

from memfold.projections.offline_rules import CURRENCY_CODES, ID_WORDS, MONTHS, RULE

# --------------------------------------------------------------------------- sentences




# Words that name what a decision, condition or state is about → the stem of its key.
SUBJECTS = {
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
SUBJECT_RE = re.compile(r"\b(" + "|".join(sorted(SUBJECTS, key=len, reverse=True)) + r")\b", re.I)

# Patterns scanned over whole messages, compiled with a lookahead that names every character a match
# can start with: re then skips most positions without trying each alternative there (the same
# matches; 1.5-2.5x faster on BEAM's messages). (compiled, body, flags) of each, for the test that
# holds them equal to their bodies: tests/unit/test_fast_patterns.py.
FAST_STARTS: list[tuple[re.Pattern[str], str, int]] = []


def _initials(alternatives: str) -> str:
    """Return the first characters of ``a|b|c`` words, escaped for a lookahead's character class."""
    return "".join(re.escape(c) for c in sorted({word[0] for word in alternatives.split("|")}))


def fast_start(first: str, body: str, flags: int = 0) -> re.Pattern[str]:
    """Compile ``body`` behind the lookahead ``first``, which every match of ``body`` satisfies where it starts."""
    compiled = re.compile(f"(?={first})(?:{body})", flags)
    FAST_STARTS.append((compiled, body, flags))
    return compiled


AMOUNT_RE = fast_start(rf"[$€£¥₹{_initials(CURRENCY_CODES)}]|\d", RULE["amount"].body, RULE["amount"].flags)
# Nearest keyword before an amount (else after it) names the amount.
AMOUNT_KEYS = [
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

# The thing an amount is the amount of, said right after it with a determiner before it: "a $2,000
# penalty", "a $500 team lunch", "that $120 mindfulness app". One or two lower-case words; a word that
# cannot name a thing ends the name ("a $300 repair seems steep" -> repair) or gives none ("the $75 could help").
ATTRIBUTIVE_BEFORE_RE = re.compile(r"\b(?:a|an|the|my|our|your|his|her|their|this|that|its)\s+$", re.I)
ATTRIBUTIVE_RE = re.compile(r"[ \t]+(?P<first>[a-z]{3,})(?:[ \t-]+(?P<second>[a-z]{3,}))?")
NOT_ATTRIBUTIVE = frozenset(
    "per each monthly annually yearly weekly daily hourly total more less extra plus minus back now then"
    " could would should can will may might must shall was were are has had have been being did does and"
    " but for from into onto than that the this those these with without which who what when where"
    " thousand million billion grand worth upfront altogether overall instead already also just only"
    " every last next first second third some any all few many much apiece cheaper dearer higher"
    " lower short over under off one two three four five six seven eight nine ten twelve hundred"
    " among versus within toward towards across beyond despite via since due left remaining regular"
    " seems fits gives covers reduces means provides aligns meets plays represents involves appears goes"
    " makes helps works sounds looks needs remains includes leaves adds brings takes comes stays allows"
    " puts pays costs feels faster slower sooner later available spent paid".split()
)

# The amount named right after it: "I've entered $1,043.75 as the claimed amount" -> claimed_amount,
# the key a later "the claimed amount is now $1,200" updates.
AMOUNT_AFTER_RE = re.compile(r"\s+as\s+(?:the|your|my|our)\s+(?P<noun>[a-z]{3,})\s+(?:amount|sum)\b")

# The event a date is the date of, when no keyword names it. Before the date: an event noun
# before "on", "for", "by" ..., over names and places between ("my therapy session with Sara on
# March 10", "a team lunch at The Blue Lagoon on August 30"). After it: "for the cutover", or any
# noun in "as the incident date". Only events: "moved the plants on June 16" is no plants_date.
DATE_LEAD_RE = re.compile(r"(?:^|[^\w'])(?P<noun>[a-z]{3,})(?:\s+(?:with|at|in|from)(?:\s+(?:the\s+)?[A-Z][\w'-]*){1,4})?"
                          r"\s+(?:on|for|by|until|till|scheduled for|set for|planned for)\s+$")
DATE_AFTER_RE = re.compile(r"\s+(?:for|as)\s+(?:the|your|my|our)\s+(?P<noun>[a-z]{3,})(?P<date>\s+date)?\b")
EVENT_NOUNS = frozenset(
    """session sessions workshop workshops class classes course lesson lessons seminar webinar conference
    summit panel talk lecture presentation pitch demo interview interviews exam test quiz audition
    concert show screening premiere festival fair exhibition party dinner lunch breakfast brunch picnic
    wedding birthday anniversary celebration ceremony graduation reunion trip vacation holiday getaway
    retreat hike race marathon match game tournament launch release submission application draft outline
    review checkup surgery consultation hearing closing cutover migration rollout deployment kickoff
    sprint milestone event events move visit inspection installation pickup handover training orientation
    onboarding shoot recording performance rehearsal signing trial""".split()
)

DATE_RE = fast_start(rf"[\d{_initials(MONTHS)}]", RULE["date"].body, RULE["date"].flags)
# Said right before an amount or a date, these make it an old or a denied value, not the current one:
# "$938.55, revised from ... instead of $1,043.75"; "it's £3,347.10 per month, not £4,200.70 as first
# quoted"; "on May 5 rather than May 3"; "now runs v4.5.6, replacing v3.7.11"; "moved from May 3".
SUPERSEDED_RE = re.compile(
    r"\b(?:instead of|replacing|previously|formerly|originally|down from|up from|compared (?:to|with)|versus|vs\.?"
    r"|(?:upgraded|updated|changed|moved|switched|migrated) from"
    r"|not(?:\s+(?:on|in|at|for|by|until|till))?|rather than)\s+$", re.I
)
# Words that say a value changed ("the deadline moved to", "the budget is now", "revised to"). A
# keyword key ("deadline", "budget") takes a new value in place of its old one only with one of them
# in the sentence, or the old value named in the message; otherwise both stand (deadline, deadline_2).
CHANGE_RE = re.compile(
    r"\b(?:now|new|instead|no longer|actually|after all|chang\w*|mov(?:e|ed|es|ing)|reschedul\w*"
    r"|revis\w*|updat\w*|postpon\w*|push\w*|extend\w*|delay\w*|rebook\w*|retim\w*|recalculat\w*"
    r"|correct\w*)\b",
    re.I,
)
WAS_RE = re.compile(r"\b(?:was|were|used to be)\s+$", re.I)
BEFORE_RE = re.compile(r"^\s*(?:before|previously|earlier|originally)\b", re.I)
DATE_KEYS = [
    (re.compile(r"\b(?:deliver(?:y|ed)?|arriv(?:e|al|es|ing)|ship(?:s|ped|ping)?|dispatch(?:ed)?)\b", re.I), "delivery_date"),
    (re.compile(r"\b(?:return(?:ed)?|send (?:it )?back)\b", re.I), "return_date"),
    (re.compile(r"\b(?:depart(?:s|ing|ure)?|flight|fly(?:ing)?|flies)\b", re.I), "departure_date"),
    (re.compile(r"\brefund(?:ed)?\b", re.I), "refund_date"),
    (re.compile(r"\b(?:appointment|meeting|call|visit|schedul(?:e|ed))\b", re.I), "appointment_date"),
    (re.compile(r"\b(?:ordered|purchased|bought|placed)\b", re.I), "order_date"),
    (re.compile(r"\b(?:renew(?:s|al)?|expir(?:e|es|y|ation))\b", re.I), "renewal_date"),
    (re.compile(r"\b(?:deadline|due|until)\b", re.I), "deadline"),
]

# "Your deductible is $751.25", "The adjuster is booked for 2025-10-10": when no keyword names
# a value, the head noun of the clause it completes does (deductible, adjuster_date).
CLAUSE_SUBJECT_RE = re.compile(
    r"(?:^|[,;:]\s*|\b(?:and|but|so)\s+)(?:(?:the|your|my|our|their|his|her|its)\s+)?"
    r"(?P<noun>[a-z]{3,}(?:\s+[a-z]{3,}){0,2})\s+(?:is|are|was|were|will be|has been|have been|'s|’s)\b[^,;:]*$",
    re.I,
)
NOT_SUBJECTS = frozenset(
    "that this there here which what who it everything something nothing anything all one today tomorrow"
    " you they she him them also just still now then only".split()
)

EMAIL_RE = RULE["email"].pattern
PHONE_RE = RULE["phone"].pattern
NAME_RE = fast_start(
    r"(?i:[mcith])|[.!?,]|^",  # my, i'm, call, the, this, it; hi, hello, hey; a sentence's end; the text's start
    RULE["name"].body,
)
NOT_NAMES = {"not", "no", "just", "still", "also", "here", "sorry", "good", "happy", "glad", "fine", "the", "so"}

# Codes like ORD-88231, SN-49VH-1453, POL-1277149, E-1960: an upper-case prefix, a dash, 3+ digits in all.
PREFIXED_ID_RE = fast_start("[A-Z]", RULE["prefixed_id"].body, RULE["prefixed_id"].flags)
# Names of standards and algorithms, not ids anyone was given: "AES-256", "SHA-256", "UTF-8", "ISO-8601".
NOT_ID_PREFIXES = frozenset({"aes", "sha", "rsa", "md", "utf", "iso", "tls", "ssl", "http", "ipv", "ecdsa", "hmac"})
PREFIX_KEYS = {
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
WORD_ID_RE = fast_start(f"[{_initials(ID_WORDS)}]", RULE["word_id"].body, RULE["word_id"].flags)
CODE_KEYS = [
    (re.compile(r"\bserial\b", re.I), "serial_number"),
    (re.compile(r"\berror\b", re.I), "error_code"),
    (re.compile(r"\bpolicy\b", re.I), "policy_number"),
    (re.compile(r"\bclaim\b", re.I), "claim_id"),
    (re.compile(r"\baccount\b", re.I), "account_id"),
    (re.compile(r"\b(?:booking|reservation)\b", re.I), "booking_ref"),
]
VERSION_RE = fast_start("v", RULE["version"].body, RULE["version"].flags)
VERSION_KEYS = [(re.compile(r"\bfirmware\b", re.I), "firmware_version"), (re.compile(r"\b(?:app|software)\b", re.I), "app_version")]
# What an order holds, named right after its id: "I found order #18066: one Halden standing desk,
# charged at ...", "my order #18066, the Oriel espresso machine". A bare "order #18066" names none.
ORDER_ITEM_RE = re.compile(
    r"\border\s+(?:number\s+|no\.?\s*)?#?[A-Z]{0,4}-?\d[\w-]*\s*[:,(]\s*"
    r"(?:the|one|an?|\d+\s*(?:x|×)?)\s+(?P<item>[^,.;:()!?\n]{3,60}?)"
    r"(?=\s*(?:[,.;:)!?\n]|$|\s(?:for|at|charged|billed|which|that|placed|ordered|is|was)\b))",
    re.I,
)
WORD_KEYS = {
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
TRACKING_RE = fast_start("t", RULE["tracking"].body, RULE["tracking"].flags)
HASH_ID_RE = fast_start("#", RULE["hash_id"].body, RULE["hash_id"].flags)

DECISION_VERB_RE = RULE["decision_verb"].pattern
DECISION_PHRASE_RE = RULE["decision_phrase"].pattern
DECISION_VERBS = {"authorised": "approved", "authorized": "approved", "declined": "rejected", "denied": "rejected"}
HYPOTHETICAL_RE = RULE["hypothetical"].pattern


STATUS_WORDS = (
    "out for delivery|in transit|on hold|shipped|delivered|cancell?ed|canceled|refunded|returned|processed"
    "|pending|escalated|resolved|closed|reopened|suspended|expired|failed|overdue|lost|damaged|delayed|active"
)
STATUS_RE = fast_start(f"[{_initials(STATUS_WORDS)}]", rf"\b(?P<status>{STATUS_WORDS})\b", re.I)
AUX_RE = re.compile(
    r"(?:\b(?:is|was|has|have|had|been|are|were|got|gets|now|currently|already|still|status(?:\s+is)?)|'s|’s|n't|n’t|:)\s*"
    r"(?:(?:not|never|yet|been|now|already|currently|still|being|just|officially)\s+)*$",
    re.I,
)
NEGATION_RE = RULE["negation"].pattern

# What a support conversation is about, from the user's words. Each pattern names the support matter,
# not the bare word: in other talk "track my reading", "I stayed up late", "my study plan", "address
# the issue", "a return value" and "swap ideas" are about nothing of the kind.
_GOODS = r"(?:order|package|parcel|delivery|shipment|items?|parts?|goods|purchase|product|refund|it|them)"
TOPICS = [
    (re.compile(r"\bcancel(?:l?ing|l?ation|led|ed)?\b", re.I), "cancellation"),
    (re.compile(r"\brefund", re.I), "refund request"),
    (re.compile(rf"\b(?:(?:exchange|swap)\s+(?:(?:it|this|them|the|my|your|an?)\s+)?(?:{_GOODS}|size|colou?r|for\s+(?:a|an|the)\b)"
                r"|(?:an|the) exchange)\b", re.I), "exchange"),
    (re.compile(rf"\b(?:return(?:ing)?\s+(?:(?:the|my|this|these|an?)\s+)?{_GOODS}|send (?:it |them )?back|return (?:label|policy|email|shipping|window)|for the return)\b",
                re.I), "return"),
    (re.compile(rf"\b(?:(?:arrived|came|is|was|are|were)\s+(?:\w+\s+)?(?:damaged|broken|defective|faulty)|wrong item|missing item"
                rf"|(?:damaged|broken|defective|faulty)\s+{_GOODS}|it(?:'s|’s| is) (?:damaged|broken|defective|faulty))\b", re.I),
     "damaged or wrong item"),
    (re.compile(rf"\b(?:where is (?:my|the|our) {_GOODS}|track(?:ing)?\s+(?:number|(?:my|the|our)\s+{_GOODS})"
                rf"|tracking (?:page|info|link|code|says|shows|still|has(?:n't| not))|has(?:n't| not) arrived|not arrived|(?:{_GOODS}) (?:is |was |are |has been )?(?:late|delayed))\b", re.I),
     "delivery status"),
    (re.compile(r"\b(?:charged|billing|invoice|overcharged|(?:my|the) (?:payment|bill)\b(?!\s+plan))", re.I), "billing"),
    (re.compile(r"\b(?:(?:can't|cannot|can not|unable to|couldn't|won't let me)\s+(?:log ?in|sign in|access my account)"
                r"|locked out|(?:reset|forgot|change) (?:my )?password|2fa)\b", re.I), "account access"),
    (re.compile(r"\b(?:(?:upgrade|downgrade|change|switch|cancel|move)\w*\s+(?:my |the |our )?(?:plan|subscription|tier)"
                r"|(?:upgrade|downgrade) to|(?:the|your|our|my) (?:new|current|cheaper|annual|monthly|team|pro|basic|premium|business)"
                r" (?:plan|tier|subscription))\b", re.I), "subscription change"),
    (re.compile(r"\b(?:(?:change|update|correct)\w*\s+(?:my |the |our )?(?:shipping |delivery |billing |mailing |home )?address"
                r"|new (?:shipping |delivery |mailing |home )?address|wrong address|address (?:change|update))\b", re.I),
     "address change"),
    # An insurance or warranty claim: "I need to file a claim on the bathroom floor" (the damage it is
    # about comes later, "Can I throw away the damaged items?", and is no wrong-item complaint).
    (re.compile(r"\b(?:(?:file|filing|open|opening|make|submit|lodge|start)\s+(?:a|an|my|the)\s+(?:\w+\s+)?claim"
                r"|following up on (?:a|my|the) claim|report (?:the )?damage)\b", re.I), "claim"),
]
TOPIC_OBJECT_RE = re.compile(r"\b(order|subscription|booking|reservation|account|plan|membership|flight)\b", re.I)

REQUEST_RE = re.compile(
    r"\b(?P<lead>i'd like to|i would like to|i want to|i wanna|i need to|i'm trying to|i am trying to|i need|i want"
    r"|can you|could you|would you|please|help me(?: to)?"
    r"|i have (?:a|an) (?:problem|issue|question|complaint) (?:with|about)|i'm writing about|i am writing about)"
    r"\s+(?P<rest>.+)",
    re.I,
)
ASKING_AUX_RE = re.compile(r"\b(?:do|does|did|should|would|could|can|will|must|if|when|why|what|how|whether)\s+$", re.I)

FILLER_RE = RULE["filler"].pattern

CONDITION_MARKER_RE = re.compile(
    r"\b(?:(?:one|the|a|only|your|main|our)\s+)?conditions?\s*(?::|\bis\b|\bare\b)\s*:?\s*(?P<rest>\S.*)$", re.I
)

CONDITION_RE = re.compile(
    r"\bwithin\s+\d+\s+(?:business\s+|working\s+|calendar\s+)?(?:days?|hours?|weeks?|months?|years?)\b"
    # "provided the item is returned unused": a clause with its own subject and verb follows; "the
    # provided code", "provided by EndNote", "providing clear explanations" are no conditions.
    r"|\b(?P<provided>provided|providing)(?:\s+that\b|(?=\s+(?:you\b(?!\s+with)|(?:the|your|it|its|they|their|we|our"
    r"|he|she|this|these|all|both|no|there)\s+(?:[\w'’-]+\s+){0,4}?(?:is|are|was|were|be|has|have|had|can|will|would"
    r"|could|may|must|should|remains?|stays?|gets?|arrives?|returns?|pays?|keeps?|does|do|doesn't|don't|isn't|aren't"
    r"|hasn't|haven't)\b)))"
    r"|\bas long as\b(?!\s+(?:needed|necessary|possible|required|you (?:like|want|need)))"
    r"|\bon (?:the )?condition that\b|\bonly if\b|\bsubject to\b"
    # "unless you prefer to wait" leaves the choice to the listener: an offer, not a condition
    r"|\bunless\b(?!\s+you(?:'d|\s+would)?\s+(?:rather|prefer|want|like|wish|choose))"
    # "unless absolutely necessary", "unless explicitly requested": a manner of advice, no condition
    r"(?!\s+(?:absolutely\s+|strictly\s+|explicitly\s+)?(?:necessary|needed|required|requested|otherwise|asked))"
    r"|\bonce (?:the|you|your|we|it|they|our)\b"
    r"|\bif\b(?P<if_rest>[^.;!?,]*)",
    re.I,
)

# What comes before a "provided" that is a verb or an adjective: "we provided", "the provided schedule".
PROVIDED_NOT_RE = re.compile(
    r"\b(?:we|i|they|you|he|she|it|has|have|had|was|were|is|are|be|been|the|a|an|this|these|those|your|our|their|its"
    r"|his|her|any|all|each)\s+$",
    re.I,
)
# An "if" that asks rather than sets a condition: "I'm wondering if this will work", "let me know if".
ASKING_IF_RE = re.compile(
    r"\b(?:wonder(?:ing|ed)?|not sure|unsure|know|see|check(?:ing)?|ask(?:ing|ed)?|curious|doubt(?:ful)?|question"
    r"|decide|deciding|tell me|confirm(?:ing)?|determin(?:e|ing)|find out|figure out|evaluat(?:e|ing)|assess(?:ing)?"
    r"|test(?:ing)?|verif(?:y|ying)|validat(?:e|ing)|understand(?:ing)?|clarify(?:ing)?)\s+$",
    re.I,
)
# An "if" about the listener's wishes or doubts offers something; it sets no condition ("if you're
# looking for a lighter read, here are some options").
IDLE_IF_RE = re.compile(
    r"^\s*(?:you (?:need|have|want|would like|'d like|wish|plan|intend)|there(?:'s| is) anything|possible|so|not|any|that's|this is"
    r"|you can|(?:i|we) (?:can|may|could)"
    r"|you(?:'re|’re| are) (?:considering|looking|interested|thinking|planning|unsure|not sure|curious|open)"
    r"|you change your mind|you(?:'d|’d| would) (?:rather|prefer))\b",
    re.I,
)
# The main clause of advice: a conditional sentence that only advises ("Once you have a draft, it's
# important to have it reviewed") states no condition anyone agreed to.
ADVICE_RE = re.compile(
    r",\s*(?:then\s+)?(?:it(?:'s|’s| is) (?:important|a good idea|helpful|best|wise|essential|crucial|worth)"
    r"|make sure|consider|remember|feel free|don't hesitate|don’t hesitate"
    r"|you (?:might|may|could) (?:also )?(?:want|consider|find|try|reach)|you(?:'ll|’ll| will) (?:want|need) to|you should also"
    # "Once you have the list, you can compare ...": the next step of instructions; "you can expect
    # the refund" still states what the condition gives
    r"|you can (?!expect|get|receive|claim|keep|have|return|cancel|exchange|use)(?:now |then |easily |also )?\w+)\b",
    re.I,
)

# The main clause of instructions: "If you fall behind one day, adjust your plan", "Once you complete a
# course, update your resume": a step to take, not a condition anyone agreed to.
IMPERATIVE_RE = re.compile(
    r",\s*(?:then\s+|just\s+|simply\s+)?(?:adjust|update|note|modify|address|avoid|check|double-check|try|review|revisit"
    r"|ask|add|include|remove|replace|start|stop|focus|install|enable|disable|verify|test|restart|rerun|re-run"
    r"|prioriti[sz]e|reconsider|follow up|reach out|offer|incorporate|inform|explore|discuss|communicate"
    # "If you change your mind, just let us know": an offer to the listener
    r"|let (?:us|me) know)\b",
    re.I,
)
# A sentence that opens with advice ("Avoid jargon unless ...", "Consider opening an account once you
# arrive"): the "unless"/"once" in the same clause qualifies the advice.
ADVICE_OPENING_RE = re.compile(
    r"^\W*(?:avoid|consider|recogni[sz]e|incorporate|inform|ensure|make sure|be sure|try|adjust|update"
    r"|modify|address|check|review|revisit|add|include|remove|replace|focus|install|enable|disable|verify|prioriti[sz]e"
    r"|reconsider|think about|don't|don’t|do not|never)\b",
    re.I,
)
# A sentence that asks for help ("..., can you explain it to me with an example?") or gives an
# example ("For example, if several readers mention ...") states no condition, whatever "if" it holds.
HELP_REQUEST_RE = re.compile(
    r"\b(?:can|could|would) you (?:please\s+)?(?:help|explain|tell|show|give|provide|suggest|recommend|walk|clarify)\b",
    re.I,
)
EXAMPLE_RE = re.compile(r"^\W*(?:for example|for instance|e\.g\.)\W", re.I)
# An "if" after an earlier asking one in the same sentence asks too: "I'm not sure if I need to add
# a setting or if there are steps I need to take".
ASKING_BEFORE_RE = re.compile(
    r"\b(?:not sure|unsure|wonder(?:ing|ed)?|curious|don't know|do not know|don’t know)\b[^.?!]*?\b(?:if|whether)\b", re.I
)

NOBODY_RE = re.compile(r"\b(?:nothing|none|no one|nobody)\s+\S+\s*$", re.I)

PRONOUNS = [
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
    (re.compile(r"\bour\b", re.I), "their"),  # "make sure our company is compliant": the user's company
    (re.compile(r"\bI'm\b|\bI am\b", re.I), "they are"),
    (re.compile(r"\bI've\b", re.I), "they have"),
    (re.compile(r"\bI\b"), "they"),
    (re.compile(r"\bme\b", re.I), "them"),
    (re.compile(r"\bmyself\b", re.I), "themselves"),
]


# --------------------------------------------------------------------------- the user's first-person statements

CODE_BLOCK_RE = RULE["code_block"].pattern
# Markdown an assistant writes tutorials with: list items, headings, bold, inline code.
MARKDOWN_RE = re.compile(r"^\s*(?:[-*+•]\s|\d{1,2}\.\s|#{1,6}\s)|\*\*|`")

# Where a first-person value ends: the end of its clause.
VALUE = (
    r"(?:now\s+)?(?P<value>[^.;!?\n]{2,120}?)(?=\s*(?:[.;!?\n]|,\s|\s(?:but|because|since|so that|and then|which)\s"
    r"|\sand\s+(?:I|I'm|I’m|I've|I’ve|we|my)\s|$))"  # "my deadline is April 15 and I'm using Python 3"
)
PLACE = r"(?P<value>[A-Z][\w'’-]*(?:\s+(?:[A-Z][\w'’-]*|(?:de|del|la|le|of|am|upon|on)(?=\s+[A-Z])))*)"
RELATIONS = (
    "sister|brother|wife|husband|partner|girlfriend|boyfriend|fianc[ée]e?|mother|father|mom|mum|dad|son|daughter"
    "|kids?|children|friend|best friend|boss|manager|colleague|coworker|co-worker|roommate|dog|cat|cousin|aunt|uncle"
    "|grandmother|grandfather|grandma|grandpa|mentor|teammate|landlord|doctor|therapist"
)
NAME_AFTER = r"(?:(?:'s|’s) name is|,? (?:is )?(?:named|called))?\s+(?P<name>[A-Z][a-z]+(?:\s[A-Z][a-z]+)?)\b"
# (pattern, key, category): a key ending in "_" is numbered (every distinct value kept); others are one
# subject each, so a later value supersedes the earlier one.
FIRST_PERSON_RULES = [
    (re.compile(rf"\bI(?:'ve|’ve| have)?\s+(?:just\s+|recently\s+|finally\s+)?(?:moved|relocated)\s+(?:back\s+)?to\s+{PLACE}"), "lives_in", "ENTITY"),
    (re.compile(rf"\bI\s+(?:currently\s+|now\s+|still\s+)?live\s+in\s+{PLACE}"), "lives_in", "ENTITY"),
    (re.compile(rf"\bI(?:'m|’m| am)\s+(?:now\s+|currently\s+)?(?:based|living)\s+in\s+{PLACE}"), "lives_in", "ENTITY"),
    (re.compile(rf"\bI\s+(?:now\s+|currently\s+)?work\s+(?:at|for)\s+{PLACE}"), "works_at", "ENTITY"),
    (re.compile(rf"\bI\s+(?:now\s+|currently\s+)?work\s+as\s+(?:an?\s+)?{VALUE}", re.I), "occupation", "ENTITY"),
    (re.compile(rf"\b(?:my|our)\s+(?P<subject>(?:[a-z][\w-]*\s+){{0,2}}deadline)\s+(?:is|was|has been|got|is now)?\s*(?:moved\s+|pushed\s+|changed\s+|extended\s+|set\s+)?(?:to|for|on)?\s*{VALUE}", re.I), "{subject}", "ENTITY"),
    (re.compile(rf"\bI\s+(?:really\s+|strongly\s+|much\s+|generally\s+|usually\s+|now\s+)?(?:prefer|favou?r|would rather|'d rather|’d rather)\s+{VALUE}", re.I), "preference_", "GENERAL"),
    (re.compile(rf"\bI\s+(?:really\s+)?(?:love|enjoy|hate|dislike|can't stand|can’t stand|am allergic to|'m allergic to|’m allergic to)\s+{VALUE}", re.I), "preference_", "GENERAL"),
    (re.compile(rf"\b(?:I|we)(?:'ve|’ve| have)?\s+(?:finally\s+|just\s+)?(?:chosen|chose|opted|settled)\s+(?:to|on|for|against)\s+{VALUE}", re.I), "decision_", "DECISION"),
    (re.compile(rf"\bI(?:'m|’m| am)\s+(?:planning|going|hoping|aiming|intending)\s+to\s+{VALUE}", re.I), "plan_", "GENERAL"),
    (re.compile(rf"\bI\s+plan\s+to\s+{VALUE}", re.I), "plan_", "GENERAL"),
    (re.compile(rf"\b(?i:my)\s+(?P<relation>(?i:{RELATIONS})){NAME_AFTER}"), "{relation}_name", "ENTITY"),
    (re.compile(rf"\bmy\s+(?P<relation>{RELATIONS})\s+(?P<value>(?:is|was|has|had|just|lives|works|will|got|started|moved|loves|likes|wants)\b[^.;!?\n]{{2,110}}?)(?=\s*(?:[.;!?\n]|,\s|$))", re.I), "{relation}_", "ENTITY"),
    (re.compile(rf"\bmy\s+(?P<subject>(?:favou?rite|current|new|main|primary|target|monthly|weekly|daily|annual|total|first|next|final|home|work|usual)\s+(?:[a-z][\w-]*\s+)?[a-z][\w-]*)\s+(?:is|are)\s+(?:now\s+)?{VALUE}", re.I), "{subject}", "ENTITY"),
    (re.compile(rf"\bmy\s+(?P<subject>budget|goal|target|salary|rent|age|birthday|timezone|time zone|team|role|title|job|major|favou?rite\s+[a-z]+)\s+(?:is|are)\s+(?:now\s+)?{VALUE}", re.I), "{subject}", "ENTITY"),
]
# Every FIRST_PERSON_RULES pattern starts at one of these words: a sentence without any is skipped
# (held by tests/unit/test_fast_patterns.py on generated sentences).
FIRST_PERSON_WORD_RE = re.compile(r"\b(?:i|my|our|we)\b", re.I)
