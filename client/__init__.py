"""memfold.client: talk to a running ``memfold serve`` from Python (httpx; sync and asyncio).

    from memfold.client import Client
    with Client("http://127.0.0.1:8080", api_key="mf_...") as mf:
        mf.append("c1", [{"role": "user", "content": "hello"}])
        print(mf.prompt("c1", budget=2000).messages)  # the chat call's messages, as the openai SDK takes them
"""

from memfold.client._http import AsyncClient, Client
from memfold.client.models import (
    AlreadyRetractedConflictError,
    ApiError,
    Appended,
    AuthenticationError,
    ConflictError,
    Context,
    ContextMessage,
    Conversation,
    ConversationGoneError,
    ConversationNotFoundError,
    EventIdConflictError,
    Identity,
    InvalidRequestError,
    Message,
    MessageNotFoundError,
    NotFoundError,
    PermissionDeniedError,
    Prompt,
    RateLimitedError,
    ReplayNotFoundError,
    RequestTooLargeError,
    SearchHit,
    SearchPage,
    ServiceUnavailableError,
    SqlResult,
    UserIdConflictError,
    UserNotFoundError,
)

__all__ = [
    "AlreadyRetractedConflictError", "ConversationNotFoundError", "EventIdConflictError", "MessageNotFoundError",
    "ReplayNotFoundError",
    "ApiError", "Appended", "AsyncClient", "AuthenticationError", "Client", "ConflictError", "Context", "ContextMessage",
    "Conversation", "ConversationGoneError", "Identity", "InvalidRequestError", "Message", "NotFoundError", "PermissionDeniedError",
    "Prompt",
    "RateLimitedError", "RequestTooLargeError", "SearchHit", "SearchPage", "ServiceUnavailableError", "SqlResult",
    "UserIdConflictError", "UserNotFoundError",
]
