"""Pin the public names: what users import must not move or vanish silently."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "memfold.engine.engine": ["MemoryEngine", "load_policy", "fold_contexts"],
    "memfold.engine.overrides": ["parse_assignments", "load_file", "apply", "policy_view"],
    "memfold.streams.namespaces": ["ReplayReport", "ReplayStats", "Namespace", "ReplayFold", "list_namespaces", "drop"],
    "memfold.engine.events": [
        "Event", "MessageAppended", "ConversationDeleted", "ConversationReopened", "PRIVATE_FIELDS", "SettingsChanged", "ClockTicked", "SummaryRequested",
        "SummaryProduced", "SummaryFailed", "TopicAssigned", "TopicCompacted", "TopicEvicted", "MessagePayload",
        "ToolCall", "Fact", "EncryptedContent", "UpcasterRegistry", "UPCASTERS", "decode", "json_schemas",
    ],
    "memfold.engine.errors": [
        "MemfoldError", "ValidationError", "UnknownRoleError", "EmptyContentError", "MessageTooLargeError",
        "ConfigError", "EventDecodeError", "UnknownEventTypeError", "UpcastError", "LogError",
        "LogUnavailableError", "AppendFailedError", "ProjectionError", "ProjectionBusyError",
        "ProjectionLagTimeout", "SummarizerError", "SummarizerTimeoutError", "SummarizerOutputError",
        "TokenizerUnavailableError", "UnknownReplayError", "ConversationForgottenError", "ErasureIncompleteError",
        "UnknownConversationError", "SqlTimeoutError", "UserConflictError", "UnknownUserError",
    ],
    "memfold.engine.ports": [
        "EventLog", "Policy", "Summarizer", "Embedder", "ProjectionStore", "MessageSource", "FoldContext",
        "MessageRecord", "ContextPlan", "ContextMessage", "MemoryMessage", "SummaryInput", "SummaryOutput",
    ],
    "memfold.engine.positions": ["Position", "LogRecord"],
    "memfold.engine.shapes": ["FORMATS", "Shaped", "shaped", "messages_from"],
    "memfold.engine.partitioner": ["murmur2", "partition_for"],
    "memfold.engine.settings": [
        "Settings", "HierarchicalSettings", "ChunkedSettings", "SlidingWindowSettings", "RollingSettings",
        "TopicsSettings", "SummarizerSettings", "EmbedderSettings", "RetrievalSettings", "POLICY_NAMES",
    ],
    "memfold.engine.tokens": ["TokenCounter", "counter", "load_encoding"],
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
    from memfold.engine import errors

    roots = [
        getattr(errors, n) for n in PUBLIC["memfold.engine.errors"]
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
