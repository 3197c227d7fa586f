"""Factories that pick the summarizer and embedder adapters named by the settings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from memfold.core.errors import ConfigError
from memfold.core.ports import Embedder, Summarizer, SummaryInput, SummaryOutput
from memfold.core.settings import Settings


class DeferredSummarizer:
    """The offline summarizer, made on its first use: an engine that summarizes nothing never loads its rules.

    Loading the offline rules compiles some 250 patterns (~35 ms), most of a
    CLI read's spare time; a read, or an engine whose summaries are all
    cached, needs none of it. Only for summarizers whose settings cannot be
    wrong at open (the OpenAI-compatible one is built at once, so a missing
    key fails there).
    """

    def __init__(self, name: str, make: Callable[[], Summarizer]):
        self.name = name
        self._make = make
        self._made: Summarizer | None = None
        self._lock = threading.Lock()

    @property
    def made(self) -> Summarizer | None:
        """The summarizer once made (first summary or identity asked for), else None."""
        return self._made

    def _summarizer(self) -> Summarizer:
        made = self._made
        if made is None:
            with self._lock:
                if self._made is None:
                    self._made = self._make()
                made = self._made
        return made

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        return self._summarizer().summarize(request)

    def identity(self, request: SummaryInput) -> tuple[str, str]:
        return self._summarizer().identity(request)

    def drop_text_caches(self) -> None:
        if self._made is not None:  # nothing made, nothing kept
            self._made.drop_text_caches()

    def close(self) -> None:
        with self._lock:
            if self._made is not None:
                self._made.close()


def build_summarizer(settings: Settings, cache_conn: Any = None, *, cache_table_made: bool = False) -> Summarizer:
    """Return the summarizer ``settings.summarizer.kind`` names, behind the DuckDB cache when ``cache_conn`` is given.

    ``offline`` needs nothing; ``openai`` takes its API key from
    ``settings.summarizer.api_key`` or ``$OPENAI_API_KEY`` (a custom
    ``base_url`` may go without). Building makes no network call.
    ``cache_table_made``: ``cache_conn`` holds the ``llm_cache`` table already
    (a projection store: its schema makes it), so no DDL runs.
    """
    kind = settings.summarizer.kind
    summarizer: Summarizer
    if kind == "offline":
        summarizer = DeferredSummarizer("offline", lambda: _offline(settings))
    elif kind == "openai":
        from memfold.projections.openai_summarizer import OpenAISummarizer

        summarizer = OpenAISummarizer(settings.summarizer, encoding=settings.encoding)
    else:  # pragma: no cover - the settings model only admits the kinds above
        raise ConfigError(f"unknown summarizer kind {kind!r}; choose offline or openai")
    if cache_conn is None:
        return summarizer
    from memfold.projections.summary_cache import CachingSummarizer

    return CachingSummarizer(summarizer, cache_conn, make_table=not cache_table_made)


def _offline(settings: Settings) -> Summarizer:
    """Return the offline summarizer: in this process, or in ``summarizer.processes`` worker processes."""
    if settings.summarizer.processes:
        from memfold.projections.summarizer_processes import ProcessSummarizer

        return ProcessSummarizer(settings.encoding, settings.summarizer.processes,
                                 niceness=settings.summarizer.process_nice)
    from memfold.projections.offline_summarizer import OfflineSummarizer

    return OfflineSummarizer(encoding=settings.encoding)


def build_embedder(settings: Settings) -> Embedder:
    """Return the embedder ``settings.embedder.kind`` names: local (default), openai or sentence-transformers."""
    kind = settings.embedder.kind
    if kind == "local":
        from memfold.projections.embedders import LocalHashEmbedder

        return LocalHashEmbedder(dimensions=settings.embedder.dimensions)
    if kind == "openai":
        from memfold.projections.embedders import OpenAIEmbedder

        return OpenAIEmbedder(
            settings.embedder,
            max_retries=settings.summarizer.max_retries,
            backoff_base_s=settings.summarizer.backoff_base_s,
            backoff_max_s=settings.summarizer.backoff_max_s,
        )
    if kind == "sentence-transformers":
        from memfold.projections.embedders import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
        if settings.embedder.dimensions != embedder.dimensions:
            raise ConfigError(
                f"all-MiniLM-L6-v2 embeds in {embedder.dimensions} dimensions; set embedder.dimensions = "
                f"{embedder.dimensions} (it is {settings.embedder.dimensions})"
            )
        return embedder
    raise ConfigError(f"unknown embedder kind {kind!r}; choose local, openai or sentence-transformers")  # pragma: no cover
