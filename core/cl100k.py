"""cl100k_base token counts of short ASCII texts, without building tiktoken's encoder.

tiktoken builds its encoder from all 100,256 ranks before its first count:
reading them and building its tables takes ~0.1 s, most of what a command
that appends one message spends. For a short ASCII text this module gives
the same count from an index of the ranks on disk:

1. the text is split into pieces by cl100k_base's pattern, written for
   ASCII (``\\p{L}`` is ``[A-Za-z]``, ``\\p{N}`` is ``[0-9]``, ``\\s`` the six
   ASCII characters of Unicode's White_Space, ``$`` the end of the text);
2. a piece that is a token counts 1; any other piece's bytes are merged as
   tiktoken's byte-pair merge does: start from single bytes, merge the
   adjacent pair whose bytes have the lowest rank (the leftmost on a tie)
   until no adjacent pair is a token; it counts its remaining parts.

The index is a SQLite file (``piece -> rank`` for the 95,222 ASCII tokens)
built once from the checked ranks file into the cache directory
(:func:`cache_dir`); it records the SHA-256 of the ranks it was built from
and is rebuilt when that differs. ``count`` answers None for a text it
does not cover (not ASCII, longer than :data:`MAX_CHARS`, or a piece that
is not a token and longer than :data:`MAX_MERGE_BYTES`); the caller then
counts with tiktoken. ``test_cl100k_ascii`` checks every count against
tiktoken's on generated and real texts.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path

INDEX_VERSION = 1
MAX_CHARS = 4_000
# A piece that is not a token is merged in O(n^2) lookups: longer ones are left to tiktoken.
MAX_MERGE_BYTES = 64
_WS = r"\t\n\x0b\x0c\r "
# CL100K_PATTERN (memfold.core.tokens) for ASCII text; re.ASCII so that nothing outside these classes matches.
ASCII_PATTERN = re.compile(
    rf"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{{1,3}}+| ?[^{_WS}A-Za-z0-9]++[\r\n]*+|"""
    rf"""[{_WS}]++\Z|[{_WS}]*[\r\n]|[{_WS}]+(?![^{_WS}])|[{_WS}]""",
    re.ASCII,
)
_NONE = 1 << 62  # "no rank": above every rank


def cache_dir() -> Path | None:
    """Return where memfold keeps rebuildable files: ``$MEMFOLD_CACHE_DIR``, else ``$XDG_CACHE_HOME/memfold``,
    else ``~/.cache/memfold``; None when none of them can be named (no home directory)."""
    given = os.environ.get("MEMFOLD_CACHE_DIR")
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "memfold"
    try:
        return Path.home() / ".cache" / "memfold"
    except RuntimeError:  # no HOME and no passwd entry
        return None


class AsciiCounter:
    """Count cl100k_base tokens of short ASCII texts from a rank index (module docstring). Thread-safe."""

    def __init__(self, index: Path, source_sha256: str):
        """Open the index at ``index``; raise ``sqlite3.Error`` or ``ValueError`` if it was not built from
        ranks with ``source_sha256`` by this version of the module."""
        self._db = sqlite3.connect(f"file:{index}?mode=ro", uri=True, check_same_thread=False)
        try:
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error:
            self._db.close()
            raise
        if meta.get("source_sha256") != source_sha256 or meta.get("version") != str(INDEX_VERSION):
            self._db.close()
            raise ValueError(f"{index} was built from other ranks or by another version")
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def count(self, text: str) -> int | None:
        """Return the cl100k_base token count of ``text``, or None when this counter does not cover it."""
        if len(text) > MAX_CHARS or not text.isascii():
            return None
        pieces = [p.encode("ascii") for p in ASCII_PATTERN.findall(text)]
        with self._lock:
            ranks = self._ranks(set(pieces))
            total = 0
            for piece in pieces:
                if piece in ranks:
                    total += 1
                elif len(piece) > MAX_MERGE_BYTES:
                    return None
                else:
                    total += len(self._merge(piece, ranks))
        return total

    def _ranks(self, pieces: set[bytes]) -> dict[bytes, int]:
        """Return the ranks of those of ``pieces`` that are tokens."""
        found: dict[bytes, int] = {}
        todo = list(pieces)
        for start in range(0, len(todo), 500):
            batch = todo[start : start + 500]
            marks = ",".join("?" * len(batch))
            found.update(self._db.execute(f"SELECT piece, rank FROM ranks WHERE piece IN ({marks})", batch))
        return found

    def _merge(self, piece: bytes, known: dict[bytes, int]) -> list[bytes]:
        """Return ``piece`` split into tokens by byte-pair merging (tiktoken's ``_byte_pair_merge``)."""
        candidates = {piece[i:j] for i in range(len(piece)) for j in range(i + 2, len(piece) + 1)}
        ranks = {**known, **self._ranks(candidates - known.keys())}
        parts = [piece[i : i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best, at = _NONE, -1
            for i in range(len(parts) - 1):
                rank = ranks.get(parts[i] + parts[i + 1], _NONE)
                if rank < best:
                    best, at = rank, i
            if at < 0:
                break
            parts[at : at + 2] = [parts[at] + parts[at + 1]]
        return parts


def build_index(path: Path, ranks: Mapping[bytes, int], source_sha256: str) -> None:
    """Write the index of the ASCII tokens of ``ranks`` to ``path`` (through a temporary file: a reader
    never sees half an index, and two processes building it at once both leave a whole one)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        db = sqlite3.connect(tmp)
        try:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute("CREATE TABLE ranks (piece BLOB PRIMARY KEY, rank INTEGER NOT NULL) WITHOUT ROWID")
            db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.executemany("INSERT INTO ranks VALUES (?, ?)", sorted((k, v) for k, v in ranks.items() if k.isascii()))
            db.executemany("INSERT INTO meta VALUES (?, ?)",
                           [("source_sha256", source_sha256), ("version", str(INDEX_VERSION))])
            db.commit()
        finally:
            db.close()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
