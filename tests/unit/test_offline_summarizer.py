"""The offline summarizer: facts from realistic conversations, merges, narrative, text summaries, caps, determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfold.core.events import Fact, ToolCall
from memfold.core.ports import MessageRecord, SummaryInput
from memfold.core.tokens import counter
from memfold.projections.fact_extraction import FactBook, extract_facts
from memfold.projections.offline_summarizer import RULES_VERSION, OfflineSummarizer

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
TOKENS = counter()
SUMMARIZER = OfflineSummarizer()


def conversation(*items: tuple, start: int = 0) -> tuple[MessageRecord, ...]:
    out = []
    for i, item in enumerate(items, start=start):
        role, content, *extra = item
        out.append(
            MessageRecord(
                tenant_id="t", conversation_id="c", index=i, seq=i + 1, event_id=f"e{i}", role=role,
                content=content, tokens=0, occurred_at=T0, **(extra[0] if extra else {}),
            )
        )
    return tuple(out)


def as_dict(facts) -> dict[str, tuple[str, str]]:
    return {f.key: (f.value, f.category) for f in facts}


REFUND_CHAT = conversation(
    ("user", "Hi, my name is Maria Lopez. I'd like to cancel order #1234, it hasn't shipped yet."),
    ("assistant", "I can help with that. Your order totals $50.00."),
    ("user", "Can I get my money back? My email is maria.lopez@example.com."),
    ("assistant", "Yes. Refunds are possible within 30 days provided that the item is unused. "
                  "I've approved a refund of $50.00 to your card."),
    ("user", "Great, that works for me."),
    ("assistant", "Your order #1234 has been cancelled. You will see the refund by March 8."),
)


def facts_of(messages, existing=()) -> dict[str, tuple[str, str]]:
    out = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=messages, existing_facts=existing))
    return as_dict(out.facts)


def of_category(facts: dict[str, tuple[str, str]], category: str) -> dict[str, str]:
    """The ``key: value`` of ``facts`` (as :func:`facts_of` gives them) of one category."""
    return {k: v for k, (v, c) in facts.items() if c == category}


# --------------------------------------------------------------------------- extraction


def test_refund_conversation_yields_the_seed_000_kind_of_facts():
    facts = facts_of(REFUND_CHAT)
    assert facts["order_id"] == ("#1234", "ENTITY")
    assert facts["customer_name"] == ("Maria Lopez", "ENTITY")
    assert facts["email"] == ("maria.lopez@example.com", "ENTITY")
    assert facts["refund_amount"] == ("$50.00", "NUMERIC")
    assert facts["order_total"] == ("$50.00", "NUMERIC")
    assert facts["refund_condition"] == ("Refunds are possible within 30 days provided that the item is unused", "CONDITION")
    assert facts["refund_approved"][1] == "DECISION" and "approved a refund of $50.00" in facts["refund_approved"][0]
    assert facts["order_status"] == ("cancelled", "STATE")
    assert facts["refund_date"] == ("March 8", "ENTITY")
    assert facts["topic"] == ("order cancellation", "GENERAL")


def test_ids_in_their_usual_spellings():
    facts = facts_of(conversation(
        ("user", "My order ORD-88231 arrived broken, ticket #4521 is open."),
        ("assistant", "I also see order number 55123 on your account, case CASE-9912."),
    ))
    assert facts["order_id"] == ("55123", "ENTITY")  # the latest mention wins
    assert facts["ticket_id"] == ("#4521", "ENTITY")
    assert facts["case_id"] == ("CASE-9912", "ENTITY")
    one_message = facts_of(conversation(("user", "Orders ORD-1001 and ORD-1002 are both late")))
    assert one_message["order_id"] == ("ORD-1001, ORD-1002", "ENTITY")


def test_amounts_with_currencies_dates_and_phone():
    facts = facts_of(conversation(
        ("user", "I was charged 50.00 EUR on 2024-03-02 but the price was €120. Call me at +44 20 7946 0958."),
        ("assistant", "We can offer a store credit of $15 and the delivery is expected on March 3rd."),
    ))
    assert facts["charged_amount"] == ("50.00 EUR", "NUMERIC")
    assert facts["price"] == ("€120", "NUMERIC")
    assert facts["credit_amount"] == ("$15", "NUMERIC")
    assert facts["date_0"] == ("2024-03-02", "ENTITY")
    assert facts["delivery_date"] == ("March 3rd", "ENTITY")
    assert facts["phone"] == ("+44 20 7946 0958", "ENTITY")


def test_an_amount_or_a_date_said_as_not_the_value_is_no_fact():
    facts = facts_of(conversation(
        ("assistant", "With everything included, it's £3,347.10 per month, not £4,200.70 as first quoted."),
        ("assistant", "The installer comes on May 5 rather than May 3, and not on 2025-05-04 either."),
    ))
    values = {value for value, _ in facts.values()}
    assert "£3,347.10" in values and "May 5" in values
    assert not values & {"£4,200.70", "May 3", "2025-05-04"}, facts


def test_a_value_said_instead_of_a_held_one_is_that_facts_new_value():
    out = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=conversation(
        ("assistant", "For 215 seats on Team monthly, the price is £4,200.70 a month."),
        ("user", "Finance wants the final number."),
        ("assistant", "With everything included, it's £3,347.10 per month, not £4,200.70 as first quoted."),
        ("assistant", "Your installation is booked for May 3."),
        ("assistant", "Sorry, my mistake: the installer comes on May 5, not on May 3."),
    )))
    current = {f.key: f.value for f in out.facts if f.superseded_by is None}
    assert current["price"] == "£3,347.10"
    assert [(f.value, f.superseded_by) for f in out.facts if f.key == "price" and f.superseded_by] == [
        ("£4,200.70", "£3,347.10")]
    dated = {k: v for k, v in current.items() if "May" in v}
    assert list(dated.values()) == ["May 5"], current  # one date: the installation's, changed
    assert not [k for k in current if k.startswith("amount")], current


def test_an_amount_said_of_a_thing_is_that_things():
    facts = facts_of(conversation(
        ("user", "I reallocated tasks to avoid a $2,000 penalty, but I'm wondering how to plan ahead."),
        ("user", "We celebrated with a $500 team lunch at The Blue Lagoon."),
        ("user", "I rejected a $4,000 freelance offer to avoid risking my work-life balance."),
        ("user", "I managed to avoid a $1,200 penalty by rescheduling a client call."),
        ("user", "Attending the workshop for $75 could help, and I earn $85,000 annually."),
        ("user", "I bought her a $50 gift card."),
        ("user", "I saved $10 compared to May; the $30 seems steep."),
    ))
    assert facts["penalty_amount"] == ("$2,000", "NUMERIC")
    assert facts["penalty_amount_2"] == ("$1,200", "NUMERIC")  # another penalty, not a change of the first
    assert facts["team_lunch_amount"] == ("$500", "NUMERIC")
    assert facts["freelance_offer_amount"] == ("$4,000", "NUMERIC")  # not the "balance" named after it
    assert facts["credit_amount"] == ("$50", "NUMERIC")  # a gift card is a credit, as its keyword says
    assert facts["amount_4"] == ("$75", "NUMERIC") and facts["amount_4_2"] == ("$85,000", "NUMERIC")  # nothing named
    # No determiner before the amount, or a verb after it: no thing is named.
    assert facts["amount_6"] == ("$10", "NUMERIC") and facts["amount_6_2"] == ("$30", "NUMERIC")


def test_a_date_is_named_by_the_thing_it_is_the_date_of():
    facts = facts_of(conversation(
        ("assistant", "I have your booking: flight AZ420 departing March 4, 2025."),
        ("assistant", "I've pencilled in 21 February 2025 for the cutover."),
        ("user", "It happened on January 27, 2025. A branch fell on the car."),
        ("assistant", "Noted January 27, 2025 as the incident date."),
        ("user", "I'm nervous about my first therapy session with Sara on March 10."),
        ("user", "We had a team lunch at The Blue Lagoon on August 30."),
        ("user", "I'm aiming for 4,200 words by May 9 and I'll see you on June 2."),
        ("user", "We moved the plants on June 16, then a pottery class on June 20 for the best results."),
    ))
    assert facts["departure_date"] == ("March 4, 2025", "ENTITY")
    assert facts["cutover_date"] == ("21 February 2025", "ENTITY")  # named after the date
    assert facts["incident_date"] == ("January 27, 2025", "ENTITY")  # and the bare copy of message 2 is gone
    assert not [k for k, (v, _) in facts.items() if v == "January 27, 2025" and k != "incident_date"], facts
    assert facts["session_date"] == ("March 10", "ENTITY")  # over the name between
    assert facts["lunch_date"] == ("August 30", "ENTITY")  # over the place between
    # Only events: a count to reach by a date, a person, the plants moved name nothing.
    assert facts["date_6"] == ("May 9", "ENTITY") and facts["date_6_2"] == ("June 2", "ENTITY")
    assert facts["date_7"] == ("June 16", "ENTITY") and facts["class_date"] == ("June 20", "ENTITY")


def test_a_value_no_keyword_names_takes_the_noun_of_its_clause():
    facts = facts_of(conversation(
        ("assistant", "Okay, I've entered $4,181.05 as the claimed amount. Your deductible is $751.25. "
                      "The adjuster is booked for 2025-10-10."),
        ("assistant", "Pickup is booked for 2025-02-06, and your deposit was €200."),
        ("assistant", "That is 2025-03-01 then."),
    ))
    assert facts["deductible_amount"] == ("$751.25", "NUMERIC")
    assert facts["claimed_amount"] == ("$4,181.05", "NUMERIC")  # named after it: "as the claimed amount"
    assert facts["adjuster_date"] == ("2025-10-10", "ENTITY")
    assert facts["pickup_date"] == ("2025-02-06", "ENTITY")
    assert facts["deposit_amount"] == ("€200", "NUMERIC")
    assert facts["date_2"] == ("2025-03-01", "ENTITY")  # "That is": a pronoun names nothing
    assert not any(k.startswith("amount") for k in facts)
    # The name after it is the key a later statement of that thing updates.
    updated = extract_facts(conversation(
        ("assistant", "Okay, I've entered $4,181.05 as the claimed amount."),
        ("assistant", "Updated: the claimed amount is now $4,600.00 instead of $4,181.05."),
    ))
    assert [(f.key, f.value, f.superseded_by) for f in updated] == [
        ("claimed_amount", "$4,181.05", "$4,600.00"), ("claimed_amount", "$4,600.00", None)]
    # Only "as the <name> amount": "as the amount" or "as a fee" is not this rule's.
    bare = facts_of(conversation(("assistant", "I've entered $90.00 as the amount, and $12 as an extra.")))
    assert bare["amount_0"] == ("$90.00", "NUMERIC")
    # An unnamed copy of a named value is no fact of its own, whichever comes first.
    later = facts_of(conversation(("user", "Okay, $7 then."), ("assistant", "Your refund is now $7.")))
    assert later["refund_amount"] == ("$7", "NUMERIC") and not any(k.startswith("amount") for k in later)
    earlier = facts_of(conversation(("assistant", "Your refund is $7."), ("assistant", "Okay, $7 then.")))
    assert earlier["refund_amount"] == ("$7", "NUMERIC") and not any(k.startswith("amount") for k in earlier)


def test_agreed_condition_and_short_agreement_refers_to_the_offer():
    facts = facts_of(conversation(
        ("assistant", "I can offer a replacement as long as you send the broken one back by Friday."),
        ("user", "Deal, agreed."),
    ))
    assert facts["replacement_condition"] == (
        "I can offer a replacement as long as you send the broken one back by Friday", "CONDITION")
    value, category = facts["replacement_agreed"]
    assert category == "DECISION" and value.startswith("Deal, agreed (re: I can offer a replacement")


def test_a_bare_deal_accepts_the_offer_named_by_what_it_names_first():
    facts = facts_of(conversation(
        ("assistant", "I've set up a refund of 310.40 EUR. One condition: it's a refund within 14 days provided the item "
                      "is returned unused."),
        ("user", "Deal."),
    ))
    value, category = facts["refund_accepted"]  # not "order_chosen" (the item, named last, is the order's)
    assert category == "DECISION" and value.startswith("Deal (re: I've set up a refund of 310.40 EUR")
    chose = facts_of(conversation(("assistant", "We can ship it by courier or by post."), ("user", "Let's go with the courier.")))
    assert [k for k in chose if k.endswith("_chosen") or k.startswith("decision")]
    assert not [k for k in chose if k.endswith("_accepted")]


def test_an_offer_that_leaves_the_choice_to_the_listener_does_not_replace_a_condition():
    facts = facts_of(conversation(
        ("assistant", "It's a refund within 14 days provided the item is returned unused."),
        ("assistant", "I'll keep the refund unless you prefer to wait."),
        ("assistant", "I'll book the pickup unless you'd rather drop it off."),
    ))
    assert facts["refund_condition"] == ("It's a refund within 14 days provided the item is returned unused", "CONDITION")
    assert not [k for k, (_, category) in facts.items() if category == "CONDITION" and k != "refund_condition"]
    kept = facts_of(conversation(("assistant", "No refund unless the item is returned unused.")))
    assert kept["refund_condition"] == ("No refund unless the item is returned unused", "CONDITION")


def test_an_unnamed_condition_about_something_else_replaces_the_last_without_a_was():
    book = FactBook()
    book.put_unnamed_condition("You'll get an email once it's paid out", 28)
    book.put_unnamed_condition("Any sturdy box works, as long as the display is protected", 50)
    (only,) = book.entries()
    assert (only.key, only.value, only.history) == ("condition", "Any sturdy box works, as long as the display is protected", [])
    book.put_unnamed_condition("Any sturdy box works, as long as the display is protected", 60)  # said again
    assert [(e.key, e.source) for e in book.entries()] == [("condition", 60)]
    changed = FactBook()
    changed.put_unnamed_condition("Returns are free as long as you ship within 14 days", 1)
    changed.put_unnamed_condition("Returns are free as long as you ship within 30 days", 5)
    (current,) = changed.entries()
    assert current.key == "condition" and current.value.endswith("within 30 days")
    assert [h.value for h in current.history] == ["Returns are free as long as you ship within 14 days"]
    demo = facts_of(conversation(("assistant", "You'll get an email once it's paid out."),
                                 ("assistant", "Any sturdy box works, as long as the display is protected.")))
    assert demo["condition"] == ("Any sturdy box works, as long as the display is protected", "CONDITION")


def test_provided_as_a_verb_or_adjective_and_advice_set_no_condition():
    # Sentences from long assistant explanations (BEAM chats) that became "condition" facts.
    for text in [
        "The provided code demonstrates a simplified comparison between a monolith and microservices.",
        "By following these steps and using the provided tools, you can manage your tasks.",
        "The shoe provided the necessary support and comfort, contributing to your improved performance.",
        "The speed-up can be attributed to the automation provided by EndNote.",
        "Maintaining transparency and providing clear explanations can help prevent misunderstandings.",
        "Once you have drafted your will, it's important to have it reviewed by an attorney.",
        "If you are considering new tools for your writing, here are some options with trial periods.",
        "If you feel comfortable, you could also reach out to the client to reschedule the project.",
        "Once you have gathered this information, you can compare your proposed salary against the market data.",
        "Avoid the temptation to work outside these hours unless absolutely necessary.",
        "I rejected the offer on September 3, and I'm wondering if that was the right call.",
        "If you decide to try it, make sure to use the trial to determine if it's worth the subscription.",
        "This can be especially useful if you plan to discuss the book with your book club.",
    ]:
        facts = facts_of(conversation(("assistant", text)))
        assert not [k for k, (_, category) in facts.items() if category == "CONDITION"], text
    for text, key in [
        ("The payout is made provided the police report number is added to the claim.", "payout_condition"),
        ("Refunds are available provided you return it within a month.", "return_condition"),
        ("We can reship it, provided that the address is confirmed by Friday.", "address_condition"),
        ("If the parcel does not arrive by Friday, we will reship it at no cost.", "order_condition"),
        ("Once the item reaches our warehouse, the refund is issued.", "order_condition"),
        ("Once the item is back in the warehouse, you can expect the refund within 3 days.", "order_condition"),
        ("No refund unless the item is returned unused.", "refund_condition"),
        ("If you decide to cancel, we refund half of the fee.", "cancellation_condition"),
    ]:
        facts = facts_of(conversation(("assistant", text)))
        assert facts[key] == (text.rstrip("."), "CONDITION"), (text, facts)


def test_the_item_of_an_order_is_named_after_its_id():
    facts = facts_of(conversation(
        ("user", "Hi, I have a problem with my order #18066, the Halden standing desk."),
        ("assistant", "I found order #18066: one Oriel espresso machine, charged at 672.35 EUR, ordered on 2025-01-18."),
    ))
    assert facts["item"] == ("Oriel espresso machine", "ENTITY")  # the later statement wins, as for any fact
    assert facts["order_id"][0] == "#18066" and facts["order_date"][0] == "2025-01-18"
    for text in ["Your order #4411 is on its way.", "I placed an order for a desk last week.",
                 "Order #18066 was delivered on 2025-02-01."]:
        assert "item" not in facts_of(conversation(("assistant", text))), text


def test_an_assistants_tutorial_lines_give_no_date_or_amount_over_what_the_user_said():
    facts = facts_of(conversation(
        ("user", "My deadline is March 15. My budget is $60."),
        ("assistant", "Here is a plan:\n- Week 1: outline by March 3\n- **Budget**: $50 for software\n"
                      "Your refund of $42 is approved and arrives on March 20.\n" + "A long explanation follows. " * 40),
    ))
    assert facts["deadline"][0] == "March 15" and facts["budget"][0] == "$60"  # not the bullets' examples
    assert facts["refund_amount"][0] == "$42"  # a plain sentence of an agent still counts
    assert "March 3" not in {v for v, _ in facts.values()} and "$50" not in {v for v, _ in facts.values()}
    short = facts_of(conversation(("assistant", "Your order:\n- **Total**: $672.35\n- Delivery date: March 3")))
    assert short["order_total"][0] == "$672.35" and short["delivery_date"][0] == "March 3"  # a short reply records them


def test_an_assistants_long_answer_qualifies_advice_with_if_and_unless_and_sets_no_condition():
    padding = " A long explanation of the options follows." * 30
    advice = facts_of(conversation(
        ("user", "Should I buy the regular or the deluxe edition?"),
        ("assistant", "However, if budget constraints are a concern, sticking with the regular version is wiser. "
                      "The deluxe one pays off only if you resell it, unless prices drop." + padding),
    ))
    assert not [k for k in advice if "condition" in k], advice
    named = facts_of(conversation(("assistant", "One condition: the item must be returned unused." + padding)))
    assert [v for k, (v, _) in named.items() if k.endswith("condition")] == ["the item must be returned unused"]
    agreed = facts_of(conversation(
        ("assistant", "I can refund $184.50 within 14 days provided the item is returned unused."),
    ))
    assert [k for k in agreed if k.endswith("condition")], agreed  # a short reply of an agent sets one


def test_the_topic_names_a_support_matter_not_a_word():
    def topic(text: str) -> str | None:
        found = facts_of(conversation(("user", text))).get("topic")
        return found[0] if found else None

    assert topic("Where is my package? It hasn't arrived.") == "delivery status"
    assert topic("I want to upgrade my plan to the team tier.") == "subscription change"
    assert topic("Please change my shipping address to 4 Elm Row.") == "address change"
    assert topic("The mug arrived broken.") == "damaged or wrong item"
    assert topic("Would an exchange be faster?") == "exchange"
    assert topic("I need to file a claim on the bathroom and hallway floor.") == "claim"
    assert topic("I want to report damage on the roof, policy POL-1277149.") == "claim"
    assert topic("If it helps, the mug arrived broken.") == "damaged or wrong item"  # a new sentence's matter
    for text in ["I've been tracking my reading progress all week.", "I stayed up late finishing the essay.",
                 "My study plan is solid now.", "We should address the issue in the next sprint.",
                 "The function's return value is None.", "Let's swap ideas on the outline.",
                 "Which email address do you have for me now?", "I claim no expertise in tax law.",
                 "Will you tell me if the flight is cancelled?", "And if it's broken?"]:  # supposed, not the matter
        assert topic(text) is None, text


def test_names_in_common_introductions():
    for text, name in [
        ("Hey, it's Priya Schuster. I booked a trip.", "Priya Schuster"),
        ("Good afternoon, Aisha Holm here. The NAS keeps dropping.", "Aisha Holm"),
        ("Good afternoon. This is Sofia Haddad.", "Sofia Haddad"),
        ("Hi, I'm Marcus Haddad. I'm writing about order #65018.", "Marcus Haddad"),
        ("Call me Ann.", "Ann"),
    ]:
        assert facts_of(conversation(("user", text)))["customer_name"] == (name, "ENTITY"), text
    assert "customer_name" not in facts_of(conversation(("user", "I'm Happy to help. My name is on the account.")))


def test_codes_versions_and_references():
    facts = facts_of(conversation(
        ("user", "Serial is SN-49VH-1453. The app says error E-1960 on policy POL-1277149."),
        ("assistant", "I've opened ticket TCK-07863; it's running firmware v3.8.10. Booking reference Q4D2R8, flight AZ420."),
    ))
    assert facts["serial_number"] == ("SN-49VH-1453", "ENTITY")
    assert facts["error_code"] == ("E-1960", "ENTITY")
    assert facts["policy_number"] == ("POL-1277149", "ENTITY")
    assert facts["ticket_id"] == ("TCK-07863", "ENTITY")
    assert facts["firmware_version"] == ("v3.8.10", "ENTITY")
    assert facts["booking_ref"] == ("Q4D2R8", "ENTITY")
    assert facts["flight_number"] == ("AZ420", "ENTITY")


def test_an_old_amount_mentioned_next_to_the_new_one_does_not_win():
    facts = facts_of(conversation(
        ("assistant", "After review, the refund is revised to 393.40 EUR (it was 310.40 EUR before)."),
        ("assistant", "Recalculated, your total comes to £1,254.05, compared to £1,092.20 before."),
    ))
    assert facts["refund_amount"] == ("393.40 EUR", "NUMERIC")
    assert facts["order_total"] == ("£1,254.05", "NUMERIC")


def test_marked_conditions_and_decisions_without_a_subject_are_all_kept():
    facts = facts_of(conversation(
        ("assistant", "One condition: the old workspace remains read-only for 30 days after cutover."),
        ("assistant", "We agreed to add one checked bag for free. We also agreed to waive the seat fee."),
        ("assistant", "We agreed to add one checked bag for free."),
    ))
    assert facts["migration_condition"] == ("the old workspace remains read-only for 30 days after cutover", "CONDITION")
    assert facts["decision"] == ("We agreed to add one checked bag for free", "DECISION")
    assert facts["decision_2"] == ("We also agreed to waive the seat fee", "DECISION")
    assert "decision_3" not in facts  # a restated decision is not a new one


def test_a_thing_already_confirmed_is_named_by_that_thing_not_a_new_decision():
    facts = facts_of(conversation(
        ("assistant", "Hotels in that area get busy on weekends, so it's good that the room is already confirmed."),
        ("assistant", "It's a twin, late checkout on request. Everything is confirmed, and you're in seat 24D."),
        ("assistant", "Your transfer was approved yesterday."),
    ))
    decisions = of_category(facts, "DECISION")
    assert decisions["room_confirmed"] == "it's good that the room is already confirmed"
    assert decisions["transfer_approved"] == "Your transfer was approved yesterday"
    assert decisions["decision"] == "Everything is confirmed, and you're in seat 24D"  # nothing named: a decision
    assert len(decisions) == 3


def test_a_decision_in_a_long_sentence_is_its_clause():
    facts = facts_of(conversation(
        ("user", "I'm trying to deploy my portfolio site and I've decided to use Netlify over GitHub Pages due to "
                 "its built-in SSL and easier DNS management, but I'm not sure how to point my domain at it."),
        ("user", "I finished the final code review for my project, which was approved with minor comments on "
                 "naming on May 3; now I need to fix the class names before the launch."),
        ("user", "Okay, we agreed to add one checked bag for free, and I'll pay the seat fee."),
    ))
    assert facts["decision"] == (
        "I've decided to use Netlify over GitHub Pages due to its built-in SSL and easier DNS management", "DECISION")
    # A relative clause stays with what it is about; a semicolon ends the statement.
    assert facts["decision_2"] == (
        "I finished the final code review for my project, which was approved with minor comments on naming on May 3",
        "DECISION")
    assert facts["decision_3"] == ("we agreed to add one checked bag for free, and I'll pay the seat fee", "DECISION")


def test_a_decision_pointing_at_the_last_turn_names_it_and_a_possible_one_is_none():
    facts = facts_of(conversation(
        ("assistant", "Certainly! We could book the 9am slot with Dr. Lee on Friday."),
        ("user", "Yeah, I think I'll go with that."),
        ("assistant", "If the commit message does not follow the rules, the commit will be rejected."),
        ("assistant", "A clear abstract improves its chances of being accepted for publication."),
    ))
    assert [(k, v) for k, (v, c) in facts.items() if c == "DECISION"] == [
        ("decision", "Yeah, I think I'll go with that (re: We could book the 9am slot with Dr. Lee on Friday.)")]  # no "Certainly!"


def test_advice_examples_and_requests_for_help_set_no_condition():
    facts = facts_of(conversation(
        ("assistant", "If you fall behind one day, adjust your plan to catch up the next day."),
        ("assistant", "Once you complete a course, update your resume to reflect it."),
        ("assistant", "For example, if several readers mention tone, note this clearly."),
        ("assistant", "Avoid unnecessary jargon unless it is essential to your argument."),
        ("user", "I'm not sure if I need a setting in my config or if there are steps I need to take to enforce HTTPS."),
        ("user", "I get why P(A and B) only equals P(A) times P(B) if they are independent, can you explain it with coins"),
    ))
    assert not [k for k in facts if k.endswith("condition")]
    kept = facts_of(conversation(
        ("assistant", "Note that the replacement ships once the RMA for the old unit is registered."),
        ("assistant", "Keep your receipt; a refund is only possible within 30 days of delivery."),
        ("assistant", "If the parcel is not delivered by Friday, we will reship it at no cost."),
    ))
    assert [v for k, (v, c) in kept.items() if c == "CONDITION"] == [
        "the replacement ships once the RMA for the old unit is registered",  # "Note that" is a filler
        "Keep your receipt; a refund is only possible within 30 days of delivery",
        "If the parcel is not delivered by Friday, we will reship it at no cost",
    ]


def test_questions_and_requests_are_not_decisions_or_states():
    facts = facts_of(conversation(
        ("user", "Can you confirm the refund was approved? I want my order cancelled."),
        ("assistant", "Let me know if you need anything else. Your case stays open, so nothing is lost."),
        ("user", "Do I need the original box?"),
    ))
    assert not [k for k, (_, c) in facts.items() if c in ("DECISION", "STATE", "CONDITION")]
    assert facts["user_request"] == ("asked to confirm the refund was approved", "GENERAL")


def test_a_state_as_the_condition_of_an_offer_is_no_state():
    facts = facts_of(conversation(
        ("assistant", "It's a refund within 14 days provided the item is returned unused."),
        ("assistant", "You can keep the loaner as long as it is returned by Friday."),
    ))
    assert not [k for k, (_, c) in facts.items() if c == "STATE"]
    later = facts_of(conversation(("assistant", "Your order #18066 has been delivered."),
                                  ("assistant", "The refund comes provided the item is returned unused.")))
    assert later["order_status"] == ("delivered", "STATE")


def test_a_status_named_by_its_subject_is_that_subjects():
    facts = facts_of(conversation(
        ("user", "Hi, my order #18066 arrived broken."),
        ("assistant", "Yes, the parcel is in the courier's system, currently label created. Refund status: pending return."),
    ))
    assert facts["refund_status"] == ("pending", "STATE") and "order_status" not in facts  # not the order's


def test_the_state_of_something_else_is_no_status_of_the_case():
    facts = facts_of(conversation(
        ("user", "I need to file a claim, the bathroom floor is flooded. My order #555 is unrelated."),
        ("assistant", "It has been delivered, by the way."),
        ("user", "The neighbour's fence is damaged too."),
    ))
    states = of_category(facts, "STATE")
    assert states == {"order_status": "delivered"}  # not "damaged": the fence is no order


def test_a_request_to_hear_back_is_no_condition():
    facts = facts_of(conversation(
        ("assistant", "Let me know what the lights do once it's back up."),
        ("assistant", "Please keep me posted if the error comes back."),
    ))
    assert not [k for k, (_, c) in facts.items() if c == "CONDITION"]
    kept = facts_of(conversation(("assistant", "We replace the router once the diagnostics are done.")))
    assert [c for _, (_, c) in kept.items() if c == "CONDITION"]


def test_a_narrative_without_a_request_quotes_the_first_turn_that_says_something():
    from memfold.projections.fact_extraction import read_all
    from memfold.projections.offline_summarizer import narrative

    turns = conversation(("user", "Thanks, that clears it up."), ("assistant", "You are very welcome."),
                         ("user", "The hallway floor got wet as well, near the stairs."))
    assert narrative(read_all(turns, ()), turns).startswith("The user wrote: \u201cThe hallway floor got wet as well")
    only = conversation(("user", "Thanks, that clears it up."), ("assistant", "No problem, anytime."))
    assert narrative(read_all(only, ()), only) == "The user only thanked or agreed."


def test_when_a_notice_comes_is_no_condition():
    facts = facts_of(conversation(
        ("assistant", "You'll get an email once it's paid out."),
        ("assistant", "You'll get an automatic email at each step, so you don't need to check back unless something looks off."),
        ("assistant", "We'll text you if the courier runs late, and you will be notified once the label is scanned."),
    ))
    assert not [k for k, (_, c) in facts.items() if c == "CONDITION"], facts
    # What the listener gets is no notice: a condition still.
    kept = facts_of(conversation(("assistant", "You'll get a refund once the item arrives at our warehouse.")))
    assert [v for v, c in kept.values() if c == "CONDITION"] == ["You'll get a refund once the item arrives at our warehouse"], kept


def test_an_agreement_with_its_condition_is_one_fact_a_decision_verb_inside_the_condition_is_not():
    agreed = facts_of(conversation(("assistant", "If it comes to that, we agreed to replace the router under warranty.")))
    assert agreed == {"warranty_agreed": ("If it comes to that, we agreed to replace the router under warranty", "DECISION")}
    later = facts_of(conversation(("assistant", "We agreed to refund the delivery charge as long as the item is returned unused.")))
    assert [c for _, (_, c) in later.items()] == ["DECISION"]
    # "confirmed" sits in the conditional clause: the condition is the fact.
    reship = facts_of(conversation(("assistant", "We can reship it, provided that the address is confirmed by Friday.")))
    assert reship["address_condition"][1] == "CONDITION"


def test_tool_calls_and_results_are_read_and_summarized():
    msgs = conversation(
        ("user", "Where is order #777?"),
        ("assistant", "", {"tool_calls": (ToolCall(id="k1", name="track_order", arguments='{"order": "777"}'),)}),
        ("tool", '{"carrier": "DHL", "eta": "2024-05-01"}', {"tool_call_id": "k1"}),
        ("assistant", "It is in transit and arrives 2024-05-01."),
    )
    out = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=msgs))
    assert as_dict(out.facts)["order_status"] == ("in transit", "STATE")
    assert "tools used: track_order" in out.text
    text = SUMMARIZER.summarize(SummaryInput(policy="rolling", kind="text", messages=msgs)).text
    assert '- (1) assistant called track_order({"order": "777"})' in text
    assert '- (2) tool result track_order: {"carrier": "DHL", "eta": "2024-05-01"}' in text


def dated(*items: tuple[str, str, str]) -> tuple[MessageRecord, ...]:
    """Messages (role, ISO date, content), one per date."""
    return tuple(
        MessageRecord(
            tenant_id="t", conversation_id="c", index=i, seq=i + 1, event_id=f"e{i}", role=role, content=content,
            tokens=0, occurred_at=datetime.fromisoformat(day).replace(tzinfo=UTC),
        )
        for i, (role, day, content) in enumerate(items)
    )


def test_first_person_statements_become_dated_facts():
    facts = {f.key: f for f in extract_facts(dated(
        ("user", "2024-03-01", "I just moved to Berlin last month. My sister Anna is visiting. I prefer tea over coffee."),
        ("assistant", "2024-03-01", "Welcome to Berlin! My sister would love it."),
        ("user", "2024-03-08", "My deadline is March 29. I'm planning to launch the beta in May. My favorite color is green."),
        ("user", "2024-03-09", "If I move to Paris I'd be happier. Do I prefer cats? I opted for the yearly plan."),
    ))}
    assert (facts["lives_in"].value, facts["lives_in"].category) == ("Berlin", "ENTITY")
    assert facts["lives_in"].stated_at == datetime(2024, 3, 1, tzinfo=UTC) and facts["lives_in"].stated_in == 0
    assert facts["sister_name"].value == "Anna"
    assert (facts["preference"].value, facts["preference"].category) == ("tea over coffee", "GENERAL")
    assert facts["deadline"].value == "March 29" and facts["deadline"].stated_at.day == 8
    assert facts["plan"].value == "launch the beta in May"
    assert facts["favorite_color"].value == "green"
    assert facts["decision"].value == "the yearly plan" and facts["decision"].category == "DECISION"
    assert "Paris" not in " ".join(f.value for f in facts.values())  # a hypothetical states nothing
    assert "preference_2" not in facts  # a question states nothing either


def test_a_preference_cut_by_a_listing_comma_keeps_its_list_and_a_new_clause_stays_out():
    facts = [f.value for f in extract_facts(dated(
        ("user", "2024-03-01", "I want my app small, so I prefer simple, minimal dependencies, how can I keep it that way"),
        ("user", "2024-03-02", "I prefer mornings, especially before 9."),
        ("user", "2024-03-03", "I prefer tea, but coffee is fine."),
    )) if f.key.startswith("preference")]
    assert facts == ["simple, minimal dependencies", "mornings", "tea"]


def test_a_value_ends_before_the_next_first_person_clause_and_standard_names_are_no_ids():
    facts = {f.key: f.value for f in extract_facts(dated(
        ("user", "2024-03-01", "My deadline is April 15 and I'm using Python 3.11 for this."),
        ("user", "2024-03-02", "I'm encrypting with AES-256 and hashing with SHA-256, ticket TCK-14886."),
    ))}
    assert facts["deadline"] == "April 15"
    assert facts["ticket_id"] == "TCK-14886" and "AES-256" not in facts.values() and "SHA-256" not in facts.values()


def test_a_letter_the_assistant_drafts_for_the_user_names_no_agent():
    facts = {f.key: f.value for f in extract_facts(dated(
        ("user", "2024-03-01", "I need a cover letter for the analyst role."),
        ("assistant", "2024-03-01", "Here's a draft:\n\nDear Hiring Manager,\n\nMy name is Jordan Blake and I am "
                                    "applying for the analyst role.\n\nSincerely,\nJordan Blake"),
        ("assistant", "2024-03-02", "My name is Sam and I'll take care of your case."),
    ))}
    assert facts["agent_name"] == "Sam" and "Jordan Blake" not in facts.values()


def test_a_later_fact_supersedes_an_earlier_one_and_keeps_the_lineage():
    chat = dated(
        ("user", "2024-03-01", "I live in Berlin and my deadline is March 29."),
        ("assistant", "2024-03-01", "Noted, Berlin and March 29."),
        ("user", "2024-04-10", "Big news: I moved to Munich. Also my deadline has been moved to April 12."),
    )
    facts = extract_facts(chat)
    lineage = sorted(
        ((f.key, f.value, f.stated_at.date().isoformat(), f.superseded_by) for f in facts if f.key in ("lives_in", "deadline")),
        key=lambda row: (row[0] != "lives_in", row[2]),
    )
    assert lineage == [
        ("lives_in", "Berlin", "2024-03-01", "Munich"),
        ("lives_in", "Munich", "2024-04-10", None),
        ("deadline", "March 29", "2024-03-01", "April 12"),
        ("deadline", "April 12", "2024-04-10", None),
    ]
    # Across summaries: the earlier summary's facts come back as existing facts, lineage and dates included.
    first = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=chat[:2])).facts
    assert [(f.value, f.current) for f in first if f.key == "lives_in"] == [("Berlin", True)]
    later = SUMMARIZER.summarize(SummaryInput(
        policy="hierarchical", kind="facts", messages=chat[2:], existing_facts=first,
    )).facts
    moved = [f for f in later if f.key == "lives_in"]
    assert [(f.value, f.stated_at.month, f.superseded_by) for f in moved] == [("Berlin", 3, "Munich"), ("Munich", 4, None)]
    again = SUMMARIZER.summarize(SummaryInput(
        policy="hierarchical", kind="facts", messages=dated(("user", "2024-05-01", "All good here.")), existing_facts=later,
    )).facts
    assert [f for f in again if f.key == "lives_in"] == moved  # the lineage is carried, not lost


# --------------------------------------------------------------------------- merging


def test_existing_facts_are_kept_updated_and_removed():
    existing = (
        Fact(key="order_id", value="#1234", category="ENTITY"),
        Fact(key="email", value="old@example.com", category="ENTITY"),
        Fact(key="phone", value="+1 555 123 4567", category="ENTITY"),
        Fact(key="refund_amount", value="$50.00", category="NUMERIC"),
        Fact(key="refund_approved", value="yes", category="DECISION"),
    )
    facts = facts_of(conversation(
        ("user", "My email changed, it is now new@example.com. Please forget my phone number."),
        ("user", "Actually, cancel the refund, I'd rather keep the item."),
    ), existing)
    assert facts["order_id"] == ("#1234", "ENTITY")  # untouched
    assert facts["email"] == ("new@example.com", "ENTITY")  # latest wins
    assert "phone" not in facts  # retracted
    assert not [k for k in facts if k.startswith("refund")]  # "cancel the refund" retracts every refund_* fact


def test_updates_overwrite_in_place_and_a_same_value_keeps_its_spelling():
    first = extract_facts(conversation(("user", "order #1234, refund $20")))
    later = extract_facts(conversation(("assistant", "For order 1234 the refund is $35."), start=1), first)
    assert [f.key for f in later if f.current] == [f.key for f in first]
    assert as_dict(f for f in later if f.current)["refund_amount"] == ("$35", "NUMERIC")
    assert as_dict(later)["order_id"] == ("#1234", "ENTITY")
    old = [f for f in later if not f.current]
    assert [(f.key, f.value, f.superseded_by) for f in old] == [("refund_amount", "$20", "$35")]


def test_dates_and_amounts_nothing_names_never_replace_each_other():
    """A long chat states many dates: "on May 3" and, later, "on May 20" are two facts, no update."""
    chat = conversation(
        ("user", "I went hiking with Ana on May 3 and spent $40 on gear."),
        *[("assistant", f"Noted, point {i}.") for i in range(1, 6)],
        ("user", "My sister visits on May 20, and I got museum tickets for $15."),
        ("user", "I started pottery on June 2."),
        ("user", "We saw Coldplay on June 9."),
        ("user", "We moved the plants on June 16."),
    )
    facts = extract_facts(chat)
    assert all(f.current for f in facts)  # nothing superseded
    dates = {f.key: f.value for f in facts if f.key.startswith("date")}
    assert dates == {"date_6": "May 20", "date_7": "June 2", "date_8": "June 9", "date_9": "June 16"}  # the newest four
    amounts = {f.key: f.value for f in facts if f.key.startswith("amount")}
    assert amounts == {"amount_0": "$40", "amount_6": "$15"}


def test_a_value_in_a_tool_results_json_is_named_by_its_field():
    facts = facts_of(conversation(
        ("tool", '{"policy": "POL-8599679", "deductible": "$308.55", "visit_date": "2025-10-02", "value": "$5"}'),
    ))
    assert facts["deductible_amount"] == ("$308.55", "NUMERIC")
    assert facts["visit_date"] == ("2025-10-02", "ENTITY")
    assert facts["amount_0"] == ("$5", "NUMERIC")  # "value" names nothing


def test_a_tool_field_restating_a_subject_fact_adds_no_second_key():
    # The demo's order: "Pickup is booked for ..." then the tracking tool's "pickup_scheduled" field.
    facts = facts_of(conversation(
        ("assistant", "Pickup is booked for 2025-02-06."),
        ("tool", '{"parcel": "1Z9383451282", "pickup_scheduled": "2025-02-06"}'),
        ("assistant", "The pickup has been moved to 2025-02-12."),
        ("tool", '{"parcel": "1Z9383451282", "pickup_scheduled": "2025-02-12", "delivery_scheduled": "2025-02-06"}'),
    ))
    assert facts["pickup_date"] == ("2025-02-12", "ENTITY")
    assert "pickup_scheduled_date" not in facts  # the same pickup, said by the tool
    assert facts["delivery_scheduled_date"] == ("2025-02-06", "ENTITY")  # another thing with an old value


def test_a_text_value_said_again_in_other_words_is_not_a_change():
    from memfold.projections.fact_extraction import FactBook

    book = FactBook()
    book.put("refund_approved", "Refund status: approved pending inspection", 3)
    book.put("refund_approved", "The refund record shows approved pending inspection", 9)
    (fact,) = book.facts()  # one current value, in its latest words, no lineage
    assert fact.value == "The refund record shows approved pending inspection" and fact.superseded_by is None
    assert fact.stated_in == 3  # first stated there
    book.put("refund_approved", "The refund record shows not approved pending inspection", 12)  # negated: a change
    book.put("order_status", "parcel awaiting courier pickup today", 13)
    book.put("order_status", "parcel awaiting courier pickup on 2025-02-12", 14)  # a number added: a change
    book.put("refund_condition", "provided the item is returned unused", 14)
    book.put("refund_condition", "provided the item is returned in its original packaging", 15)  # a new last word
    book.put("item", "Halden standing desk", 15)
    book.put("item", "Halden sitting desk", 16)  # a name, not a sentence: a change
    current = {f.key: f.value for f in book.facts() if f.superseded_by is None}
    assert current == {"refund_approved": "The refund record shows not approved pending inspection",
                       "order_status": "parcel awaiting courier pickup on 2025-02-12", "item": "Halden sitting desk",
                       "refund_condition": "provided the item is returned in its original packaging"}
    assert len(book.facts()) == 8


def test_what_a_relative_is_doing_right_now_is_no_fact_about_them():
    facts = facts_of(conversation(
        ("user", "Sorry, my partner is asking who I'm typing to."),
        ("user", "My boss is waiting for my report."),
        ("user", "My sister is moving to Lisbon next month."),
        ("user", "My wife is a nurse."),
    ))
    assert "partner" not in facts and "boss" not in facts
    assert facts["sister"] == ("is moving to Lisbon next month", "ENTITY")  # a place: a fact
    assert facts["wife"] == ("is a nurse", "ENTITY")


def test_a_keyword_key_far_from_its_value_changes_only_when_the_message_says_so():
    first = ("user", "The deadline for the grant report is April 15.")
    filler = [("assistant", f"Here is tip {i} for your plan.") for i in range(12)]
    facts = extract_facts(conversation(first, *filler, ("user", "My scholarship essay deadline is June 25.")))  # 13 on
    assert all(f.current for f in facts)
    assert {f.key: f.value for f in facts if f.key.startswith("deadline")} == {"deadline": "April 15", "deadline_2": "June 25"}
    moved = extract_facts(conversation(first, *filler, ("user", "The grant report deadline moved to April 30.")))
    old = [(f.key, f.value, f.superseded_by) for f in moved if not f.current]
    assert old == [("deadline", "April 15", "April 30")]
    named = extract_facts(conversation(first, *filler, ("user", "Not April 15: the deadline is April 22.")))
    assert [(f.value, f.superseded_by) for f in named if not f.current] == [("April 15", "April 22")]
    near = extract_facts(conversation(first, ("user", "Sorry, the deadline is April 18.")))  # still on it
    assert [(f.value, f.superseded_by) for f in near if not f.current] == [("April 15", "April 18")]


def test_a_value_said_to_replace_another_updates_the_key_that_held_it():
    def lineage(*turns):
        return [(f.key, f.value, f.superseded_by) for f in extract_facts(conversation(*turns))
                if f.key.endswith(("version", "date"))]

    assert lineage(("assistant", "The unit reports firmware v3.7.11."),
                   ("assistant", "Yes, the unit now runs v4.5.6, replacing v3.7.11.")) == [
        ("firmware_version", "v3.7.11", "v4.5.6"), ("firmware_version", "v4.5.6", None)]  # not "version: v4.5.6, v3.7.11"
    assert lineage(("assistant", "The unit reports firmware v3.7.11."),
                   ("assistant", "Updated from v3.7.11: the unit runs v4.5.6 now.")) == [
        ("firmware_version", "v3.7.11", "v4.5.6"), ("firmware_version", "v4.5.6", None)]
    assert lineage(("assistant", "Your pickup is on May 3."), ("user", "The pickup moved from May 3 to May 5.")) == [
        ("pickup_date", "May 3", "May 5"), ("pickup_date", "May 5", None)]
    assert lineage(("assistant", "We tested v1.2.0 and v1.3.0.")) == [("version", "v1.2.0, v1.3.0", None)]  # no old one
    assert lineage(("user", "I fly from Lisbon to Porto on May 5.")) == [("departure_date", "May 5", None)]


def test_cancelling_an_order_keeps_its_id():
    facts = facts_of(conversation(("user", "Please cancel my order #1234.")))
    assert facts["order_id"] == ("#1234", "ENTITY")
    assert facts["user_request"] == ("asked to cancel their order #1234", "GENERAL")


# --------------------------------------------------------------------------- narrative and text


def test_narrative_says_who_wants_what_what_was_agreed_and_the_state_then_the_dated_statements():
    out = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=REFUND_CHAT, token_cap=500))
    opener, *lines = out.text.splitlines()
    assert opener.startswith("The user (Maria Lopez) wants to cancel order #1234.")
    assert "Agreed: refund approved" in opener
    assert "Current state: order status cancelled" in opener
    assert lines[0] == "[2024-03-01]"  # the statements, under the date they were made
    assert "- (0) user: Hi, my name is Maria Lopez. \u2026 I'd like to cancel order #1234, it hasn't shipped yet." in lines
    assert out.model == RULES_VERSION and len(out.prompt_hash) == 64  # the model label names the rules that wrote it
    assert out.tokens_in > 0 and out.tokens_out > TOKENS.count(out.text)


def test_narrative_tells_the_latest_request_when_the_user_moved_on_and_keeps_the_first():
    chat = conversation(
        ("user", "I want to figure out what day it will be a week from January 10."),
        ("assistant", "A week from Wednesday, January 10 is Wednesday, January 17."),
        ("user", "Thanks! Now I'm learning probability for my job."),
        ("assistant", "Great, where would you like to start?"),
        ("user", "Can you explain the difference between permutations and combinations?"),
        ("assistant", "Order matters in a permutation and not in a combination."),
    )
    facts = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=chat, token_cap=500))
    assert facts.text.startswith(  # the flow of the conversation: what it was opened for, what is asked now
        "The user wants to figure out what day it will be a week from January 10. "
        "Lately, they asked to explain the difference between permutations and combinations."
    )
    assert as_dict(facts.facts)["user_request"][0] == "wants to figure out what day it will be a week from January 10"
    text = SUMMARIZER.summarize(SummaryInput(policy="rolling", kind="text", messages=chat)).text
    assert "- user_request: wants to figure out what day it will be a week from January 10 (msg 0)" in text
    assert "Summary: Lately, the user asked to explain the difference between permutations and combinations." in text
    # One request so far: said once.
    first = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=chat[:2], token_cap=500))
    assert first.text.splitlines()[0] == "The user wants to figure out what day it will be a week from January 10."


def test_a_request_keeps_its_thousands_and_names_the_users_things_theirs_and_a_vague_one_is_passed_over():
    from memfold.projections.fact_extraction import specific_request

    said = "I want to decide how to allocate our marketing budget of $18,500, can you help?"
    assert facts_of(conversation(("user", said)))["user_request"][0] == (
        "wants to decide how to allocate their marketing budget of $18,500"
    )
    # "I want to learn" names nothing; the request after it in the same sentence does.
    assert specific_request("I've never done these, but I want to learn, can you explain permutations to me?") == (
        "asked to explain permutations to them"
    )
    assert specific_request("Thanks! I want to make the most of it.") is None


def test_text_summary_lists_facts_and_messages_and_merges_the_previous_summary():
    first = SUMMARIZER.summarize(SummaryInput(policy="rolling", kind="text", messages=REFUND_CHAT[:3])).text
    assert first.startswith("Key facts:\n- customer_name: Maria Lopez (msg 0)\n- order_id: #1234 (msg 0)")
    assert "\nMessages:\n[2024-03-01]\n- (0) user: Hi, my name is Maria Lopez." in first
    second = SUMMARIZER.summarize(
        SummaryInput(policy="rolling", kind="text", messages=REFUND_CHAT[3:], existing_summary=first)
    ).text
    assert "- email: maria.lopez@example.com (msg 2)" in second  # carried from the previous summary
    assert "- refund_amount: $50.00 (msg 3)" in second  # added from the new messages
    assert "- (0) user:" in second and "- (5) assistant: Your order #1234 has been cancelled." in second


def test_sliding_window_drops_content_before_window_start():
    first = SUMMARIZER.summarize(SummaryInput(policy="sliding_window", kind="text", messages=REFUND_CHAT[:4])).text
    out = SUMMARIZER.summarize(SummaryInput(
        policy="sliding_window", kind="text", messages=REFUND_CHAT[4:], existing_summary=first, window_start=2,
    )).text
    assert "(msg 0)" not in out and "(msg 1)" not in out
    assert "- (0)" not in out and "- (1)" not in out and "- (2) user:" in out
    assert "customer_name" not in out  # only mentioned before the window
    assert "- email: maria.lopez@example.com (msg 2)" in out and "- (5) assistant:" in out


def test_a_sliding_window_that_keeps_facts_drops_the_narrative_before_the_window_but_not_its_facts():
    first = SUMMARIZER.summarize(SummaryInput(
        policy="sliding_window", kind="text", messages=REFUND_CHAT[:4], window_start=0, keep_facts=True,
    ))
    assert as_dict(first.facts)["customer_name"][0] == "Maria Lopez"  # returned whole, for the next version
    out = SUMMARIZER.summarize(SummaryInput(
        policy="sliding_window", kind="text", messages=REFUND_CHAT[4:], existing_summary=first.text,
        existing_facts=first.facts, window_start=2, keep_facts=True,
    ))
    assert "- customer_name: Maria Lopez (msg 0)" in out.text and "- order_id: #1234" in out.text
    assert "- (0)" not in out.text and "- (1)" not in out.text and "- (5) assistant:" in out.text
    assert {"customer_name", "order_id", "email"} <= set(as_dict(out.facts))


def test_a_catch_up_reads_the_facts_of_its_backlog_but_tells_only_the_window():
    # After an import, a memory of 0-1 is followed by one over the last window, fed every message since.
    first = SUMMARIZER.summarize(SummaryInput(
        policy="sliding_window", kind="text", messages=REFUND_CHAT[:2], window_start=0, keep_facts=True,
    ))
    out = SUMMARIZER.summarize(SummaryInput(
        policy="sliding_window", kind="text", messages=REFUND_CHAT[2:], existing_summary=first.text,
        existing_facts=first.facts, window_start=4, keep_facts=True,
    ))
    assert "- email: maria.lopez@example.com (msg 2)" in out.text  # stated in the backlog, before the window
    assert "- (2)" not in out.text and "- (3)" not in out.text and "- (5) assistant:" in out.text


def test_kept_facts_let_a_repeated_value_and_the_topic_go_before_an_agreed_decision():
    from memfold.projections.fact_extraction import FactEntry
    from memfold.projections.offline_summarizer import OfflineSummarizer

    entries = [
        FactEntry("customer_name", "Maria Lopez", "ENTITY", 0),
        FactEntry("topic", "refund request", "GENERAL", 1),
        FactEntry("firmware_version", "v4.2.10", "ENTITY", 2),
        FactEntry("refund_decision", "we agreed to refund the original delivery charge as well, given the delay", "DECISION", 3),
        FactEntry("version", "v4.2.10", "ENTITY", 4),
        FactEntry("ticket_id", "TCK-54741", "ENTITY", 5),
    ]
    kept = [e.key for e in OfflineSummarizer._drop_order(entries, carried=True)]
    assert kept == ["version", "topic", "refund_decision", "customer_name", "firmware_version", "ticket_id"]
    plain = [e.key for e in OfflineSummarizer._drop_order(entries)]  # other text summaries: sentences first
    assert plain == ["refund_decision", "customer_name", "topic", "firmware_version", "version", "ticket_id"]


def test_kept_sentences_go_last_stated_first_so_an_early_agreement_stays():
    from memfold.projections.fact_extraction import FactEntry
    from memfold.projections.offline_summarizer import OfflineSummarizer

    entries = [
        FactEntry("refund_condition", "refund within 14 days provided the item is returned unused", "CONDITION", 7, stated_in=7),
        FactEntry("order_id", "#18066", "ENTITY", 0, stated_in=0),
        FactEntry("case_condition", "Should the box get damaged, take a photo and reply to the case email", "CONDITION", 210,
                  stated_in=210),
        FactEntry("refund_agreed", "we agreed to refund the original delivery charge too", "DECISION", 9, stated_in=9),
        FactEntry("order_chosen", "Deal (re: I've set up a refund of 310.40 EUR. One condition: it's a refund…)", "DECISION", 8,
                  stated_in=8),
    ]
    kept = [e.key for e in OfflineSummarizer._drop_order(entries, carried=True)]
    # A bare agreement quoting the offer goes with the GENERAL facts, before every other sentence.
    assert kept == ["order_chosen", "case_condition", "refund_agreed", "refund_condition", "order_id"]


def test_a_fact_the_text_had_no_room_for_comes_back_from_the_structured_facts():
    first = SUMMARIZER.summarize(SummaryInput(
        policy="sliding_window", kind="text", messages=REFUND_CHAT[:4], window_start=0, keep_facts=True,
    ))
    # A version whose text names no fact at all (a model's free-form summary, say) loses none.
    out = SUMMARIZER.summarize(SummaryInput(
        policy="sliding_window", kind="text", messages=REFUND_CHAT[4:], existing_summary="The order was discussed.",
        existing_facts=first.facts, window_start=4, keep_facts=True,
    ))
    assert "- customer_name: Maria Lopez" in out.text and "- email: maria.lopez@example.com" in out.text


def test_a_rolling_summary_carries_its_facts_and_a_topic_summary_returns_the_ones_its_text_lists():
    rolling = SUMMARIZER.summarize(SummaryInput(policy="rolling", kind="text", messages=REFUND_CHAT[:4]))
    assert as_dict(rolling.facts)["order_id"][0] == "#1234"
    later = SUMMARIZER.summarize(SummaryInput(
        policy="rolling", kind="text", messages=REFUND_CHAT[4:], existing_summary="Earlier turns.",
        existing_facts=rolling.facts,
    ))
    assert "- order_id: #1234" in later.text and "order_id" in as_dict(later.facts)
    for cap in (None, 120):
        topic = SUMMARIZER.summarize(SummaryInput(policy="topics", kind="text", messages=REFUND_CHAT[:4], token_cap=cap))
        listed = [line[2:].split(":")[0] for line in topic.text.split("\n") if line.startswith("- ") and ": " in line
                  and not line.startswith("- (")]
        assert listed and [f.key for f in topic.facts] == listed  # what its text shows, no carried set
        assert all(f.current and f.stated_in is not None for f in topic.facts)
    assert len(topic.facts) == 1 < len(as_dict(rolling.facts))  # a small cap lists one; rolling carries them all


def test_an_unstructured_previous_summary_is_kept_and_mined():
    out = SUMMARIZER.summarize(SummaryInput(
        policy="chunked", kind="text", prompt_format="chunked", messages=REFUND_CHAT[4:],
        existing_summary="The customer disputes invoice INV-7781 for $99.",
    )).text
    assert "- invoice_id: INV-7781\n" in out
    assert "Earlier summary: The customer disputes invoice INV-7781 for $99." in out


# --------------------------------------------------------------------------- caps and determinism


def test_text_summary_respects_token_and_char_caps_keeping_the_specific_lines():
    long_chat = conversation(*[
        ("user" if i % 2 == 0 else "assistant", f"Message {i} about order #{1000 + i} and a refund of ${i}.00 "
         + "with plenty of filler words to make the line long " * 3)
        for i in range(40)
    ])
    out = SUMMARIZER.summarize(SummaryInput(policy="chunked", kind="text", messages=long_chat, token_cap=300)).text
    assert TOKENS.count(out) <= 300
    assert "- order_id: #1039 (msg 39)" in out
    assert out.count("\n- (") >= 3  # the statements fill what the facts leave
    capped = SUMMARIZER.summarize(SummaryInput(policy="rolling", kind="text", messages=long_chat, char_cap=400)).text
    assert len(capped) <= 400 and capped.startswith("Key facts:")


def test_a_short_fact_share_keeps_values_before_sentences():
    chat = conversation(
        ("user", "Hi, I'm Maria Lopez, order #5521 arrived broken. My email is maria.lopez@example.com."),
        ("assistant", "Your refund of $50.00 is approved. Pickup is booked for 2024-03-06."),
        *[("assistant", f"Refunds are possible within {d} days provided that the item is returned unused and in its box.")
          for d in (14, 30)],
        ("assistant", "Replacements are possible as long as the model is still in stock at the warehouse nearby."),
    )
    out = SUMMARIZER.summarize(SummaryInput(policy="rolling", kind="text", messages=chat, token_cap=265)).text
    facts, rest = out.split("Summary:")
    assert TOKENS.count(out) <= 265
    for value in ("#5521", "maria.lopez@example.com", "Maria Lopez", "$50.00", "2024-03-06"):  # the oldest, kept
        assert value in facts
    assert "within 30 days" not in facts and "within 30 days" in rest  # newer, but a sentence: a statement carries it


def test_salience_keeps_the_early_specific_statement_over_later_filler():
    filler = [
        ("assistant" if i % 2 == 0 else "user", "That sounds good to me, thanks a lot for all the help with everything so far.")
        for i in range(30)
    ]
    chat = conversation(
        ("user", "Sounds good. Anyway, my first sprint ends on March 29 and I present the demo to Dr. Okafor in Lisbon."),
        *filler,
    )
    text = SUMMARIZER.summarize(SummaryInput(policy="chunked", kind="text", messages=chat, token_cap=90)).text
    assert "my first sprint ends on March 29 and I present the demo to Dr. Okafor in Lisbon" in text
    assert TOKENS.count(text) <= 90
    narrative = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=chat, token_cap=80)).text
    assert "March 29" in narrative and "Okafor" in narrative
    # The salient statement survives the next round, read back from the previous summary.
    again = SUMMARIZER.summarize(SummaryInput(
        policy="rolling", kind="text", messages=conversation(*filler, start=31), existing_summary=text, token_cap=90,
    )).text
    assert "March 29" in again and "Okafor" in again


def test_narrative_respects_tiny_caps():
    for cap in (1, 3, 10, 25):
        out = SUMMARIZER.summarize(SummaryInput(policy="hierarchical", kind="facts", messages=REFUND_CHAT, token_cap=cap))
        assert TOKENS.count(out.text) <= cap
        assert as_dict(out.facts)["order_id"] == ("#1234", "ENTITY")  # the cap is the narrative's, facts stay


WORDS = st.sampled_from([
    "order", "#1234", "ORD-55", "refund", "$50.00", "€120", "30 EUR", "March", "3", "2024-03-05", "agreed",
    "approved", "if", "within", "30", "days", "provided", "that", "my", "name", "is", "Ann", "a@b.co", "cancel",
    "has", "been", "shipped", "not", ".", ",", "?", "!", "\n", "the", "item", "ok", "deal", "forget", "email",
    "超长", "naïve", "🙂", "x" * 40,
])
MESSAGE = st.tuples(
    st.sampled_from(["user", "assistant", "tool", "system"]),
    st.lists(WORDS, min_size=0, max_size=40).map(" ".join),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(MESSAGE, min_size=1, max_size=12),
    kind=st.sampled_from(["facts", "text"]),
    token_cap=st.integers(min_value=1, max_value=200),
    char_cap=st.one_of(st.none(), st.integers(min_value=1, max_value=600)),
    existing=st.one_of(st.none(), st.text(max_size=300)),
    window_start=st.one_of(st.none(), st.integers(min_value=0, max_value=12)),
)
def test_output_never_exceeds_the_caps(items, kind, token_cap, char_cap, existing, window_start):
    request = SummaryInput(
        policy="p", kind=kind, messages=conversation(*items), existing_summary=existing,
        token_cap=token_cap, char_cap=char_cap, window_start=window_start,
    )
    out = SUMMARIZER.summarize(request)
    assert TOKENS.count(out.text) <= token_cap
    assert char_cap is None or len(out.text) <= char_cap
    assert SUMMARIZER.summarize(request) == out


def test_same_input_same_output_across_processes_and_hash_seeds():
    script = (
        "import json, sys; sys.path[:0] = [sys.argv[1]];"
        "from test_offline_summarizer import REFUND_CHAT, SUMMARIZER;"
        "from memfold.core.ports import SummaryInput;"
        "out = [SUMMARIZER.summarize(SummaryInput(policy='p', kind=k, messages=REFUND_CHAT, token_cap=200)) for k in ('facts', 'text')];"
        "print(json.dumps([[o.text, [f.model_dump(mode='json') for f in o.facts], o.prompt_hash] for o in out]))"
    )
    here = os.path.dirname(__file__)
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run([sys.executable, "-c", script, here], env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(result.stdout))
    assert runs[0] == runs[1]
    local = [SUMMARIZER.summarize(SummaryInput(policy="p", kind=k, messages=REFUND_CHAT, token_cap=200)) for k in ("facts", "text")]
    assert runs[0] == [[o.text, [f.model_dump(mode="json") for f in o.facts], o.prompt_hash] for o in local]


def test_a_lead_in_to_a_list_and_a_check_whether_set_no_decision_or_condition():
    """Seen on BEAM: "decision: This is confirmed by the fact that:" and a condition made of "I'm trying to verify if ...".

    A sentence ending in a colon announces what follows; its own words hold no decision or condition. Checking,
    verifying or understanding whether something holds asks about it, as "not sure if" does.
    """
    facts = facts_of(conversation(
        ("assistant", "This is confirmed by the fact that:"),
        ("user", "We agreed on the following:"),
        ("user", "I'm trying to verify if P(heart or queen) = P(heart) + P(queen) is correct for a draw without replacement"),
        ("user", "I want to understand if the refund covers the shipping for my order #4411"),
        ("user", "I'm verifying whether the replacement ships before Friday"),
    ))
    assert not [k for k, (_, c) in facts.items() if c in ("DECISION", "CONDITION")], facts
    kept = facts_of(conversation(
        ("user", "We agreed on the following: the refund covers shipping."),
        ("assistant", "If the parcel is not delivered by Friday, we will reship it at no cost."),
    ))
    assert [c for _, (_, c) in kept.items() if c in ("DECISION", "CONDITION")] == ["DECISION", "CONDITION"]


def test_a_date_nothing_names_said_on_that_very_day_is_no_fact():
    """BEAM: "considering my current focus on April 5, 2024", written on April 5, 2024, was kept as date_138."""
    day = datetime(2024, 4, 5, 9, 0, tzinfo=UTC)
    chat = conversation(
        ("user", "I'm now ready to tackle permutations, considering my current focus on April 5, 2024"),
        ("user", "What about 2024-04-05 and the 5th of April? And on April 19 I will know more."),
        ("user", "I read about it on April 5, 2023 in a book."),
    )
    chat = tuple(msgspec.structs.replace(m, occurred_at=day) for m in chat)
    facts = facts_of(chat)
    assert sorted(v for k, (v, _) in facts.items() if k.startswith("date")) == ["April 19", "April 5, 2023"]
    named = facts_of(tuple(msgspec.structs.replace(m, occurred_at=day) for m in conversation(
        ("user", "My deadline is April 5, 2024."),
    )))
    assert named["deadline"][0] == "April 5, 2024"  # a named date of that day is still the deadline


def test_a_keyword_after_a_date_that_introduces_the_next_date_names_that_one():
    """BEAM: "Assuming today is January 10 and you have until February 1" gave "deadline: February 1 (was: January 10)"."""
    book = FactBook()
    chat = conversation(
        ("assistant", "Assuming today is March 10 and you have until April 1 to meet your goal, you have 22 days."),
        ("user", "The parcel comes on May 3 for the delivery window."),
    )
    from memfold.projections.fact_extraction import read_message

    for m in chat:
        read_message(m, book)
    facts = [(f.key, f.value, f.superseded_by) for f in book.facts()]
    assert ("deadline", "April 1", None) in facts
    assert not [f for f in facts if f[0] == "deadline" and f[1] == "March 10"]  # no lineage through the other date
    assert ("delivery_date", "May 3", None) in facts  # a keyword after its own date still names it


def test_a_long_answers_worked_example_dates_nothing_but_its_named_dates_stay():
    """BEAM: an assistant's 1,500-character explanation gave date_69 from "given that it rained on February 14, 2024"."""
    filler = "Conditional probability is the probability of an event given that another event has already occurred. " * 10
    answer = (f"{filler}In your case, we want the probability that it will rain on March 15, 2024, given that it "
              "rained on March 14, 2024. Your exam deadline is still April 2, 2024.")
    assert len(answer) > 1000
    facts = facts_of(conversation(("assistant", answer)))
    dates = {k: v for k, (v, c) in facts.items() if c == "DATE" or k.endswith("date") or k.startswith("date")}
    assert not [k for k in dates if k.startswith("date")], dates  # no bare date from the example
    assert facts["deadline"][0] == "April 2, 2024"
    short = facts_of(conversation(("assistant", "It rained on March 14, 2024, so the pitch was closed.")))
    assert [v for k, (v, _) in short.items() if k.startswith("date")] == ["March 14, 2024"]  # a short reply still records it
