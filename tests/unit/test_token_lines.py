"""TokenCounter.count_lines adds up remembered line counts only where that equals counting the whole text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.core.tokens import TokenCounter

TOKENS = TokenCounter()
# Pieces that meet at a line break in tiktoken's split pattern: letters, digits, contractions,
# punctuation runs (which take the newlines after them), spaces and other whitespace (trailing a
# line, leading one, or a whole line), combining marks, CJK, and blank lines.
ATOMS = ["a", "Bc", "é", "\u0301", "中文", "1", "234", "'s", "'LL", " ", "  ", "\t", "\u00a0", "\u2028", "\x85",
         ".", "!?", "-", " -", "(", "):", "…", "$5", "[2024-03-15]", "- (12) user:", "Key facts:", "\r", ""]
line = st.lists(st.sampled_from(ATOMS), max_size=8).map("".join)
text = st.lists(line, min_size=1, max_size=8).map("\n".join)


@settings(max_examples=3000, deadline=None)
@given(text)
def test_the_sum_over_lines_is_the_count_of_the_whole_text(sample):
    assert TokenCounter().count_lines(sample) == TOKENS.count(sample)


@settings(max_examples=500, deadline=None)
@given(st.lists(text, min_size=2, max_size=6))
def test_remembered_lines_give_the_same_counts_in_other_texts(samples):
    counter = TokenCounter()
    for sample in samples:
        assert counter.count_lines(sample) == TOKENS.count(sample)
    for sample in samples:  # now every line comes from the memo
        assert counter.count_lines(sample) == TOKENS.count(sample)


def test_summary_shaped_text_is_counted_by_its_lines_and_blank_lines_or_returns_by_the_whole():
    counter = TokenCounter()
    summary = ("Key facts:\n- order_id: 12345-AB (msg 3)\n- refund_amount: 310.40 EUR (msg 7)\n"
               "Summary: The user asked about a cracked desk.\nMessages:\n[2025-02-04]\n"
               "- (12) user: The desk arrived cracked \u2026 can I get a refund?")
    assert counter.count_lines(summary) == TOKENS.count(summary)
    assert len(counter._line_counts) == summary.count("\n") + 1  # each line remembered once
    assert counter.count_lines("a\n\nb") == TOKENS.count("a\n\nb") == 3  # "\n\n" is one piece: not 2 + 1 + 1
    assert counter.count_lines("a \r\nb") == TOKENS.count("a \r\nb")
    assert counter.count_lines("") == 0


def test_another_encoding_counts_the_whole_text():
    counter = TokenCounter()
    counter._by_lines = False  # as for r50k/p50k, whose split pattern joins a trailing space to the newline
    assert counter.count_lines("a \nb") == TOKENS.count("a \nb")
    assert counter._line_counts == {}
