"""Pin the public names: what users import must not move or vanish silently."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "memfold.engine.engine": ["MemoryEngine", "load_policy", "fold_contexts"],
    "memfold.core.overrides": ["parse_assignments", "load_file", "apply", "policy_view"],
    "memfold.engine.namespaces": ["ReplayReport", "ReplayStats", "Namespace", "ReplayFold", "list_namespaces", "drop"],
    "memfold.core.events": [
        "Event", "MessageAppended", "ConversationDeleted", "ConversationReopened", "PRIVATE_FIELDS", "SettingsChanged", "ClockTicked", "SummaryRequested",
        "SummaryProduced", "SummaryFailed", "TopicAssigned", "TopicCompacted", "TopicEvicted", "MessagePayload",
        "ToolCall", "Fact", "EncryptedContent", "UpcasterRegistry", "UPCASTERS", "decode", "json_schemas",
    ],
    "memfold.core.errors": [
        "MemfoldError", "ValidationError", "UnknownRoleError", "EmptyContentError", "MessageTooLargeError",
        "ConfigError", "EventDecodeError", "UnknownEventTypeError", "UpcastError", "LogError",
        "LogUnavailableError", "AppendFailedError", "ProjectionError", "ProjectionBusyError",
        "ProjectionLagTimeout", "SummarizerError", "SummarizerTimeoutError", "SummarizerOutputError",
        "TokenizerUnavailableError", "UnknownReplayError", "ConversationForgottenError", "ErasureIncompleteError",
        "UnknownConversationError", "SqlTimeoutError", "UserConflictError", "UnknownUserError",
    ],
    "memfold.core.ports": [
        "EventLog", "Policy", "Summarizer", "Embedder", "ProjectionStore", "MessageSource", "FoldContext",
        "MessageRecord", "ContextPlan", "ContextMessage", "MemoryMessage", "SummaryInput", "SummaryOutput",
    ],
    "memfold.core.positions": ["Position", "LogRecord"],
    "memfold.core.shapes": ["FORMATS", "Shaped", "shaped", "messages_from"],
    "memfold.core.partitioner": ["murmur2", "partition_for"],
    "memfold.core.settings": [
        "Settings", "HierarchicalSettings", "ChunkedSettings", "SlidingWindowSettings", "RollingSettings",
        "TopicsSettings", "SummarizerSettings", "EmbedderSettings", "RetrievalSettings", "POLICY_NAMES",
    ],
    "memfold.core.tokens": ["TokenCounter", "counter", "load_encoding"],
    "memfold.streams.logs": ["open_log"],
    "memfold.streams.sqlite_log": ["SQLiteEventLog"],
    "memfold.streams.kafka_log": ["KafkaEventLog"],
    "memfold.projections.store": ["DuckDBProjectionStore"],
    "memfold.projections.context": ["assemble", "take_last"],
    "memfold.projections.dense": ["DenseIndex", "FusedOlder", "rrf"],
    "memfold.projections.fold": ["step", "make_request", "produced", "failed", "run_sync"],
    "memfold.client": [
        "Client", "AsyncClient", "ApiError", "AuthenticationError", "ConflictError", "PermissionDeniedError", "NotFoundError",
        "RequestTooLargeError", "InvalidRequestError", "RateLimitedError", "ServiceUnavailableError",
        "Appended", "Message", "Context", "ContextMessage", "Conversation", "Identity", "SqlResult",
        "ConversationGoneError", "SearchHit", "SearchPage", "Prompt", "ConversationNotFoundError",
        "MessageNotFoundError", "ReplayNotFoundError", "EventIdConflictError", "AlreadyRetractedConflictError",
        "UserNotFoundError", "UserIdConflictError",
    ],
    "memfold.service.app": ["create_app"],
    "memfold.adapters.langchain": ["MemfoldChatMessageHistory", "MemfoldMiddleware"],
    "memfold.adapters.mcp": ["build_server", "main"],
    "memfold.adapters.agents": ["MemfoldSession"],
    "memfold.service.keys": ["ApiKeyStore", "ApiKey", "ROLES"],
    "memfold.service.limits": ["Limits"],
    "memfold.service.server": ["serve"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_exist(module):
    mod = importlib.import_module(module)
    missing = [name for name in PUBLIC[module] if not hasattr(mod, name)]
    assert not missing, f"{module} lost public names: {missing}"


def test_errors_form_one_tree():
    from memfold.core import errors

    roots = [
        getattr(errors, n) for n in PUBLIC["memfold.core.errors"]
    ]
    assert all(issubclass(cls, errors.MemfoldError) for cls in roots)
    assert issubclass(errors.ValidationError, ValueError)


@pytest.mark.parametrize("name", ["hierarchical", "chunked", "sliding_window", "rolling", "topics"])
def test_every_seed_policy_loads(name):
    from memfold.engine.engine import load_policy

    policy = load_policy(name)
    assert policy.name == name
    for method in ("initial", "evolve", "decide", "plan"):
        assert callable(getattr(policy, method))


def test_the_top_level_package_gives_the_engine_and_the_client():
    import memfold
    from memfold import AsyncClient, Client, MemoryEngine
    from memfold.client import AsyncClient as client_async
    from memfold.client import Client as client_sync
    from memfold.engine.engine import MemoryEngine as engine_class

    assert (MemoryEngine, Client, AsyncClient) == (engine_class, client_sync, client_async)
    assert sorted(memfold.__all__) == ["AsyncClient", "Client", "MemoryEngine"]
    with pytest.raises(AttributeError):
        memfold.NoSuchName  # noqa: B018
