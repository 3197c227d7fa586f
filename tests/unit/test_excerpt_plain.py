"""Excerpts are flat text: the markdown that laid a long answer out is left out, never a word."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from memfold.core.ports import MessageRecord
from memfold.core.tokens import counter
from memfold.projections.excerpt import excerpt, plain

COUNT = counter().count
WORD = re.compile(r"[^\W_]+|_+")


FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*$", re.M)


def words(text: str) -> list[str]:
    return WORD.findall(text)


def source_words(text: str) -> list[str]:
    """The words of ``text`` but a code fence's language tag (```python), which goes with the fence."""
    return words(FENCE_LINE.sub("", text))


ANSWER = """Sure! Here's a plan for your **budget tracker**:

### Step 1: Set up the project
- **Flask 2.3.1** on Python 3.11, port `5000`
- Create `app.py`:
  * register the `/login` route

```python
class User(db.Model):
    def __init__(self, name):
        self.name = name
```

1. Numbered steps keep their numbers.
"""


def test_plain_drops_layout_marks_and_keeps_every_word_in_order():
    text = plain(ANSWER)
    assert words(text) == source_words(ANSWER)
    assert "**" not in text and "`" not in text and "###" not in text
    assert not any(line.startswith(("- ", "* ", " ")) for line in text.split("\n"))
    assert "Flask 2.3.1 on Python 3.11, port 5000" in text
    assert "def __init__(self, name):" in text  # underscores are not markup
    assert "1. Numbered steps keep their numbers." in text
    assert COUNT(text) < COUNT(ANSWER)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["word", "42", "**", "`", "``", "- ", "* ", "# ", "### ", "\n", " ", "\n```js\n",
                                 "__init__", "a-b", "é", "+ ", "\t", "~~~", "• "]), max_size=40))
def test_plain_never_loses_or_merges_a_word(pieces):
    text = "".join(pieces)
    assert words(plain(text)) == source_words(text)


def test_an_excerpt_of_a_markdown_answer_is_flat_text_with_its_words():
    long = ANSWER + "\n".join(f"- **Point {k}:** the garden and the weather, nothing much." for k in range(60))
    m = MessageRecord(tenant_id="t", conversation_id="c", index=7, seq=8, event_id="e7", role="assistant",
                      content=long, tokens=counter().count_message(long),
                      occurred_at=datetime(2024, 3, 1, tzinfo=UTC))
    out = excerpt(m, frozenset({"flask", "port"}), COUNT)
    assert out is not None
    content = out[0].content
    assert content.startswith("[2024-03-01] (excerpt)\n")
    assert "Flask 2.3.1 on Python 3.11, port 5000" in content
    assert "**" not in content and "`" not in content
