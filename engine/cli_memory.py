"""The ``memfold`` commands about a conversation's memory over time: forget (and audit, time travel).

Kept apart from :mod:`memfold.engine.cli` so the general commands stay small;
:func:`add_commands` registers the sub-parsers and ``COMMANDS`` maps them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this module's sub-commands with ``command`` (the CLI's ``add_parser`` with the common options)."""
    f = command("forget", help="erase a conversation: delete its rows, destroy its data key (crypto-shredding)")
    f.add_argument("conversation")
    f.add_argument("--tenant", default="default")
    f.add_argument("--reason", default=None, help="recorded on the ConversationDeleted event")


def cmd_forget(args: argparse.Namespace) -> int:
    from .cli import _engine
    from .errors import ValidationError

    if not args.conversation.strip():
        raise ValidationError("conversation is required and must not be blank", field="conversation")
    with _engine(args) as engine:
        position = engine.forget(args.conversation, tenant_id=args.tenant, reason=args.reason)
    print(f"forgot {args.tenant}/{args.conversation} (ConversationDeleted at {position}; data key destroyed)")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"forget": cmd_forget}
