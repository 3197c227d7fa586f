"""Recall: the context fills its budget with older messages, relevant ones first, dated, whole, in order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.core.events import ToolCall
from memfold.core.ports import ContextPlan, MemoryMessage, MessageRecord
from memfold.core.tokens import MESSAGE_OVERHEAD, counter
from memfold.projections import retrieval
from memfold.projections.context import LEAD_SHARES, assemble, cap_digests, date_prefix, fit_memory
from memfold.projections.excerpt import EXCERPT_TOKENS
from memfold.projections.retrieval import OlderFromProjection, SearchIndex, analyze

COUNT = counter().count
T0 = datetime(2024, 3, 1, 9, 30, tzinfo=UTC)
FILLER = ["the weather was grey again today", "we talked about the football match", "lunch was a sandwich",
          "the train was late this morning", "a long meeting about budgets", "new shoes arrived by post"]


def msg(index: int, role: str, content: str, **kw) -> MessageRecord:
    return MessageRecord(
        tenant_id="t", conversation_id="c", index=index, seq=index + 1, event_id=f"e{index}", role=role,
        content=content, tokens=counter().count_message(content), occurred_at=T0 + timedelta(days=index), **kw,
    )


def chat(n: int, planted: dict[int, str] | None = None) -> list[MessageRecord]:
    planted = planted or {}
    return [
        msg(i, "user" if i % 2 == 0 else "assistant", planted.get(i, f"{FILLER[i % len(FILLER)]} ({i})"))
        for i in range(n)
    ]


def older(messages: list[MessageRecord]) -> OlderFromProjection:
    """The real search index, loaded from rows built exactly as the projector builds them."""
    cols = retrieval.new_columns()
    for m in messages:
        retrieval.add_doc(cols, m.tenant_id, m.conversation_id, "message", m.event_id, m.index, m.content)
    rows = list(zip(*(cols[c] for c in retrieval.SEARCH_COLUMNS)))
    index = SearchIndex(lambda t, c: rows, lambda t, c: messages)
    return OlderFromProjection(index, ("t", "c"))


def plan_after(cut: int, memory: str = "Summary: small talk.") -> ContextPlan:
    return ContextPlan(memory=(MemoryMessage(memory, "summary", COUNT(memory) + MESSAGE_OVERHEAD),), verbatim_from=cut)


def context(messages, plan, budget, query=None):
    return assemble(plan, messages[plan.verbatim_from:], budget=budget, system_prompt="Be brief.",
                    count_tokens=COUNT, older=older(messages), query=query)


def test_budget_left_after_memory_goes_to_older_messages_newest_first_without_query():
    messages = chat(200)
    out = context(messages, plan_after(190), budget=600, query="")
    kinds = [m.kind for m in out]
    assert kinds[:2] == ["system_prompt", "memory:summary"]
    recalled = [m for m in out if m.kind == "recalled"]
    assert recalled, "the budget left after memory and the recent messages must be used"
    assert [m.index for m in out if m.kind == "verbatim"] == list(range(190, 200))
    assert [m.index for m in recalled] == list(range(190 - len(recalled), 190))  # the newest older ones
    used = sum(m.tokens for m in out)
    following = messages[190 - len(recalled) - 1]
    assert used <= 600 < used + following.tokens + COUNT(date_prefix(following))  # full: the next one would not fit


def test_a_memory_covering_every_turn_still_leaves_the_last_exchange_in_the_context():
    """sliding_window's summary caught up: no verbatim turn left, the query matches many old turns."""
    planted = {i: f"My sister Dana called about the Lisbon flat, part {i}, and the lease on it." for i in range(20, 120, 4)}
    planted.update({196: "It's quite bulky, can I send it in two boxes?",
                    197: "Two boxes are fine, the courier just needs both labels.",
                    198: "Remind me, what did Dana say about the Lisbon lease?",
                    199: "She said the lease on the Lisbon flat runs to June.",
                    200: "And what did Dana say about the flat before that?"})
    messages = chat(201, planted)
    out = context(messages, plan_after(200), budget=500, query=None)
    assert [m.kind for m in out][-1] == "current" and not [m for m in out if m.kind == "verbatim"]
    recalled = [m.index for m in out if m.kind == "recalled"]
    assert {196, 197, 198, 199} <= set(recalled), recalled  # the last turns first, whole
    assert any(i < 120 for i in recalled)  # and the relevant old ones with the rest
    assert recalled == sorted(recalled) and sum(m.tokens for m in out) <= 500
    # With turns the memory does not cover, those are the recent ones: nothing is taken twice.
    gap = context(messages, plan_after(196), budget=500, query=None)
    assert [m.index for m in gap if m.kind == "verbatim"] == [196, 197, 198, 199]


def test_a_turn_the_memory_quotes_whole_is_not_recalled_again():
    """A window summary quotes turns ("- (196) user: ..."); recall spends that room on other turns."""
    planted = {196: "It's quite bulky, can I send it in two boxes to the Lisbon flat?",
               198: "Remind me, what did Dana say about the Lisbon lease?",
               199: "She said the lease on the Lisbon flat runs to June.",
               200: "And what about the Lisbon flat's deposit?",
               60: "Dana paid the Lisbon flat deposit of 900 EUR in cash."}
    messages = chat(201, planted)
    memory = f"Summary: the Lisbon flat.\nMessages:\n- (196) user: {planted[196]}\n- (199) assistant: runs to June"
    quoting = context(messages, plan_after(200, memory), budget=500, query=None)
    plain = context(messages, plan_after(200), budget=500, query=None)
    assert 196 in [m.index for m in plain if m.kind == "recalled"]  # without the quote it is recalled
    recalled = [m.index for m in quoting if m.kind == "recalled"]
    assert 196 not in recalled  # quoted whole: not said twice
    assert {197, 198, 199, 60} <= set(recalled), recalled  # 199 is quoted in part only; the fill went on past 196
    assert sum(m.tokens for m in quoting) <= 500
    # A quoted question that the query ranks first still brings its answer, which the memory does not hold.
    planted.update({100: "Could you ship the bulky brass lamp in two separate boxes?",
                    101: "Yes, print both labels and tape one on each."})
    messages = chat(201, planted)
    memory = f"Summary: a lamp.\nMessages:\n- (100) user: {planted[100]}"
    out = context(messages, plan_after(200, memory), budget=500, query="ship the bulky brass lamp in boxes")
    recalled = [m.index for m in out if m.kind == "recalled"]
    assert 100 not in recalled and 101 in recalled, recalled
    # A short turn counts as quoted only by a line quoting that very message by its number.
    planted.update({150: "Will the refund go to my card?", 151: "Yes, to the card you paid with."})
    messages = chat(201, planted)
    for line, quoted in ((f"- (150) user: {planted[150]}]", True), (f"- (148) user: {planted[150]}", False),
                         (f"- (150) user: {planted[150]} … and when?", False)):
        out = context(messages, plan_after(200, f"[Previous context: Summary: a refund.\nMessages:\n{line}"),
                      budget=500, query="will the refund go to my card")
        recalled = [m.index for m in out if m.kind == "recalled"]
        assert (150 not in recalled) is quoted and 151 in recalled, (line, recalled)


def test_a_question_asked_again_word_for_word_is_recalled_once_unless_it_brings_its_answer():
    """Support chats repeat questions ("Will the refund go to my card?"): the newest saying is kept,
    an older one only as the question of a recalled answer; a short turn ("Yes, thanks.") always counts."""
    asked = "Will the refund go to my card?"
    planted = {40: asked, 41: "The refund returns to the card you paid with, in 2 to 11 days.",
               80: asked, 81: "Yes, thanks.", 120: "Is the refund taxed?", 121: "Yes, thanks.",
               150: asked, 160: asked}
    messages = chat(200, planted)
    out = context(messages, plan_after(195), budget=900, query="refund card")
    recalled = [m.index for m in out if m.kind == "recalled"]
    assert sum(m.tokens for m in out) <= 900
    assert 160 in recalled  # the newest saying
    assert 80 not in recalled and 150 not in recalled, recalled  # said again: not twice
    assert 40 in recalled and 41 in recalled, recalled  # the answer keeps its question
    assert 121 in recalled, recalled  # "Yes, thanks." twice: too short to tell it is the same thing said
    # The current message counts as said: a turn it repeats is not recalled beside it.
    messages = chat(201, {**planted, 200: asked})
    out = context(messages, plan_after(195), budget=900, query=None)
    recalled = [m.index for m in out if m.kind == "recalled"]
    assert out[-1].kind == "current" and 160 not in recalled and {40, 41} <= set(recalled), recalled


def test_relevant_messages_are_recalled_with_their_neighbour_dated_and_in_order():
    planted = {40: "Where should I go for my sister Dana's birthday dinner?",
               41: "Try the Lisbon tram tour and then dinner at Cervejaria Ramiro.",
               120: "My sister Dana moved to Lisbon in 2019."}
    messages = chat(200, planted)
    out = context(messages, plan_after(190), budget=400, query="Which city did Dana move to?")
    recalled = [m for m in out if m.kind == "recalled"]
    idx = [m.index for m in recalled]
    assert 120 in idx and 40 in idx and 41 in idx  # 41 answers 40; 121 is 120's answer
    assert idx == sorted(idx)
    kinds = [m.kind for m in out]
    assert kinds.index("recalled") > kinds.index("memory:summary")
    assert max(i for i, k in enumerate(kinds) if k == "recalled") < kinds.index("verbatim")
    dana = next(m for m in recalled if m.index == 120)
    assert dana.content == "[2024-06-29]\nMy sister Dana moved to Lisbon in 2019."
    assert dana.occurred_at == messages[120].occurred_at
    assert sum(m.tokens for m in out) <= 400


def test_recall_fills_a_context_whose_memory_covers_every_message():
    messages = chat(60, {10: "The boiler service is booked for the 14th."})
    plan = plan_after(60)  # nothing left uncovered, no current message
    out = context(messages, plan, budget=300, query="when is the boiler service?")
    recalled = [m.index for m in out if m.kind == "recalled"]
    assert 10 in recalled and recalled[-1] == 59


def test_no_query_uses_the_current_user_message():
    planted = {30: "The wifi password is kumquat-77.", 198: "what was the wifi password again?"}
    messages = chat(199, planted)
    plan = plan_after(195)
    without = context(messages, plan, budget=200)
    explicit = context(messages, plan, budget=200, query=planted[198])
    assert [m.as_dict() for m in without] == [m.as_dict() for m in explicit]
    assert 30 in [m.index for m in without if m.kind == "recalled"]
    assert without[-1].kind == "current" and without[-1].index == 198


def test_rendered_cost_is_exact():
    for text in ["Hello there", "'s odd", "42 is the answer", "!!! wow", "émigré café", " leading space", "\nnewline"]:
        m = msg(3, "user", text)
        out = context([msg(0, "user", "x"), msg(1, "assistant", "y"), msg(2, "user", "z"), m, msg(4, "user", "now")],
                      ContextPlan(verbatim_from=4), budget=500, query=text)
        r = next(c for c in out if c.index == 3)
        assert r.content == date_prefix(m) + text
        assert r.tokens == COUNT(r.content) + MESSAGE_OVERHEAD


def tool_chat(n: int, tool_at: int) -> list[MessageRecord]:
    messages = chat(n)
    call = ToolCall(id="call-1", name="lookup_order", arguments='{"id": 7}')
    messages[tool_at] = msg(tool_at, "assistant", "", tool_calls=(call,))
    messages[tool_at + 1] = msg(tool_at + 1, "tool", "order 7 shipped to Porto warehouse", tool_call_id="call-1")
    return messages


def test_a_recalled_tool_result_brings_its_call():
    messages = tool_chat(100, 51)
    out = context(messages, plan_after(95), budget=300, query="where was order 7 shipped? Porto?")
    idx = [m.index for m in out if m.kind == "recalled"]
    assert 52 in idx and 51 in idx
    call = next(m for m in out if m.index == 51)
    assert call.tool_calls and call.kind == "recalled"


def test_a_tool_lookup_made_again_with_the_same_result_is_recalled_once():
    """"Let me look that up." + the very result the context holds already brings nothing new; a lookup
    whose result differs, or whose call says something of its own, is recalled."""
    result = '{"hotel": "Pensione Fiore", "room": "twin", "breakfast": true}'

    def lookups(second_result: str, first_call: str = "Let me check.") -> list[MessageRecord]:
        messages = chat(120)
        for at, cid, said, text in ((41, "c1", first_call, result), (81, "c2", "Let me look that up.", second_result)):
            call = ToolCall(id=cid, name="get_hotel", arguments="{}")
            messages[at - 1] = msg(at - 1, "user", "Does my hotel booking include breakfast?")
            messages[at] = msg(at, "assistant", said, tool_calls=(call,))
            messages[at + 1] = msg(at + 1, "tool", text, tool_call_id=cid)
        return messages

    def recalled(messages):
        out = context(messages, plan_after(115), budget=700, query="Which hotel, with breakfast?")
        assert sum(m.tokens for m in out) <= 700
        return [m.index for m in out if m.kind == "recalled"]

    same = recalled(lookups(result))
    assert len({41, 81} & set(same)) == 1 and len({42, 82} & set(same)) == 1, same  # one lookup, whole
    assert {41, 42, 81, 82} <= set(recalled(lookups(result.replace("twin", "double"))))  # a result that differs is news
    said = "I've moved you to the Pensione Fiore annex, here it is."
    assert {41, 42, 81, 82} <= set(recalled(lookups(result, said)))  # the older call says something of its own


def big_memory(lines: int, kind: str) -> ContextPlan:
    """A plan whose memory may alone exceed the budget: dated fact lines or narrative sentences."""
    if kind == "facts":
        body = "\n".join(f"[2024-03-{1 + i // 3:02d}]\n- item {i}: {FILLER[i % len(FILLER)]}" for i in range(lines))
    else:
        body = "The user chats about daily life. " + " ".join(f"{FILLER[i % len(FILLER)]} ({i})." for i in range(lines))
    return ContextPlan(memory=(MemoryMessage(body, kind, COUNT(body) + MESSAGE_OVERHEAD),
                               MemoryMessage("Summary: small talk.", "summary", COUNT("Summary: small talk.") + MESSAGE_OVERHEAD)))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=80),
    cut=st.integers(min_value=0, max_value=80),
    budget=st.integers(min_value=0, max_value=900),
    tool_at=st.one_of(st.none(), st.integers(min_value=0, max_value=77)),
    query=st.sampled_from([None, "", "Porto order shipped", "football match weather", "train"]),
    memory=st.one_of(st.none(), st.tuples(st.integers(min_value=1, max_value=120), st.sampled_from(["facts", "narrative"]))),
    share=st.sampled_from([0.0, 0.5, 1.0]),
    days=st.sampled_from(["daily", "sessions", "shuffled"]),
)
def test_never_over_budget_ordered_marked_and_tool_groups_whole(n, cut, budget, tool_at, query, memory, share, days):
    messages = tool_chat(n, tool_at) if tool_at is not None and tool_at + 1 < n else chat(n)
    if days != "daily":  # a day's first recalled message is dated; shuffled dates need more date lines than days
        offset = (lambda i: i // 7) if days == "sessions" else (lambda i: (i * 7) % 5)
        messages = [msgspec.structs.replace(m, occurred_at=T0 + timedelta(days=offset(m.index))) for m in messages]
    plan = plan_after(min(cut, n - 1))
    if memory is not None:  # memory alone can be larger than the budget: it is trimmed, never sent over budget
        plan = msgspec.structs.replace(big_memory(*memory), verbatim_from=plan.verbatim_from)
    out = assemble(plan, messages[plan.verbatim_from:], budget=budget, system_prompt="Be brief.",
                   count_tokens=COUNT, older=older(messages), query=query, recall_share=share)
    fixed = sum(m.tokens for m in out if m.kind in ("system_prompt", "current"))
    assert sum(m.tokens for m in out) <= max(budget, fixed)
    source = {f"memory:{x.kind}": x.content for x in plan.memory}
    for m in out:
        if m.kind.startswith("memory:"):  # trimmed memory: what is left is the original's, counted exactly
            assert m.tokens == COUNT(m.content) + MESSAGE_OVERHEAD
            if m.kind == "memory:facts":
                assert set(m.content.split("\n")) <= set(source[m.kind].split("\n"))
            else:
                assert source[m.kind].startswith(m.content)
    kinds = [m.kind for m in out]
    order = {"system_prompt": 0, "recalled": 2, "verbatim": 3, "current": 4}
    ranks = [1 if k.startswith("memory:") else order[k] for k in kinds]
    assert ranks == sorted(ranks)
    recalled = [m.index for m in out if m.kind == "recalled"]
    assert recalled == sorted(set(recalled))
    present = {m.index for m in out if m.index is not None}
    assert len(present) == len([m for m in out if m.index is not None])  # nothing twice
    for m in out:
        if m.tool_calls:
            assert all(any(o.tool_call_id == tc.id for o in out) for tc in m.tool_calls)
        if m.role == "tool":
            assert any(tc.id == m.tool_call_id for o in out for tc in o.tool_calls)


def test_analyzer_drops_stop_words_and_meets_word_forms():
    assert analyze("When did I move to Lisbon?") == ["mov", "lisbon"]
    assert analyze("I moved my 2 cats") == ["mov", "2", "cat"]
    assert analyze("move moves moved moving") == ["mov"] * 4
    assert analyze("stopped stop running run") == ["stop", "stop", "run", "run"]


def test_a_long_relevant_message_is_recalled_as_its_matching_passages():
    story = " ".join(f"Paragraph {k} is about the garden, the weather and nothing much." for k in range(60))
    story += " The vet said Biscuit needs his booster shot on 12 May. He was calm about it. " + story
    messages = chat(100, {20: "Tell me about your week?", 21: story})
    out = context(messages, plan_after(95), budget=400, query="When is Biscuit's booster shot?")
    excerpt = next(m for m in out if m.index == 21)
    assert excerpt.kind == "recalled" and excerpt.content.startswith("[2024-03-22] (excerpt)\n")
    # Condensed (excerpt.condense): "was" is left out, the month "May" and the pronoun stay.
    assert "booster shot on 12 May. He calm about it." in excerpt.content and "…" in excerpt.content
    assert excerpt.tokens == COUNT(excerpt.content) + MESSAGE_OVERHEAD < messages[21].tokens // 4
    assert sum(m.tokens for m in out) <= 400


def test_with_room_the_best_exchanges_are_shown_at_length_and_without_it_as_short_excerpts():
    """Past LEAD_ROOM the first hit and its answer get up to LEAD_SHARES[0] of the room; below it, every excerpt is short."""
    answer = " ".join(f"Step {k}: water the tomato seedlings with {k} cups and check the soil." for k in range(80))
    planted = {40: "How should I water the tomato seedlings?", 41: answer,
               70: "The tomato seedlings look fine now.", 71: answer.replace("Step", "Stage")}
    messages = chat(200, planted)
    query = "How should I water the tomato seedlings?"
    wide = {m.index: m for m in context(messages, plan_after(195), budget=4000, query=query) if m.kind == "recalled"}
    narrow = {m.index: m for m in context(messages, plan_after(195), budget=1500, query=query) if m.kind == "recalled"}
    assert wide[41].content.startswith("[2024-04-11] (excerpt)\n") and narrow[41].content.startswith("[2024-04-11] (excerpt)\n")
    assert wide[41].tokens > 3 * EXCERPT_TOKENS > narrow[41].tokens
    assert wide[41].tokens <= 1.1 * LEAD_SHARES[0] * 4000  # "about": an excerpt ends after the passage that reaches its size
    assert EXCERPT_TOKENS < wide[71].tokens <= 1.1 * LEAD_SHARES[1] * 4000 < wide[41].tokens  # the second hit: the next share
    assert sum(m.tokens for m in context(messages, plan_after(195), budget=4000, query=query)) <= 4000


def test_a_question_about_the_whole_conversation_recalls_many_user_turns_as_short_excerpts():
    """'In what order did I bring up ...': below LEAD_ROOM (ORDER_ROOM for an order) the user's turns come first, short."""
    parts = ["concrete base", "timber frame", "roof felt", "door hinges", "window glass", "paint colour",
             "gutter pipes", "floor boards"]
    words = ["walnut", "granite", "copper", "linen", "amber", "cobalt", "willow", "basalt", "saffron", "ivory",
             "marble", "juniper", "indigo", "hazel", "quartz", "russet"]
    answer = " ".join(f"Step {k}: for the garden shed, level the base and fix the frame." for k in range(40))
    planted = {}
    for n, at in enumerate(range(20, 180, 20)):
        tail = " ".join(f"The {words[(n + k) % 16]} {words[(3 * n + k) % 16]} sample number {n * 20 + k} looked fine."
                        for k in range(30))  # a long turn (over EXCERPT_OVER): an excerpt
        planted[at] = f"Next for the garden shed: the {parts[n]}. {tail}"
        planted[at + 1] = answer
    messages = chat(200, planted)
    overview = "In what order did I bring up the parts of the garden shed across our conversations?"
    plain = "What did I say about the garden shed roof and door?"
    wide = [m for m in context(messages, plan_after(195), budget=1200, query=overview) if m.kind == "recalled"]
    narrow = [m for m in context(messages, plan_after(195), budget=1200, query=plain) if m.kind == "recalled"]
    users = [m for m in wide if m.role == "user" and m.index in planted]
    assert len(users) == 8 and all("(excerpt)" in m.content and m.tokens <= 100 for m in users)  # every turn, short
    assert len([m for m in narrow if m.role == "user" and m.index in planted]) < 8  # a plain one: its best exchanges
    for query in (overview, plain):
        assert sum(m.tokens for m in context(messages, plan_after(195), budget=1200, query=query)) <= 1200
    # With more room (LEAD_ROOM..ORDER_ROOM), only a question about the order keeps to the user's turns;
    # one about the conversations in other words gets the lead exchanges at length.
    order = "In what order did I bring up the parts of the garden shed?"
    count = "How many parts of the garden shed did I bring up across our conversations?"
    ordered = [m for m in context(messages, plan_after(195), budget=3500, query=order) if m.kind == "recalled"]
    counted = [m for m in context(messages, plan_after(195), budget=3500, query=count) if m.kind == "recalled"]
    assert len([m for m in ordered if m.role == "user" and m.index in planted]) == 8
    assert all(m.tokens <= 100 for m in ordered if m.role == "user" and m.index in planted)
    assert max(m.tokens for m in counted) > 300  # the first hit at length
    for query in (order, count):
        assert sum(m.tokens for m in context(messages, plan_after(195), budget=3500, query=query)) <= 3500
    from memfold.projections.context import ORDER_QUERY, OVERVIEW_QUERY

    assert ORDER_QUERY.search("Can you list the order in which I brought up different aspects of my budget?")
    assert not ORDER_QUERY.search("How do I order the tasks in my sprint?")
    assert OVERVIEW_QUERY.search("How many sizes have I mentioned across my messages?")
    assert not OVERVIEW_QUERY.search("Was it consistent across all comparisons?")
    assert not OVERVIEW_QUERY.search("How do I stay motivated throughout the weeks before my deadline?")


def test_a_passage_already_shown_is_not_repeated_by_a_later_excerpt():
    plan = "Step one: book the vet for Biscuit's booster shot on 12 May."
    filler = " ".join(f"Paragraph {k} is about the garden, the weather and nothing much." for k in range(40))
    planted = {21: f"{filler} {plan} Keep him calm. {filler}",
               61: f"{filler} {plan} Keep him calm. Step two: Biscuit's worm tablets are due in June. {filler}"}
    messages = chat(100, planted)
    out = context(messages, plan_after(95), budget=700, query="When is Biscuit's booster shot and his worm tablets?")
    recalled = {m.index: m for m in out if m.kind == "recalled"}
    shown = "Step one: book vet for Biscuit's booster shot on 12 May."  # as an excerpt condenses it
    assert sum(m.content.count(shown) for m in out) == 1  # the repeated plan once; its room goes to what is new
    assert "worm tablets due in June" in recalled[61].content
    assert 21 not in recalled  # nothing in it matches the query that is not in the context already
    assert sum(m.tokens for m in out) <= 700


def test_the_users_own_words_rank_before_an_assistant_echo():
    planted = {30: "I keep my spare key under the blue flowerpot by the door.",
               51: "A spare key under a blue flowerpot? Spare key, blue flowerpot: burglars check there first."}
    messages = chat(100, planted)
    source = older(messages)
    query = "where is the spare key? blue flowerpot"
    assert [h.idx for h in source.index.rank(source.key, query, limit=2)] == [51, 30]  # BM25 alone: the echo
    assert source.ranked(query, 2) == [30, 51]


def test_a_run_on_sentence_is_excerpted_by_its_clauses():
    clauses = [f"and I have also set up item {k} in the old shed" for k in range(80)]
    clauses[50] = "and my passport number is X1234 for the trip"
    run_on = "I did many things, " + ", ".join(clauses) + "."
    messages = chat(100, {21: run_on})
    out = context(messages, plan_after(95), budget=400, query="What is my passport number?")
    excerpt = next(m for m in out if m.index == 21)
    assert "passport number X1234" in excerpt.content and excerpt.content.startswith("[2024-03-22] (excerpt)\n")
    assert excerpt.tokens < messages[21].tokens // 4


def test_a_recalled_questions_long_answer_comes_as_its_opening_when_nothing_in_it_matches():
    answer = "Here is a plan. " + " ".join(f"Step {k}: water the tomatoes and check the soil." for k in range(120))
    messages = chat(100, {40: "My landlord Ferreira wants the flat back by June, what now?", 41: answer})
    out = context(messages, plan_after(95), budget=500, query="What does Ferreira want?")
    recalled = {m.index: m for m in out if m.kind == "recalled"}
    assert 40 in recalled and 41 in recalled
    assert recalled[41].content.startswith("[2024-04-11] (excerpt)\nHere plan. Step 0")
    assert recalled[41].tokens < messages[41].tokens // 4


def test_words_about_the_conversation_itself_do_not_rank():
    planted = {30: "I work as a colour technologist at a paint factory.",
               60: "You mentioned that earlier, and I mentioned it too, as we said."}
    source = older(chat(100, planted))
    assert retrieval.query_terms("What profession did I mention I work in?") == ["profession", "work"]
    assert retrieval.query_terms("What did I mention?") == ["mention"]  # nothing else: kept
    assert source.ranked("What profession did I mention I work in?", 5) == [30]
    # An apology or a hesitation is no topic either: "sorry" must not bring back every other apology.
    sorry = older(chat(100, {20: "Sorry, long day. Can I get an invoice?", 40: "Done: you now fly on October 28."}))
    assert retrieval.query_terms("Sorry, wait, when am I flying out again?") == ["fly"]
    assert sorry.ranked("Sorry, wait, when am I flying out again?", 5) == [40]


def test_a_question_announced_first_is_recalled_by_what_it_asks():
    # The demo's refund chat: "One more question:" had recalled "Random question: are you a bot?".
    chat_ = older(chat(100, {20: "Random question: are you a real person or a bot?",
                             40: "Your refund is 293.45 EUR, approved pending inspection."}))
    query = "One more question: how much is the refund again?"
    assert retrieval.query_terms(query) == ["much", "refund"]
    assert chat_.ranked(query, 5) == [40]
    # Only a leading preface goes: a question about questions keeps the word.
    assert retrieval.query_terms("What question did I ask about the refund?") == ["question", "refund"]
    assert retrieval.query_terms("Quick question.") == ["quick", "question"]  # nothing else: kept


def test_a_query_of_common_words_scores_a_bounded_head_and_still_finds_the_best_match():
    n = 3000
    messages = [msg(i, "user" if i % 2 == 0 else "assistant", f"the order and the refund of parcel {i} were fine")
                for i in range(n)]
    # The densest use of both words (with a number, as every candidate has: a question weighs stated values up).
    messages[1234] = msg(1234, "user", "order refund order refund 7")
    source = older(messages)
    source.end()  # loads the conversation
    corpus = source.index._docs(source.key).corpora["message"]
    assert set(corpus.heads) >= {"order", "refund"} and all(len(h) == retrieval._HEAD for h in corpus.heads.values())
    scores = corpus.scores({"order", "refund"})
    assert len(scores) <= 2 * retrieval._HEAD < n  # not every one of the 3,000 postings per term
    assert source.ranked("what about the order refund?", 3)[0] == 1234
    # The head is a function of the documents: an index that followed the conversation batch by
    # batch (as the projector feeds it) holds the same heads and ranking as one loaded at once.
    cols = retrieval.new_columns()
    for m in messages:
        retrieval.add_doc(cols, "t", "c", "message", m.event_id, m.index, m.content)
    rows = list(zip(*(cols[k] for k in retrieval.SEARCH_COLUMNS)))
    live = SearchIndex(lambda t, c: rows[:100], lambda t, c: messages[:100])
    live.count(("t", "c"))  # loaded with the first 100
    for start in range(100, n, 700):
        batch = {k: v[start : start + 700] for k, v in cols.items()}
        live.extend(batch, messages[start : start + 700])
    followed = live._docs(("t", "c")).corpora["message"]
    assert followed.heads == corpus.heads
    assert OlderFromProjection(live, ("t", "c")).ranked("order refund parcel", 20) == source.ranked("order refund parcel", 20)


def test_only_the_first_recalled_message_of_a_day_carries_the_date():
    planted = {40: "Where should I go for my sister Dana's birthday dinner?",
               41: "Try the Lisbon tram tour and then dinner at Cervejaria Ramiro.",
               120: "My sister Dana moved to Lisbon in 2019."}
    messages = [msgspec.structs.replace(m, occurred_at=T0 + timedelta(days=m.index // 50, minutes=m.index))
                for m in chat(200, planted)]  # a day holds 50 messages
    out = context(messages, plan_after(190), budget=400, query="Which city did Dana move to?")
    recalled = {m.index: m for m in out if m.kind == "recalled"}
    assert recalled[40].content == "[2024-03-01]\n" + planted[40]  # the day's first recalled message
    assert recalled[41].content == planted[41]  # same day as 40: no second date line
    assert recalled[41].tokens == messages[41].tokens
    assert recalled[120].content.startswith("[2024-03-03]\n")
    for m in out:
        assert m.tokens == COUNT(m.content) + MESSAGE_OVERHEAD
    assert sum(m.tokens for m in out) <= 400
    days = [m.occurred_at.date() for m in out if m.kind == "recalled"]
    dated = [m.content.startswith("[") for m in out if m.kind == "recalled"]
    assert dated == [i == 0 or days[i] != days[i - 1] for i in range(len(days))]


def test_an_excerpt_skips_a_passage_that_repeats_what_the_context_says_but_keeps_a_new_number():
    setup = "I am building the Biscuit tracker with Flask 3 and SQLite on my laptop."
    filler = " ".join(f"Paragraph {k} is about the garden, the weather and nothing much." for k in range(40))
    planted = {20: setup,
               61: f"{filler} Again: I am building the Biscuit tracker with Flask and SQLite. {filler}",
               81: f"{filler} Now I am building the Biscuit tracker with Flask 4 and SQLite on my laptop. {filler}"}
    messages = chat(100, planted)
    out = context(messages, plan_after(95), budget=900, query="What is the Biscuit tracker built with, Flask?")
    recalled = {m.index: m for m in out if m.kind == "recalled"}
    assert setup in recalled[20].content
    assert "Again: I am building" not in "".join(m.content for m in out)  # said again in other words: not repeated
    assert "tracker with Flask 4 and SQLite" in recalled[81].content  # the same words with a new number are news
    assert sum(m.tokens for m in out) <= 900


def test_dates_out_of_order_cost_more_date_lines_and_the_context_still_fits_with_tool_groups_whole():
    # Days alternate message by message (an import with shuffled timestamps): every recalled
    # message starts a new run of days and needs its date line, though only two days were paid for.
    messages = [msgspec.structs.replace(m, occurred_at=T0 + timedelta(days=m.index % 2)) for m in tool_chat(120, 50)]
    for budget in range(260, 800, 37):
        out = context(messages, plan_after(110), budget=budget, query="where was order 7 shipped? Porto? the weather")
        assert sum(m.tokens for m in out) <= budget
        recalled = [m for m in out if m.kind == "recalled"]
        assert recalled and [m.index for m in recalled] == sorted(m.index for m in recalled)
        last = None
        for m in recalled:
            if m.content:
                day = m.occurred_at.date()
                assert m.content.startswith(f"[{day.isoformat()}]") == (day != last)
                assert m.tokens == COUNT(m.content) + MESSAGE_OVERHEAD
                last = day
        indices = {m.index for m in recalled}
        assert (50 in indices) == (51 in indices)  # the call and its result together or not at all


def summary_of(sentences: int) -> str:
    return "Summary: " + " ".join(f"{FILLER[i % len(FILLER)]} ({i})." for i in range(sentences))


def test_with_a_query_a_summary_takes_at_most_its_share_of_a_small_budget_and_recall_the_rest():
    messages = chat(120, planted={8: "my order number is ORD-5521"})
    digest = MemoryMessage(summary_of(60), "summary", COUNT(summary_of(60)) + MESSAGE_OVERHEAD)
    plan = ContextPlan(memory=(digest,), verbatim_from=120)
    room = 400 - (COUNT("Be brief.") + MESSAGE_OVERHEAD)
    assert digest.tokens > room  # alone, the summary would take the whole budget
    kw = dict(budget=400, system_prompt="Be brief.", count_tokens=COUNT, older=older(messages),
              query="what was my order number?")
    shared = assemble(plan, [], recall_share=0.5, **kw)
    summary = [m for m in shared if m.kind == "memory:summary"]
    assert len(summary) == 1 and summary[0].tokens <= room // 2
    assert summary[0].content.startswith("Summary: the weather was grey again today (0).")  # trimmed from its end
    assert any("ORD-5521" in m.content for m in shared if m.kind == "recalled")
    assert sum(m.tokens for m in shared) <= 400
    whole = assemble(plan, [], recall_share=0.0, **kw)  # no share: memory first, as before
    assert not any(m.kind == "recalled" for m in whole)


def test_facts_are_not_capped_and_no_query_means_no_cap():
    messages = chat(120)
    facts_text = "\n".join(f"- item {i}: {FILLER[i % len(FILLER)]}" for i in range(12))
    facts = MemoryMessage(facts_text, "facts", COUNT(facts_text) + MESSAGE_OVERHEAD)
    digest = MemoryMessage(summary_of(30), "narrative", COUNT(summary_of(30)) + MESSAGE_OVERHEAD)
    plan = ContextPlan(memory=(facts, digest), verbatim_from=120)
    budget = facts.tokens + digest.tokens + 60
    kw = dict(budget=budget, system_prompt=None, count_tokens=COUNT, older=older(messages), recall_share=0.5)
    out = assemble(plan, [], query="football match", **kw)
    kinds = {m.kind: m for m in out}
    assert kinds["memory:facts"].content == facts_text  # whole: facts are what that memory keeps in every context
    assert kinds["memory:narrative"].tokens <= (budget // 2) and kinds["memory:narrative"].tokens < digest.tokens
    unasked = assemble(plan, [], query="", **kw)
    assert [m.content for m in unasked if m.kind.startswith("memory:")] == [facts_text, summary_of(30)]


def test_facts_that_do_not_fit_go_by_the_query_first_then_oldest_first():
    messages = chat(40)
    lines = ["- deductible_amount: $751.25"] + [f"- note_{i}: {FILLER[i % len(FILLER)]}" for i in range(10)]
    facts_text = "[2025-09-30]\n" + "\n".join(lines)
    facts = MemoryMessage(facts_text, "facts", COUNT(facts_text) + MESSAGE_OVERHEAD)
    plan = ContextPlan(memory=(facts,), verbatim_from=40)
    budget = facts.tokens // 2
    kw = dict(budget=budget, system_prompt=None, count_tokens=COUNT, older=older(messages), recall_share=0.5)
    asked = assemble(plan, [], query="How much was my deductible?", **kw)
    kept = asked[0].content.split("\n")
    assert asked[0].kind == "memory:facts" and sum(m.tokens for m in asked) <= budget
    assert "- deductible_amount: $751.25" in kept  # the oldest fact, but the one asked about
    assert "- note_0: the weather was grey again today" not in kept and lines[-1] in kept
    unasked = assemble(plan, [], query="", **kw)[0].content.split("\n")
    assert "- deductible_amount: $751.25" not in unasked and lines[-1] in unasked  # no query: oldest first


def test_a_topics_key_facts_share_the_digests_cap_and_go_last_the_asked_one_kept():
    messages = chat(120, planted={8: "my flight leaves on March 3"})
    lines = ["- deductible_amount: $751.25"] + [f"- note_{i}: {FILLER[i % len(FILLER)]}" for i in range(12)]
    facts_text = "[2025-09-30]\n" + "\n".join(lines)
    facts = MemoryMessage(facts_text, "key_facts", COUNT(facts_text) + MESSAGE_OVERHEAD)
    digest = MemoryMessage(summary_of(30), "topics", COUNT(summary_of(30)) + MESSAGE_OVERHEAD)
    plan = ContextPlan(memory=(facts, digest), verbatim_from=120)
    budget = facts.tokens + 40
    kw = dict(budget=budget, system_prompt=None, count_tokens=COUNT, older=older(messages), recall_share=0.5)
    out = assemble(plan, [], query="How much was my deductible?", **kw)
    memory = [m for m in out if m.kind.startswith("memory:")]
    assert sum(m.tokens for m in memory) <= budget // 2  # unlike a facts memory, capped with the digests
    assert memory[0].kind == "memory:key_facts" and "- deductible_amount: $751.25" in memory[0].content
    assert all(m.kind != "memory:topics" or m.tokens < digest.tokens for m in memory)  # the digest went first
    assert "- note_0: the weather was grey again today" not in memory[0].content  # then facts the query does not name
    assert any(m.kind == "recalled" for m in out) and sum(m.tokens for m in out) <= budget


def test_a_memory_message_trimmed_to_its_header_is_dropped_whole():
    """topics at a small budget: "Earlier topics of this conversation:" over no topic says nothing."""
    from memfold.core.ports import ContextMessage

    def message(text: str, kind: str) -> ContextMessage:
        return ContextMessage("system", text, kind, COUNT(text) + MESSAGE_OVERHEAD)

    facts = message("[2025-09-21]\n- order_id: ORD-95092-8\n- refund_amount: £116.75", "memory:key_facts")
    topics = message("Earlier topics of this conversation:\n- returns: the label and the pickup window\n"
                     "- delivery: the courier, the tracking number and the neighbour", "memory:topics")
    summary = message("The user wants the refund before the weekend.", "memory:summary")
    room = facts.tokens + summary.tokens + 2
    for fitted in (fit_memory([facts, topics, summary], room, COUNT), cap_digests([facts, topics, summary], room, COUNT)):
        assert [m.kind for m in fitted] == ["memory:key_facts", "memory:summary"]  # no header-only message, order kept
        assert fitted[0] == facts and fitted[1] == summary


def test_a_digest_trimmed_from_its_end_keeps_no_heading_over_nothing():
    """A window summary cut to its first lines: "Messages:" and a date line with their statements gone go too."""
    from memfold.core.ports import ContextMessage

    text = ("[Previous context: Key facts:\n- order_id: #18066 (msg 221)\n- refund_amount: 293.45 EUR (msg 221)\n"
            "Summary: The user (Mira Adeyemi) has a problem with order #18066.\nMessages:\n[2025-02-04]\n"
            "- (2) user: Long story short, the panel is cracked.\n- (12) user: I'll print the label at the library tomorrow.]")
    summary = ContextMessage("system", text, "memory:summary", COUNT(text) + MESSAGE_OVERHEAD)
    kept_lines = text.split("\n")[:4]
    room = COUNT("\n".join(kept_lines)) + MESSAGE_OVERHEAD + 3  # the summary line fits, "Messages:" could too
    for fitted in (fit_memory([summary], room, COUNT), cap_digests([summary], room, COUNT)):
        assert [m.content for m in fitted] == ["\n".join(kept_lines)]
        assert fitted[0].tokens == COUNT(fitted[0].content) + MESSAGE_OVERHEAD <= room
