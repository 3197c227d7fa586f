"""Settings: one pydantic model per policy (seed defaults), the summarizer/embedder, and the engine.

Sources, strongest first: keyword arguments, ``MEMFOLD_*`` environment
variables (nested with ``__``: ``MEMFOLD_HIERARCHICAL__TRIGGER_MESSAGE_COUNT=30``),
``memfold.toml`` (one table per policy), then the defaults below, which are the
seeds' defaults. A policy's canonical settings hash is stamped on every event
it derives, so a replay can tell which settings produced what.
"""

from __future__ import annotations

import json
import os
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from memfold.core.errors import ConfigError
from memfold.core.ids import content_hash

LOG_BINDING = "log.json"
POLICY_NAMES = ("hierarchical", "chunked", "sliding_window", "rolling", "topics")


class _PolicySettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def read_wait_ms(self) -> int:
        """How long a read may wait for this policy's pending summary (0: never; seed 000's lazy fallback)."""
        return 0


class HierarchicalSettings(_PolicySettings):
    """Seed 000: facts + narrative + recent N verbatim above a message-count trigger."""

    trigger_message_count: int = Field(20, ge=1)
    recent_message_count: int = Field(10, ge=0)
    max_narrative_tokens: int = Field(500, ge=1)
    llm_model: str = "gemini-2.0-flash"
    # Not in the seed: re-summarize once this many messages have left the recent
    # window since the last summary (1 = after every message). Messages the
    # summary does not cover stay verbatim, so a lag loses nothing.
    resummarize_every: int = Field(10, ge=1)
    # Seed's lazy fallback: on read, wait at most this long for a pending summary.
    lazy_timeout_ms: int = Field(2000, ge=0)

    def read_wait_ms(self) -> int:
        return self.lazy_timeout_ms


class ChunkedSettings(_PolicySettings):
    """Seed 001: one global summary + last K raw turns, token thresholds decide when to fold."""

    k_raw_turns: int = Field(3, ge=1)
    summary_token_cap: int = Field(500, ge=1)
    prompt_token_budget: int = Field(3000, ge=1)
    chunk_summarize_threshold: int = Field(6000, ge=1)
    min_tail_turns: int = Field(1, ge=1)
    summarizer_model: str = "gpt-5.1-nano"
    prompt_id: str = "pmpt_6917ebe9367c819396fe4840cf0f0e050c18a965a3366120"
    prompt_version: str | None = None


class SlidingWindowSettings(_PolicySettings):
    """Seed 002: versioned memories over a sliding window of message sequence numbers."""

    rolling_window_size: int = Field(14, ge=2)
    summarize_after_seq: int = Field(5, ge=0)
    memory_model: str = "gpt-4.1-mini"
    # Not in the seed: the memory's key facts (names, ids, amounts, dates, conditions, decisions)
    # outlive the window, latest value per key; the narrative still keeps only the window.
    # false = the seed exactly: everything said before the window leaves the memory.
    keep_facts: bool = True


class RollingSettings(_PolicySettings):
    """Seed 003: a summary covering N messages, regenerated from previous summary + new messages."""

    message_threshold: int = Field(20, ge=1)
    token_threshold: int = Field(8000, ge=1)
    recent_messages_to_keep: int = Field(10, ge=0)
    regeneration_threshold: int = Field(10, ge=1)
    max_summary_length: int = Field(2000, ge=1)  # characters, as in the seed
    max_messages: int | None = Field(None, ge=1)  # without a summary: all messages up to this many


class TopicsSettings(_PolicySettings):
    """Seed 004: topics by embedding similarity, half-life decay, compaction with restore on access."""

    max_topics: int = Field(20, ge=1)
    similarity_threshold: float = Field(0.7, ge=-1.0, le=1.0)
    base_half_life_seconds: float = Field(86400.0, gt=0)
    max_half_life_seconds: float = Field(2592000.0, gt=0)
    access_threshold_for_lt: int = Field(5, ge=1)
    max_messages_per_topic: int = Field(12, ge=1)
    recent_message_keep: int = Field(4, ge=0)
    eviction_priority: float = Field(0.05, ge=0.0)
    title_chars: int = Field(80, ge=1)
    default_importance: float = Field(0.5, ge=0.0, le=1.0)
    # Not in the seed: a topic the user leaves is compacted whole (cold topics
    # compressed, hot ones not), so every topic has a summary of what was said
    # in it. Each summary is capped at ``summary_token_cap`` tokens; the
    # context carries the summaries of earlier topics, highest priority first,
    # up to ``memory_token_cap`` tokens (0: the seed's behaviour, the active
    # topic only and no compaction on leaving).
    summary_token_cap: int = Field(200, ge=1)
    memory_token_cap: int = Field(800, ge=0)


POLICY_SETTINGS: dict[str, type[_PolicySettings]] = {
    "hierarchical": HierarchicalSettings,
    "chunked": ChunkedSettings,
    "sliding_window": SlidingWindowSettings,
    "rolling": RollingSettings,
    "topics": TopicsSettings,
}


class SummarizerSettings(BaseModel):
    """Which summarizer runs and how it reaches its model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["offline", "openai"] = "offline"
    model: str = "gpt-4.1-mini"
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(3, ge=0)
    backoff_base_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(8.0, ge=0)
    # Use the Responses API with the hosted prompt (seed 001) for the chunked policy.
    chunked_use_responses: bool = True
    # The summarizer pool: calls in flight at once, and requests that may wait before the fold is held back.
    concurrency: int = Field(4, ge=1, le=256)
    max_pending: int = Field(10_000, ge=1)
    # How long an answer may wait for the ones after it to share a log append. Longer: a chunk of answers
    # lands in one append whatever the calls' timing (where the next decisions land among the answers
    # then never depends on it); shorter: a slow model's first summary is readable sooner.
    flush_after_s: float = Field(0.05, ge=0)
    # A prompt over this many tokens (tiktoken) drops its oldest input messages until it fits (an import's
    # first catch-up, or hierarchical's whole history, can be longer than the model's context window).
    max_input_tokens: int = Field(100_000, ge=1)
    # The offline summarizer's calls run in this many worker processes (0: on the summarizer pool's threads,
    # in this process), at this much lower CPU priority (nice). A process of its own keeps summarizing from
    # holding the interpreter lock the fold and the reads need: the service's reads under load wait less.
    # None: 1 in `memfold serve`, 0 elsewhere (a library or CLI call starts no process).
    processes: int | None = Field(None, ge=0, le=64)
    process_nice: int = Field(5, ge=0, le=19)


class EmbedderSettings(BaseModel):
    """Which embedder assigns topics: a deterministic local hash embedder by default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["local", "openai", "sentence-transformers"] = "local"
    model: str = "text-embedding-3-small"
    dimensions: int = Field(256, ge=8)
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(10.0, gt=0)


class ContextSettings(BaseModel):
    """How a read fills its budget (``projections.context``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Share of the budget left after memory and the current message kept for recalled
    # messages when there is a query: recent verbatim turns can be long (ten 800-token
    # answers fill 8,000 tokens) and would otherwise leave recall nothing. With a query, a
    # summary or narrative memory also takes at most 1 - recall_share of the room (facts are
    # never cut for it): at small budgets the summary of recent turns would fill it.
    recall_share: float = Field(0.5, ge=0, le=1)
    # Share of the budget a conversation of a user gives to the user's memory (current facts, then the
    # user summary) and to messages recalled from the user's other conversations; what the conversation's
    # own context then leaves unused goes to them too (a new conversation has little of its own). The
    # conversation's own memory, system prompt and current message are never squeezed for it; 0 turns
    # user memory off in reads.
    user_share: float = Field(0.25, ge=0, le=1)


class UserSettings(BaseModel):
    """The user's own summary across its conversations (docs/users.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # A conversation of a user asks for the user's summary after every N-th summary a policy makes of it
    # (counted per conversation and policy, in the fold); 0: no user summary (the user part shows each
    # conversation's newest summary instead, as it does until the first user summary exists).
    summary_every: int = Field(1, ge=0)
    # The user summary's length cap (tokens), as the policies' summary caps.
    summary_token_cap: int = Field(400, ge=1)


class RetrievalSettings(BaseModel):
    """How recall ranks older messages: BM25 always; dense retrieval fused with it when ``embedder`` is set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # none: BM25 only (the default, no model). local / openai / sentence-transformers: embed
    # every message (outside the fold, projections.dense) with that embedder, configured by
    # the [embedder] settings, and fuse the cosine ranking with BM25's by reciprocal rank.
    embedder: Literal["none", "local", "openai", "sentence-transformers"] = "none"
    rrf_k: int = Field(60, ge=1)


class SnapshotSettings(BaseModel):
    """Parquet snapshots of the projection refreshed by the running engine, worker or service (docs/analytics.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    every_seconds: float = Field(0.0, ge=0)  # 0: no refresh; `memfold snapshot DIR` writes one on demand
    dir: Path | None = None  # default: DATA_DIR/snapshots
    keep_seconds: float = Field(300.0, ge=0)  # a retired snapshot stays this long for readers that resolved it
    node: str | None = None  # this node's name in the snapshot manifest (fleet queries)


class Settings(BaseModel):
    """Everything memfold can be told. :meth:`load` reads the sources (module docstring); the constructor none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path = Path(".memfold")
    log: str | None = None  # URL: sqlite:///path or kafka://host:port; default: the data dir's SQLite file
    topic: str = "memfold.events"
    partitions: int = Field(8, ge=1, le=1024)
    # Data keys for crypto-shredding: a file path (every node of a deployment must share it).
    # Default: keys.sqlite in the data dir when the log is the data dir's SQLite file or another
    # SQLite file; on Kafka there is no default, and content is stored unsealed until one is set.
    keystore: str | None = None
    encoding: str = "cl100k_base"
    max_message_chars: int = Field(100_000, ge=1)
    max_message_tokens: int = Field(32_000, ge=1)
    system_prompt: str | None = None
    # sliding_window: the best BEAM answer recall at 4,000 tokens (README, "Measured on BEAM").
    policy: str = "sliding_window"
    policies: tuple[str, ...] = ("sliding_window",)
    tenant_policies: dict[str, str] = Field(default_factory=dict)
    summarizer: SummarizerSettings = SummarizerSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    context: ContextSettings = ContextSettings()
    users: UserSettings = UserSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    snapshot: SnapshotSettings = SnapshotSettings()
    hierarchical: HierarchicalSettings = HierarchicalSettings()
    chunked: ChunkedSettings = ChunkedSettings()
    sliding_window: SlidingWindowSettings = SlidingWindowSettings()
    rolling: RollingSettings = RollingSettings()
    topics: TopicsSettings = TopicsSettings()

    @field_validator("policies", mode="before")
    @classmethod
    def _split_policies(cls, value: Any) -> Any:
        if isinstance(value, str):  # MEMFOLD_POLICIES=hierarchical,rolling
            value = value.strip()
            if value.startswith("["):
                return json.loads(value)
            return tuple(p.strip() for p in value.split(",") if p.strip())
        return value

    @model_validator(mode="after")
    def _known_policies(self) -> Settings:
        for name in (self.policy, *self.policies, *self.tenant_policies.values()):
            if name not in POLICY_SETTINGS:
                raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
        return self

    @classmethod
    def load(cls, config: str | Path | None = None, **overrides: Any) -> Settings:
        """Load settings from ``config`` (or ``$MEMFOLD_CONFIG``, or ``./memfold.toml`` if present), the
        ``MEMFOLD_*`` environment and ``overrides`` (strongest; None values are ignored).

        Raises :class:`ConfigError` with the offending field when the result is invalid.
        """
        path = config or os.environ.get("MEMFOLD_CONFIG")
        if path is None and Path("memfold.toml").is_file():
            path = "memfold.toml"
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"settings file {path} does not exist")
        try:
            values: dict[str, Any] = {}
            if path is not None:
                with open(path, "rb") as f:
                    values = tomllib.load(f)
            values = _merged(values, env_values(os.environ))
            values = _merged(values, {k: v for k, v in overrides.items() if v is not None})
            return cls.model_validate(values)
        except ConfigError:
            raise
        except Exception as exc:  # pydantic.ValidationError, TOML decode errors
            raise ConfigError(f"invalid memfold settings: {_first_error(exc)}") from exc

    # ----------------------------------------------------------------- derived views

    @property
    def active_policies(self) -> tuple[str, ...]:
        """Return every policy that keeps a projection: ``policies`` + ``policy`` + per-tenant picks."""
        seen: dict[str, None] = {}
        for name in (*self.policies, self.policy, *self.tenant_policies.values()):
            seen.setdefault(name, None)
        return tuple(seen)

    def policy_for(self, tenant_id: str) -> str:
        """Return the policy a tenant reads by default."""
        return self.tenant_policies.get(tenant_id, self.policy)

    def policy_settings(self, policy: str) -> _PolicySettings:
        """Return the settings model of ``policy``."""
        if policy not in POLICY_SETTINGS:
            raise ConfigError(f"unknown policy {policy!r}; choose from {', '.join(POLICY_NAMES)}")
        return getattr(self, policy)

    def settings_hash(self, policy: str) -> str:
        """Return the canonical hash of what decides ``policy``'s derived events."""
        return content_hash(policy, self.policy_settings(policy).model_dump(mode="json"), self.encoding, length=16)

    def log_url(self) -> str:
        """Return the event log URL, defaulting to the data dir's SQLite file."""
        return self.log or f"sqlite:///{(self.data_dir / 'events.sqlite').as_posix()}"

    def keystore_location(self) -> str | None:
        """Return the key store sealing this deployment's content, or None when content is not sealed."""
        if self.keystore:
            return self.keystore
        url = self.log_url()
        if url.startswith("sqlite:"):
            return (self.data_dir / "keys.sqlite").as_posix()
        if url.startswith("kafka://"):  # every node of the deployment shares the key topic beside the events
            return f"{url.rstrip('/')}/{self.topic}.keys"
        return None

    def snapshot_dir(self) -> Path:
        """Return where this node's Parquet snapshots go (setting ``snapshot.dir``, default DATA_DIR/snapshots)."""
        return self.snapshot.dir if self.snapshot.dir is not None else self.data_dir / "snapshots"

    def projection_path(self) -> Path:
        """Return the DuckDB projection file of this data dir."""
        return self.data_dir / "projections.duckdb"

    def log_binding_path(self) -> Path:
        """Return the file naming the log a data dir replicates (a Kafka node's; an embedded dir has none)."""
        return self.data_dir / LOG_BINDING


ENV_PREFIX, ENV_NESTED = "MEMFOLD_", "__"


def env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """Return the settings the ``MEMFOLD_*`` variables of ``environ`` give, as nested values to validate.

    Names are case-insensitive; ``__`` reaches into a section
    (``MEMFOLD_HIERARCHICAL__TRIGGER_MESSAGE_COUNT=30``). A value for a
    section, mapping or list is JSON (``MEMFOLD_TENANT_POLICIES={"acme": "topics"}``);
    ``MEMFOLD_POLICIES`` is also read as a comma list. Variables naming no
    setting (``MEMFOLD_CONFIG``, ``MEMFOLD_URL``) are not settings and are skipped.
    """
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.upper().startswith(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX):].lower().split(ENV_NESTED)
        model: type[BaseModel] | None = Settings
        annotation: Any = None
        for key in path:
            if model is None and typing.get_origin(annotation) is dict:  # MEMFOLD_TENANT_POLICIES__ACME=topics
                annotation = typing.get_args(annotation)[1]
                continue
            field = model.model_fields.get(key) if model is not None else None
            if field is None:
                annotation = str  # inside a section: kept, so validation names the unknown setting
                break
            annotation, model = field.annotation, _model_of(field.annotation)
        if path[0] in Settings.model_fields:  # else not a setting (MEMFOLD_URL, MEMFOLD_CONFIG)
            value: Any = raw
            if path != ["policies"] and _structured(annotation):
                try:
                    value = json.loads(raw)
                except ValueError as exc:
                    raise ConfigError(f"invalid memfold settings: {name} is not JSON ({exc})") from exc
            node = out
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
    return out


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """Return the settings section ``annotation`` is (``SummarizerSettings``), or None for a plain value."""
    for t in (annotation, *typing.get_args(annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def _structured(annotation: Any) -> bool:
    """True when a value of ``annotation`` is a section, mapping or sequence (given as JSON in the environment)."""
    if _model_of(annotation) is not None:
        return True
    return any(typing.get_origin(t) in (dict, list, tuple, set, frozenset) or t in (dict, list, tuple, set)
               for t in (annotation, *typing.get_args(annotation)))


def _merged(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``over`` laid on top, sections merged key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _first_error(exc: Exception) -> str:
    """Return one line naming the first invalid setting (pydantic's report spans many lines)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return " ".join(str(exc).split())
    first = errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = str(first.get("msg", "")).removeprefix("Value error, ")
    more = f" (and {len(errors()) - 1} more)" if len(errors()) > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"
