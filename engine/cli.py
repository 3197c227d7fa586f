"""The ``memfold`` command line: append, ingest, context, history, summaries, sql, schema, demo, serve, keys.

Replay namespaces (replay, replays, drop, promote) are in cli_replay.py; memory over time (forget,
reopen, verify, audit) in cli_memory.py.

``--url`` (env ``MEMFOLD_URL``) runs the commands the HTTP API serves
against a running ``memfold serve`` instead of a data dir (see
cli_remote.py, ``REMOTE``), with ``--api-key`` (env ``MEMFOLD_API_KEY``).
Every other command works on a local data dir only and refuses ``--url``
(exit 2) before touching anything: remote means remote, never the local data.

Human-readable output shows control characters of stored content as
escapes (``\\x1b``), so content cannot drive the terminal; ``--json``
escapes them as JSON does (``\\u001b``), C1 and bidi controls included.

Every command takes ``--data-dir`` (env ``MEMFOLD_DATA_DIR``, default
``./.memfold``). Errors are one plain line on stderr and a non-zero exit
code, never a stack trace: 1 runtime error (nothing could be done: a file
that cannot be read, the log failing), 2 invalid input or usage (bad flags,
settings, an unknown conversation; for ``ingest``: some lines were
rejected, the others are stored), 3 the projection is busy (another process
holds it: retry). Reads (context, history, summaries, sql) never change the
data dir.

JSON shapes (stable):
- ``context --json``: ``[{"role", "content", "kind", "tokens"}]`` (+ ``index``, ``occurred_at`` for
  conversation messages, ``tool_calls``/``tool_call_id`` when set); kind is ``system_prompt``,
  ``memory:<facts|narrative|summary|...>``, ``recalled``, ``verbatim`` or ``current``.
- ``history --json``: ``[{"index", "seq", "role", "content", "tokens", "occurred_at", "model_variant",
  "tool_calls", "tool_call_id", "event_id"}]``.
- ``summaries --json``: one object per summary request with its outcome and lineage.
- ``sql --json``: ``[{column: value}]``; ``--csv`` writes a header row then the rows.
- ``append --json``: ``{"event_id", "partition", "offset"}``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from memfold.engine import cli_diff, cli_memory, cli_replay, cli_users
from memfold.engine.errors import (
    ConfigError,
    ConversationForgottenError,
    ErasureIncompleteError,
    InputFileError,
    MemfoldError,
    ProjectionBusyError,
    ValidationError,
)
from memfold.engine.shapes import FORMATS, INPUT_FORMATS, shaped


class UsageError(Exception):
    """A command line argparse refused; printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage and exits; memfold says one line
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a number above 0")
    return value


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="memfold", description="Event-sourced conversation memory.")
    p.add_argument("--data-dir", default=os.environ.get("MEMFOLD_DATA_DIR", ".memfold"),
                   help="data directory (env MEMFOLD_DATA_DIR, default ./.memfold)")
    p.add_argument("--config", default=None, help="memfold.toml (env MEMFOLD_CONFIG, default ./memfold.toml if present)")
    p.add_argument("--policy", default=None, help="policy to read/keep (env MEMFOLD_POLICY, default sliding_window)")
    p.add_argument("--log", default=None, help="event log URL: sqlite:///FILE (default) or kafka://HOST:PORT")
    p.add_argument("--url", default=None,
                   help="talk to a running 'memfold serve' at this URL instead of a data dir (env MEMFOLD_URL)")
    p.add_argument("--api-key", default=os.environ.get("MEMFOLD_API_KEY"),
                   help="API key for --url (env MEMFOLD_API_KEY)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The global options are accepted after the command too (`memfold project --log URL --data-dir DIR`).
    common = _Parser(add_help=False)
    for flag in ("--data-dir", "--config", "--policy", "--log", "--url", "--api-key"):
        common.add_argument(flag, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    command = functools.partial(sub.add_parser, parents=[common])

    a = command("append", help="append one message")
    a.add_argument("conversation")
    a.add_argument("role", help="user | assistant | system | tool")
    a.add_argument("content")
    a.add_argument("--tenant", default="default")
    a.add_argument("--model-variant")
    a.add_argument("--importance", type=float, help="0..1")
    a.add_argument("--tool-call-id")
    a.add_argument("--user", default=None, help="the user the conversation belongs to")
    a.add_argument("--no-wait", action="store_true", help="return once the event is in the log")
    a.add_argument("--json", action="store_true")

    i = command("ingest", help="ingest a JSONL file, one message per line")
    i.add_argument("file")
    i.add_argument("--batch-size", type=_positive_int, default=2000)
    i.add_argument("--no-wait", action="store_true", help="return once the events are in the log")
    i.add_argument("--quiet", action="store_true", help="no progress bar")
    i.add_argument("--strict", action="store_true", help="stop at the first bad line; nothing after it is written")
    i.add_argument("--resume", action="store_true", help="continue after the last line the log holds")
    i.add_argument("--errors", metavar="FILE", help="write every rejected line as JSONL {line, field, error}")
    i.add_argument("--source", metavar="KEY", help="what names this input in derived ids (default: the file name)")
    i.add_argument("--format", choices=INPUT_FORMATS, default="openai",
                   help="the shape of each line: an OpenAI chat message (or memfold's flat form), an Anthropic "
                        "message, or a Responses API input item (docs/shapes.md)")

    c = command("context", help="print the assembled context for the next model call")
    c.add_argument("conversation")
    c.add_argument("--budget", type=_positive_int, default=None, help="token budget (default: no limit)")
    c.add_argument("--query", default=None, help="what to recall older messages for (default: the current user message)")
    c.add_argument("--tenant", default="default")
    c.add_argument("--user", default=None,
                   help="read as a conversation of this user (its memory and other conversations join the context); "
                        "a conversation not started yet shows what it would begin with")
    c.add_argument("--as-of", default=None, metavar="POSITION|TIME",
                   help="the context as it was at log position PARTITION:OFFSET or an ISO-8601 time with zone")
    c.add_argument("--json", action="store_true",
                   help="print {format, messages, memfold}: messages ready for a model call, memfold's "
                        "annotations in a parallel list")
    c.add_argument("--format", choices=FORMATS, default="openai",
                   help="with --json: openai (chat messages), anthropic (messages + system), responses "
                        "(input items) or compact (memfold's annotated messages)")

    h = command("history", help="print every stored message of a conversation")
    h.add_argument("conversation")
    h.add_argument("--tenant", default="default")
    h.add_argument("--json", action="store_true")

    s = command("summaries", help="print the summary chain (requests, outcomes, lineage)")
    s.add_argument("conversation")
    s.add_argument("--tenant", default="default")
    s.add_argument("--json", action="store_true")

    q = command("sql", help="run SQL over the projections (read-only)")
    q.add_argument("query", nargs="?")
    q.add_argument("--views", action="store_true", help="list the documented SQL views instead")
    q.add_argument("--replay", metavar="NAME", help="query the projection of replay NAME instead of the live one")
    fmt = q.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")

    command("schema", help="print the JSON Schema of every event type")

    command("rebuild", help="fold the projection again from the log beside the live one, then swap it in")

    pj = command("project", help="run a projector node: fold the log into this data dir's DuckDB replica")
    pj.add_argument("--until-caught-up", action="store_true", help="exit once the replica has caught up")
    pj.add_argument("--status-every", type=_positive_float, default=10.0, help="seconds between status lines")

    w = command("worker", help="run a distributed-mode worker: fold + summarize the Kafka partitions it owns")
    w.add_argument("--partitions", default=None,
                   help="a fixed partition list such as 0,1,2 (default: share the topic through a consumer group)")
    w.add_argument("--group", default=None, help="consumer group id (default memfold-worker.TOPIC)")
    w.add_argument("--session-timeout", type=_positive_float, default=10.0,
                   help="seconds before a dead worker's partitions go to the others (default 10)")
    w.add_argument("--commit-interval", type=_positive_float, default=1.0, help="seconds between advisory offset commits")
    w.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING")
    w.add_argument("--connect-timeout", type=_positive_float, default=15.0, help="seconds to wait for the broker at start")

    d = command("demo", help="ingest the bundled sample and show what memfold keeps")
    d.add_argument("--budget", type=_positive_int, default=600)
    cli_memory.add_commands(command)
    cli_users.add_commands(command, _positive_int)
    cli_replay.add_commands(command)
    cli_diff.add_commands(command, _positive_int)

    sv = command("serve", help="serve this data dir over HTTP (API keys, /docs, /metrics, /ui)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8080)
    sv.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024, help="largest request body (413 above)")
    sv.add_argument("--max-batch", type=int, default=1000, help="most messages in one append (413 above)")
    sv.add_argument("--rate", type=float, default=200.0, help="requests per second per key (429 above; 0 = no limit)")
    sv.add_argument("--burst", type=int, default=400, help="requests a key may send at once before --rate applies")
    sv.add_argument("--log-level", default="warning", help="uvicorn log level")
    sv.add_argument("--fold-in-process", action="store_true",
                    help="fold in the serving process (default with an embedded log: a fold process of its own)")

    k = command("keys", help="create, list or revoke the service's API keys")
    ksub = k.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    kc = ksub.add_parser("create", help="create a key and print it (shown once)")
    kc.add_argument("--tenant", required=True)
    kc.add_argument("--role", required=True, choices=("operator", "admin", "writer", "reader"),
                    help="reader: reads; writer: + appends; admin: + forget, SQL, verify (its tenant); "
                         "operator: + replays, promote, verify of the whole data dir")
    kc.add_argument("--name", default=None, help="a label to recognise the key by")
    kc.add_argument("--json", action="store_true")
    kl = ksub.add_parser("list", help="list keys (never their secrets)")
    kl.add_argument("--json", action="store_true")
    kr = ksub.add_parser("revoke", help="revoke a key by its id (or the whole key)")
    kr.add_argument("key_id")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code. Every error is one line on stderr.

    Run as the ``memfold`` command (``argv`` None), a command that folds the
    whole log (:data:`_BULK`) tunes its process's garbage collector
    (:func:`~memfold.engine.runtime.tune_gc`).
    """
    if argv is None:
        # Files this process creates (DuckDB's WAL, replay namespaces, exports) hold plaintext or keys:
        # owner-only, whatever the shell's umask. The library leaves its caller's umask alone; the
        # data dir itself is 0700 either way.
        os.umask(0o077)
    try:
        args = _parser().parse_args(argv)
        if argv is None and args.command in _BULK:
            from memfold.engine.runtime import tune_gc

            tune_gc()
        flag = "--url" if args.url else "MEMFOLD_URL"
        args.url = args.url or os.environ.get("MEMFOLD_URL") or None
        if args.url:
            from memfold.engine.cli_remote import REMOTE, run_remote

            if args.command not in REMOTE:
                raise UsageError(
                    f"{args.command} works on a local data dir; {flag} is not supported for it "
                    f"(run it without {flag} where the data dir is)"
                )
            return run_remote(args)
        return _COMMANDS[args.command](args)
    except UsageError as exc:
        return _fail(f"usage: {exc}", 2)
    except ProjectionBusyError as exc:
        return _fail(f"busy, retry: {exc}", 3)
    except ConversationForgottenError as exc:
        hint = "" if "reopen" in str(exc) else "; `memfold reopen CONVERSATION` starts it again"
        return _fail(f"conversation forgotten: {exc}{hint}", 2)
    except ErasureIncompleteError as exc:
        return _fail(f"erasure not finished: {exc}; run memfold forget again", 1)
    except ValidationError as exc:
        return _fail(f"invalid input: {exc}", 2)
    except ConfigError as exc:
        return _fail(str(exc), 2)
    except MemfoldError as exc:
        return _fail(f"error: {exc}", 1)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the data dir or an output file: permissions, a full disk
        return _fail(f"error: {exc.filename or ''}: {exc.strerror or exc}".replace(": : ", ": "), 1)
    except Exception as exc:  # a bug: still one line, and what to report
        return _fail(f"internal error ({type(exc).__name__}: {_one_line(str(exc))}); please report it", 1)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fail(message: str, code: int) -> int:
    from memfold.engine.render import terminal_safe

    print(f"memfold: {terminal_safe(_one_line(message))}", file=sys.stderr)
    return code


# --------------------------------------------------------------------------- helpers


def _settings(args: argparse.Namespace, **extra: Any):
    from memfold.engine.settings import Settings

    overrides: dict[str, Any] = {"data_dir": Path(args.data_dir), **extra}
    if args.log:
        overrides["log"] = args.log
    if args.policy:
        overrides["policy"] = args.policy
    return Settings.load(args.config, **overrides)


def _engine(args: argparse.Namespace, *, writing: bool = False, read_only: bool | None = None):
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
    from memfold.engine.engine import LOG_BINDING, MemoryEngine, _bind_log

    settings = _settings(args)
    kafka = (settings.log or "").startswith("kafka://")
    # A projector node's or worker's data dir has no events.sqlite: its log.json names the Kafka log it replicates.
    bound = (settings.data_dir / LOG_BINDING).is_file()
    has_log = bound or (settings.data_dir / "events.sqlite").is_file()
    if read_only and not kafka and not has_log and settings.log is None:
        raise ConfigError(
            f"no memfold data in {settings.data_dir}: append or ingest first, or pass --data-dir "
            "(env MEMFOLD_DATA_DIR) for the data dir you mean"
        )
    settings = _bind_log(settings)
    role = "embedded"
    if settings.log_url().startswith("kafka://"):
        role = "client" if writing else "projector"
    return MemoryEngine(settings, role=role, policy_changes="refuse" if read_only else "rebuild")


def _require_conversation(engine, conversation_id: str, tenant_id: str) -> None:
    """Raise a one-line error when the projection has no such conversation (a typo, another tenant)."""
    from memfold.engine.errors import UnknownConversationError

    if engine.store.conversation(tenant_id, conversation_id) is None:
        raise UnknownConversationError(
            f"no conversation {conversation_id!r} for tenant {tenant_id!r} in {engine.settings.data_dir}; "
            "list them with: memfold sql \"SELECT tenant_id, conversation_id FROM conversations\"",
            field="conversation",
        )


def _catch_up(engine) -> None:
    engine.runner.run_once()


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


# What json.dumps(ensure_ascii=False) leaves raw although a terminal acts on it: DEL, C1 controls, bidi controls.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _print_json(value: Any) -> None:
    """Print ``value`` as indented JSON, every control character escaped (``\\u001b``, ``\\u009b``)."""
    text = json.dumps(value, ensure_ascii=False, indent=2, default=_jsonable)
    sys.stdout.write(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


# --------------------------------------------------------------------------- commands


def cmd_append(args: argparse.Namespace) -> int:
    with _engine(args, writing=True) as engine:
        position = engine.append_message(
            args.conversation, args.role, args.content, tenant_id=args.tenant, model_variant=args.model_variant,
            importance=args.importance, tool_call_id=args.tool_call_id, user_id=args.user,
        )
        if not args.no_wait and engine.role == "embedded":
            engine.wait_for(position)
            engine.wait_idle()
        if args.json:
            _print_json({"partition": position.partition, "offset": position.offset})
        else:
            print(f"appended to {args.tenant}/{args.conversation} at {position}")
    return 0


SHOWN_REJECTIONS = 20


def cmd_ingest(args: argparse.Namespace) -> int:
    from memfold.engine.ingest import check_readable, ingest_file

    path = Path(args.file)
    check_readable(path)  # before the data dir is opened: a typo creates nothing
    refuse_errors_on_input(args.errors, args.file)  # before "w" truncates it
    errors = _open_errors_file(args.errors)
    try:
        with _engine(args, writing=True) as engine:
            report = ingest_file(engine, path, batch_size=args.batch_size, progress=not args.quiet,
                                 strict=args.strict, resume=args.resume, source=args.source, format=args.format)
            if not args.no_wait and engine.role == "embedded" and not report.log_failed:
                engine.wait_idle(timeout=600)
        if errors is not None:
            for rejection in report.rejected:
                errors.write(json.dumps(rejection.as_dict(), ensure_ascii=False) + "\n")
    finally:
        if errors is not None:
            errors.close()
    from memfold.engine.render import terminal_safe

    for rejection in report.rejected[:SHOWN_REJECTIONS]:
        print(f"memfold: line {rejection.line} rejected: {terminal_safe(_one_line(rejection.reason))}", file=sys.stderr)
    hidden = len(report.rejected) - SHOWN_REJECTIONS
    if hidden > 0:
        where = f"all are in {args.errors}" if args.errors else "--errors FILE writes all as JSONL"
        print(f"memfold: ... and {hidden} more rejected line(s) ({where})", file=sys.stderr)
    if report.resumed_after is not None:
        print(f"resumed: the log held {report.duplicates} line(s), up to line {report.resumed_after} "
              "(counted as duplicates)")
    rate = report.accepted / report.seconds if report.seconds else float("inf")
    conflicts = f" ({report.conflicts} conflicting event_id)" if report.conflicts else ""
    print(
        f"ingested {report.accepted} messages, duplicates {report.duplicates}, rejected {len(report.rejected)}"
        f"{conflicts} in {report.seconds:.2f}s ({rate:,.0f} messages/s)"
    )
    if report.stopped:
        print(f"memfold: {_one_line(report.stopped)}", file=sys.stderr)
    return report.exit_code


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


def _open_errors_file(name: str | None):
    if name is None:
        return None
    try:
        return open(name, "w", encoding="utf-8")
    except OSError as exc:
        raise InputFileError(f"--errors {name}: cannot write it: {exc.strerror or exc}") from exc


def cmd_context(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        _catch_up(engine)
        if args.user is None:  # with a user, a conversation not started yet is read as its first context
            _require_conversation(engine, args.conversation, args.tenant)
        elif args.as_of:
            raise UsageError("--user reads today's user memory; --as-of reads a conversation's past without it")
        as_of = cli_memory.parse_as_of(args.as_of) if args.as_of else None
        messages = engine.context(
            args.conversation, budget=args.budget, query=args.query, tenant_id=args.tenant, as_of=as_of,
            user_id=args.user,
        )
    if args.json:
        _print_json(shaped(args.format, messages, conversation_id=args.conversation).as_dict())
    else:
        from memfold.engine.render import print_context

        print_context(messages, title=f"context for {args.tenant}/{args.conversation}", budget=args.budget)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        _catch_up(engine)
        _require_conversation(engine, args.conversation, args.tenant)
        history = engine.history(args.conversation, tenant_id=args.tenant)
    if args.json:
        _print_json(
            [
                {
                    "index": m.index, "seq": m.seq, "role": m.role, "content": m.content, "tokens": m.tokens,
                    "occurred_at": m.occurred_at, "model_variant": m.model_variant,
                    "tool_calls": [tc.model_dump() for tc in m.tool_calls], "tool_call_id": m.tool_call_id,
                    "event_id": m.event_id,
                }
                for m in history
            ]
        )
    else:
        from memfold.engine.render import history_line

        for m in history:
            print(history_line(m.index, m.role, m.content))
    return 0


def cmd_summaries(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        _catch_up(engine)
        _require_conversation(engine, args.conversation, args.tenant)
        rows = engine.summaries(args.conversation, tenant_id=args.tenant, policy=args.policy)
    if args.json:
        _print_json(rows)
    else:
        from memfold.engine.render import print_summaries

        print_summaries(rows)
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from memfold.projections.store import DuckDBProjectionStore

    if args.views:
        return cli_memory.print_views(args)
    if not args.query:
        raise ValidationError("give a SQL query, or --views to list the documented views", field="query")
    settings = _settings(args)
    path = settings.projection_path()
    if args.replay:
        from memfold.streams.namespaces import Namespace, check_name, replays_dir

        space = Namespace.open(replays_dir(settings.data_dir) / check_name(args.replay))
        space.refuse_stale()
        path = space.store_path
    else:
        with _engine(args) as engine:  # bring the projection up to date, then release the writer lock
            _catch_up(engine)
    store = DuckDBProjectionStore(path, read_only=True)
    try:
        columns, rows = store.query(args.query)
    finally:
        store.close()
    if args.json:
        _print_json([dict(zip(columns, r)) for r in rows])
    elif args.csv:
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows([[_jsonable(v) for v in r] for r in rows])
    else:
        from memfold.engine.render import print_table

        print_table(columns, rows)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from memfold.engine.events import json_schemas

    _print_json(json_schemas())
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    with _engine(args, read_only=False) as engine:  # the command that adds a policy or applies new settings
        started = time.perf_counter()
        engine.rebuild()
        events = engine.sql("SELECT count(*) FROM events")[1][0][0]
        calls = engine.worker.calls
    print(f"rebuilt the projection from {events} events in {time.perf_counter() - started:.2f}s; "
          f"{calls} summarizer call(s)")
    return 0


def cmd_project(args: argparse.Namespace) -> int:
    import signal
    import threading

    from memfold.engine.engine import MemoryEngine, _bind_log

    settings = _bind_log(_settings(args))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with MemoryEngine(settings, role="projector", start=not args.until_caught_up) as engine:
        started = time.perf_counter()
        if args.until_caught_up:
            while (engine.runner.run_once() or not engine.runner.caught_up()) and not stop.is_set():
                pass  # a SIGTERM ends the catch-up after the batch in progress (positions are with the rows)
        else:
            while not stop.wait(args.status_every):
                lag = _lag(engine)
                print(f"projector: {settings.log_url()} -> {settings.projection_path()}, lag {lag} events", flush=True)
        events = engine.sql("SELECT count(*) FROM events")[1][0][0]
        lag = _lag(engine)
    print(f"projected {events} events from {settings.log_url()} into {settings.projection_path()} "
          f"in {time.perf_counter() - started:.2f}s; lag {lag}")
    return 0


def _lag(engine) -> int:
    ends = engine.log.end_positions()
    pos = engine.store.position()
    return sum(max(0, end - pos.get(p, 0)) for p, end in ends.items())


def cmd_worker(args: argparse.Namespace) -> int:
    import logging
    import logging.config
    import signal

    from memfold.engine.engine import MemoryEngine, _bind_log
    from memfold.streams.kafka_worker import PartitionWorker, logging_config, peak_rss_mb

    settings = _bind_log(_settings(args))
    if not settings.log_url().startswith("kafka://"):
        raise ValidationError("the worker runs on a Kafka log: pass --log kafka://HOST:PORT", field="log")
    fixed = _partition_list(args.partitions) if args.partitions else None
    logging.config.dictConfig(logging_config(args.log_level))
    log = logging.getLogger("memfold.worker")
    started = time.perf_counter()
    engine = ownership = None
    try:
        engine = MemoryEngine(settings, role="worker", log_timeout=args.connect_timeout)
        worker = PartitionWorker(engine.runner, engine.worker, _NoOwnership(), commit_interval=args.commit_interval)
        ownership = _ownership(args, settings, engine, fixed, worker)
        worker.ownership = ownership
    except MemfoldError as exc:
        log.error("cannot start the worker: %s", exc)
        if engine is not None:
            engine.close()
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop())
    log.info("worker starting on %s topic %s (%s; policies %s)", settings.log_url(), settings.topic,
             f"partitions {fixed}" if fixed else f"group {ownership.group_id}", ",".join(settings.active_policies))
    try:
        worker.run()
    finally:
        folded, calls = engine.runner.folded, engine.worker.calls
        ownership.close()
        engine.close()
    log.info("worker stopped (exit 0) after %.1fs: folded %d events, %d summarizer calls, peak RSS %.0f MiB",
             time.perf_counter() - started, folded, calls, peak_rss_mb())
    return 0


def _partition_list(text: str) -> list[int]:
    try:
        return sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise ValidationError(f"--partitions takes numbers separated by commas, got {text!r}", field="partitions") from None


class _NoOwnership:
    def poll(self, timeout: float) -> set[int]:
        return set()

    def committed(self, positions: dict[int, int]) -> None:
        pass

    def close(self) -> None:
        pass


def _ownership(args: argparse.Namespace, settings, engine, fixed: list[int] | None, worker):
    from urllib.parse import urlsplit

    from memfold.streams.ownership import ConsumerGroup, StaticPartitions

    if fixed is not None:
        return StaticPartitions(fixed, engine.log.partition_count)
    return ConsumerGroup(
        urlsplit(settings.log_url()).netloc, settings.topic, args.group or f"memfold-worker.{settings.topic}",
        session_timeout_s=args.session_timeout, timeout=args.connect_timeout, on_revoke=worker.release,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from memfold.engine.demo import run_demo

    return run_demo(Path(args.data_dir), budget=args.budget, config=args.config)


def cmd_serve(args: argparse.Namespace) -> int:
    from memfold.engine.engine import _bind_log
    from memfold.service.limits import Limits
    from memfold.service.server import serve

    limits = Limits(max_body_bytes=args.max_body_bytes, max_batch=args.max_batch, rate=args.rate, burst=args.burst)
    serve(_bind_log(_settings(args)), host=args.host, port=args.port, limits=limits, log_level=args.log_level,
          fold_process=not args.fold_in_process)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from memfold.service.keys import ApiKeyStore

    store = ApiKeyStore(Path(args.data_dir))
    if args.keys_command == "create":
        key, secret = store.create(args.tenant, args.role, args.name)
        if args.json:
            _print_json({"key": secret, "key_id": key.key_id, "tenant_id": key.tenant_id, "role": key.role})
        else:
            print(secret)
            print(f"key {key.key_id}: tenant {key.tenant_id}, role {key.role} (the key is shown once; store it now)",
                  file=sys.stderr)
    elif args.keys_command == "list":
        keys = store.list()
        if args.json:
            _print_json([{"key_id": k.key_id, "tenant_id": k.tenant_id, "role": k.role, "name": k.name,
                          "created_at": k.created_at, "revoked_at": k.revoked_at} for k in keys])
        else:
            from memfold.engine.render import print_table

            print_table(["key_id", "tenant", "role", "name", "created", "revoked"],
                        [(k.key_id, k.tenant_id, k.role, k.name or "", k.created_at, k.revoked_at or "") for k in keys])
    else:
        key = store.revoke(args.key_id)
        print(f"revoked key {key.key_id} (tenant {key.tenant_id}, role {key.role}) at {key.revoked_at}")
    return 0


# Commands that fold the whole log in one go: measured faster with a rarely running collector (replay of
# 20,000 messages from the cache 6,329 -> 8,031 msg/s). Long-running processes (serve, worker) keep
# CPython's defaults: no gain was measured there.
_BULK = ("replay", "rebuild", "verify")

_COMMANDS = {
    "append": cmd_append,
    "ingest": cmd_ingest,
    "context": cmd_context,
    "history": cmd_history,
    "summaries": cmd_summaries,
    "sql": cmd_sql,
    "schema": cmd_schema,
    "rebuild": cmd_rebuild,
    "project": cmd_project,
    "worker": cmd_worker,
    "demo": cmd_demo,
    **cli_memory.COMMANDS,
    **cli_users.COMMANDS,
    **cli_replay.COMMANDS,
    **cli_diff.COMMANDS,
    "serve": cmd_serve,
    "keys": cmd_keys,
}

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
