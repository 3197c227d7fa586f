"""What the commands share: opening the engine a command needs, printing JSON, argument types, usage errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import types
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from memfold.core.errors import ConfigError, UnknownConversationError, ValidationError
from memfold.core.runtime import resume_gc


class UsageError(Exception):
    """A command line argparse refused; printed as one line, exit code 2."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a number above 0")
    return value


def one_line(text: str) -> str:
    return " ".join(text.split())


def settings_of(args: argparse.Namespace, **extra: Any):
    from memfold.core.settings import Settings

    overrides: dict[str, Any] = {"data_dir": Path(args.data_dir), **extra}
    if args.log:
        overrides["log"] = args.log
    if args.policy:
        overrides["policy"] = args.policy
    return Settings.load(args.config, **overrides)


def open_engine(args: argparse.Namespace, *, writing: bool = False, read_only: bool | None = None):
    """Open the engine in the role the log calls for.

    SQLite log: embedded (everything in this process). Kafka log: commands
    that write are clients (append and return once the broker acknowledged);
    commands that read are projector nodes (catch the local replica up, then read).
    A read (``read_only``, default: not ``writing``) never changes what the
    data dir keeps: a data dir that does not exist, or a policy or settings
    it was not built with, is an error.
    """
    if read_only is None:
        read_only = not writing
    settings = settings_of(args)
    kafka = (settings.log or "").startswith("kafka://")
    # A projector node's or worker's data dir has no events.sqlite: its log.json names the Kafka log it replicates.
    bound = settings.log_binding_path().is_file()
    has_log = bound or (settings.data_dir / "events.sqlite").is_file()
    if read_only and not kafka and not has_log and settings.log is None:
        raise ConfigError(
            f"no memfold data in {settings.data_dir}: append or ingest first, or pass --data-dir "
            "(env MEMFOLD_DATA_DIR) for the data dir you mean"
        )
    if not kafka and not bound and settings.projection_path().is_file():
        from memfold.projections.opening import open_ahead

        open_ahead(settings.projection_path())  # opens while the engine's code loads (~20 ms of each command)
    from memfold.engine.builders import bind_log
    from memfold.engine.engine import MemoryEngine

    settings = bind_log(settings)
    role = "embedded"
    if settings.log_url().startswith("kafka://"):
        role = "client" if writing else "projector"
    engine = MemoryEngine(settings, role=role, policy_changes="refuse" if read_only else "rebuild")
    resume_gc()  # the code is loaded (memfold.cli.main.run paused the collector meanwhile)
    return engine


def require_conversation(engine, conversation_id: str, tenant_id: str) -> None:
    """Raise a one-line error when the projection has no such conversation (a typo, another tenant)."""
    if engine.store.conversation(tenant_id, conversation_id) is None:
        raise UnknownConversationError(
            f"no conversation {conversation_id!r} for tenant {tenant_id!r} in {engine.settings.data_dir}; "
            "list them with: memfold sql \"SELECT tenant_id, conversation_id FROM conversations\"",
            field="conversation",
        )


def catch_up(engine) -> None:
    engine.runner.run_once()


def jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


# What json.dumps(ensure_ascii=False) leaves raw although a terminal acts on it: DEL, C1 controls, bidi controls.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON, every control character escaped (``\\u001b``, ``\\u009b``)."""
    text = json.dumps(value, ensure_ascii=False, indent=2, default=jsonable)
    sys.stdout.write(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


SHOWN_REJECTIONS = 20


def refuse_errors_on_input(errors: str | None, file: str) -> None:
    """Raise :class:`UsageError` when ``--errors`` names the input itself (same inode: a link, ``/dev/stdin``).

    Opening it for writing would truncate the input before a line was read.
    """
    if errors is None:
        return
    try:
        same = os.path.samefile(errors, file)
    except OSError:  # the errors file does not exist yet: it cannot be the input
        return
    if same:
        raise UsageError(f"--errors {errors} is the input file {file}; writing rejections there would erase "
                         "the input: give another file")


def parse_as_of(text: str):
    """Return the :class:`Position` (``PARTITION:OFFSET``) or aware ``datetime`` (ISO-8601) ``text`` names."""
    from memfold.core.positions import Position

    part, sep, offset = text.partition(":")
    if sep and part.isdigit() and offset.isdigit():
        return Position(int(part), int(offset))
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            f"--as-of {text!r} is neither a log position (PARTITION:OFFSET, e.g. 3:1200) nor an ISO-8601 time "
            "(e.g. 2026-03-02T09:00:00+00:00)", field="as_of") from None
    if when.tzinfo is None:
        raise ValidationError(f"--as-of {text!r} has no time zone; add one (e.g. +00:00 or Z)", field="as_of")
    return when


def without_httpx_cli() -> None:
    """Keep httpx from importing its own command-line client (click, rich's progress bars, pygments: ~40 ms).

    ``import httpx`` imports ``httpx._main`` for the ``httpx`` command and
    falls back to a stub when its dependencies are missing. The ``memfold``
    command never runs it, so its process takes that stub path at once (only
    here, in memfold's own executable; a program importing ``memfold.client``
    is left alone). No effect once httpx is imported.
    """
    if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
        stub = types.ModuleType("httpx._main")

        def main() -> None:
            raise SystemExit("the httpx command line client is not loaded in the memfold command")

        stub.main = main  # type: ignore[attr-defined]
        sys.modules["httpx._main"] = stub
