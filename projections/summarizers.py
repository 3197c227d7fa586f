"""Factories that pick the summarizer and embedder adapters named by the settings."""

from __future__ import annotations

from typing import Any

from memfold.core.errors import ConfigError
from memfold.core.ports import Embedder, Summarizer
from memfold.core.settings import Settings


def build_summarizer(settings: Settings, cache_conn: Any = None) -> Summarizer:
    """Return the summarizer ``settings.summarizer.kind`` names, behind the DuckDB cache when ``cache_conn`` is given.

    ``offline`` needs nothing; ``openai`` takes its API key from
    ``settings.summarizer.api_key`` or ``$OPENAI_API_KEY`` (a custom
    ``base_url`` may go without). Building makes no network call.
    """
    kind = settings.summarizer.kind
    summarizer: Summarizer
    if kind == "offline":
        if settings.summarizer.processes:
            from memfold.projections.summarizer_processes import ProcessSummarizer

            summarizer = ProcessSummarizer(
                settings.encoding, settings.summarizer.processes, niceness=settings.summarizer.process_nice)
        else:
            from memfold.projections.offline_summarizer import OfflineSummarizer

            summarizer = OfflineSummarizer(encoding=settings.encoding)
    elif kind == "openai":
        from memfold.projections.openai_summarizer import OpenAISummarizer

        summarizer = OpenAISummarizer(settings.summarizer, encoding=settings.encoding)
    else:  # pragma: no cover - the settings model only admits the kinds above
        raise ConfigError(f"unknown summarizer kind {kind!r}; choose offline or openai")
    if cache_conn is None:
        return summarizer
    from memfold.projections.summary_cache import CachingSummarizer

    return CachingSummarizer(summarizer, cache_conn)


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
