"""TokenCounter loads an encoding that ships offline on its first count, and counts as the loaded encoding does."""

from __future__ import annotations

import pytest

from memfold.core.errors import TokenizerUnavailableError
from memfold.core.tokens import TokenCounter, load_encoding


def test_cl100k_base_is_loaded_by_the_first_count_not_by_the_counter():
    counter = TokenCounter()
    assert counter._loaded is None
    text = "The desk arrived cracked, can I get a refund of 310.40 €?"  # not ASCII: not the rank index's (test_cl100k_ascii)
    assert counter.count(text) == len(load_encoding("cl100k_base").encode_ordinary(text))
    assert counter._loaded is load_encoding("cl100k_base")


def test_an_encoding_that_is_not_available_still_fails_when_the_counter_is_made():
    with pytest.raises(TokenizerUnavailableError, match="not available offline"):
        TokenCounter("no_such_encoding_here")
