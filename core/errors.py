"""The memfold exception tree: every error the engine raises on purpose.

    MemfoldError
     ├── ValidationError (also ValueError)      bad input from a caller; nothing was written
     │    ├── UnknownRoleError
     │    ├── EmptyContentError
     │    ├── MessageTooLargeError
     │    ├── EventConflictError                an event_id already stored with different content
     │    ├── UserConflictError                 a message names a user other than its conversation's
     │    ├── UnknownUserError                  a read names a user with no conversation (a typo, another tenant)
     │    ├── UnknownConversationError          a read names a conversation the projection does not hold
     │    ├── ConversationForgottenError        an append to a forgotten conversation (reopen it first)
     │    ├── UnknownMessageError               a retraction names no message of that conversation
     │    ├── AlreadyRetractedError             a retraction names a message retracted before
     │    ├── UnknownReplayError                a command names a replay namespace that does not exist
     │    ├── SqlTimeoutError                   a SQL statement ran past its time limit and was interrupted
     │    └── ExportRefusedError                an export dir import refuses (checksum, schema, missing keys); nothing imported
     ├── InputFileError                         an input file that cannot be read (missing, a directory)
     ├── ConfigError                            settings that cannot work
     ├── EventDecodeError                       stored or received bytes that are not a known event
     │    ├── UnknownEventTypeError
     │    └── UpcastError                       no path from the stored schema version to the current one
     ├── LogError                               the event log
     │    ├── LogUnavailableError               cannot reach / open the log (broker down, file locked)
     │    │    └── PartitionNotOwnedError       a shard node asked about a conversation another node folds
     │    ├── AppendFailedError                 the log did not acknowledge an append; treat as NOT stored
     │    └── LogCorruptionError                the log breaks an invariant (gap in seq, offsets out of order)
     ├── ProjectionError                        the DuckDB projection
     │    ├── ProjectionBusyError               another process holds the projection file for writing
     │    ├── ErasureIncompleteError            forget could not remove every copy yet; forget again
     │    └── ProjectionLagTimeout              wait_for() gave up before the projector reached a position
     ├── SummarizerError                        a summarizer could not produce a usable summary
     │    ├── SummarizerTimeoutError
     │    └── SummarizerOutputError             the model answered, but not with what was asked (broken JSON)
     ├── EmbedderError                          an embedder could not produce vectors (remote model, optional package)
     │    └── EmbedderTimeoutError
     ├── TokenizerUnavailableError              the tiktoken encoding cannot be loaded offline
     └── KeyStoreError                          the data-key store (crypto-shredding) cannot be read or written

Driver exceptions (sqlite3, duckdb, kafka, openai) never cross a module boundary:
the adapter that catches one raises one of these ``from`` it.
"""

from __future__ import annotations


class MemfoldError(Exception):
    """Root of every error memfold raises on purpose."""


class ValidationError(MemfoldError, ValueError):
    """Caller input is invalid; nothing was written.

    ``field`` names the offending field, ``line`` the 1-based input line when
    the input came from a file.
    """

    def __init__(self, message: str, *, field: str | None = None, line: int | None = None):
        self.field = field
        self.line = line
        prefix = f"line {line}: " if line is not None else ""
        super().__init__(prefix + message)


class UnknownRoleError(ValidationError):
    """A message role outside user/assistant/system/tool."""


class EmptyContentError(ValidationError):
    """A message with empty or whitespace-only content."""


class MessageTooLargeError(ValidationError):
    """A message above the configured size limit."""

    def __init__(self, message: str, *, size: int, limit: int, unit: str, **kw):
        self.size = size
        self.limit = limit
        self.unit = unit
        super().__init__(message, **kw)


class EventConflictError(ValidationError):
    """An ``event_id`` the log already holds with different content; the new message was not stored."""

    def __init__(self, message: str, *, event_id: str | None = None, **kw):
        self.event_id = event_id
        super().__init__(message, **kw)


class UserConflictError(ValidationError):
    """A message names a ``user_id`` other than the one its conversation belongs to; nothing was written.

    A conversation belongs to at most one user: the first its messages name.
    ``owner`` is that user, ``user_id`` the one the message named.
    """

    def __init__(self, message: str, *, user_id: str | None = None, owner: str | None = None, **kw):
        self.user_id = user_id
        self.owner = owner
        super().__init__(message, **kw)


class UnknownUserError(ValidationError):
    """A read names a user none of the tenant's conversations belongs to (a typo, another tenant, forgotten)."""


class UnknownConversationError(ValidationError):
    """A read names a conversation the projection does not hold (a typo, another tenant)."""


class ConversationForgottenError(ValidationError):
    """An append names a conversation that was forgotten; nothing was written.

    Its data key is destroyed, so new content would be sealed under a new key
    in a conversation whose history is gone: say so instead of storing it
    silently. ``MemoryEngine.reopen`` (``memfold reopen``, ``POST
    .../reopen``) starts it again on purpose; HTTP answers 410 Gone.
    """


class UnknownMessageError(ValidationError):
    """A retraction names an event_id that is no message of that conversation (missing, another tenant's)."""


class AlreadyRetractedError(ValidationError):
    """A retraction names a message that was retracted before; nothing was appended."""


class UnknownReplayError(ValidationError):
    """A command names a replay namespace that does not exist (``memfold replays`` lists them)."""


class SqlTimeoutError(ValidationError):
    """A SQL statement ran past its statement timeout and was interrupted; nothing was changed (HTTP 408)."""


class ExportRefusedError(ValidationError):
    """An export directory ``memfold import`` refuses: a file whose checksum fails, an event it cannot
    upcast, a sealed export whose keys the target does not hold. Nothing was imported."""


class InputFileError(MemfoldError):
    """An input file that does not exist, is a directory or cannot be read; nothing was read from it."""


class ConfigError(MemfoldError):
    """Settings that cannot work (unknown policy, bad URL, unreadable memfold.toml)."""


class EventDecodeError(MemfoldError):
    """Bytes that do not decode to a known event. The event is reported, never dropped silently."""


class UnknownEventTypeError(EventDecodeError):
    """An event ``type`` this version of memfold does not know."""

    def __init__(self, event_type: str):
        self.event_type = event_type
        super().__init__(
            f"unknown event type {event_type!r}: this log was written by a newer memfold or another "
            "producer; upgrade memfold or register a decoder for it"
        )


class UpcastError(EventDecodeError):
    """No upcaster chain from a stored schema version to the version this code reads."""

    def __init__(self, event_type: str, version: int, current: int, reason: str):
        self.event_type = event_type
        self.version = version
        self.current = current
        super().__init__(f"{event_type} schema_version {version} cannot be read as version {current}: {reason}")


class LogError(MemfoldError):
    """The event log failed."""


class LogUnavailableError(LogError):
    """The log cannot be reached or opened. Nothing was appended."""


class PartitionNotOwnedError(LogUnavailableError):
    """A shard node was asked about a conversation of a partition it does not fold (now); ``partition`` names it.

    Unavailable *here*, not lost: its owner answers (the service routes there).
    """

    def __init__(self, message: str, *, partition: int):
        self.partition = partition
        super().__init__(message)


class AppendFailedError(LogError):
    """The log did not acknowledge an append. Treat every event in ``event_ids`` as NOT stored."""

    def __init__(self, message: str, *, event_ids: list[str] | None = None):
        self.event_ids = list(event_ids or [])
        super().__init__(message)


class LogCorruptionError(LogError):
    """The log breaks one of its invariants; stop and investigate, do not retry."""


class ProjectionError(MemfoldError):
    """The projection store failed."""


class ProjectionBusyError(ProjectionError):
    """Another process holds the DuckDB projection for writing (DuckDB allows one writer per file)."""


class ErasureIncompleteError(ProjectionError):
    """``forget`` destroyed the data key but could not yet remove every readable copy (disk full, a busy file).

    The erasure is recorded as pending; ``forget`` again (or any engine
    start) finishes it. ``remaining`` names what is left.
    """

    def __init__(self, message: str, *, remaining: list[str] | None = None):
        self.remaining = list(remaining or [])
        super().__init__(message)


class ProjectionLagTimeout(ProjectionError):
    """``wait_for`` gave up before the projection reached the position."""


class SummarizerError(MemfoldError):
    """A summarizer could not produce a usable summary; the policy falls back as its seed says."""

    retry_after: float | None = None


class SummarizerTimeoutError(SummarizerError):
    """The summarizer did not answer in time."""


class SummarizerOutputError(SummarizerError):
    """The summarizer answered with something unusable (broken JSON, wrong shape, empty)."""


class EmbedderError(MemfoldError):
    """An embedder could not produce vectors; ``retry_after`` is the delay a server asked for, if any."""

    retry_after: float | None = None


class EmbedderTimeoutError(EmbedderError):
    """The embedder did not answer in time."""


class TokenizerUnavailableError(MemfoldError):
    """The configured tiktoken encoding cannot be loaded without network access."""


class KeyStoreError(MemfoldError):
    """The data-key store cannot be opened, read or written; nothing was sealed or destroyed."""

