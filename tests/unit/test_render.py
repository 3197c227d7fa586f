"""The CLI's tables: every cell terminal-safe, kept as text, and the table within the width it may use."""

from __future__ import annotations

from dataclasses import dataclass

from memfold.cli.render import _column_caps, _mark, print_context, print_table


@dataclass
class Row:
    role: str
    content: str
    kind: str
    tokens: int


def test_a_table_shows_control_characters_as_escapes_and_keeps_values_as_text(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    print_table(["id", "note"], [["0042", "red \x1b[31malert\x1b[0m\u202eevil"], [None, 1.5]], title="t\x07")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b[31malert" in out and "\\u202e" in out and "t\\x07" in out
    assert "0042" in out and "1.50" in out


def test_a_long_message_wraps_inside_the_width(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    words = " ".join(f"word{i}" for i in range(200))
    print_context([Row("user", words, "verbatim", 400), Row("system", "facts", "memory:facts", 3)],
                  title="context", budget=300)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0] == "context" and "word0" in lines[4] and any("word199" in line for line in lines)
    assert " ".join(lines[-2:]) == ("2 messages, 403 tokens of a 300-token budget: over it, because the system "
                                    "prompt and the current message are never cut")


def test_a_query_with_no_rows_prints_its_header(capsys):
    print_table(["policy", "count_star()"], [])
    assert "policy" in capsys.readouterr().out


def test_column_caps_keep_narrow_columns_and_cap_the_widest_to_fit():
    assert _column_caps([10, 20, 30], 200) == [None, None, None]
    caps = _column_caps([6, 100, 300], 100)
    assert caps[0] is None and caps[1] == caps[2]
    assert 6 + caps[1] + caps[2] <= 100 - (3 * 3 + 1)


def test_highlighted_words_are_marked_in_one_pass():
    marked = _mark("Order 7m of 7M, ref 1m", ["7m", "1m"], "<")
    assert marked == "Order <7m\x1b[0m of <7M\x1b[0m, ref <1m\x1b[0m"
