"""Fact keys and values: the category a key belongs to, and how long a value may be. Light, for readers.

Used by the summarizers (:mod:`memfold.projections.fact_extraction`,
:mod:`memfold.projections.prompts`) and by what renders facts for a context.
"""

from __future__ import annotations

import re

# A summary keeps at most this many facts (the most recently stated win).
MAX_FACTS = 40
MAX_VALUE_CHARS = 160
# A value up to this long is a value (an id, amount, date, address, name); longer, a sentence
# (a condition, a decision), which a summary's statements or narrative carry anyway.
SHORT_VALUE_CHARS = 48


def clip(text: str, limit: int) -> str:
    """Return ``text`` on one line, cut at a word boundary to at most ``limit`` characters (with "…")."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:") + "…"


def category_for(key: str) -> str:
    """Return the category a fact key belongs to (keys are built systematically, so this is total).

    A numbered key (``budget_2``, ``amount_150``) is in its stem's category.
    """
    key = re.sub(r"(?:_\d+)+$", "", key) or key
    if key in ("topic", "user_request"):
        return "GENERAL"
    if key.endswith("_status") or key == "status":
        return "STATE"
    if key.endswith("_condition") or re.fullmatch(r"condition(?:_\d+)?", key):
        return "CONDITION"
    if re.fullmatch(r"decision(?:_\d+)?", key) or re.search(r"_(?:agreed|approved|confirmed|decided|accepted|rejected|chosen)$", key):
        return "DECISION"
    if key.endswith(("_amount", "_total", "_cost")) or key in ("amount", "total", "price", "balance", "budget"):
        return "NUMERIC"
    return "ENTITY"
