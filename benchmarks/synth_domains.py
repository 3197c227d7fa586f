"""What the synthetic conversations talk about: five domains, their facts, phrasings, tools and updates.

Templates use a tiny grammar expanded by :mod:`synth`: ``[a|b|c]`` picks one
alternative (nest freely, an empty alternative makes a part optional),
``{name}`` inserts a slot (a fact's current value or a filler variable) and
``{@name}`` expands one of the :data:`MACROS`. Fact slots are exactly the fact
keys, so the generator can tell which message first mentions a value.
Templates in ``exchanges`` and ``recalls`` must not use fact slots: the long
middle of a conversation mentions facts only through ``references`` and tools.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Exchange = tuple[str, str]  # (user template, assistant template)
Facts = dict[str, tuple[str, str]]  # key -> (kind, value)


# --------------------------------------------------------------------------- value helpers

FIRST_NAMES = (
    "Dana", "Marcus", "Priya", "Tomasz", "Aisha", "Lukas", "Mei", "Oluwaseun", "Sofia", "Jonas",
    "Hannah", "Rafael", "Ingrid", "Kenji", "Fatima", "Gabriel", "Chloe", "Mateo", "Nadia", "Elliot",
    "Yusuf", "Clara", "Arjun", "Beatriz", "Connor", "Leila", "Henrik", "Zanele", "Owen", "Mira",
)
LAST_NAMES = (
    "Whitfield", "Okafor", "Raman", "Kowalski", "Haddad", "Brenner", "Lindqvist", "Tanaka", "Moreau",
    "Castillo", "Adeyemi", "Novak", "Fitzgerald", "Delgado", "Schuster", "Achterberg", "Mensah",
    "Iyer", "Petrov", "Gallagher", "Esposito", "Nakamura", "Oyelaran", "Vasquez", "Holm", "Duarte",
)
EMAIL_DOMAINS = ("example.com", "example.org", "example.net", "mail.example.com", "post.example.org")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}


def fmt_money(cents: int, currency: str, style: str = "symbol") -> str:
    """Return ``cents`` as ``$1,240.00`` (``style="symbol"``) or ``1,240.00 EUR`` (``style="code"``)."""
    number = f"{cents // 100:,}.{cents % 100:02d}"
    if style == "code" or currency not in CURRENCY_SYMBOLS:
        return f"{number} {currency}"
    return f"{CURRENCY_SYMBOLS[currency]}{number}"


def fmt_date(day: dt.date, style: str) -> str:
    """Return ``day`` as ``March 14, 2025`` (us), ``14 March 2025`` (eu) or ``2025-03-14`` (iso)."""
    if style == "us":
        return f"{MONTHS[day.month - 1]} {day.day}, {day.year}"
    if style == "eu":
        return f"{day.day} {MONTHS[day.month - 1]} {day.year}"
    return day.isoformat()


@dataclass
class Ctx:
    """Per-conversation choices every value generator sees."""

    rng: random.Random
    start: dt.datetime
    currency: str
    money_style: str
    date_style: str
    first: str
    last: str
    taken: set[str] = field(default_factory=set)  # every value handed out, so none repeats
    extra: dict[str, str] = field(default_factory=dict)  # non-fact slots a domain fixes per conversation

    def unique(self, make: Callable[[], str]) -> str:
        for _ in range(1000):
            value = make()
            if value.casefold() not in self.taken:
                self.taken.add(value.casefold())
                return value
        raise RuntimeError("could not draw a fresh value")

    def money(self, lo: int, hi: int) -> str:
        """Return a fresh amount between ``lo`` and ``hi`` (whole currency units) in this conversation's style."""
        return self.unique(lambda: fmt_money(self.rng.randint(lo * 100, hi * 100) // 5 * 5, self.currency, self.money_style))

    def money_near(self, amount: str, lo: float, hi: float) -> str:
        """Return a fresh amount between ``lo`` and ``hi`` times ``amount`` (an amount this class wrote)."""
        cents = int(round(float(amount.strip("$€£ ").split()[0].replace(",", "")) * 100))
        return self.unique(lambda: fmt_money(self.rng.randint(int(cents * lo), int(cents * hi)) // 5 * 5 or 5,
                                             self.currency, self.money_style))

    def date(self, lo_days: int, hi_days: int, after: dt.date | None = None) -> str:
        """Return a fresh date ``lo_days``..``hi_days`` after ``after`` (default: the conversation start)."""
        base = after or self.start.date()
        return self.unique(lambda: fmt_date(base + dt.timedelta(days=self.rng.randint(lo_days, hi_days)), self.date_style))

    def email(self) -> str:
        rng = self.rng

        def make() -> str:
            first, last = self.first.lower(), self.last.lower()
            local = rng.choice((f"{first}.{last}", f"{first[0]}{last}", f"{first}{rng.randint(2, 99)}",
                                f"{first}_{last[:4]}", f"{last}.{first[0]}"))
            return f"{local}@{rng.choice(EMAIL_DOMAINS)}"

        return self.unique(make)

    def phone(self) -> str:
        rng = self.rng
        if self.currency == "GBP":  # Ofcom's drama range: never a real line
            return self.unique(lambda: f"+44 20 7946 0{rng.randint(0, 999):03d}")
        return self.unique(lambda: f"+1 {rng.choice((212, 312, 415, 503, 617, 720))}-555-01{rng.randint(0, 99):02d}")

    def code(self, pattern: str) -> str:
        """Return a fresh id from ``pattern``: ``d`` digit, ``n`` digit 1-9, ``l`` capital letter, ``x`` either; the rest is literal."""
        rng = self.rng
        letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"

        def make() -> str:
            out = []
            for ch in pattern:
                if ch == "d":
                    out.append(str(rng.randint(0, 9)))
                elif ch == "n":
                    out.append(str(rng.randint(1, 9)))
                elif ch == "l":
                    out.append(rng.choice(letters))
                elif ch == "x":
                    out.append(rng.choice(letters + "23456789"))
                else:
                    out.append(ch)
            return "".join(out)

        return self.unique(make)


def parse_fmt_date(value: str) -> dt.date:
    """Invert :func:`fmt_date` for the three styles it writes."""
    if value[:4].isdigit():
        return dt.date.fromisoformat(value)
    parts = value.replace(",", "").split()
    if parts[0].isdigit():
        day, month, year = parts
    else:
        month, day, year = parts
    return dt.date(int(year), MONTHS.index(month) + 1, int(day))


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class ToolSpec:
    """One tool an assistant may call: the user's ask, the call, the tool's JSON answer, the reply."""

    name: str
    ask: tuple[str, ...]
    pre: tuple[str, ...]
    args: Callable[[Mapping[str, str]], dict[str, Any]]
    result: Callable[[random.Random, Mapping[str, str], dict[str, Any]], dict[str, Any]]  # (rng, facts, per-conversation memo)
    reply: tuple[str, ...]  # may use {r_<field>} slots filled from the result


@dataclass(frozen=True)
class UpdateSpec:
    """A later change of one fact; templates use ``{<key>}`` for the new value and may use ``{old}``."""

    key: str
    new_value: Callable[[Ctx, Mapping[str, str]], str]
    exchanges: tuple[Exchange, ...]


@dataclass(frozen=True)
class Domain:
    name: str
    facts: Callable[[Ctx], Facts]
    opening: tuple[Exchange, ...]
    exchanges: tuple[Exchange, ...]
    references: tuple[Exchange, ...]
    tools: tuple[ToolSpec, ...]
    updates: tuple[UpdateSpec, ...]
    recalls: Mapping[str, tuple[str, ...]]
    key_facts: tuple[str, ...]  # referenced once late in long conversations
    asides: tuple[str, ...] = ()  # extra assistant sentences (no fact slots) that make replies longer


def _later_date(ctx: Ctx, facts: Mapping[str, str], key: str, lo: int, hi: int) -> str:
    return ctx.date(lo, hi, after=parse_fmt_date(facts[key]))


def _email_update(ctx: Ctx, facts: Mapping[str, str]) -> str:
    return ctx.email()


def _phone_update(ctx: Ctx, facts: Mapping[str, str]) -> str:
    return ctx.phone()


EMAIL_UPDATE = UpdateSpec("email", _email_update, (
    ("[Quick thing|Oh, before I forget|One more thing|Small change]: [I've changed my email|my email address changed|I no longer use that email address]. [Please use|Can you switch it to|Send everything to] {email} [from now on|going forward|instead].",
     "[Done|Updated|All set][,|.] [I've replaced|I've swapped] {old} [with|for] {email} [on your profile|on the case|in our records]. [All further updates will go there.|You'll get the next confirmation there.|]"),
    ("[Can you update my contact email?|Please change the email on file.] [The new one is|It's now|Use] {email}.",
     "[Of course|Sure thing|No problem]. [Your contact email is now|I've updated it to|From now on we'll write to] {email}. [I've also sent a short verification note there.|You may get a one-time confirmation link.|]"),
))
PHONE_UPDATE = UpdateSpec("phone", _phone_update, (
    ("[I got a new phone number|My number changed last week|Please note a new number for me][, by the way|]: {phone}.",
     "[Thanks for letting me know|Good to know|Noted]. [I've updated your phone number to|Your callback number is now] {phone}[; the old one, {old}, is removed|]."),
    ("[If you need to call me, use|Best number to reach me is now] {phone}[, the old one doesn't work anymore|].",
     "[Updated|Got it|Perfect]: {phone} [is now on file|is saved as your callback number|is the number our team will use]."),
))


# --------------------------------------------------------------------------- shared phrasing

MACROS: dict[str, str] = {
    "hi": "[Hi|Hello|Hey|Good morning|Good afternoon|Hi there|Hello there]",
    "ack": "[Thanks|Thank you|Thanks a lot|Got it|Understood|Great|Okay|Alright|Noted|Perfect]",
    "ack_a": "[Thanks for confirming|Thank you for the details|That helps, thank you|Understood|Got it|Perfect, thanks|Thanks for bearing with me|I appreciate your patience|Thanks, that's useful]",
    "sorry": "[I'm sorry about that|Sorry for the trouble|I apologize for the inconvenience|I understand how frustrating that is|That's not the experience we want for you|Sorry you had to deal with that]",
    "more": "[Is there anything else I can help with?|Anything else on your mind?|What else can I do for you?|Let me know if anything else comes up.|Anything else before we wrap this part up?||]",
    "wait": "[Give me a moment|One moment please|Let me check|Bear with me a second|Let me take a look|Checking now|Let me look that up]",
    "ok": "[ok|okay|sure|sounds good|alright|great, thanks|perfect|cool|fine by me|thanks|got it|makes sense]",
    "hmm": "[Hmm|Huh|Okay|Right|Oh|Ah|Well]",
    "hmm_end": "[, haha.|!|.| 🙃]",
}

GENERIC_EXCHANGES: tuple[Exchange, ...] = (
    ("[Sorry, I stepped away for a minute|Sorry, had to grab the door|Back, sorry about that|Apologies, my {kid} needed something|Sorry for the delay, I was on another call].",
     "[No problem at all|No worries|Take your time|That's completely fine], {first}. [I'm still here.|I'll be here whenever you're ready.|We can pick up right where we left off.]"),
    ("[How long does this usually take?|Is this going to take long?|Roughly how long will all of this take?]",
     "[Usually|In most cases|Typically] [about|around|roughly] {mins} minutes on our side[, though it can vary a bit|, sometimes less|]. [I'll keep you posted as I go.|I'll tell you as soon as anything changes.|]"),
    ("[It's {weather} here, so I'm stuck inside anyway|Honestly it's {weather} outside, so I have time|It's {weather} today, perfect day for admin]{@hmm_end}",
     "[Ha, sorry to hear that|That sounds rough|Stay dry and warm|At least it's a good day to get this sorted]! [Let's make the rest of this quick for you.|Let's get you sorted so you can enjoy the rest of your {time_of_day}.|]"),
    ("[Can I ask something unrelated? Do you work weekends?|Off topic, but do you guys work weekends?]",
     "[Ha, fair question!|Good question.|Sure.] [Our team covers seven days a week in shifts.|We're here every day, with a smaller crew on Sundays.] [Now, back to your case.|]"),
    ("[Random question: are you a real person or a bot?|Am I chatting with a bot?]",
     "[Fair question!|Good question.] [I'm an AI assistant working with the support team, and a human colleague can step in whenever you like.|I'm an AI assistant; a person reviews the case notes.] [Happy to keep going with your case.|]"),
    ("[Off topic, but is your team based in {city}?|Where are you based, by the way? {city}?]",
     "[Ha, sure.|Good guess.] [We have people in a few cities, {city} included.|Part of the team is in {city}, yes.] [Now, back to your case.|]"),
    ("{@ok}", "[Great|Perfect|Wonderful|Good]. [I'll carry on then.|Let me continue.|Moving on to the next step.|]"),
    ("[Thanks for being so patient with me|You've been really helpful so far|I appreciate the help, really].",
     "[It's my pleasure|Happy to help|Thank you for saying so], {first}. [That means a lot.|Let's finish this properly.|]"),
    ("[Is there a way to get a transcript of this chat?|Can you email me a copy of this conversation?|Will I get a summary of this chat afterwards?]",
     "[Yes|Absolutely|Sure] — [when we close the chat you'll get a transcript by email|there's a download icon at the top right of this window|I'll make sure a summary is sent to you at the end]. [It can take {mins} minutes to arrive.|Check your spam folder if it doesn't show up.|]"),
    ("[I'm not very technical, so please bear with me|Sorry if I'm asking silly questions|I'm a bit lost with all of this, honestly].",
     "[Not at all|No such thing as a silly question here|You're doing great], {first}. [I'll explain each step in plain terms.|We'll go one step at a time.|That's what I'm here for.]"),
    ("[What are your opening hours, in case I need to call back?|If this chat drops, how do I get back to you?|Is there a phone line too?]",
     "[Chat is open around the clock|The phone line runs {open_hours}|You can reply to the confirmation email and it comes straight back to this case]. [Your case stays open, so nothing is lost.|Anyone on the team can pick it up from the notes.|]"),
    ("[My {gadget} battery is at {n} percent, let's be quick|I'm on my {gadget}, so typing is slow|I'm switching from my {gadget} to my laptop, one sec].",
     "[Understood|No rush|Got it], [I'll keep my messages short.|take your time.|I'll wait.]"),
    ("[lol ok|haha fair|ha, ok]", "[😊 Shall we continue?|Glad I could make you smile.|Ha. On to the next bit.]"),
    ("[Can you explain that again, more slowly?|Wait, I didn't follow that last part.|Sorry, can you rephrase that?]",
     "[Of course.|Sure, let me put it differently.|Happy to.] [In short: I'm checking the details on our side first, then I'll confirm the next step with you before anything happens.|Nothing changes without your okay; I'm only verifying what we already discussed.|The short version is that I'm lining up the next step, and you don't need to do anything yet.]"),
    ("[Do you need anything else from me right now?|Is there something I should be doing meanwhile?|Should I stay on the chat?]",
     "[Not right now|Nothing at the moment|You're all good for now]. [I'll ask if I need anything.|Feel free to stay on, it won't be long.|If I need a document I'll say so.]"),
    ("[I tried calling earlier but waited {mins} minutes on hold|Your phone queue was really long this {time_of_day}|I gave up on the hotline after {mins} minutes].",
     "{@sorry}. [Call volumes were unusually high today.|We're adding staff to the phone line this week.|Chat is usually the faster route, so you did the right thing.] [I'll make sure you don't have to call again.|Let's get everything done here.|]"),
    ("[Is my data safe with you?|Who can see the information I share here?|Do you store these chats?]",
     "[Good question.|Fair question.|] [Only the team handling your case can see it|Chats are stored encrypted and kept only as long as needed for your case|We never share your details with third parties]. [You can ask for deletion at any time.|Our privacy page has all the details.|]"),
    ("[By the way, your website was really slow earlier|The app kept logging me out this {time_of_day}|Your site showed an error page before I found this chat].",
     "[Thanks for flagging that|Sorry about that|Good to know]. [I've passed it to our web team.|There was a short outage around {clock}, it should be fine now.|I'll add it to our incident notes.]"),
    ("[Okay, I'm back|Back now|Right, where were we?]", "[Welcome back!|Hi again, {first}.|Great.] [We were just going through the details of your case.|I was about to confirm the next step.|Let's continue.]"),
    ("[I'll be honest, I'm a bit annoyed about all this|This whole thing has been stressful|I've spent way too much time on this already].",
     "{@sorry}, {first}. [You shouldn't have had to chase this.|I'll make sure the rest is smooth.|Let me take as much of it off your plate as I can.]"),
    ("[Do you have a reference number for this chat?|Is there a case number for today's conversation?]",
     "[Yes|Sure] — [this chat is logged under reference CH-{n}{n2}{n3}{n}|your chat reference is CH-{n3}{n}{n2}{n2}]; [you'll also find it in the email.|quote it if you contact us again.]"),
    ("[What's the best way to leave feedback about this?|Can I rate this chat?]",
     "[After we finish|At the end of the chat] [a short survey pops up|you'll get a one-question survey by email]. [Honest feedback helps us a lot.|It takes about a minute.]"),
    ("[My {kid} is asking who I'm typing to, haha|My {pet} just walked across the keyboard, sorry if something weird got sent].",
     "[Ha!|That's adorable.|No harm done.] [Say hi from us.|Nothing strange came through.|] [Let's keep going.|]"),
    ("[Will someone follow up if this isn't resolved?|What happens if this doesn't work?]",
     "[Yes|Definitely]. [If anything is still open by {weekday}, our team will reach out to you.|Your case stays open until you confirm it's fixed.|I'm adding a follow-up reminder for {weekday}.]"),
    ("[Sorry, my internet is a bit patchy today|The connection keeps dropping on my end|I'm on train wifi so I might vanish for a bit].",
     "[No problem|Understood|That's fine]. [If we get disconnected, just reopen the chat and it will resume here.|I'll keep the session open for you.|Everything is saved as we go.]"),
    ("[One sec, let me find my reading glasses|Hold on, I'm looking for the paperwork|Give me a minute to dig out the email].",
     "[Sure, take your time.|No rush at all.|Of course, I'll wait.]"),
    ("[Sorry, what does that mean exactly?|Is that normal?|Should I be worried about that?]",
     "[Not at all, it's routine|Nothing to worry about|It's a standard step], [I just wanted to keep you informed.|it happens in most cases like yours.|and I'll flag anything unusual.]"),
    ("[Quick question, is this chat recorded?|Are you still there?|Hello?]",
     "[Yes, I'm here|Still here], {first}. [Sorry for the pause, I was checking a detail.|Just finishing a note on your case.|]"),
    ("[I have a meeting in {mins} minutes, can we speed this up?|I need to leave soon|Can we finish this quickly?]",
     "[Of course|Absolutely|Sure]. [We're nearly done.|I'll keep it brief.|Only a couple of things left.] [You can also come back later, everything is saved.|]"),
    ("[My {kid} says hi|I'm doing this while cooking dinner, sorry|Sorry, typing with one hand, holding a coffee].",
     "[Ha, hi back!|No problem at all.|Multitasking, I respect that.] [Take it at your own pace.|]"),
    ("[Can I speak to a human?|Is there a person I can talk to?|Could a supervisor look at this?]",
     "[Of course, I can transfer you at any point|A colleague can join if you prefer], [though I can also finish this for you now.|and they'll see the full history of this chat.] [Would you like that?|Just say the word.]"),
    ("[What's your name, by the way?|Who am I talking to?|Are you the same agent as yesterday?]",
     "[I'm the support assistant for your case|I'm an AI assistant on the support team], [and I can see the full history of your case.|and a human colleague reviews the case notes.]"),
    ("[Is there a way to get notifications by text instead of email?|Can you text me updates?|I prefer WhatsApp, is that possible?]",
     "[Text updates can be switched on in your account settings|We can send SMS updates for this case], [using the number on file.|and you can turn them off any time.]"),
    ("[I already explained this to someone else last week|Do I really have to repeat everything?|Didn't your colleague write this down?]",
     "{@sorry}. [I have the previous notes, so no need to repeat anything.|You don't need to start over, I can see the history.|I'll make sure it's all in one place from now on.]"),
    ("[Alright, one more thing came to mind|Oh, and another question|Hmm, something else]",
     "[Sure, go ahead.|Of course, what is it?|Happy to help with that too.]"),
    ("[Thanks, that clears it up|Ah okay, that makes sense now|Got it, thank you for explaining].",
     "[Glad that helps|Great|You're welcome], {first}. {@more}"),
)

# Sentences an assistant may add to any reply, and a user to any message: they make messages longer and less terse.
GENERIC_ASIDES: tuple[str, ...] = (
    "[I'll keep an eye on the case in the meantime.|I'll keep watching the case on my side too.]",
    "[If anything is unclear, just ask and I'll explain it differently.|Feel free to ask if any of this sounds confusing.]",
    "[Thanks again for your patience while we work through this.|I really appreciate how patient you've been with all of this.]",
    "[Everything we discuss here is saved on the case, so nothing gets lost.|All of this is recorded on your case, so you won't have to repeat it.]",
    "[You'll get a confirmation email summarising this shortly.|A short summary of this step will land in your inbox shortly.]",
    "[I want to make sure you have everything you need before we move on.|Let's make sure this part is fully sorted before we continue.]",
    "[If you'd rather continue this by email later, that works too.|You can always pick this up later by replying to the case email.]",
    "[Our team is available seven days a week if something comes up over the weekend.|If something comes up outside office hours, the chat is still monitored.]",
)
USER_ASIDES: tuple[str, ...] = (
    "[Sorry, it's been a long day.|Bear with me, I'm juggling a few things.|I'm trying to get this sorted before the weekend.]",
    "[I've been meaning to deal with this all week.|My {kid} keeps interrupting, so sorry if I'm slow.|I'm on my {gadget}, so excuse the typos.]",
    "[Honestly I just want this done properly.|I'd rather ask now than get it wrong later.|Just want to make sure I understand.]",
    "[I checked the website first but couldn't find an answer.|I looked in the FAQ but it wasn't clear.|A friend told me to ask you directly.]",
)


GENERIC_RECALLS: tuple[str, ...] = (
    "[Before we finish|Just so I have it right|Sorry, one last thing] — can you remind me [what we agreed on|of everything we settled] [earlier|at the start|today]?",
    "[Okay|Right]. [Can you give me a quick recap of the important details?|What were the key details again?]",
)


# --------------------------------------------------------------------------- support (order / refund)

SUPPORT_ITEMS = (  # (item, lowest price, highest price) in whole currency units
    ("Halden standing desk", 380, 720), ("Oriel espresso machine", 240, 690), ("pair of Trailmark hiking boots", 120, 260),
    ("Nimbus 3-seat sofa cover", 70, 160), ("Corvid noise-cancelling headphones", 150, 380),
    ("set of Brava cast-iron pans", 90, 220), ("Lumio floor lamp", 60, 180), ("Kestrel road bike helmet", 55, 170),
    ("Fenwick wool coat", 140, 420), ("Pico robot vacuum", 190, 560),
)


def _support_facts(ctx: Ctx) -> Facts:
    rng = ctx.rng
    order_id = ctx.code(rng.choice(("#ndddd", "ORD-ndddd-d", "#nddddd")))
    item, lo, hi = rng.choice(SUPPORT_ITEMS)
    total = ctx.money(lo, hi)
    refund = ctx.money_near(total, 0.35, 1.0)
    days = rng.choice((14, 30, 21))
    return {
        "order_id": ("id", order_id),
        "item": ("entity", item),
        "order_date": ("date", ctx.date(-20, -4)),
        "order_total": ("amount", total),
        "refund_amount": ("amount", refund),
        "refund_condition": ("condition", rng.choice((
            f"refund within {days} days provided the item is returned unused",
            f"refund within {days} days once the item is back in the warehouse",
            "refund after the courier scans the return parcel",
            f"refund provided the item is returned in its original packaging within {days} days"))),
        "decision": ("decision", rng.choice((
            "waive the restocking fee", "cover the return shipping", "refund the original delivery charge too",
            "let you keep the accessories as a goodwill gesture"))),
        "pickup_date": ("date", ctx.date(2, 6)),
    }


def _once(memo: dict[str, Any], key: str, make: Callable[[], Any]) -> Any:
    """Return the conversation's remembered ``key``, drawing it on first use: tools answer consistently."""
    if key not in memo:
        memo[key] = make()
    return memo[key]


def _support_lookup(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": f["order_id"], "status": rng.choice(("delivered", "return_requested", "return_in_transit")),
            "item": f["item"], "total": f["order_total"], "placed": f["order_date"],
            "carrier": _once(memo, "carrier", lambda: rng.choice(("DHL", "UPS", "FedEx", "DPD", "Royal Mail")))}


def _support_refund(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": f["order_id"], "refund_amount": f["refund_amount"],
            "state": rng.choice(("pending_return", "approved_pending_inspection", "awaiting_pickup")),
            "method": rng.choice(("original_payment_method", "store_credit_declined"))}


def _support_tracking(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    latest = rng.choice(("label_created", "awaiting_pickup"))
    events = [{"status": "label_created"}] + ([{"status": latest}] if latest != "label_created" else [])
    return {"parcel": _once(memo, "parcel", lambda: f"1Z{rng.randint(10**9, 10**10 - 1)}"), "events": events, "latest": latest,
            "pickup_scheduled": f["pickup_date"]}


SUPPORT = Domain(
    name="support",
    facts=_support_facts,
    opening=(
        ("{@hi}, [I'm|this is|my name is] {customer_name}. [I'm writing about|I need help with|I have a problem with] [my order|order] {order_id}[, the {item}|].",
         "{@hi} {first}, [thanks for reaching out|thanks for contacting us|good to hear from you]. [I've pulled up|I can see|I found] order {order_id}: [the|one] {item}, [total|charged at|billed at] {order_total}, [placed|ordered] on {order_date}. [What's going on with it?|What can I help you with?|How can I help today?]"),
        ("[It arrived yesterday and|When I opened the box I saw that|Long story short,] [the {part} is cracked|it's the wrong colour|it doesn't work at all|one of the parts is missing|it's clearly been used before]. [I'm really disappointed.|Not great.|I'd been waiting for it for ages.]",
         "{@sorry}. [So I can keep you updated,|Before I set anything up,|To open a return case,] could you [confirm|share] your [email address and a phone number|email and phone number]?"),
        ("[Sure|Of course|Yes]: [email is|my email is|it's] {email}[,| and] [phone is|my phone is|you can call me on] {phone}.",
         "{@ack_a}. [I've noted|I have] {email} [and|plus] {phone} [on the case|for updates]. [Let me look at your options.|Now, let's fix this.|]"),
        ("[What are my options?|Can I get a refund?|I'd rather just get my money back.|Can you refund it?]",
         "[I can offer|I've set up|We can do] a refund of {refund_amount}. [The condition is a|One condition: it's a|Just so you know, this is a] {refund_condition}. [Does that work for you?|Is that okay?|Shall I go ahead?]"),
        ("[Yes|Yes please|That works|Deal|Okay, let's do that]. [Is there a restocking fee?|Will I be charged a restocking fee?|Do I pay anything for the return?]",
         "[Normally there can be costs, but|Given the circumstances,|Since this was our mistake,] we agreed to {decision}. [The courier will collect the parcel on|Pickup is booked for|The return pickup is scheduled for] {pickup_date}."),
    ),
    exchanges=(
        ("[Do I need the original box?|I threw away the box, is that a problem?|What packaging should I use?]",
         "[Any sturdy box works|The original box is ideal but not required|A similar box is fine], [as long as the {part} is protected|just pad it well|wrap it in something soft]. [The courier brings the label.|The label is already paid.|]"),
        ("[Will the courier call before coming?|What time will the courier come?|Do I have to be home for the pickup?]",
         "[Usually they send a text {hours} hours before|They give a two-hour window on the morning of the pickup|Someone needs to hand the parcel over, yes], [and you can change the slot from that message.|but a neighbour can do it too.|]"),
        ("[Can I get a replacement instead?|Actually, would an exchange be faster?|Is a replacement an option?]",
         "[We can, but the item is back-ordered for about {n} weeks|We could, though stock is low right now|Yes, though a refund is quicker at the moment]. [Most customers in your spot go with the refund.|I'll keep the refund unless you prefer to wait.|Happy to do either.]"),
        ("[How will the money come back?|Will the refund go to my card?|Do I get store credit or cash?]",
         "[It goes back to the original payment method|The refund returns to the card you paid with|You get it back on the same card, not as credit]. [Banks take {n} to {n2} business days to show it.|Depending on your bank it can take a few days to appear.|]"),
        ("[I also ordered a {extra} last month, is that affected?|My other order with the {extra} is fine, right?]",
         "[Let me check|{@wait}] — [that order is separate and not affected|no, that one was delivered without issues|that one is fine, it shipped from a different warehouse]."),
        ("[Why did this happen in the first place?|How does something like this even get shipped?|Is this a common problem?]",
         "[Honestly, it looks like damage in transit|Our warehouse flagged a batch with packing issues last week|It's rare, but it happens with bulky items]. [I've reported it to the quality team.|Your report helps us catch it.|]"),
        ("[Can I keep using it until the pickup?|Should I stop using it?|Is it safe to use in the meantime?]",
         "[Please don't use it|Better to leave it as it is], [so it stays eligible for the return|to avoid any issue with the inspection|since it's going back anyway]."),
        ("[Do you have a discount code for the trouble?|Any chance of a voucher for next time?]",
         "[I can't add a code on top of what we arranged,|Vouchers are handled by another team,] [but I've noted your request on the case.|but I've flagged it for them.|sorry about that.]"),
        ("[I'll print the label at the library tomorrow|I don't have a printer at home|Do I need to print anything?]",
         "[No printing needed|You don't have to print anything], [the driver brings the label|the courier scans a code from the email|just have the parcel ready]."),
        ("[The tracking page says 'exception', what does that mean?|Tracking hasn't updated in {n} days|The courier app shows nothing yet].",
         "[That usually just means a delayed scan|Tracking often lags by a day], [nothing to worry about yet.|I'll keep an eye on it.|I'll check with the carrier if it doesn't move by {weekday}.]"),
        ("[Can I drop it off at a store instead?|Is there a drop-off point near me?]",
         "[Yes, any of our partner drop-off points in {city} work|You can drop it at a parcel shop with the same label], [just show the code from the email.|no printing needed.]"),
        ("[What if I miss the courier?|What happens if nobody's home?]",
         "[They try again the next working day|The driver leaves a card and comes back the next day], [or you can drop it at a parcel shop instead.|and you can rebook from the text message.]"),
        ("[Do you sell an extended warranty for these?|Would a warranty have covered this?]",
         "[We do offer one at checkout|Damage on arrival is always covered, warranty or not], [but it wouldn't change anything here.|so you're fully covered in this case.]"),
        ("[Is the refund taxed in any way?|Do I get the VAT back as well?|Does the refund include tax?]",
         "[Yes, tax is refunded together with the item|The refund covers the full line including tax], [so you don't need to claim anything separately.|nothing extra to do on your side.]"),
        ("[Should I remove the {part} before packing?|Do I need to disassemble it?|It's quite bulky, can I send it in two boxes?]",
         "[Please send it as it arrived if you can|Two boxes are fine, the courier just needs both labels|No need to take anything apart], [that makes the inspection quicker.|and keep any small parts in a bag.]"),
        ("[Can my partner hand it over if I'm at work?|My neighbour might give it to the driver, is that okay?|Does it need my signature?]",
         "[Anyone can hand it over|No signature needed for returns|That's fine, the driver just scans the label], [as long as the parcel is ready.|you'll get the receipt by email.]"),
        ("[I left a review about the damage, was that okay?|Should I post photos of the damage somewhere?|Do you want photos of the problem?]",
         "[Photos help, yes|Of course, reviews are always welcome|A couple of photos would be useful for the quality team], [you can reply to the case email with them.|upload them from the order page.|but they won't change your refund.]"),
        ("[Is the {extra} I ordered last week in stock now?|When will the {extra} be restocked?|Do you still sell the {extra}?]",
         "[Let me see — yes, it's in stock|It's due back in about {n} weeks|It's available in most colours right now], [if you want to order it separately.|you can set a stock alert on the product page.]"),
        ("[I'd like to complain about the delivery driver|The driver left the box in the rain|The parcel was thrown over my gate]",
         "{@sorry}. [I've filed a complaint with the carrier.|That's not acceptable; I've reported it.|I'll pass this to our logistics team.] [It won't affect your return.|Thank you for telling us.|]"),
        ("[How do I know you received it?|Will I get a confirmation when it arrives back?|How long until the warehouse checks it?]",
         "[You'll get an email when the warehouse scans it|Inspection usually takes {n} working days after arrival], [and another one when the refund is issued.|and I'll keep an eye on it too.]"),
        ("[Can I change the payment method for the refund?|My card expired, where does the money go?|I cancelled that card last month.]",
         "[If the card is closed, the bank forwards the money to your account|Refunds can only go to the original method], [so you don't need to do anything.|but your bank will route it to you.]"),
        ("[This is my first order with you, to be honest|I usually order from you a lot, this never happened before|I've been a customer for years].",
         "[Thank you for your loyalty|I appreciate you giving us the chance|That makes it even more important to fix], {first}. [We'll make this right.|I want this to go smoothly for you.|]"),
        ("[Where's the label? I can't find it in my inbox|Which email did the label go to?|I didn't get any return email]",
         "[It was sent about {mins} minutes ago, check the spam folder|It's in an email titled 'Your return'|I can resend it right now], [and the driver has a copy anyway.|just in case.]"),
    ),
    references=(
        ("[Just to double-check,|Quick check:|Sorry to ask again, but] the refund for {order_id} is still {refund_amount}, right?",
         "[Yes|Correct|That's right], {refund_amount} for order {order_id}[, nothing has changed|, exactly as agreed|]."),
        ("[And|Also, just to confirm:] pickup [is still on|stays] {pickup_date}?",
         "[Yes|Yep|Confirmed], {pickup_date} [as planned|is still the pickup date|, nothing changed]."),
        ("[Remind me,|So] what's the condition on the refund again?",
         "It's a {refund_condition}. [That's all.|Nothing else needed.|]"),
        ("[Did the note about the fee get saved?|You did record the thing about the fee, right?]",
         "[Yes|It's there] — [the case notes say we agreed to {decision}|we agreed to {decision}, and it's in the notes]."),
    ),
    tools=(
        ToolSpec("lookup_order", ("[Can you check the status of the order?|What does your system show for my order?|Can you see where things stand with the order?]",),
                 ("{@wait}.", "[Let me pull up the order.|Looking up the order now.]"),
                 lambda f: {"order_id": f["order_id"]}, _support_lookup,
                 ("[The order shows as|Status right now:|Our system has it as] {r_status}, [shipped with|carrier] {r_carrier}. [That matches what we discussed.|Nothing unexpected there.|]",)),
        ToolSpec("check_refund_status", ("[Has the refund been started?|Where is the refund at?|Is the refund in motion yet?]",),
                 ("[Checking the refund now.|Let me check the refund record.]",),
                 lambda f: {"order_id": f["order_id"]}, _support_refund,
                 ("[The refund record shows|Refund status:] {r_state}. [It completes after the return is checked in.|You'll get an email once it's paid out.|]",)),
        ToolSpec("get_return_tracking", ("[Is the pickup actually booked?|Can you confirm the courier has the pickup?]",),
                 ("{@wait}.",),
                 lambda f: {"order_id": f["order_id"]}, _support_tracking,
                 ("[The return parcel {r_parcel} is registered|Yes, parcel {r_parcel} is in the courier's system], [latest status: {r_latest}.|currently {r_latest}.]",)),
    ),
    updates=(
        UpdateSpec("pickup_date", lambda ctx, f: _later_date(ctx, f, "pickup_date", 2, 6), (
            ("[The courier just texted me|I got a message from the courier|Hm, the courier emailed] — [they can't make it on {old}|they moved the pickup].",
             "[I see it too|I can confirm that|Yes, they updated it on our side as well]: [the pickup is now|new pickup date:|they've rebooked it for] {pickup_date}. {@sorry}."),
            ("[I won't be home on {old} after all|Something came up for {old}]. [Can we move the pickup?|Could the courier come later?]",
             "[No problem|Sure], [I've rebooked the pickup for|the courier will now come on|new pickup date is] {pickup_date}."),
        )),
        UpdateSpec("refund_amount", lambda ctx, f: ctx.money_near(f["order_total"], 0.3, 1.0), (
            ("[Any news on the refund amount?|Did the team decide on the refund yet?|Is the refund amount final?]",
             "[Yes, there's an update:|I have news:|Good that you asked:] [after review|after a second look at the order|following the inspection notes], the refund is revised to {refund_amount} [instead of {old}|(it was {old} before)|]. [It reflects the {part} cost and shipping.|That's the final figure.|]"),
            ("[I noticed I paid extra for shipping|Wait, the shipping fee should be included too|I think the refund should include the gift wrap I paid for].",
             "[You're right|Good catch|Fair point]. [I've corrected it:|Updated:] the refund is now {refund_amount}[, up from {old}|]. [Sorry for the mix-up.|Thanks for spotting that.|]"),
        )),
        EMAIL_UPDATE,
        PHONE_UPDATE,
    ),
    recalls={
        "refund_amount": ("[Sorry, remind me|Wait|One more question]: how much is the refund again[ exactly|]?", "What was the refund amount we settled on?"),
        "order_id": ("[Sorry,|Quick question:] what was my order number again? [I can't find the email.|I lost it.|]",),
        "pickup_date": ("[When is|Remind me when] the courier [coming|picking it up] again?",),
        "decision": ("[And|Wait,] what did we agree about the fees[ again|]?",),
        "email": ("Which email address do you have for me now?",),
    },
    key_facts=("order_id", "refund_amount"),
    asides=(
        "[For bulky items like this,|In cases like yours,] the warehouse usually checks the parcel within a couple of working days of it arriving, and the case updates automatically once they do.",
        "[If anything about the parcel looks damaged when the courier arrives,|Should the box get damaged on the way back,] just take a photo and reply to the case email; that protects you if there's any question later.",
        "[I'd also recommend|It's worth] keeping the courier receipt until the refund shows up on your statement, just in case the tracking ever goes quiet.",
        "You'll get an automatic email at each step, so you don't need to check back with us unless something looks off.",
        "[Our returns team reads the case notes,|Everything we've discussed is in the case notes,] so whoever picks it up next will see the full picture without you having to explain it again.",
        "[Most returns are wrapped up within about a week and a half from pickup to refund.|From pickup to refund it's usually about ten days, sometimes faster.]",
        "If you change your mind about a replacement at any point before the pickup, just let us know and we can switch the case over.",
        "[I've also flagged the product page so the team can check whether other customers reported the same issue.|I've added a note for the product team, since feedback like yours helps them fix the listing.]",
    ),
)


# --------------------------------------------------------------------------- travel booking

def _travel_facts(ctx: Ctx) -> Facts:
    rng = ctx.rng
    airline = rng.choice(("LH", "KL", "TP", "AF", "IB", "SK", "BA", "AZ"))
    return {
        "booking_ref": ("id", ctx.code("xxxxxx")),
        "flight_number": ("id", ctx.unique(lambda: f"{airline}{rng.randint(100, 2999)}")),
        "route": ("entity", rng.choice(("Lisbon to Copenhagen", "Madrid to Vienna", "Dublin to Rome", "Amsterdam to Porto",
                                         "Berlin to Athens", "Paris to Stockholm", "London to Milan", "Zurich to Seville"))),
        "departure_date": ("date", ctx.date(20, 60)),
        "fare_total": ("amount", ctx.money(280, 1800)),
        "hotel": ("entity", rng.choice(("Hotel Alma", "Casa do Rio", "The Linden House", "Pensione Fiore", "Hotel Nordlys",
                                         "Villa Serena"))),
        "cancellation_condition": ("condition", rng.choice((
            "free cancellation until 48 hours before check-in", "free cancellation until 72 hours before departure",
            "changes allowed once without a fee if made at least 7 days before departure"))),
        "decision": ("decision", rng.choice((
            "rebook the later flight at no extra charge", "waive the change fee", "add one checked bag for free",
            "refund the seat reservation fee"))),
    }


def _travel_booking(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"booking_ref": f["booking_ref"], "flight": f["flight_number"], "date": f["departure_date"],
            "passengers": 1, "status": rng.choice(("confirmed", "ticketed")), "seat": _once(memo, "seat", lambda: f"{rng.randint(3, 38)}{rng.choice('ACDF')}")}


def _travel_flights(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"results": [{"flight": f"{f['flight_number'][:2]}{rng.randint(100, 2999)}", "depart": f"{rng.randint(6, 21):02d}:{rng.choice(('05', '20', '35', '50'))}",
                         "seats_left": rng.randint(1, 9)} for _ in range(rng.randint(2, 3))]}


def _travel_hotel(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"hotel": f["hotel"], "room": _once(memo, "room", lambda: rng.choice(("double", "twin", "junior suite"))),
            "breakfast": _once(memo, "breakfast", lambda: rng.random() < 0.5),
            "late_checkout": _once(memo, "late_checkout", lambda: rng.choice(("on request", "until 13:00", "not available")))}


TRAVEL = Domain(
    name="travel",
    facts=_travel_facts,
    opening=(
        ("{@hi}, [it's|I'm] {customer_name}. [I booked a trip|I have a booking|I need to sort out my trip] [for|on] {route}[, booking reference {booking_ref}|] and [need some help|have a few questions|something's changed].",
         "{@hi} {first}! [I have your booking here|Found it|I can see the booking]: reference {booking_ref}, flight {flight_number} [on|departing] {departure_date}, [total fare|paid in total] {fare_total}. [What would you like to change?|What can I do for you?|How can I help?]"),
        ("[My plans at work shifted|My conference moved by a day|A family thing came up], [so I might need to fly later|and I'm not sure the dates still work|and I need flexibility].",
         "[Understood|That happens|No problem]. [The terms on your booking:|Good news, your conditions are:|Per the fare rules:] {cancellation_condition}. [Let me check what's possible.|We have some room to work with.|]"),
        ("[Can you also confirm the hotel?|Is the hotel part of this booking?|What about the hotel?]",
         "[Yes,|Sure,|] [you're staying at|the booking includes] {hotel} [for the whole trip|for {n} nights|]. [I'll keep it aligned with the flights.|It's linked to the same reference.|]"),
        ("[Please use|For contact,] {email} [and|or] {phone} [if anything changes|for updates|].",
         "{@ack_a}. [Contact details set:|Saved:] {email}, {phone}."),
        ("[Would a change cost me extra?|What's this going to cost?|Is there a fee if I move the flight?]",
         "[I checked with the airline, and|Given the schedule change on their side,|Your original flight was retimed, so] we agreed to {decision}. [You won't pay anything extra for that.|That's already noted on the booking.|]"),
    ),
    exchanges=(
        ("[Can I choose a window seat?|Is seat selection included?|Can I sit near the front?]",
         "[Seat selection opens {hours} hours before departure|I can request a window seat, though the airline confirms it at check-in|Rows {n} to {n2} are still fairly empty]. [I've added a note.|I'll request it now.|]"),
        ("[How much luggage can I bring?|Is a checked bag included?|What's the hand luggage limit?]",
         "[Your fare includes one cabin bag of 8 kg|Hand luggage is up to 8 kg plus a small personal item|A checked bag of 23 kg is included on this fare class], [plus a personal item.|and extra bags can be added online.|]"),
        ("[Do I need a visa for this?|Is my ID card enough or do I need a passport?|Any entry requirements I should know?]",
         "[Within the Schengen area an ID card is usually enough|For this route a valid passport or national ID works], [but please check the official government site before you fly.|just make sure it's valid for the whole stay.]"),
        ("[Is there a lounge at the airport?|How early should I be at the airport?|Is the airport far from the city?]",
         "[Be there about two hours before departure|There's a shared lounge past security, day passes are sold at the door|The train from the airport to the centre takes about {mins} minutes]."),
        ("[Can I add a vegetarian meal?|Do they serve food on board?|Is there wifi on the flight?]",
         "[Special meals need {hours} hours' notice, and I've requested a vegetarian one|It's a short flight, so snacks are sold on board|Wifi depends on the aircraft; this route usually has it]."),
        ("[What if the flight gets delayed?|Am I covered if I miss the connection?|Should I get travel insurance?]",
         "[On a single ticket the airline rebooks you if a connection is missed|Delays over three hours can qualify for compensation under EU rules|Travel insurance is a good idea for medical costs and cancellations], [and I can send you more details.|which we can add separately.|]"),
        ("[Does the hotel have parking?|Is breakfast included at the hotel?|Can I check in late at the hotel?]",
         "[Breakfast is included on your rate|Late check-in is fine, the front desk is open around the clock|Parking is available nearby for a daily fee]. [I'll add a note to the reservation.|I've messaged the hotel.|]"),
        ("[Can I bring my bike?|Is it possible to travel with a {pet}?|Can I take a guitar in the cabin?]",
         "[That needs to be booked as special baggage|Small pets in a carrier can travel in the cabin on some routes|Musical instruments can go in the cabin if they fit the size limits], [so let me check with the airline.|and I'll confirm availability.]"),
        ("[How do I get from the airport to the hotel?|Is there a shuttle to the hotel?|Taxi or train from the airport?]",
         "[The metro is cheapest and takes {mins} minutes|A taxi costs a flat fare into the centre|The hotel runs a shuttle every {mins} minutes until late evening]."),
        ("[Any recommendations for dinner near the hotel?|What's the weather like there this time of year?|Anything worth seeing nearby?]",
         "[I'm not a travel guide, but|Happily —] [the old town is a short walk away|evenings are mild, so pack a light jacket|the riverside market is popular on {weekday}s]. [Enjoy!|]"),
        ("[Can I earn miles on this booking?|Will my frequent flyer number work here?]",
         "[Yes, add your frequent flyer number and it will credit|Miles credit after the flight, usually within {n} weeks]."),
        ("[Can I pay the difference by card?|Do you take PayPal for changes?|How do I pay if there's a fare difference?]",
         "[Card payments work for any difference|You'd get a payment link by email], [and nothing is charged until you confirm.|and it's valid for {hours} hours.]"),
        ("[Is the flight direct?|Is there a stopover?|How long is the flight?]",
         "[It's a direct flight of about {n} hours|The flight is direct, roughly {n} hours gate to gate|No stopover on this routing]."),
        ("[Can I add my partner to the booking?|My colleague might join me, can we travel together?|Can I book a second ticket on the same reference?]",
         "[A second passenger needs a new ticket|I can book them on the same flight and link the bookings], [though fares may have changed.|so you sit together where possible.]"),
        ("[What's the check-in time at the hotel?|Can I leave my bags at the hotel early?|Is there a gym at the hotel?]",
         "[Check-in is from 15:00|Luggage storage is free at reception|There's a small gym on the ground floor], [and I've added your arrival time to the reservation.|just mention your booking at the desk.|]"),
        ("[Do I need to print my boarding pass?|Can I use the mobile boarding pass?|When does online check-in open?]",
         "[Online check-in opens {hours} hours before departure|The mobile boarding pass works at both airports], [so no printing needed.|and you'll get a reminder by email.]"),
        ("[Is there a train option instead?|Would the train be faster door to door?|Can I do part of the trip by train?]",
         "[There is a train, but it takes most of a day|Trains are possible but not part of this booking], [so the flight is still the quicker choice.|and I'd keep the flight for now.]"),
        ("[The app shows a different terminal than the email|Which terminal do I go to?|Is it terminal 1 or 2?]",
         "[The app is the most current source|Terminals can change, the airline updates the app first], [so go with the app on the day.|and the departure boards will confirm it.]"),
        ("[Can I get an invoice for my company?|I need a receipt with my company name on it|Do you issue VAT invoices?]",
         "[Yes, I can issue an invoice with your company details|Invoices are available under 'My trips'], [just send me the billing address.|and I can add a purchase order number.]"),
        ("[My passport expires in {n} months, is that a problem?|Does my passport need to be valid for six months?]",
         "[For this destination it must be valid for the whole stay|Some countries require three months beyond your return], [but please double-check on the official government site.|so you should be fine, but check before you fly.]"),
        ("[What happens if there's a strike?|I read about air traffic control strikes, should I worry?|Will you tell me if the flight is cancelled?]",
         "[If the airline cancels, you're rebooked or refunded|We send a text and an email as soon as the airline tells us], [and I'll keep an eye on it.|so keep your phone on.]"),
    ),
    references=(
        ("[Just confirming,|So] my booking reference is still {booking_ref}?",
         "[Yes|Correct], {booking_ref}[, same as before|; changes don't alter the reference|]."),
        ("[And the flight is still {flight_number} on {departure_date}?|We're still on {departure_date}, right?]",
         "[Yes|That's right], {flight_number} on {departure_date}."),
        ("[What was the cancellation rule again?|Remind me of the cancellation terms?]",
         "[It's|You have] {cancellation_condition}."),
    ),
    tools=(
        ToolSpec("get_booking", ("[Can you check the booking is all in order?|Can you see if the ticket is issued?|Is everything confirmed on the booking?]",),
                 ("{@wait}.", "[Pulling up the booking.|Checking the reservation.]"),
                 lambda f: {"booking_ref": f["booking_ref"]}, _travel_booking,
                 ("[Everything is {r_status}|The booking is {r_status}], [seat {r_seat} assigned.|and you're in seat {r_seat}.]",)),
        ToolSpec("search_flights", ("[What other flights are there that day?|Are there any earlier flights?|What are the alternatives if I need to move?]",),
                 ("[Let me search the alternatives.|Searching flights now.]",),
                 lambda f: {"route": f["route"], "date": f["departure_date"]}, _travel_flights,
                 ("[I see a few options, the first one at {r_first_depart}|There's one at {r_first_depart} with seats left], [but nothing needs to change yet.|we can keep that in mind.]",)),
        ToolSpec("get_hotel_reservation", ("[Can you check the room type?|Does my hotel booking include breakfast?]",),
                 ("{@wait}.",),
                 lambda f: {"hotel": f["hotel"]}, _travel_hotel,
                 ("[You have a {r_room} room|It's a {r_room}], [late checkout {r_late_checkout}.|and late checkout is {r_late_checkout}.]",)),
    ),
    updates=(
        UpdateSpec("departure_date", lambda ctx, f: _later_date(ctx, f, "departure_date", 1, 5), (
            ("[Okay, it's official|Decision made|Work confirmed it]: [I need to fly later|I can't travel on {old}]. [Can we move it?|What's the next option?]",
             "[Done|All set|Rebooked]: [you now fly on|the new departure date is] {departure_date}[, same flight number|]. [The hotel dates are shifted to match.|I've moved the hotel as well.|]"),
            ("[The airline sent me an email about a schedule change?|I got a notice that my flight was changed.]",
             "[Yes, they retimed it|That's right, the original departure was cancelled]: [your new date is|you're now booked on] {departure_date} [instead of {old}|]. {@sorry}."),
        )),
        UpdateSpec("fare_total", lambda ctx, f: ctx.money_near(f["fare_total"], 0.85, 1.35), (
            ("[So what's the total now?|Did the price change with all this?|What do I pay in the end?]",
             "[After the changes|With the new dates|Recalculated], [the total fare is now|your total comes to] {fare_total}[, compared to {old} before|]."),
        )),
        EMAIL_UPDATE,
        PHONE_UPDATE,
    ),
    recalls={
        "departure_date": ("[Sorry, when am I flying out again?|Wait, what's my departure date now?]",),
        "booking_ref": ("[What was the booking reference again?|Can you repeat my booking code?]",),
        "fare_total": ("And the total I'm paying is what, again?",),
        "hotel": ("Which hotel was it again?",),
    },
    key_facts=("booking_ref", "departure_date"),
    asides=(
        "[Airlines sometimes retime flights by a few minutes in the weeks before departure,|Schedules do shift a little closer to the date,] so I'd check the app the day before you fly.",
        "Everything is linked to the same booking, so a change to the flight automatically shows up in your itinerary email.",
        "[If you travel with only hand luggage, you can skip the bag drop and go straight to security.|With hand luggage only, online check-in saves you a queue at the airport.]",
        "[I'd keep a screenshot of the booking confirmation on your phone|It's a good idea to have the confirmation saved offline] in case the airport wifi is slow.",
        "[Hotels in that area get busy on weekends, so|Since it's a popular season,] it's good that the room is already confirmed.",
        "If anything changes on the airline's side, we get the notification too and will contact you with options straight away.",
        "[Travel insurance can be added to the booking at any point before departure, if you'd like that later.|You can still add travel insurance later, right up to the day before you fly.]",
        "[Local transport passes are often cheaper bought online in advance, by the way.|Tip: many cities there have contactless payment on public transport, so no need to buy paper tickets.]",
    ),
)


# --------------------------------------------------------------------------- SaaS account migration

def _saas_facts(ctx: Ctx) -> Facts:
    rng = ctx.rng
    company = rng.choice(("northwind", "brightline", "kestrel-labs", "orbital", "fernhill", "quarry-analytics"))
    return {
        "account_id": ("id", ctx.code("ACC-ddddd")),
        "workspace": ("entity", ctx.unique(lambda: f"{company}-{rng.choice(('analytics', 'ops', 'data', 'eu', 'prod'))}")),
        "plan": ("entity", rng.choice(("Business annual", "Team monthly", "Enterprise annual", "Growth annual"))),
        "seats": ("count", f"{rng.randrange(15, 400, 5)} seats"),
        "monthly_price": ("amount", ctx.money(300, 6000)),
        "migration_date": ("date", ctx.date(10, 40)),
        "migration_condition": ("condition", rng.choice((
            "the data export must finish before the cutover", "SSO stays on the old tenant until all admins have logged in once",
            "the old workspace remains read-only for 30 days after cutover"))),
        "decision": ("decision", rng.choice((
            "extend the trial by 30 days", "waive the migration fee", "keep the legacy pricing for the first year",
            "credit one month of the new plan"))),
    }


def _saas_account(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"account_id": f["account_id"], "workspace": f["workspace"], "plan": f["plan"], "seats_used": rng.randint(5, 60),
            "sso": _once(memo, "sso", lambda: rng.choice(("okta", "azure_ad", "google"))),
            "region": _once(memo, "region", lambda: rng.choice(("eu-west", "us-east")))}


def _saas_migration(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"account_id": f["account_id"], "phase": rng.choice(("export_running", "export_complete", "schema_mapping", "dry_run_ok")),
            "progress_pct": rng.randint(5, 95), "cutover": f["migration_date"]}


def _saas_api_usage(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"account_id": f["account_id"], "requests_24h": rng.randint(10_000, 900_000), "rate_limit_per_min": _once(memo, "rate", lambda: rng.choice((600, 1200, 3000))),
            "errors_429": rng.randint(0, 400)}


SAAS = Domain(
    name="saas",
    facts=_saas_facts,
    opening=(
        ("{@hi}, {customer_name} here, [IT lead|head of operations|the admin] [for|at] our [company|team]. We're [migrating|moving] [our workspace|workspace {workspace}] [to the new platform|over to your new plan] and [need help planning it|have questions].",
         "{@hi} {first}, [welcome|thanks for getting in touch]! [I see|I've found] account {account_id}, workspace {workspace}, [currently on|moving to] {plan}. [Let's plan this together.|Happy to walk you through it.|]"),
        ("[We'll need|We're at|Our headcount is] {seats} [on the new plan|after the migration|in total]. [What does that cost?|How is that billed?|What's the price for that?]",
         "[For {seats} on {plan}|With {seats}], [the price is|that comes to] {monthly_price} [per month|a month][, billed annually|]. [Does that match your budget?|Let me know if that needs adjusting.|]"),
        ("[When can we do the cutover?|What date do you suggest for the switch?|We'd like to move soon.]",
         "[I've pencilled in {migration_date} for the cutover.|The earliest slot is {migration_date}.|How about {migration_date} for the cutover?] [One condition:|Important:|Note that] {migration_condition}."),
        ("[Send the technical details to|Please use] {email}[ for the project|]. [My direct line is|Phone:] {phone}.",
         "{@ack_a}. [I've set|Saved] {email} and {phone} as [the migration contact|project contact]."),
        ("[We're nervous about paying double during the transition.|Is there anything you can do on price while we switch?|Our finance team will ask about overlap costs.]",
         "[Understood|Fair concern]. [After checking with our account team,|I've got approval:] we agreed to {decision}. [It's on your account now.|You'll see it on the next invoice.|]"),
    ),
    exchanges=(
        ("[How do we map our custom fields?|Will custom fields carry over?|What happens to our saved reports?]",
         "[Custom fields are mapped automatically when the names match|Saved reports migrate as long as their data sources exist|Anything that doesn't map shows up in the review screen], [and you can fix the rest by hand.|so nothing is silently dropped.]"),
        ("[Our SSO is on {sso}, does that still work?|Do users need new passwords?|Will people get logged out?]",
         "[SSO keeps working; you just add the new reply URL in {sso}|Users sign in through SSO, so no new passwords|Active sessions end at cutover and users sign in again]."),
        ("[We hit rate limits on the API last week|Our nightly sync keeps failing with 429 errors|Is the API limit higher on the new plan?]",
         "[The new plan raises the limit|Retries with backoff usually solve the 429s|I can see a spike around {clock} on your side], [and batching requests helps too.|and I'd stagger the nightly jobs by a few minutes.]"),
        ("[Can we test the migration first?|Is there a sandbox?|Can we do a dry run?]",
         "[Yes, a dry run copies everything into a sandbox|We can run a test migration on a copy of your data], [and it takes about {hours} hours for a workspace your size.|and nothing touches production.]"),
        ("[What about webhooks?|Will our integrations break?|Our Slack integration is important to us.]",
         "[Webhooks are re-registered during migration|Integrations move with the workspace, but tokens need re-authorizing|The Slack app needs one admin to reconnect it after cutover]."),
        ("[How do we handle users who left the company?|Can we clean up inactive users first?|Do deactivated users count as seats?]",
         "[Deactivated users don't count as seats|It's a good moment to clean up|You can bulk-deactivate from the admin console], [so it won't affect billing.|and I can send you a CSV of inactive users.]"),
        ("[Where is the data stored after the move?|Do you stay in the EU region?|Is there a data processing agreement?]",
         "[Your data stays in the same region|The DPA carries over unchanged|Data residency doesn't change], [and I can send the current DPA for your records.|nothing for legal to re-review.]"),
        ("[Our CSV import failed with an encoding error|The import choked on some special characters|Some rows were skipped during import]",
         "[That's usually a file saved as Windows-1252 instead of UTF-8|Re-saving as UTF-8 fixes it nearly every time|The skipped rows are listed in the import log], [so try exporting again with UTF-8.|and you can re-import just those.]"),
        ("[Do we need downtime?|Will the app be unavailable during cutover?|How long is the freeze?]",
         "[Plan for a read-only window of about {hours} hours|The cutover takes roughly {mins} minutes of read-only time], [best scheduled outside working hours.|so a {weekday} evening is ideal.]"),
        ("[Can we keep the old URLs?|Will bookmarks break?|Do links in our docs keep working?]",
         "[Old links redirect for 12 months|Redirects are set up automatically], [so bookmarks keep working.|and you can update docs at your own pace.]"),
        ("[Who on your side owns this?|Will we have a dedicated contact?|Is there a migration engineer assigned?]",
         "[A migration engineer is assigned once the date is confirmed|You'll have a named contact for the whole project|I'll stay on this case, and an engineer joins for the cutover]."),
        ("[Do API keys change after the migration?|Will our service accounts still work?|Do we need to rotate tokens?]",
         "[API keys keep working for {n} weeks after cutover|Service accounts migrate, but their tokens are re-issued], [and the console lists every key with its last use.|so plan a rotation in your secrets manager.]"),
        ("[Can we migrate teams in phases?|Could we move one department first?|Is a staged rollout possible?]",
         "[Phased migrations are possible per team|We usually recommend one pilot team first], [though shared dashboards need to move together.|and the rest a week later.]"),
        ("[How are audit logs handled?|Do we keep our audit history?|Can we export the audit log first?]",
         "[Audit logs migrate in full|You can export the audit log as CSV any time], [and retention follows your new plan.|so compliance has a copy.]"),
        ("[Our admins are in three time zones, what time is best?|When do you recommend doing the switch?|Weekend or weekday for the cutover?]",
         "[A weekday evening in your main time zone works well|Most customers pick a {weekday} evening], [because support staff are on shift.|so any issue is caught the next morning.]"),
        ("[Is there a checklist for the migration?|Do you have documentation we can share internally?|Can you send a runbook?]",
         "[Yes, I'll send the migration runbook|There's a checklist in the admin guide], [with a section for end-user communication.|and a template email for your staff.]"),
        ("[Do guest users migrate too?|What about external collaborators?|Our contractors have guest access.]",
         "[Guests migrate with their permissions|External collaborators keep access to shared spaces], [and they don't count as paid seats.|though they'll get a re-invite email.]"),
        ("[Can we rename the workspace during the move?|Can we change our subdomain?|Is it possible to merge two workspaces?]",
         "[Renaming is easy and can happen at any time|Merging workspaces is a separate project], [so let's keep the move itself simple.|and I'd do it after cutover.]"),
        ("[How do we roll back if something goes wrong?|Is there a rollback plan?|What if the cutover fails?]",
         "[The old workspace stays intact until you confirm|Rollback means pointing users back to the old workspace], [so you can always return within the window.|which takes a few minutes.]"),
        ("[Our security team wants a pen test report|Do you have SOC 2?|Security is asking for your ISO certificate].",
         "[I can share the SOC 2 Type II report under NDA|Our ISO 27001 certificate is on the trust page], [and the latest pen test summary too.|I'll send the link.]"),
        ("[Will dashboards load faster on the new platform?|Is the new platform faster?|We had performance issues with large reports.]",
         "[Most customers see faster dashboards|Large reports run on a new query engine], [especially above a million rows.|so it should improve noticeably.]"),
    ),
    references=(
        ("[Just checking,|Confirming:] we're still on for {migration_date}?",
         "[Yes|Confirmed], the cutover stays on {migration_date}."),
        ("[And|So] the account is {account_id} and we're at {seats}, correct?",
         "[Correct|Yes]: {account_id}, {seats}."),
        ("[What was the condition for the cutover again?|Remind me what has to happen before the switch?]",
         "[Just that|Only that] {migration_condition}."),
    ),
    tools=(
        ToolSpec("get_account", ("[Can you check our current usage?|What does our account look like right now?|Can you see how many seats we use?]",),
                 ("{@wait}.", "[Pulling up the account.|Looking at the account now.]"),
                 lambda f: {"account_id": f["account_id"]}, _saas_account,
                 ("[You're using {r_seats_used} seats right now, SSO via {r_sso}|Currently {r_seats_used} active seats, region {r_region}].",)),
        ToolSpec("check_migration_status", ("[How's the export going?|Where are we with the migration?|Is the dry run done?]",),
                 ("[Checking the migration job.|Let me look at the job status.]",),
                 lambda f: {"account_id": f["account_id"]}, _saas_migration,
                 ("[The job is at {r_phase}, {r_progress_pct}% done|Status: {r_phase} ({r_progress_pct}%)]. [On track.|No errors so far.|]",)),
        ToolSpec("get_api_usage", ("[Can you see our API usage?|How close are we to the rate limit?]",),
                 ("{@wait}.",),
                 lambda f: {"account_id": f["account_id"]}, _saas_api_usage,
                 ("[You made {r_requests_24h} requests in the last day, with {r_errors_429} rate-limit errors|Limit is {r_rate_limit_per_min} per minute; you hit it {r_errors_429} times yesterday].",)),
    ),
    updates=(
        UpdateSpec("migration_date", lambda ctx, f: _later_date(ctx, f, "migration_date", 3, 14), (
            ("[We need to push the cutover|Our quarter-end freeze got extended|Legal wants more time], [{old} won't work anymore|can we move it?]",
             "[No problem|Understood], [the cutover is rescheduled to|new cutover date:] {migration_date}. [I've told the migration engineer.|The dry run stays as planned.|]"),
        )),
        UpdateSpec("seats", lambda ctx, f: ctx.unique(lambda: f"{ctx.rng.randrange(20, 480, 5)} seats"), (
            ("[We're adding a team|We had a reorg|Headcount changed]: [we now need|make it] {seats} [instead of {old}|].",
             "[Updated|Done], [the plan is now for|you're set to] {seats}. [The price adjusts on the next invoice.|I'll send a revised quote.|]"),
        )),
        UpdateSpec("monthly_price", lambda ctx, f: ctx.money_near(f["monthly_price"], 0.7, 1.2), (
            ("[Finance wants the final number|What's the final monthly price?|Did the quote change?]",
             "[The revised quote is|With everything included, it's] {monthly_price} per month[, not {old} as first quoted|]."),
        )),
        EMAIL_UPDATE,
    ),
    recalls={
        "migration_date": ("[So when exactly is the cutover?|Remind me, what's the cutover date now?]",),
        "seats": ("How many seats did we settle on in the end?",),
        "monthly_price": ("What's the monthly price again? Finance is asking.",),
        "account_id": ("What's our account ID, for the ticket?",),
    },
    key_facts=("account_id", "migration_date"),
    asides=(
        "[Most teams your size finish the whole migration in two to three weeks, including testing.|A typical migration for a workspace like yours runs two to three weeks end to end.]",
        "I'd recommend telling your users a few days ahead so nobody is surprised by the sign-in prompt after the switch.",
        "[The migration engineer will share a short checklist before the cutover so nothing gets forgotten.|You'll get a checklist from the migration engineer the week before the switch.]",
        "[All of this is documented in the admin guide, and I'm happy to send the relevant sections.|The admin guide has screenshots of each step if your team prefers to follow along.]",
        "If your security team has questions, we can set up a short call with our solutions engineer.",
        "[Nothing in production changes until you approve the cutover, so there's no risk in preparing early.|Preparation steps don't touch production, so you can start whenever it suits you.]",
        "[The dry run also produces a report of anything that couldn't be mapped, which is a good checklist for your admins.|After the dry run you'll get a mapping report listing every object that needs attention.]",
        "[We'll keep this case open until the migration is done, so you have one thread for everything.|This case stays open for the whole project, so you can reply here any time.]",
    ),
)


# --------------------------------------------------------------------------- insurance claim

INSURED_CARS = ("2019 Mazda CX-5", "2021 Skoda Octavia", "2017 Volvo V60", "2020 Toyota Corolla")
INSURED_HOMES = ("kitchen ceiling and cabinets", "ground-floor living room", "bathroom and hallway floor")
CAR_CAUSES = ("hailstorm dented the roof and bonnet", "driver reversed into me in a car park",
              "tree branch fell on it in the storm", "delivery van scraped the whole side")
HOME_CAUSES = ("burst pipe flooded the kitchen", "leak from the flat upstairs", "storm blew in the window",
               "washing machine hose split overnight")


def _insurance_facts(ctx: Ctx) -> Facts:
    rng = ctx.rng
    year = ctx.start.year
    car = rng.random() < 0.5
    item = rng.choice(INSURED_CARS if car else INSURED_HOMES)
    ctx.extra.update(cause=rng.choice(CAR_CAUSES if car else HOME_CAUSES), repairer="garage" if car else "contractor",
                     stopgap="courtesy car" if car else "temporary place to stay")
    return {
        "claim_id": ("id", ctx.code(f"CLM-{year}-ddddd")),
        "policy_number": ("id", ctx.code("POL-ddddddd")),
        "insured_item": ("entity", item),
        "incident_date": ("date", ctx.date(-12, -2)),
        "claim_amount": ("amount", ctx.money(900, 9000)),
        "deductible": ("amount", ctx.money(100, 800)),
        "adjuster_date": ("date", ctx.date(3, 10)),
        "payout_condition": ("condition", rng.choice((
            "payout once the repair invoice is submitted within 30 days", "payout after the adjuster's inspection report is filed",
            "payout provided the police report number is added to the claim"))),
        "decision": ("decision", rng.choice((
            "cover a rental car for up to 10 days", "pay for emergency drying before the inspection", "waive the deductible",
            "use the customer's own repair shop"))),
    }


def _insurance_claim(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"claim_id": f["claim_id"], "policy": f["policy_number"], "status": rng.choice(("open", "under_review", "awaiting_documents")),
            "estimated": f["claim_amount"], "documents_received": _once(memo, "docs_received", lambda: rng.randint(1, 3))}


def _insurance_policy(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"policy": f["policy_number"], "coverage": _once(memo, "coverage", lambda: rng.choice(("comprehensive", "all-risk home", "third-party plus"))),
            "deductible": f["deductible"], "renewal_month": _once(memo, "renewal", lambda: rng.choice(("March", "July", "October")))}


def _insurance_docs(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    docs = ["photos", "repair_estimate", "police_report", "receipts"]
    got = memo["docs_received"] = min(4, memo.get("docs_received", 0) + rng.randint(0, 1)) or 1
    return {"claim_id": f["claim_id"], "received": docs[:got], "missing": docs[got:]}


INSURANCE = Domain(
    name="insurance",
    facts=_insurance_facts,
    opening=(
        ("{@hi}, [I'm|my name is] {customer_name}. [I need to file a claim|I want to report damage|I'm following up on a claim] [for my|on the] {insured_item}[, policy {policy_number}|].",
         "{@hi} {first}. {@sorry}. [I've opened|I've created|Your claim is registered as] claim {claim_id} under policy {policy_number}. [When did it happen?|Can you tell me when the incident happened?]"),
        ("[It happened on|The date was|That was] {incident_date}[, in the evening| around noon|]. [A {cause}.|Basically, a {cause}.|What happened: a {cause}.]",
         "[Thank you|{@ack_a}]. [I've recorded|Noted] {incident_date} as the incident date. [What's the estimated damage?|Do you have a repair estimate yet?]"),
        ("[The {repairer}|The {repairer}'s estimate|The estimate] says [around|about|roughly] {claim_amount}.",
         "[Understood|Okay], I've [entered|logged] {claim_amount} as the claimed amount. [Your deductible is|The deductible on your policy is] {deductible}. [An adjuster will visit on|The adjuster is booked for] {adjuster_date}."),
        ("[How do I get paid?|When would I get the money?|What happens next?]",
         "[The rule here is a|It's a|You get a] {payout_condition}. [Meanwhile,|Also,|Good news:] we agreed to {decision}[ given the circumstances|]."),
        ("[Please contact me at|Best way to reach me:] {email}[ or|, or call] {phone}.",
         "{@ack_a}. {email} and {phone} are [on the claim|saved for the adjuster]."),
    ),
    exchanges=(
        ("[What photos do you need?|How many pictures should I upload?|Do the photos need timestamps?]",
         "[Wide shots first, then close-ups of each damaged area|Around {n} to {n2} photos is usually enough|Timestamps help but aren't required], [uploaded through the claim portal.|and a photo of any serial numbers.]"),
        ("[Do I need a police report?|Should I call the police about this?|Is a police report required?]",
         "[For theft or a collision with another driver, yes|For weather damage, usually not|It helps if another party was involved], [and I'll tell you if it becomes necessary.|so let's see what the adjuster says.]"),
        ("[Can I start the repairs already?|Should I wait before fixing anything?|Can I clean up the mess?]",
         "[Please only do what's needed to prevent more damage|Temporary fixes are fine, keep the receipts|Wait for the adjuster before major repairs], [so the inspection isn't affected.|and take photos before you start.]"),
        ("[Will my premium go up?|Does this affect my no-claims bonus?|Is this going to cost me next year?]",
         "[It depends on fault and the claim size|A single weather-related claim usually doesn't affect it|Your no-claims bonus is protected on your policy], [and I can check the exact impact later.|so there's no change expected.]"),
        ("[The neighbour's fence is damaged too|My neighbour's car was also hit|Part of the damage is on the shared wall].",
         "[Your neighbour should contact their own insurer|That's handled under their policy|We can coordinate with their insurer], [but note it on your claim as well.|and I'll add a note.]"),
        ("[How long does the adjuster visit take?|Do I need to be home for the adjuster?|Will the adjuster call first?]",
         "[About {mins} minutes on site|Yes, someone should let them in|They call the day before to confirm the time window]."),
        ("[What counts as proof of ownership?|I don't have the receipt anymore|Do bank statements count as proof?]",
         "[Bank or card statements are fine|Photos of the item in use help too|A manual or box also works as supporting evidence]."),
        ("[My {kid} was really shaken by the whole thing|It was quite a scare, honestly|I still can't believe it happened].",
         "{@sorry}, {first}. [I'm glad everyone is okay.|The important thing is nobody was hurt.|We'll handle the rest.]"),
        ("[Is there a hotline for emergencies?|What if it gets worse overnight?|Who do I call at night?]",
         "[Our emergency line is open around the clock|For urgent damage at night, call the emergency line on your policy card]."),
        ("[Can I choose my own {repairer}?|Do I have to use your partner {repairer}?|Which {repairer}s do you work with?]",
         "[Partners handle billing directly with us|You can use your own {repairer}, we just need an itemised invoice|There are {n} partner {repairer}s near {city}]."),
        ("[Can I get the payout by bank transfer?|Where do I send my bank details?|How is the money paid?]",
         "[Payouts go by bank transfer|You can enter your bank details in the claim portal], [usually within {n} working days of approval.|securely, so please don't send them by email.]"),
        ("[My landlord wants to know about the claim|Do I need to inform my mortgage lender?|Should I tell my employer about the accident?]",
         "[You can share the claim number with them|That's up to you, but they may need a copy of the report], [and I can send a confirmation letter.|and we can talk to them directly if you authorise it.]"),
        ("[Does the policy cover my phone that was damaged too?|What about the laptop that got wet?|Are my personal belongings covered too?]",
         "[Personal belongings are covered up to the limit in your policy|It depends on your contents cover], [so add them to the claim with receipts.|and I'll check the exact limit.]"),
        ("[How do I track the claim online?|Is there an app for this?|Can I see the status somewhere?]",
         "[The claim portal shows every step|The app has a claims tab with live status], [and you'll get a notification when something changes.|using the same login as your policy.]"),
        ("[Will the adjuster need to see the damaged parts?|Should I keep the broken parts?|Can I throw away the damaged items?]",
         "[Keep damaged parts until the adjuster has seen them|Please keep everything until after the inspection], [or at least take detailed photos.|unless it's a health hazard.]"),
        ("[The {repairer} is asking for a deposit|The {repairer} wants money upfront|Do I have to pay the {repairer} first?]",
         "[Partner shops don't ask for deposits|If you use your own shop, you may have to pay and claim it back], [so let me know which shop you chose.|with the invoice.]"),
        ("[Is mould covered if it shows up later?|What if more damage appears next month?|Can I add damage later?]",
         "[You can add damage later on the same claim|Hidden damage found later is usually covered], [as long as it's related to the same incident.|if you report it promptly.]"),
        ("[I have a second policy with another insurer|Does it matter that my partner is also insured?|We have two home policies, long story].",
         "[Double insurance is handled between insurers|Tell us the other insurer's name], [so you don't get paid twice, but you are covered.|and we'll coordinate with them.]"),
        ("[Is there a {stopgap} while it's repaired?|How do I manage in the meantime?|Can I get a {stopgap}?]",
         "[That depends on your cover and what we agreed for this claim|A {stopgap} is often included on your cover], [and I'll check availability.|so I'll confirm by {weekday}.]"),
        ("[I found the original receipt!|My partner found the purchase invoice|I dug out the old bank statement with the purchase].",
         "[Great, please upload it to the claim|That's very helpful], [it speeds up the assessment.|the adjuster will be happy.]"),
    ),
    references=(
        ("[For my records,|Just to confirm,] the claim number is {claim_id}?",
         "[Yes|Correct], {claim_id}[ under policy {policy_number}|]."),
        ("[And the adjuster is still coming {adjuster_date}?|Is the visit still on {adjuster_date}?]",
         "[Yes|Confirmed], {adjuster_date}."),
        ("[What was the claimed amount again?|Remind me of the amount on the claim?]",
         "[It's|The claim is for] {claim_amount}[, minus your deductible of {deductible}|]."),
    ),
    tools=(
        ToolSpec("get_claim", ("[Can you check the status of my claim?|Has anything moved on the claim?|Where is my claim at?]",),
                 ("{@wait}.", "[Pulling up the claim.|Checking the claim file.]"),
                 lambda f: {"claim_id": f["claim_id"]}, _insurance_claim,
                 ("[The claim is {r_status}; documents received so far: {r_documents_received}|Status: {r_status}, {r_documents_received} document(s) on file].",)),
        ToolSpec("lookup_policy", ("[What exactly does my policy cover?|Can you check my coverage?]",),
                 ("[Looking up the policy.|Let me check the policy terms.]",),
                 lambda f: {"policy_number": f["policy_number"]}, _insurance_policy,
                 ("[You have {r_coverage} cover, renewing in {r_renewal_month}|Your cover is {r_coverage}].",)),
        ToolSpec("list_claim_documents", ("[Did you get the documents I uploaded?|Is anything missing from my file?]",),
                 ("{@wait}.",),
                 lambda f: {"claim_id": f["claim_id"]}, _insurance_docs,
                 ("[We have {r_received}; still missing: {r_missing}|Received: {r_received}. Outstanding: {r_missing}].",)),
    ),
    updates=(
        UpdateSpec("adjuster_date", lambda ctx, f: _later_date(ctx, f, "adjuster_date", 1, 6), (
            ("[The adjuster called to reschedule|I got a call, the adjuster can't come on {old}|The visit needs to move].",
             "[Yes, I see the change|That's right]: the adjuster visit is now [on|scheduled for] {adjuster_date}. {@sorry}."),
        )),
        UpdateSpec("claim_amount", lambda ctx, f: ctx.money_near(f["claim_amount"], 0.6, 1.4), (
            ("[The final repair quote came in|The contractor revised the estimate|I have the final invoice now].",
             "[Thanks, I've updated the claim|Updated]: the claimed amount is now {claim_amount} [(previously {old})|instead of {old}|]."),
            ("[Did the adjuster approve an amount?|What did the adjuster decide?|Is there an approved figure yet?]",
             "[Yes|The report is in]: the approved amount is {claim_amount}[, revised from {old}|]. [Your deductible still applies.|Payment follows the condition we discussed.|]"),
        )),
        EMAIL_UPDATE,
        PHONE_UPDATE,
    ),
    recalls={
        "claim_amount": ("[And what's the approved amount now?|So how much is the claim for in the end?]",),
        "adjuster_date": ("[When is the adjuster coming again?|Remind me of the adjuster's visit date?]",),
        "claim_id": ("[What's my claim number again?|Can you repeat the claim reference?]",),
        "deductible": ("How much was my deductible?",),
    },
    key_facts=("claim_id", "claim_amount"),
    asides=(
        "[Claims like this usually take two to four weeks from the first report to payment.|Most claims of this kind are settled within a few weeks, depending on the paperwork.]",
        "Please keep all receipts for anything you spend because of the damage, even small things, since they can often be added to the claim.",
        "[The adjuster's report is shared with you, so you can see exactly how the amount was assessed.|You'll receive a copy of the adjuster's report once it's filed.]",
        "[If you're unsure whether something counts, add it anyway; it's easier for us to remove an item than to reopen the claim.|When in doubt, include it in the claim and the adjuster will decide.]",
        "[Everything you upload goes straight into the claim file, so the adjuster sees it before the visit.|The adjuster reads the whole file before the visit, including your photos.]",
        "[I know it's a lot of paperwork, but each document speeds up the decision.|The more complete the file, the faster the payout tends to be.]",
        "Your policy documents are also available in the portal if you'd like to read the exact wording of the cover.",
        "[We'll send you a text whenever the claim status changes.|You'll get an update by email at each stage of the claim.]",
    ),
)


# --------------------------------------------------------------------------- tech support with tools

def _tech_facts(ctx: Ctx) -> Facts:
    rng = ctx.rng
    return {
        "ticket_id": ("id", ctx.code("TCK-ddddd")),
        "device": ("entity", rng.choice(("Lumen AX3000 router", "Lumen MeshPro node", "Corvid NAS-4", "Halo 5G hotspot",
                                          "Strata WiFi 6 gateway"))),
        "serial_number": ("id", ctx.code("SN-xxxx-dddd")),
        "error_code": ("id", ctx.code("E-dddd")),
        "firmware": ("entity", ctx.unique(lambda: f"v{rng.randint(2, 4)}.{rng.randint(0, 9)}.{rng.randint(0, 12)}")),
        "appointment_date": ("date", ctx.date(2, 9)),
        "replacement_condition": ("condition", rng.choice((
            "the replacement ships once the RMA for the old unit is registered",
            "the replacement ships after the old unit's serial is deactivated",
            "the swap happens only if diagnostics fail twice"))),
        "decision": ("decision", rng.choice((
            "replace the router under warranty", "send a technician at no charge", "extend the warranty by 12 months",
            "credit one month of service"))),
    }


def _tech_diag(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"serial": f["serial_number"], "uptime_h": rng.randint(1, 400), "wan": rng.choice(("up", "flapping", "down")),
            "packet_loss_pct": round(rng.uniform(0, 18), 1), "last_error": f["error_code"], "firmware": f["firmware"]}


def _tech_warranty(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"serial": f["serial_number"], "in_warranty": True, "months_left": _once(memo, "warranty", lambda: rng.randint(2, 22))}


def _tech_ticket(rng: random.Random, f: Mapping[str, str], memo: dict[str, Any]) -> dict[str, Any]:
    return {"ticket": f["ticket_id"], "priority": _once(memo, "priority", lambda: rng.choice(("P2", "P3"))), "visit": f["appointment_date"],
            "assignee": _once(memo, "assignee", lambda: rng.choice(("field-team-north", "field-team-east", "tier2")))}


TECH = Domain(
    name="tech",
    facts=_tech_facts,
    opening=(
        ("{@hi}[,|.] [{customer_name} here|This is {customer_name}]. [My|The] {device} [keeps dropping the connection|shows a red light|won't connect to the internet] [since yesterday|since this morning|all week].",
         "{@hi} {first}. {@sorry}. [I've opened|Your case is] ticket {ticket_id}. [Could you read me the serial number on the bottom of the device?|What's the serial number on the label?]"),
        ("[It says|The label reads|Serial is] {serial_number}[, I think|]. [The screen|The app|The admin page] [shows|says] error {error_code}.",
         "{@ack_a}. {error_code} [usually points to a WAN sync problem|means the unit failed a self-test|often comes from a corrupted config]. [It's running firmware|The unit reports firmware] {firmware}."),
        ("[If you need to reach me,|For the ticket,] [my email is|use] {email} [and my number is|, phone] {phone}.",
         "[Saved|Noted]: {email}, {phone}."),
        ("[What if nothing works?|And if it's broken?|Can you just replace it?]",
         "[If it comes to that,|Worst case,] we agreed to {decision}[ since the unit is under warranty|]. [Just so you know,|Note that] {replacement_condition}."),
        ("[Can someone come look at the wiring too?|Is a technician visit possible?|I'd like someone to check the line.]",
         "[Yes|Sure], [a technician visit is booked for|I've scheduled a technician for] {appointment_date}. [They'll check the line and the wall socket.|You'll get a time window the day before.|]"),
    ),
    exchanges=(
        ("[I restarted it like you said|Okay, I unplugged it for 30 seconds|Done, it's rebooting now].",
         "[Great|Perfect|Thanks]. [Wait until the {light} light stops blinking, about {n} minutes.|Let me know what the lights do once it's back up.|Give it a couple of minutes to settle.]"),
        ("[The {light} light is blinking now|Now there's a solid {light} light|The lights are all {light}].",
         "[That means it's still negotiating with the line|That's the normal boot sequence|That usually means it found the line but no internet yet]. [Let's give it another minute.|Let's check the cable next.|]"),
        ("[Which cable goes where?|There are two grey cables, which one is the WAN?|Is the yellow port the right one?]",
         "[The WAN cable goes into the port marked in blue|The cable from the wall socket goes into the WAN port|Yellow ports are for local devices, the WAN port is separate], [make sure it clicks in.|and try reseating it.]"),
        ("[Speed test says {n}{n2} Mbps down|I ran a speed test: {n} Mbps|The speed test didn't even finish].",
         "[That's well below your plan|Hmm, that's low for your line|That points to a line issue], [so let's try a different channel.|which the technician can measure properly.|let's try a wired test to rule out Wi-Fi.]"),
        ("[Should I change the Wi-Fi channel?|Is interference from neighbours a thing?|Could the microwave be the problem?]",
         "[In a busy building, channel interference is common|Microwaves can disturb 2.4 GHz Wi-Fi|Switching to 5 GHz often helps], [so let's try channel {n2}{n}.|and auto-channel usually picks a quiet one.]"),
        ("[My laptop connects but my phone doesn't|Only the TV loses connection|Wired works fine, only Wi-Fi drops].",
         "[That suggests a Wi-Fi problem rather than the line|Then the line is fine and we focus on Wi-Fi|Some older devices struggle with WPA3], [so let's try separating the 2.4 and 5 GHz networks.|let's try mixed WPA2/WPA3 mode.]"),
        ("[Can I update the firmware myself?|Is there a newer firmware?|Does the router update automatically?]",
         "[Updates install automatically at night|You can trigger an update from the admin page under Maintenance], [but please don't unplug it while it runs.|it takes about {mins} minutes.]"),
        ("[I factory reset it, was that okay?|I pressed the reset button with a pin|Oops, I think I reset everything].",
         "[That's fine, it just means we set it up again|No harm done, we'll reconfigure it|Okay, then it's back to defaults], [your Wi-Fi name is on the sticker now.|let's run the setup wizard together.]"),
        ("[The admin page won't load|I can't log in to 192.168.1.1|It asks for a password I don't know].",
         "[Try http://192.168.1.1 in a private window|The default password is on the sticker under the device|Clear the browser cache and try again]."),
        ("[Is there an outage in my area?|Are other people in {city} having problems?|Is it just me?]",
         "[There's no known outage around you right now|I don't see a wider outage], [so it's likely local to your setup.|so let's keep troubleshooting the unit.]"),
        ("[I work from home, I really need this working by {weekday}|I have video calls all day tomorrow|My {kid} has an online exam this week].",
         "[Understood, I'll prioritise this|I'll flag the urgency on the ticket|Let's make sure you have a workaround], [and a mobile hotspot could help in the meantime.|and I can enable mobile backup on your account.]"),
        ("[Could it be the power adapter?|The adapter feels very hot, is that normal?|Can I use a different power supply?]",
         "[Warm is normal, too hot to touch isn't|Only use the original adapter, rated 12 V], [so let's note that for the technician.|a wrong one can cause random reboots.]"),
        ("[I moved the router to the hallway|The router is in a cupboard, is that bad?|Should the router be higher up?]",
         "[Placing it higher and in the open helps a lot|Cupboards and thick walls block the signal], [try it on a shelf for a day.|and keep it away from the TV.]"),
        ("[Can I use my own router instead?|Is bridge mode an option?|Can I put it in modem-only mode?]",
         "[Bridge mode is available under Advanced settings|You can use your own router behind it in bridge mode], [though we can only support our own unit.|but let's first fix the line itself.]"),
        ("[The smart TV app buffers constantly|Streaming works but gaming lags|Video calls freeze every few minutes].",
         "[That fits the packet loss we're seeing|Latency spikes would explain that], [so let's keep troubleshooting the line.|and quality of service settings might help a bit.]"),
        ("[How do I see which devices are connected?|Can I block a device on the network?|Someone might be using my Wi-Fi.]",
         "[The connected devices list is under Network in the app|You can pause or block any device in the app], [and change the Wi-Fi password if in doubt.|which also frees up bandwidth.]"),
        ("[Is the mesh node needed?|Should I add a repeater?|Would a second access point help upstairs?]",
         "[A mesh node helps for a second floor|Repeaters halve the speed, mesh is better], [but let's fix the main line first.|so I'd wait until the line is stable.]"),
        ("[What's the 5 GHz network for?|Why do I have two Wi-Fi names?|Should I join the 2.4 or 5 network?]",
         "[5 GHz is faster at short range, 2.4 GHz reaches further|Use 5 GHz near the router and 2.4 GHz far away], [or enable band steering to combine them.|both work with the same password.]"),
        ("[Can the technician also mount the router on the wall?|Will the technician need access to the basement?|How much time should I block for the visit?]",
         "[Wall mounting is possible if you have the bracket|They'll need access to where the line enters the building|Plan for about {mins} minutes, sometimes up to an hour], [and they'll call before arriving.|]"),
        ("[I'm getting a DNS error in the browser|Some websites don't load but others do|The browser says server not found].",
         "[Try switching DNS to automatic in the app|That points to a DNS issue, not the line], [and restart the browser after.|let's flush the DNS cache on your laptop.]"),
        ("[Does this affect my landline too?|Our phone line is also crackling|The TV box also lost its connection].",
         "[The phone runs over the same line, so yes|Line noise would affect both], [which the technician will measure.|so it's good you mentioned it.]"),
    ),
    references=(
        ("[For reference,|Just confirming] the ticket is {ticket_id}?",
         "[Yes|Correct], ticket {ticket_id}[ for serial {serial_number}|]."),
        ("[And the technician still comes {appointment_date}?|The visit is still on {appointment_date}, right?]",
         "[Yes|Confirmed], {appointment_date}."),
        ("[It showed {error_code} again just now.|Same error, {error_code}.]",
         "[Thanks, I've logged another {error_code} on the ticket.|Noted, that's the same {error_code} as before.]"),
    ),
    tools=(
        ToolSpec("run_diagnostics", ("[Can you run a check from your side?|Can you see the router remotely?|Can you test the line from there?]",),
                 ("[Running remote diagnostics now.|{@wait}, I'll run diagnostics.]",),
                 lambda f: {"serial": f["serial_number"]}, _tech_diag,
                 ("[The WAN link is {r_wan} with {r_packet_loss_pct}% packet loss|Diagnostics: WAN {r_wan}, packet loss {r_packet_loss_pct}%, uptime {r_uptime_h} hours].",)),
        ToolSpec("check_warranty", ("[Is it still under warranty?|How long is the warranty on this?]",),
                 ("{@wait}.",),
                 lambda f: {"serial": f["serial_number"]}, _tech_warranty,
                 ("[Yes, {r_months_left} months of warranty left|It's covered for another {r_months_left} months].",)),
        ToolSpec("get_ticket", ("[Is anyone actually working on my ticket?|Who has my ticket?]",),
                 ("[Checking the ticket.|Let me see who has it.]",),
                 lambda f: {"ticket_id": f["ticket_id"]}, _tech_ticket,
                 ("[It's with {r_assignee}, priority {r_priority}|{r_assignee} owns it at priority {r_priority}].",)),
    ),
    updates=(
        UpdateSpec("appointment_date", lambda ctx, f: _later_date(ctx, f, "appointment_date", 1, 5), (
            ("[The technician can't come on {old}?|I got a text that the visit moved.|I need to move the technician visit.]",
             "[Yes|Right], [the visit is rebooked for|new technician date:] {appointment_date}. {@sorry}."),
        )),
        UpdateSpec("firmware", lambda ctx, f: ctx.unique(lambda: f"v{ctx.rng.randint(3, 5)}.{ctx.rng.randint(0, 9)}.{ctx.rng.randint(0, 12)}"), (
            ("[It just updated itself overnight|I see a new firmware on the admin page|The app says the firmware changed].",
             "[Yes, the unit now runs|I can see it's on] {firmware}[, replacing {old}|]. [That release fixes a sync bug.|Let's see if it helps.|]"),
        )),
        EMAIL_UPDATE,
        PHONE_UPDATE,
    ),
    recalls={
        "appointment_date": ("[When is the technician coming again?|Remind me of the technician date?]",),
        "ticket_id": ("[What was the ticket number?|Can you give me the ticket ID again?]",),
        "firmware": ("Which firmware is it on now?",),
        "serial_number": ("What serial number did I give you?",),
    },
    key_facts=("ticket_id", "serial_number"),
    asides=(
        "[These intermittent drops are often caused by line noise rather than the router itself,|Connection drops like this are usually a line issue, not the device,] which is why the technician will measure the line as well.",
        "[If the lights change while we talk, just tell me what you see; it helps narrow things down.|Do tell me if any of the lights change colour, that gives us clues.]",
        "[Everything we try is logged on the ticket, so the technician won't repeat the same steps.|I'm noting every step on the ticket so the field team has the full history.]",
        "[Wired connections are always more stable, so for important calls a cable is the safest option for now.|As a workaround, a network cable for your laptop avoids the Wi-Fi issue entirely.]",
        "[Firmware updates run automatically overnight, so you don't need to do anything there.|The router checks for firmware updates every night around 3am.]",
        "[If the connection drops completely, you can enable the mobile backup in the app as a stopgap.|The app also shows a live status page for your line, which is handy while we troubleshoot.]",
        "[Restarting the router once a week doesn't hurt, but it shouldn't be necessary if the line is healthy.|A healthy setup shouldn't need regular restarts, so we'll get to the bottom of it.]",
        "[Thick walls and mirrors can block Wi-Fi more than people expect.|Wi-Fi signals struggle with concrete walls, fish tanks and large mirrors.]",
    ),
)


DOMAINS: dict[str, Domain] = {d.name: d for d in (SUPPORT, TRAVEL, SAAS, INSURANCE, TECH)}

# Filler variables: random every time a template renders.
FILLER_CHOICES: dict[str, tuple[str, ...]] = {
    "weekday": WEEKDAYS,
    "time_of_day": ("morning", "afternoon", "evening"),
    "weather": ("pouring", "freezing", "boiling hot", "really windy", "snowing", "grey and drizzly"),
    "city": ("Leeds", "Porto", "Denver", "Utrecht", "Lyon", "Krakow", "Austin", "Gothenburg", "Valencia", "Cork"),
    "gadget": ("phone", "tablet", "old laptop", "work phone"),
    "kid": ("son", "daughter", "toddler", "partner"),
    "pet": ("cat", "dog", "parrot", "puppy"),
    "part": ("handle", "panel", "corner", "lid", "base", "strap", "display"),
    "extra": ("phone case", "desk mat", "travel mug", "pair of socks", "charging cable"),
    "light": ("orange", "red", "white", "blue", "green"),
    "open_hours": ("8am to 8pm on weekdays", "9 to 6, Monday to Saturday", "around the clock"),
    "sso": ("Okta", "Azure AD", "Google Workspace", "OneLogin"),
}
