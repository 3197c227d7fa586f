"""The default policy keeps a conversation's early facts after its window has slid past them.

A support chat states its facts in the first turns, then goes on for long
enough that seed 002's window (14 messages) has moved far beyond them, fed ten
messages at a time with the summarizer catching up in between (many versions
in the chain). With ``sliding_window.keep_facts`` (the default) the memory still
names them in a small context whose current message asks for none of them; with
``keep_facts = false`` (the seed exactly) they are gone from the memory.
"""

from __future__ import annotations

from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine

OPENING = [
    ("user", "Hi, I'm Dana Whitfield. My order ORD-58213 arrived with a cracked screen."),
    ("assistant", "Sorry to hear that, Dana. I can see order ORD-58213 in our system."),
    ("user", "You can reach me at dana.whitfield@example.net if the chat drops."),
    ("assistant", "Noted. We agreed on a full refund of $412.50 once the courier collects the parcel."),
]
SMALL_TALK = [
    ("user", "The weather has been awful here all week, rain every single day."),
    ("assistant", "That sounds miserable, I hope it clears up for the weekend."),
    ("user", "My dog keeps barking at the delivery vans, it's a whole thing."),
    ("assistant", "Dogs do love to guard the door. Is there anything else on your mind?"),
    ("user", "I tried the new bakery on the corner, the croissants are great."),
    ("assistant", "Good to hear! A good bakery nearby is a real treat."),
]


def _chat(turns: int) -> list[dict]:
    lines = OPENING + [SMALL_TALK[i % len(SMALL_TALK)] for i in range(turns)]
    lines = [(role, text if i < len(OPENING) else f"{text} ({i})") for i, (role, text) in enumerate(lines)]
    lines[30] = ("user", "By the way, my new phone number is +1 503-555-0199.")  # mid-chat: in no window read last
    return [{"conversation_id": "c1", "role": role, "content": text} for role, text in lines]


def _run(tmp_path, keep_facts: bool, step: int = 10) -> tuple[str, MemoryEngine]:
    settings = Settings.load(
        None, data_dir=tmp_path, policies=("sliding_window",), policy="sliding_window",
        sliding_window={"keep_facts": keep_facts},
    )
    engine = MemoryEngine(settings)
    chat = _chat(70)
    for start in range(0, len(chat), step):
        engine.append_many(chat[start : start + step])
        engine.wait_idle(timeout=120)
    engine.append_message("c1", "user", "Thanks, anything else I should do?")
    engine.wait_idle(timeout=120)
    memory = next(m for m in engine.context("c1", budget=600) if m.kind.startswith("memory"))
    return memory.content, engine


def test_early_facts_stay_in_the_memory_long_after_the_window_left_them(tmp_path):
    memory, engine = _run(tmp_path / "kept", keep_facts=True)
    with engine:
        done = [r for r in engine.summaries("c1", policy="sliding_window") if r["status"] == "completed"]
        assert len(done) >= 4 and min(r["window_start"] for r in done[-2:]) > 40  # the window left msg 0-3 far behind
        for value in ("Dana Whitfield", "ORD-58213", "dana.whitfield@example.net", "$412.50", "+1 503-555-0199"):
            assert value in memory, f"{value} is not in the memory:\n{memory}"
        assert "(0) user" not in memory  # the narrative still slides: only the facts stay
        # The facts projection holds them as current, learned by an early version and carried since.
        _, rows = engine.sql(
            "SELECT value, introduced_by FROM facts WHERE policy = 'sliding_window' AND conversation_id = 'c1' "
            "AND retired_by IS NULL AND value = 'ORD-58213'")
        assert len(rows) == 1 and rows[0][1] != done[-1]["summary_id"]
        before = engine.store.dump()
        engine.rebuild()
        assert engine.store.dump() == before


def test_an_import_reads_the_facts_of_the_turns_its_catch_up_skips_over(tmp_path):
    # One batch: memory 1 covers messages 0-5, the catch-up the last window; the turns between are
    # read for facts (seed 002 feeds every message after the base), not told in the narrative.
    memory, engine = _run(tmp_path / "import", keep_facts=True, step=1000)
    with engine:
        done = [r for r in engine.summaries("c1", policy="sliding_window") if r["status"] == "completed"]
        assert len(done) == 2 and done[-1]["input_from"] == done[0]["covers_to"] + 1
        for value in ("Dana Whitfield", "ORD-58213", "dana.whitfield@example.net", "$412.50", "+1 503-555-0199"):
            assert value in memory


def test_the_seed_behaviour_forgets_them(tmp_path):
    memory, engine = _run(tmp_path / "seed", keep_facts=False)
    with engine:
        assert "ORD-58213" not in memory and "dana.whitfield@example.net" not in memory
