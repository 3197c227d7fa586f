"""The ``memfold`` command line: append, ingest, context, history, summaries, sql, schema, demo, serve, keys.

Replay namespaces (replay, replays, drop, promote) are in replay.py; memory over time (forget,
reopen, verify, audit) in memory.py; what the commands share in common.py.

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
import contextlib
import csv
import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from memfold.cli import diff as cli_diff
from memfold.cli import memory as cli_memory
from memfold.cli import portability as cli_portability
from memfold.cli import replay as cli_replay
from memfold.cli import users as cli_users
from memfold.cli.common import (
    SHOWN_REJECTIONS,
    UsageError,
    catch_up,
    jsonable,
    one_line,
    open_engine,
    parse_as_of,
    positive_float,
    positive_int,
    print_json,
    refuse_errors_on_input,
    require_conversation,
    settings_of,
    without_httpx_cli,
)
from memfold.core.errors import (
    ConfigError,
    ConversationForgottenError,
    ErasureIncompleteError,
    InputFileError,
    MemfoldError,
    ProjectionBusyError,
    ValidationError,
)
from memfold.core.runtime import pause_gc, resume_gc, tune_gc
from memfold.core.shapes import FORMATS, INPUT_FORMATS, shaped


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage and exits; memfold says one line
        raise UsageError(f"{message} (see `{self.prog} --help`)")


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

    _add_message_commands(command)
    _add_node_commands(command)
    d = command("demo", help="ingest the bundled sample and show what memfold keeps")
    d.add_argument("--budget", type=positive_int, default=600)
    cli_memory.add_commands(command)
    cli_users.add_commands(command, positive_int)
    cli_replay.add_commands(command)
    cli_portability.add_commands(command)
    cli_diff.add_commands(command, positive_int)

    _add_service_commands(command)
    return p


def _add_message_commands(command) -> None:
    """append, ingest, context, history, summaries, sql, schema: what a data dir holds, in and out."""
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
    i.add_argument("--batch-size", type=positive_int, default=2000)
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
    c.add_argument("--budget", type=positive_int, default=None, help="token budget (default: no limit)")
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
    q.add_argument("--snapshot", metavar="DIR",
                   help="query the Parquet snapshot in DIR (its 'current' one) instead of the live projection")
    fmt = q.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")

    command("schema", help="print the JSON Schema of every event type")


def _add_node_commands(command) -> None:
    """rebuild, project, worker: folding the log into this data dir, alone or as a node of many."""
    command("rebuild", help="fold the projection again from the log beside the live one, then swap it in")

    pj = command("project", help="run a projector node: fold the log into this data dir's DuckDB replica")
    pj.add_argument("--until-caught-up", action="store_true", help="exit once the replica has caught up")
    pj.add_argument("--status-every", type=positive_float, default=10.0, help="seconds between status lines")
    _shard_options(pj)

    w = command("worker", help="run a distributed-mode worker: fold + summarize the Kafka partitions it owns")
    w.add_argument("--partitions", default=None,
                   help="a fixed partition list such as 0,1,2 (default: share the topic through a consumer group)")
    w.add_argument("--group", default=None, help="consumer group id (default memfold-worker.TOPIC)")
    w.add_argument("--session-timeout", type=positive_float, default=10.0,
                   help="seconds before a dead worker's partitions go to the others (default 10)")
    w.add_argument("--commit-interval", type=positive_float, default=1.0, help="seconds between advisory offset commits")
    w.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING")
    w.add_argument("--connect-timeout", type=positive_float, default=15.0, help="seconds to wait for the broker at start")


def _add_service_commands(command) -> None:
    """serve, keys: the HTTP service over this data dir and its API keys."""
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
    _shard_options(sv)
    sv.add_argument("--advertise", default=None, metavar="URL",
                    help="the URL other nodes reach this one at (Kafka log; default http://HOST:PORT)")

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


def _shard_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--partitions", dest="shard_partitions", default=None, metavar="LIST",
                        help="Kafka log: fold only these partitions, such as 0,1, or K/N: those with p %% N == K "
                             "(a shard node; default: all)")
    parser.add_argument("--group", dest="shard_group", default=None, metavar="GROUP",
                        help="Kafka log: share the partitions with the other nodes of this consumer group "
                             "(a shard node; 'default' names memfold-projector.TOPIC)")
    parser.add_argument("--session-timeout", type=positive_float, default=10.0,
                        help="with --group: seconds before a dead node's partitions go to the others (default 10)")


def shard_request(args: argparse.Namespace, partition_count: int) -> tuple[list[int] | None, str | None] | None:
    """Return ``(fixed partitions, group)`` when the command asks for a shard node, else None (a full replica).

    ``--partitions K/N`` is slice K of N: the partitions ``p`` with ``p % N == K`` (a StatefulSet pod passes
    its ordinal and the replica count, so each pod keeps the same partitions across restarts).
    """
    fixed = _partition_slice(args.shard_partitions, partition_count) if args.shard_partitions else None
    group = args.shard_group
    if group == "default":
        group = None
    if fixed is None and args.shard_group is None:
        return None
    if fixed is not None and args.shard_group is not None:
        raise ValidationError("pass either --partitions or --group, not both", field="partitions")
    return fixed, group


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code. Every error is one line on stderr.

    Run as the ``memfold`` command (``argv`` None), a command that folds the
    whole log (:data:`_BULK`) tunes its process's garbage collector
    (:func:`~memfold.core.runtime.tune_gc`). Under :func:`run` the collector
    is off while the code loads: a command of :data:`_QUICK` turns it back on
    once its engine is open (:func:`~memfold.cli.common.open_engine`), any
    other command before it starts.
    """
    if argv is None:
        # Files this process creates (DuckDB's WAL, replay namespaces, exports) hold plaintext or keys:
        # owner-only, whatever the shell's umask. The library leaves its caller's umask alone; the
        # data dir itself is 0700 either way.
        os.umask(0o077)
        without_httpx_cli()  # the memfold command's own process: httpx's command-line client is never run
    try:
        args = _parser().parse_args(argv)
        if args.command not in _QUICK:
            resume_gc()
        elif argv is None:
            # pydantic looks for plugins among every installed distribution's entry points before it builds
            # its first model (~5 ms of a command that takes ~0.3 s); a short command has no use for them.
            # A PYDANTIC_DISABLE_PLUGINS the user set (empty: load them all) is kept.
            os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
        if argv is None and args.command in _BULK:
            tune_gc()
        flag = "--url" if args.url else "MEMFOLD_URL"
        args.url = args.url or os.environ.get("MEMFOLD_URL") or None
        if args.url:
            from memfold.cli.remote import REMOTE, run_remote

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
        return _fail(f"internal error ({type(exc).__name__}: {one_line(str(exc))}); please report it", 1)


def run() -> NoReturn:
    """The ``memfold`` console script: :func:`main`, then end the process without CPython's teardown.

    Freeing every module and object of a process that loaded DuckDB, pydantic
    and the engine one by one takes ~40 ms, a tenth of a command, and keeps
    nothing. It is skipped only when nothing is left to finish: no other
    thread runs and no engine is open (what their exit handlers would do is
    done); logging and the standard streams are flushed first. Otherwise the
    process exits normally. The cyclic garbage collector is off until the
    command's code is loaded (:func:`~memfold.core.runtime.pause_gc`).
    """
    pause_gc()
    code = main()
    engines = sys.modules.get("memfold.engine.engine")
    if threading.active_count() > 1 or (engines is not None and engines.open_engines()):
        sys.exit(code)
    logging = sys.modules.get("logging")
    if logging is not None:  # its handlers' files: what its own exit handler would flush and close
        logging.shutdown()
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):  # the reader went away (memfold sql ... | head), or a stream is closed
        pass
    except OSError as exc:  # the output could not be written (a full disk): say so, as Python's own exit would not
        code = _fail(f"error: could not write the output: {exc.strerror or exc}", 1)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(code)


def _fail(message: str, code: int) -> int:
    from memfold.cli.render import terminal_safe

    print(f"memfold: {terminal_safe(one_line(message))}", file=sys.stderr)
    return code


# --------------------------------------------------------------------------- helpers


# --------------------------------------------------------------------------- commands


def cmd_append(args: argparse.Namespace) -> int:
    with open_engine(args, writing=True) as engine:
        position = engine.append_message(
            args.conversation, args.role, args.content, tenant_id=args.tenant, model_variant=args.model_variant,
            importance=args.importance, tool_call_id=args.tool_call_id, user_id=args.user,
        )
        if not args.no_wait and engine.role == "embedded":
            engine.wait_for(position)
            engine.wait_idle()
        if args.json:
            print_json({"partition": position.partition, "offset": position.offset})
        else:
            print(f"appended to {args.tenant}/{args.conversation} at {position}")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from memfold.cli.ingest import check_readable, ingest_file

    path = Path(args.file)
    check_readable(path)  # before the data dir is opened: a typo creates nothing
    refuse_errors_on_input(args.errors, args.file)  # before "w" truncates it
    errors = _open_errors_file(args.errors)
    try:
        with open_engine(args, writing=True) as engine:
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
    from memfold.cli.render import terminal_safe

    for rejection in report.rejected[:SHOWN_REJECTIONS]:
        print(f"memfold: line {rejection.line} rejected: {terminal_safe(one_line(rejection.reason))}", file=sys.stderr)
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
        print(f"memfold: {one_line(report.stopped)}", file=sys.stderr)
    return report.exit_code


def _open_errors_file(name: str | None):
    if name is None:
        return None
    try:
        return open(name, "w", encoding="utf-8")
    except OSError as exc:
        raise InputFileError(f"--errors {name}: cannot write it: {exc.strerror or exc}") from exc


def cmd_context(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        catch_up(engine)
        if args.user is None:  # with a user, a conversation not started yet is read as its first context
            require_conversation(engine, args.conversation, args.tenant)
        elif args.as_of:
            raise UsageError("--user reads today's user memory; --as-of reads a conversation's past without it")
        as_of = parse_as_of(args.as_of) if args.as_of else None
        messages = engine.context(
            args.conversation, budget=args.budget, query=args.query, tenant_id=args.tenant, as_of=as_of,
            user_id=args.user,
        )
    if args.json:
        print_json(shaped(args.format, messages, conversation_id=args.conversation).as_dict())
    else:
        from memfold.cli.render import print_context

        print_context(messages, title=f"context for {args.tenant}/{args.conversation}", budget=args.budget)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        catch_up(engine)
        require_conversation(engine, args.conversation, args.tenant)
        history = engine.history(args.conversation, tenant_id=args.tenant)
    if args.json:
        print_json(
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
        from memfold.cli.render import history_line

        for m in history:
            print(history_line(m.index, m.role, m.content))
    return 0


def cmd_summaries(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        catch_up(engine)
        require_conversation(engine, args.conversation, args.tenant)
        rows = engine.summaries(args.conversation, tenant_id=args.tenant, policy=args.policy)
    if args.json:
        print_json(rows)
    else:
        from memfold.cli.render import print_summaries

        print_summaries(rows)
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from memfold.projections.store import DuckDBProjectionStore

    if args.views:
        return cli_memory.print_views(args)
    if not args.query:
        raise ValidationError("give a SQL query, or --views to list the documented views", field="query")
    if args.snapshot:
        from memfold.engine.snapshots import require_current
        from memfold.projections.store import SnapshotReader

        reader = SnapshotReader(require_current(args.snapshot))  # no data dir, no lock: a plain copy
        try:
            return _print_rows(args, *reader.read_query(args.query))
        finally:
            reader.close()
    settings = settings_of(args)
    path = settings.projection_path()
    if args.replay:
        from memfold.engine.namespaces import Namespace, check_name, replays_dir

        space = Namespace.open(replays_dir(settings.data_dir) / check_name(args.replay))
        space.refuse_stale()
        path = space.store_path
    else:
        with open_engine(args) as engine:  # bring the projection up to date, then release the writer lock
            catch_up(engine)
    store = DuckDBProjectionStore(path, read_only=True)
    try:
        columns, rows = store.query(args.query)
    finally:
        store.close()
    return _print_rows(args, columns, rows)


def _print_rows(args: argparse.Namespace, columns: list[str], rows: list[tuple[Any, ...]]) -> int:
    if args.json:
        print_json([dict(zip(columns, r)) for r in rows])
    elif args.csv:
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows([[jsonable(v) for v in r] for r in rows])
    else:
        from memfold.cli.render import print_table

        print_table(columns, rows)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from memfold.core.events import json_schemas

    print_json(json_schemas())
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    with open_engine(args, read_only=False) as engine:  # the command that adds a policy or applies new settings
        started = time.perf_counter()
        engine.rebuild()
        events = engine.sql("SELECT count(*) FROM events")[1][0][0]
        calls = engine.worker.calls
    print(f"rebuilt the projection from {events} events in {time.perf_counter() - started:.2f}s; "
          f"{calls} summarizer call(s)")
    return 0


def cmd_project(args: argparse.Namespace) -> int:
    from memfold.engine.builders import bind_log
    from memfold.engine.engine import MemoryEngine
    from memfold.engine.sharding import open_shards

    settings = bind_log(settings_of(args))
    shard = shard_request(args, settings.partitions)
    if shard is not None and not settings.log_url().startswith("kafka://"):
        raise ValidationError("shard nodes run on a Kafka log: pass --log kafka://HOST:PORT", field="log")
    if shard is not None and shard[0] is None and args.until_caught_up:
        raise ValidationError("--until-caught-up needs a fixed --partitions list, not a group", field="group")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    fixed = shard[0] if shard is not None else None
    grouped = shard is not None and fixed is None
    # A group node owns nothing until the group assigns; a fixed list folds it from the start.
    with MemoryEngine(settings, role="projector", start=not args.until_caught_up,
                      partitions=[] if grouped else fixed) as engine:
        shards = None
        if fixed is not None:
            from memfold.streams.ownership import StaticPartitions

            StaticPartitions(fixed, engine.log.partition_count)  # refuses a list that does not fit the topic
        if grouped:
            import logging.config

            from memfold.engine.kafka_worker import logging_config

            logging.config.dictConfig(logging_config("INFO"))  # ownership changes, as a worker logs them
            shards = open_shards(engine, partitions=None, group=shard[1], directory=None,
                                 session_timeout=args.session_timeout)
            print(f"projector: shard node of {shards.description}", flush=True)
        started = time.perf_counter()
        try:
            if args.until_caught_up:
                while (engine.runner.run_once() or not engine.runner.caught_up()) and not stop.is_set():
                    pass  # a SIGTERM ends the catch-up after the batch in progress (positions are with the rows)
            else:
                while not stop.wait(args.status_every):
                    lag = _lag(engine)
                    print(f"projector: {settings.log_url()} -> {settings.projection_path()}, partitions "
                          f"{engine.runner.partitions}, lag {lag} events", flush=True)
        finally:
            if shards is not None:
                shards.close()
        events = engine.sql("SELECT count(*) FROM events")[1][0][0]
        lag = _lag(engine)
    print(f"projected {events} events from {settings.log_url()} into {settings.projection_path()} "
          f"in {time.perf_counter() - started:.2f}s; lag {lag}")
    return 0


def _lag(engine) -> int:
    return engine.runner.lag()  # of the partitions this node folds (all of them unless it is a shard node)


def cmd_worker(args: argparse.Namespace) -> int:
    import logging
    import logging.config

    from memfold.engine.builders import bind_log
    from memfold.engine.engine import MemoryEngine
    from memfold.engine.kafka_worker import PartitionWorker, logging_config, peak_rss_mb

    settings = bind_log(settings_of(args))
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


def _partition_slice(text: str, partition_count: int) -> list[int]:
    if "/" not in text:
        return _partition_list(text)
    k, _, n = text.partition("/")
    try:
        index, slices = int(k), int(n)
    except ValueError:
        raise ValidationError(f"--partitions K/N takes two numbers (slice K of N), got {text!r}",
                              field="partitions") from None
    if not 0 <= index < slices or slices > partition_count:
        raise ValidationError(f"--partitions {text}: K must be 0..N-1 and N at most the topic's {partition_count} "
                              "partitions", field="partitions")
    return [p for p in range(partition_count) if p % slices == index]


class _NoOwnership:
    def poll(self, timeout: float) -> set[int]:
        return set()

    def committed(self, positions: dict[int, int]) -> None:
        pass

    def close(self) -> None:
        pass


def _ownership(args: argparse.Namespace, settings, engine, fixed: list[int] | None, worker):
    from memfold.streams.ownership import ConsumerGroup, StaticPartitions

    if fixed is not None:
        return StaticPartitions(fixed, engine.log.partition_count)
    return ConsumerGroup(
        urlsplit(settings.log_url()).netloc, settings.topic, args.group or f"memfold-worker.{settings.topic}",
        session_timeout_s=args.session_timeout, timeout=args.connect_timeout, on_revoke=worker.release,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from memfold.cli.demo import run_demo

    return run_demo(Path(args.data_dir), budget=args.budget, config=args.config)


def cmd_serve(args: argparse.Namespace) -> int:
    from memfold.engine.builders import bind_log
    from memfold.service.limits import Limits
    from memfold.service.server import serve

    limits = Limits(max_body_bytes=args.max_body_bytes, max_batch=args.max_batch, rate=args.rate, burst=args.burst)
    settings = bind_log(settings_of(args))
    serve(settings, host=args.host, port=args.port, limits=limits, log_level=args.log_level,
          fold_process=not args.fold_in_process, shard=shard_request(args, settings.partitions),
          advertise=args.advertise, session_timeout=args.session_timeout)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from memfold.engine.builders import bind_log
    from memfold.service.keys import open_api_keys

    # With a Kafka log the keys are records on TOPIC.apikeys that every service replica reads.
    store = open_api_keys(bind_log(settings_of(args)), follow=False)
    try:
        if args.keys_command == "create":
            key, secret = store.create(args.tenant, args.role, args.name)
            if args.json:
                print_json({"key": secret, "key_id": key.key_id, "tenant_id": key.tenant_id, "role": key.role})
            else:
                print(secret)
                print(f"key {key.key_id}: tenant {key.tenant_id}, role {key.role} (the key is shown once; store it now)",
                      file=sys.stderr)
        elif args.keys_command == "list":
            keys = store.list()
            if args.json:
                print_json([{"key_id": k.key_id, "tenant_id": k.tenant_id, "role": k.role, "name": k.name,
                              "created_at": k.created_at, "revoked_at": k.revoked_at} for k in keys])
            else:
                from memfold.cli.render import print_table

                print_table(["key_id", "tenant", "role", "name", "created", "revoked"],
                            [(k.key_id, k.tenant_id, k.role, k.name or "", k.created_at, k.revoked_at or "") for k in keys])
        else:
            key = store.revoke(args.key_id)
            print(f"revoked key {key.key_id} (tenant {key.tenant_id}, role {key.role}) at {key.revoked_at}")
    finally:
        store.close()
    return 0


# Commands that fold the whole log in one go: measured faster with a rarely running collector (replay of
# 20,000 messages from the cache 6,329 -> 8,031 msg/s). Long-running processes (serve, worker) keep
# CPython's defaults: no gain was measured there.
_BULK = ("replay", "rebuild", "verify")
# One short engine session each: the garbage collector stays off until the engine is open (main, run).
_QUICK = frozenset({"context", "append", "history", "summaries", "sql"})

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
    **cli_portability.COMMANDS,
    **cli_diff.COMMANDS,
    "serve": cmd_serve,
    "keys": cmd_keys,
}

if __name__ == "__main__":  # pragma: no cover
    run()
