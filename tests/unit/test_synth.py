"""The synthetic conversation generator (benchmarks/synth.py): determinism, ground truth, structure, scoring."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from support.benchmarks import BENCH
from support.benchmarks import load as _load

from memfold.core.events import ROLES, MessagePayload

synth = _load("synth")
DOMAINS = tuple(synth.domains.DOMAINS)
ALLOWED_KEYS = {"conversation_id", "tenant_id", "role", "content", "model_variant", "metadata", "ts", "tool_calls",
                "tool_call_id"}


@pytest.fixture(scope="module")
def corpus():
    return synth.generate(5, 240, seed=11)


@pytest.fixture(scope="module")
def short_and_odd():
    return [synth.generate_conversation(3, d, t, conversation_id=f"{d}-{t}")
            for d in DOMAINS for t in (14, 15, 17, 23, 61, 151)]


def _all(corpus, short_and_odd):
    return [*corpus, *short_and_odd]


def test_same_seed_same_bytes(tmp_path):
    a = synth.write(synth.generate(3, "40-90", seed="s1"), tmp_path / "a.jsonl", {})
    b = synth.write(synth.generate(3, "40-90", seed="s1"), tmp_path / "b.jsonl", {})
    assert a[0].read_bytes() == b[0].read_bytes()
    assert a[1].read_bytes() == b[1].read_bytes()


def test_other_seed_other_conversations():
    a = synth.generate(2, 60, seed=1)
    b = synth.generate(2, 60, seed=2)
    assert [m["content"] for m in a[0].messages] != [m["content"] for m in b[0].messages]


def test_exact_length_and_every_domain(corpus, short_and_odd):
    assert [len(c.messages) for c in corpus] == [240] * 5
    assert {c.domain for c in corpus} == set(DOMAINS)
    for conv in short_and_odd:
        assert len(conv.messages) == int(conv.conversation_id.rsplit("-", 1)[1])


def test_latest_values_appear_at_their_turn(corpus, short_and_odd):
    for conv in _all(corpus, short_and_odd):
        assert len(conv.facts) >= 8
        for fact in conv.facts.values():
            assert fact.value == fact.history[-1]["value"]
            for step in fact.history:
                assert step["value"] in conv.messages[step["turn"]]["content"], (conv.conversation_id, fact.key, step)
            turns = [s["turn"] for s in fact.history]
            assert turns == sorted(turns) and len(set(turns)) == len(turns)
            assert synth.fact_present(fact.kind, fact.value, "\n".join(m["content"] for m in conv.messages))


def test_long_conversations_update_facts(corpus):
    for conv in corpus:
        updated = [f for f in conv.facts.values() if len(f.history) > 1]
        assert updated, conv.conversation_id
        assert all(f.turn > 10 for f in updated)
        assert all(f.history[-1]["value"] != f.history[-2]["value"] for f in updated)


def test_roles_alternate_and_tool_calls_are_answered(corpus, short_and_odd):
    for conv in _all(corpus, short_and_odd):
        msgs = conv.messages
        assert msgs[0]["role"] == "user"
        i = 0
        while i < len(msgs):
            m = msgs[i]
            if m["role"] == "user":
                assert i + 1 == len(msgs) or msgs[i + 1]["role"] == "assistant", (conv.conversation_id, i)
                i += 1
                continue
            assert m["role"] == "assistant", (conv.conversation_id, i, m["role"])
            if m.get("tool_calls"):
                ids = [c["id"] for c in m["tool_calls"]]
                answers = msgs[i + 1 : i + 1 + len(ids)]
                assert [a["role"] for a in answers] == ["tool"] * len(ids)
                assert [a["tool_call_id"] for a in answers] == ids
                for call in m["tool_calls"]:
                    assert isinstance(json.loads(call["arguments"]), dict) and call["name"]
                for a in answers:
                    json.loads(a["content"])
                assert msgs[i + 1 + len(ids)]["role"] == "assistant"
                i += 1 + len(ids)
                continue
            assert i + 1 == len(msgs) or msgs[i + 1]["role"] == "user", (conv.conversation_id, i)
            i += 1
        assert sum(1 for m in msgs if m["role"] == "tool") == sum(len(m.get("tool_calls", ())) for m in msgs)


def test_corpus_has_tool_calls_and_parallel_calls(corpus):
    calls = [m["tool_calls"] for c in corpus for m in c.messages if m.get("tool_calls")]
    assert len(calls) >= 10
    assert any(len(c) == 2 for c in calls)


def test_jsonl_lines_are_valid_ingest_messages(tmp_path, corpus):
    out, truth = synth.write(corpus[:2], tmp_path / "c.jsonl", {"seed": 11})
    assert truth.name == "c.truth.json"
    last: dict[str, dt.datetime] = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        msg = json.loads(line)
        assert set(msg) <= ALLOWED_KEYS
        assert msg["role"] in ROLES and msg["content"].strip()
        assert (msg["role"] == "tool") == ("tool_call_id" in msg)
        assert ("model_variant" in msg) <= (msg["role"] == "assistant")
        ts = dt.datetime.strptime(msg["ts"], "%Y-%m-%dT%H:%M:%SZ")
        prev = last.get(msg["conversation_id"])
        assert prev is None or 2 <= (ts - prev).total_seconds() <= 90
        last[msg["conversation_id"]] = ts
        MessagePayload(**{k: v for k, v in msg.items() if k not in ("conversation_id", "tenant_id", "ts")})
    doc = json.loads(truth.read_text(encoding="utf-8"))
    assert list(doc) == ["_meta", *(c.conversation_id for c in corpus[:2])]
    assert doc["_meta"]["seed"] == 11
    facts = synth.read_truth(truth)[corpus[0].conversation_id]
    assert {f["key"]: f["value"] for f in facts} == {k: f.value for k, f in corpus[0].facts.items()}


def test_middle_mentions_facts_rarely(corpus):
    for conv in corpus:
        middle = conv.messages[10:-1]
        mentioning = [m for m in middle if m["role"] != "tool"
                      and any(f.value in m["content"] for f in conv.facts.values())]
        assert len(mentioning) < 0.2 * len(middle), conv.conversation_id


def test_wording_varies(corpus):
    contents = [m["content"] for c in corpus for m in c.messages if m["role"] != "tool"]
    assert len(set(contents)) > 0.6 * len(contents)
    assert not any("lorem" in c.lower() or "{" in c or "[" in c for c in contents)


def test_sample_preset_shape():
    convs = synth.generate_sample(4711)
    assert 6 <= len(convs) <= 8
    assert len({c.domain for c in convs}) >= 5 and len({c.tenant_id for c in convs}) == 2
    long = [c for c in convs if len(c.messages) >= 200]
    assert [c.conversation_id for c in long] == ["support-4711"]
    assert all(20 <= len(c.messages) <= 120 for c in convs if c not in long)
    support = long[0]
    order, refund = support.facts["order_id"], support.facts["refund_amount"]
    assert order.history[0]["turn"] < 10 and refund.history[0]["turn"] < 10
    late = [m for m in support.messages[len(support.messages) // 2 :] if order.value in m["content"] or refund.value in m["content"]]
    assert late


def test_unknown_domain_and_too_short_are_rejected():
    with pytest.raises(ValueError):
        synth.generate_conversation(1, "cooking", 40, conversation_id="x")
    with pytest.raises(ValueError):
        synth.generate_conversation(1, "support", 10, conversation_id="x")


# --------------------------------------------------------------------------- scoring

@pytest.mark.parametrize(("kind", "value", "text", "present"), [
    ("id", "#48213", "Order #48213 is on its way", True),
    ("id", "#48213", "order 48213", False),
    ("id", "ORD-2291-7", "facts:\n- order_id:   ord-2291-7", True),
    ("amount", "$184.50", "refund_amount: 184.5 USD", True),
    ("amount", "$184.50", "refund of USD 184.50", True),
    ("amount", "$1,240.00", "price $1240", True),
    ("amount", "$184.50", "refund of 184.50 EUR", False),
    ("amount", "$184.50", "refund of $184.05", False),
    ("amount", "129.00 EUR", "€129 refund", True),
    ("amount", "129.00 EUR", "129 euros", True),
    ("amount", "£42.10", "42.10 GBP", True),
    ("date", "March 14, 2025", "pickup: 2025-03-14", True),
    ("date", "14 March 2025", "on Mar 14th, 2025", True),
    ("date", "2025-03-14", "on 14 March 2025", True),
    ("date", "2025-03-14", "on 15 March 2025", False),
    ("phone", "+1 415-555-0134", "call (415) 555 0134", True),
    ("phone", "+44 20 7946 0123", "phone 020 7946 0123", True),
    ("phone", "+1 415-555-0134", "call 415-555-0135", False),
    ("count", "45 seats", "seats: 45", True),
    ("count", "45 seats", "we need 45 more seats", True),
    ("count", "45 seats", "405 seats", False),
    ("email", "Dana.W@example.com", "email dana.w@EXAMPLE.com", True),
    ("condition", "refund within 14 days provided the item is returned unused",
     "Agreed: refund within 14\n days provided the item is returned   unused.", True),
    ("decision", "waive the restocking fee", "we will not waive the fee", False),
])
def test_fact_present(kind, value, text, present):
    assert synth.fact_present(kind, value, text) is present


def test_money_and_date_mentions():
    assert synth.money_mentions("$1,240.00 and 99 EUR and GBP 5") == {
        ("USD", synth.Decimal("1240")), ("EUR", synth.Decimal("99")), ("GBP", synth.Decimal("5"))}
    assert synth.date_mentions("2025-02-30 is not a date, 1 March 2025 is") == {dt.date(2025, 3, 1)}


def test_score_maps_keys():
    facts = [{"key": "a", "kind": "id", "value": "X-1"}, {"key": "b", "kind": "amount", "value": "$5.00"}]
    assert synth.score(facts, "x-1 costs 5 dollars") == {"a": True, "b": True}
    assert synth.score(facts, "nothing") == {"a": False, "b": False}


def test_bundled_sample_matches_its_generator(tmp_path):
    """cli/data/sample.jsonl is exactly what the command in cli/data/README.md writes."""
    data = BENCH.parent / "cli" / "data"
    assert synth.main(["--preset", "sample", "--seed", "4711", "--out", str(tmp_path / "sample.jsonl")]) == 0
    assert (tmp_path / "sample.jsonl").read_bytes() == (data / "sample.jsonl").read_bytes()
    assert (tmp_path / "sample.truth.json").read_bytes() == (data / "sample.truth.json").read_bytes()
    assert (data / "sample.jsonl").stat().st_size < 600_000


def _slots(template: str) -> set[str]:
    found: set[str] = set()

    def walk(parts):
        for part in parts:
            if isinstance(part, tuple) and part[0] == "alt":
                for alt in part[1]:
                    walk(alt)
            elif isinstance(part, tuple) and part[0] == "slot":
                name = part[1]
                found.add(name)
                if name.startswith("@"):
                    walk(synth._compile(synth.domains.MACROS[name[1:]]))

    walk(synth._compile(template))
    return found


def test_middle_templates_never_name_a_fact():
    """Filler, asides and closing questions must not state facts: the middle mentions them only on purpose."""
    generic = [t for pair in synth.domains.GENERIC_EXCHANGES for t in pair]
    generic += [*synth.domains.GENERIC_ASIDES, *synth.domains.USER_ASIDES, *synth.domains.GENERIC_RECALLS]
    for name in DOMAINS:
        domain = synth.domains.DOMAINS[name]
        conv = synth.generate_conversation(1, name, 40, conversation_id="x")
        facts = set(conv.facts)
        templates = generic + [t for pair in domain.exchanges for t in pair] + list(domain.asides)
        templates += [q for qs in domain.recalls.values() for q in qs]
        for template in templates:
            assert not _slots(template) & facts, (name, template)
        assert not set(synth.domains.FILLER_CHOICES) & facts, name
