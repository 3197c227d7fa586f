"""BEAM, a long-conversation memory benchmark, as a dataset for ``memory_quality.py --dataset beam``.

BEAM (github.com/mohammadtavakoli78/BEAM) holds long multi-session chats and
questions asked afterwards about what was said. The data is NOT part of this
repository: fetch it anywhere and pass the folder (``chats/100K`` or a folder
of chat folders) with ``--path``. Each chat folder holds

- ``chat.json``: a list of batches (sessions), each with ``turns``, a list of
  lists of ``{role, content, time_anchor?}``; a user turn opening a session
  carries its date as ``time_anchor`` (``"March-15-2024"``);
- ``probing_questions/probing_questions.json``: ``{kind: [question, ...]}``;
  the reference answer is ``answer`` (``ideal_answer`` for
  contradiction_resolution).

Scoring is answer-content recall, the same for every policy
(:mod:`memfold.projections.answer_recall`, re-exported here): the share of
the reference answer's content words found in the context's text. No model
is involved, so the figures say whether the answer's material reached the
context, not whether a model would answer right.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memfold.projections.answer_recall import (  # noqa: F401  (re-exported: the benchmarks score with them)
    MONTHS,
    STOP_WORDS,
    TEMPLATE_WORDS,
    content_words,
    context_words,
    recall,
    words,
)

KINDS = (
    "information_extraction", "temporal_reasoning", "knowledge_update",
    "multi_session_reasoning", "event_ordering", "contradiction_resolution",
)
ANSWER_FIELDS = ("answer", "ideal_answer")

_MARKER = re.compile(r"\s*->->\s*[\d,\s]+\)?\s*$")  # BEAM's "->-> 1,1" generation marker on user turns


@dataclass(frozen=True, slots=True)
class Question:
    """One probing question: its kind, text and reference answer."""

    kind: str
    text: str
    answer: str
    index: int  # position within its kind in the file


@dataclass(frozen=True, slots=True)
class Chat:
    """One BEAM chat: its folder name, messages ready for ``append_many`` (minus conversation_id) and questions."""

    chat_id: str
    messages: tuple[dict[str, Any], ...]
    questions: tuple[Question, ...] = field(default=())


def parse_anchor(anchor: str) -> datetime:
    """Return the UTC midnight of a BEAM time anchor such as ``"March-15-2024"``; raise ValueError if malformed."""
    return datetime.strptime(anchor.strip(), "%B-%d-%Y").replace(tzinfo=UTC)


def load_messages(batches: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flatten a ``chat.json`` into messages dated by their session's time anchor.

    A message with a ``time_anchor`` starts a new date, carried forward to the
    following messages (across batches too); messages before the first anchor
    carry none (the engine dates them at ingest). Each message of a date gets
    one more second so timestamps stay in conversation order. The generation
    marker at the end of user turns is removed.
    """
    out: list[dict[str, Any]] = []
    day: datetime | None = None
    offset = 0
    for batch in batches:
        anchor = batch.get("time_anchor")
        if anchor:
            day, offset = parse_anchor(anchor), 0
        for turn in batch["turns"]:
            for m in turn:
                if m.get("time_anchor"):
                    day, offset = parse_anchor(m["time_anchor"]), 0
                content = _MARKER.sub("", m["content"]) if m["role"] == "user" else m["content"]
                msg: dict[str, Any] = {"role": m["role"], "content": content}
                if day is not None:
                    msg["occurred_at"] = day + timedelta(seconds=offset)
                    offset += 1
                out.append(msg)
    return out


def load_questions(raw: dict[str, list[dict[str, Any]]], kinds: Sequence[str] = KINDS) -> list[Question]:
    """Return the questions of ``kinds`` (in that order) with their reference answers."""
    out = []
    for kind in kinds:
        for i, q in enumerate(raw.get(kind, ())):
            answer = next((q[f] for f in ANSWER_FIELDS if isinstance(q.get(f), str) and q[f].strip()), None)
            if answer is None:
                raise ValueError(f"{kind} question {i} has no answer field ({' or '.join(ANSWER_FIELDS)})")
            out.append(Question(kind, q["question"], answer, i))
    return out


def chat_dirs(path: str | Path, select: str | None = None) -> list[Path]:
    """Return the chat folders under ``path`` in numeric order, optionally only ``select`` ("1-5", "3", "1,4,7-9").

    ``path`` is a folder of chat folders (each with a ``chat.json``) or one chat folder.
    """
    root = Path(path)
    if (root / "chat.json").is_file():
        return [root]
    dirs = [d for d in root.iterdir() if (d / "chat.json").is_file()]
    if not dirs:
        raise FileNotFoundError(f"no chat folders (*/chat.json) under {root}")
    dirs.sort(key=lambda d: (not d.name.isdigit(), int(d.name) if d.name.isdigit() else 0, d.name))
    if select:
        wanted = _parse_selection(select)
        dirs = [d for d in dirs if d.name.isdigit() and int(d.name) in wanted]
        if not dirs:
            raise FileNotFoundError(f"no chat folders {select!r} under {root}")
    return dirs


def _parse_selection(select: str) -> set[int]:
    wanted: set[int] = set()
    for part in select.split(","):
        lo, _, hi = part.strip().partition("-")
        wanted.update(range(int(lo), int(hi or lo) + 1))
    return wanted


def load_chat(folder: str | Path, kinds: Sequence[str] = KINDS) -> Chat:
    """Read one chat folder (``chat.json`` + ``probing_questions/probing_questions.json``)."""
    folder = Path(folder)
    batches = json.loads((folder / "chat.json").read_text(encoding="utf-8"))
    raw = json.loads((folder / "probing_questions" / "probing_questions.json").read_text(encoding="utf-8"))
    return Chat(folder.name, tuple(load_messages(batches)), tuple(load_questions(raw, kinds)))
