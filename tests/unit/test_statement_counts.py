"""The offline summarizer counts a statement's tokens once: not again for a message's whole text, nor for a message seen before."""

from __future__ import annotations

from datetime import UTC, datetime

from memfold.engine.ports import MessageRecord
from memfold.engine.tokens import MESSAGE_OVERHEAD, TokenCounter
from memfold.projections.salience import statements_of


class CountingTokens(TokenCounter):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return super().count(text)


def message(index: int, content: str, tokens: TokenCounter) -> MessageRecord:
    return MessageRecord(tenant_id="t", conversation_id="statements", index=index, seq=index + 1, event_id=f"s{index}",
                         role="user", content=content, tokens=tokens.count(content) + MESSAGE_OVERHEAD,
                         occurred_at=datetime(2025, 2, 4, tzinfo=UTC))


def test_a_one_sentence_message_uses_its_count_from_append_and_a_message_seen_before_is_not_split_again():
    tokens = CountingTokens()
    one = message(1, "My order number is 18066 and the desk arrived cracked", tokens)
    two = message(2, "The desk arrived cracked on Monday. My order number is 18066.", tokens)
    tokens.calls = 0
    (only,) = statements_of(one, tokens)
    assert only.text == one.content and only.tokens == one.tokens - MESSAGE_OVERHEAD
    assert tokens.calls == 0
    first = statements_of(two, tokens)
    assert [s.text for s in first] == ["The desk arrived cracked on Monday.", "My order number is 18066."]
    assert [s.tokens for s in first] == [TokenCounter().count(s.text) for s in first]
    counted = tokens.calls
    assert counted == 2
    assert statements_of(two, tokens) == first and tokens.calls == counted  # the cache: no count, the same statements
    edited = MessageRecord(**{**{f: getattr(two, f) for f in two.__dataclass_fields__}, "content": "Cracked desk, order 18066."})
    assert [s.text for s in statements_of(edited, tokens)] == ["Cracked desk, order 18066."]  # other text: split anew
