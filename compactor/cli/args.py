"""The arguments the ``compactor`` sub-commands and the spark-submit jobs share, their
validation into :class:`~compactor.maintenance.options.MaintenanceOptions`, and the one place
where an error becomes an exit code and a message (:func:`run_guarded`)."""

from __future__ import annotations

import argparse
import datetime
import io
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

import yaml

from compactor import progress
from compactor.cleaner.planning import ONE_TASK_KEYS
from compactor.cleaner.rewrite import WRITERS
from compactor.config import parse_assignment, parse_topic_assignment
from compactor.erasure.rules import ALL_TOPICS
from compactor.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    CompactorError,
    ConfigError,
    InternalError,
    first_line,
)
from compactor.log import storage
from compactor.maintenance.options import MaintenanceOptions, build_options
from compactor.retention import MIN_RETENTION_BYTES, MIN_RETENTION_MS


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help names it already or there
    is none to name (no value, a flag that is off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("default" in text or not action.option_strings
                or action.default in (None, False, [], argparse.SUPPRESS)):
            return text
        return text + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An argument parser whose help shows defaults (sub-command parsers inherit it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def complete(parser: argparse.ArgumentParser) -> None:
    """Shell completion (argcomplete): answers and exits when the shell asks, else nothing.
    Activate with ``eval "$(register-python-argcomplete compactor)"``."""
    import argcomplete

    argcomplete.autocomplete(parser)


def flag_value(text: str) -> bool:
    """A boolean option's value as schedulers render it (``True``/``False``, any case)."""
    value = {"true": True, "false": False}.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return value


LONG_MAX = 2**63 - 1
# How far ahead of this machine's clock --now-ms may lie without --allow-future-now: clock
# skew between hosts, not a mistyped digit (a `now` years ahead makes retention delete every
# segment and compaction drop every tombstone).
FUTURE_TOLERANCE_MS = 3_600_000


def clock_ms(text: str) -> int | None:
    """``--now-ms``: epoch milliseconds, or an ISO-8601 time with its offset
    (``2026-11-25T10:00:00Z``); empty (a scheduler's unset parameter) means the wall clock.

    Raises:
        argparse.ArgumentTypeError: anything else, a time without an offset (no naive times),
            or a value outside ``[0, 2**63-1]``.
    """
    value = text.strip()
    if not value or value == "None":
        return None
    try:
        ms = int(value)
    except ValueError:
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither epoch milliseconds nor an ISO-8601 time "
                "(2026-11-25T10:00:00Z)") from None
        if parsed.tzinfo is None:
            raise argparse.ArgumentTypeError(
                f"{text!r} has no UTC offset: add Z or +HH:MM (times are never guessed "
                "to be local)")
        ms = int(parsed.timestamp() * 1000)
    if not 0 <= ms <= LONG_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is outside [0, 2^63-1] epoch ms")
    return ms


def add_clock_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--now-ms`` of a command that deletes or rewrites, and the confirmation a time far
    ahead of the machine's clock needs."""
    parser.add_argument("--now-ms", type=clock_ms, default=None,
                        help=f"{what} in epoch ms or ISO-8601 with an offset, e.g. "
                             "2026-11-25T10:00:00Z (default or empty: wall clock)")
    parser.add_argument("--allow-future-now", action="store_true",
                        help="accept a --now-ms more than an hour ahead of this machine's "
                             "clock")
    parser.add_argument("--allow-past-now", action="store_true",
                        help="accept a --now-ms more than an hour before the newest record of "
                             "a partition the command changes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of the Spark commands (``compact``, ``plan``, ``run``) and their jobs."""
    add_config_arguments(parser)
    parser.add_argument("--master", default=None,
                        help="Spark master URL (default: spark-submit's, else local[*])")
    parser.add_argument("--writer", choices=WRITERS, default="native",
                        help="how executors decide and re-encode records: the numba kernels, "
                             "or the pure-Python reference (the same bytes, slower; runs "
                             "without numba)")
    parser.add_argument("--task-keys", type=int, default=ONE_TASK_KEYS, metavar="N",
                        help="a partition whose round has several groups is cleaned in one "
                             "task with one key table (64-128 bytes a key) while that table "
                             "holds at most N keys; beyond, the round goes through the "
                             "distributed offset map, and 0 sends every such round there "
                             f"(default {ONE_TASK_KEYS:,})")


def add_config_arguments(parser: argparse.ArgumentParser, *, compaction: bool = True) -> None:
    """Log dir, clock, topic configs and output format (every maintenance command;
    ``compaction``: one that compacts)."""
    parser.add_argument("log_dir", nargs="*", metavar="LOG_DIR",
                        help="the Kafka log dir(s) of one broker: paths every executor reaches "
                             "or s3://bucket/prefix (default: log.dirs of --server-properties)")
    add_clock_arguments(parser, "the round's clock")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="topic config for every topic (Kafka names); repeatable")
    parser.add_argument("--topic-config", action="append", default=[],
                        metavar="TOPIC:KEY=VALUE", help="topic config for one topic; repeatable")
    parser.add_argument("--config-json", default=None, metavar="JSON",
                        help='configs for every topic as a JSON object, e.g. '
                             '\'{"cleanup.policy": "compact,delete"}\' (schedulers)')
    parser.add_argument("--topic-configs", default=None, metavar="FILE",
                        help="YAML or JSON map: topic -> {config: value}")
    parser.add_argument("--topics", default=None, metavar="T1,T2",
                        help="only these topics (comma-separated; default: every topic)")
    add_cluster_arguments(parser, compaction=compaction)
    add_storage_arguments(parser)
    parser.add_argument("--state-dir", default=None,
                        help="append one row per partition to the runs Delta table there")
    add_report_arguments(parser)


def add_storage_arguments(parser: argparse.ArgumentParser, *, lease: bool = True) -> None:
    """How to reach object storage (every command that takes a log dir or a state dir);
    ``lease`` for the commands that hold a log dir."""
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="object-store setting, e.g. endpoint_url=http://127.0.0.1:8333 "
                             "(keys: " + ", ".join(sorted(storage.STORAGE_OPTIONS)) +
                             "); repeatable; credentials come from the AWS environment")
    if not lease:
        return
    parser.add_argument("--break-lease", action="store_true",
                        help="take an object-store log dir's lease even if another run holds "
                             "it (only after that run crashed)")


def configure_storage(args: argparse.Namespace) -> None:
    """Apply ``--storage-option`` and ``--break-lease`` to this process (and, through
    :func:`compactor.log.storage.portable`, to its executors).

    Raises:
        ConfigError: a malformed pair or an unknown key.
    """
    pairs = {}
    for item in getattr(args, "storage_option", None) or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--storage-option {item!r}: expected KEY=VALUE")
        pairs[key.strip()] = value.strip()
    storage.configure(storage.StorageSettings(
        options=pairs, break_lease=bool(getattr(args, "break_lease", False))))


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """How the report comes out (the commands that produce one)."""
    parser.add_argument("--json", action="store_true",
                        help="print the JSON report line instead of the human summary")
    parser.add_argument("--report-file", default=None, metavar="FILE",
                        help="also write the JSON report to FILE (with or without --json)")
    parser.add_argument("--metrics-file", default=None, metavar="FILE",
                        help="write the run's metrics to FILE in Prometheus' text format "
                             "(node_exporter's textfile collector: FILE ends in .prom)")
    parser.add_argument("--html-report", default=None, metavar="FILE",
                        help="write the report as one self-contained HTML page with charts "
                             "(bytes and records before/after, drops by reason, dirty ratio "
                             "against its threshold, deletions by reason, stage timeline)")


def add_metadata_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata-log-dir", default=None, metavar="DIR",
                        help="the directory holding __cluster_metadata-0 (Kafka's "
                             "metadata.log.dir; default: the log dir, when it holds one)")


def add_cluster_arguments(parser: argparse.ArgumentParser, *,
                          compaction: bool = False) -> None:
    """Where the cluster's own configs are (every command that decides by topic configs);
    ``compaction``: the commands that compact also take ``--allow-replica-divergence``."""
    add_metadata_argument(parser)
    if compaction:
        parser.add_argument("--allow-replica-divergence", action="store_true",
                            help="compact partitions whose ISR lacks one of their replicas "
                                 "(by default left alone: the missing replica may still "
                                 "need the tombstones and markers a round removes)")
    parser.add_argument("--server-properties", default=None, metavar="FILE",
                        help="the broker's static server.properties (log.* broker defaults)")
    parser.add_argument("--assume-kafka-defaults", action="store_true",
                        help="state that the broker sets no log.* config and, without a "
                             "metadata log, that no topic overrides any (Kafka's defaults: "
                             "cleanup.policy=delete, retention.ms 7 days; its internal topics "
                             "as Kafka creates them)")
    parser.add_argument("--assume-committed", action="store_true",
                        help="a partition without a replication-offset-checkpoint entry counts "
                             "as committed up to its log end (an archive whose checkpoints "
                             "were not copied); by default its high watermark is 0, as a "
                             "broker loads it, and nothing above it is deleted or cleaned")
    parser.add_argument("--kafka-version", default=None, metavar="X.Y",
                        help="the Kafka release (4.1-4.4) that serves this log dir, whose "
                             "rules to follow; by default the broker's registration in the "
                             "metadata log, else the oldest release the cluster's "
                             "metadata.version allows (no metadata log: 4.1)")


def now_ms(args: argparse.Namespace) -> int:
    """``--now-ms``, or the wall clock when it is not given.

    Raises:
        ConfigError: on a command that deletes or rewrites, a ``--now-ms`` more than an hour
            ahead of this machine's clock without ``--allow-future-now``.
    """
    wall = int(time.time() * 1000)
    if args.now_ms is None:
        return wall
    if hasattr(args, "allow_future_now") and not args.allow_future_now \
            and args.now_ms > wall + FUTURE_TOLERANCE_MS:
        ahead = (args.now_ms - wall) / 86_400_000
        raise ConfigError(
            f"--now-ms {args.now_ms} lies {ahead:.1f} days ahead of this machine's clock: "
            "retention would delete, and compaction drop tombstones, as if that time had come",
            remedy="check the value (epoch milliseconds, or an ISO-8601 time such as "
                   "2026-11-25T10:00:00Z); pass --allow-future-now if you mean it; nothing "
                   "was changed")
    return args.now_ms


def optional_path(value: str | None) -> str | None:
    """An optional path argument made absolute (executors run elsewhere)."""
    return storage.absolute(value) if value else None


def log_dirs_of(args: argparse.Namespace) -> list[str]:
    """The log dirs a command runs on: those given, else every one of ``log.dirs`` (else
    ``log.dir``) in ``--server-properties``, as the broker itself would load them.

    Raises:
        ConfigError: none given and no ``--server-properties`` naming any.
    """
    from compactor.log.layout import check_directory_ids, server_log_dirs

    given = args.log_dir if isinstance(args.log_dir, list) else [args.log_dir]
    props_path = getattr(args, "server_properties", None)
    if given and given != [None]:
        # the broker's other log dirs too: one of them may be a copy of a given one
        check_directory_ids([*given, *(server_log_dirs(props_path) if props_path else [])])
        return list(given)
    if props_path:
        dirs = server_log_dirs(props_path)
        if dirs:
            check_directory_ids(dirs)
            return dirs
        raise ConfigError("server.properties names no log.dirs (nor log.dir)",
                          path=props_path, remedy="give the log dirs on the command line")
    raise ConfigError("no log dir given", remedy="name the log dir(s), or give the broker's "
                                                 "--server-properties to take its log.dirs")


def _one_log_dir(args: argparse.Namespace) -> str:
    """The log dir of options parsed for one (a command over several runs one at a time)."""
    dirs = log_dirs_of(args)
    if len(dirs) != 1:
        raise ConfigError(f"{len(dirs)} log dirs where one is expected",
                          remedy="run the command over the broker's log dirs, one at a time")
    return dirs[0]


def options_from_args(args: argparse.Namespace, *, dry_run: bool = False) -> MaintenanceOptions:
    """Validate the config arguments into :class:`MaintenanceOptions`.

    Raises:
        ConfigError: malformed ``KEY=VALUE``, unreadable or malformed ``--topic-configs``.
    """
    config_all = {}
    if getattr(args, "config_json", None):
        try:
            loaded = json.loads(args.config_json)
        except ValueError as err:
            raise ConfigError(f"--config-json is not JSON: {err}") from None
        if not isinstance(loaded, dict):
            raise ConfigError("--config-json must be a JSON object {config: value}")
        config_all.update({str(k): str(v) for k, v in loaded.items()})
    config_all.update(parse_assignment(a) for a in args.config)
    topics: dict[str, dict[str, str]] = {}
    if args.topic_configs:
        try:
            loaded = yaml.safe_load(storage.read_text(args.topic_configs))
        except yaml.YAMLError as err:
            raise ConfigError(f"--topic-configs is not valid YAML/JSON: {err}",
                              path=args.topic_configs) from None
        if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
            raise ConfigError("--topic-configs must map topic names to {config: value} maps",
                              path=args.topic_configs)
        for topic, cfg in loaded.items():
            topics.setdefault(str(topic), {}).update({str(k): str(v) for k, v in cfg.items()})
    for item in args.topic_config:
        topic, key, value = parse_topic_assignment(item)
        topics.setdefault(topic, {})[key] = value
    selected = frozenset(t for t in (getattr(args, "topics", None) or "").split(",") if t)
    return build_options(
        _one_log_dir(args), now_ms=now_ms(args), config_all=config_all, config_topics=topics,
        dry_run=dry_run or getattr(args, "dry_run", False), topics=selected,
        assume_kafka_defaults=getattr(args, "assume_kafka_defaults", False),
        assume_committed=getattr(args, "assume_committed", False),
        kafka_version=getattr(args, "kafka_version", None),
        allow_replica_divergence=getattr(args, "allow_replica_divergence", False),
        metadata_log_dir=optional_path(getattr(args, "metadata_log_dir", None)),
        server_properties=optional_path(getattr(args, "server_properties", None)),
        writer=getattr(args, "writer", "native"),
        task_keys=getattr(args, "task_keys", ONE_TASK_KEYS),
        check_past_now=(getattr(args, "now_ms", None) is not None
                        and not getattr(args, "allow_past_now", True)))


def add_erase_arguments(parser: argparse.ArgumentParser, *, apply: bool) -> None:
    """The arguments of ``erase apply`` (``apply``) and ``erase verify``, and of
    ``jobs/erase.py``. Both read the cluster's configs: the compacted-topic rule and tiered
    storage depend on them."""
    parser.add_argument("log_dir", nargs="*", metavar="LOG_DIR",
                        help="the Kafka log dir(s) of one broker (default: log.dirs of "
                             "--server-properties)")
    parser.add_argument("--state-dir", required=True,
                        help="directory of the ledger's Delta tables (outside the log dir)")
    add_clock_arguments(parser, "the clock")
    parser.add_argument("--master", default=None, help="Spark master URL")
    add_report_arguments(parser)
    add_cluster_arguments(parser)
    add_storage_arguments(parser)
    parser.add_argument("--writer", choices=WRITERS, default="native",
                        help="how executors read the records: the numba kernels (keys and "
                             "headers digested by libcrypto in the kernel), or the pure-Python "
                             "reference (the same matches, slower; runs without numba)")
    if apply:
        parser.add_argument("--exclude-pending-deletes", action="store_true",
                            help="scan -delete and -stray copies but do not rewrite them: "
                                 "their matches are reported as residual copies")
        parser.add_argument("--dry-run", action="store_true",
                            help="scan and report what would be rewritten; change nothing")
        parser.add_argument("--remote", action="store_true",
                            help="the remote step (tiered storage, KIP-405), with the cluster "
                                 "running: rewrite the remote segments of tiered topics that "
                                 "hold a subject, through the cluster (--bootstrap-server) and "
                                 "the broker's RemoteStorageManager; the log dir is only read, "
                                 "its local segments are the step without --remote's")
        parser.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT",
                            help="a listener of the cluster, for --remote")


def add_retention_arguments(parser: argparse.ArgumentParser) -> None:
    """The retention flags shared by ``retain`` and ``run``."""
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be deleted, delete nothing")
    parser.add_argument("--allow-aggressive-retention", action="store_true",
                        help=f"allow retention.ms < {MIN_RETENTION_MS} or retention.bytes < "
                             f"{MIN_RETENTION_BYTES}")


def add_recover_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``recover`` and of ``jobs/recover.py``."""
    parser.add_argument("log_dir", help="a log dir or one partition directory")
    parser.add_argument("--dry-run", action="store_true", help="print what would change")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.add_argument("--report-file", default=None, metavar="FILE",
                        help="also write the JSON outcome to FILE (schedulers)")
    add_storage_arguments(parser)


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``erase status`` and of ``jobs/erase.py status``."""
    parser.add_argument("--state-dir", required=True, help="the ledger's directory")
    parser.add_argument("--now-ms", type=clock_ms, default=None,
                        help="the clock in epoch ms or ISO-8601 (default: wall clock)")
    parser.add_argument("--json", action="store_true", help="print the JSON result")
    parser.add_argument("--report-file", default=None, metavar="FILE",
                        help="also write the JSON result to FILE (schedulers)")
    parser.add_argument("--metrics-file", default=None, metavar="FILE",
                        help="write the overdue and total request counts to FILE in "
                             "Prometheus' text format")
    add_storage_arguments(parser)


def add_verbosity_arguments(parser: argparse.ArgumentParser) -> None:
    """``-q`` and ``-v`` (every command and job)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true",
                       help="print only errors (the JSON report still, with --json)")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="show Spark's own logging (its default log4j profile, WARN and up) "
                            "instead of errors only")
    parser.add_argument("--progress", choices=[m.value for m in progress.Mode],
                        default=progress.Mode.AUTO.value,
                        help="progress on stderr: a live bar (stage, tasks done/total, bytes, "
                             "ETA), a line per finished step, or none; -q turns it off "
                             "(default: auto, a bar on a terminal, lines otherwise)")


# The arguments that name a file a command writes for the user.
OUTPUT_FILE_ARGUMENTS = ("report_file", "metrics_file", "html_report", "html")


def check_output_files(args: argparse.Namespace) -> None:
    """Every output file the command will write can be written: checked before it changes
    anything, so that a typo in a path never ends a run after segments were deleted.

    Raises:
        ConfigError: naming the option, the path and why.
    """
    for name in OUTPUT_FILE_ARGUMENTS:
        path = getattr(args, name, None)
        if not path or not isinstance(path, str):
            continue
        problem = storage.output_problem(storage.absolute(path))
        if problem is not None:
            raise ConfigError(f"--{name.replace('_', '-')} {path}: {problem}", path=path,
                              remedy="name a file in an existing, writable directory; "
                                     "nothing was changed")


def _write_error_report(args: argparse.Namespace, error_line: dict[str, Any]) -> None:
    """A failed command's ``--report-file`` holds its error (code, exit code, location,
    remedy), so a scheduler can tell a lock or a storage hiccup from bad input."""
    report_file = getattr(args, "report_file", None)
    if not report_file:
        return
    try:
        storage.write_output(storage.absolute(report_file),
                             (json.dumps(error_line, separators=(",", ":")) + "\n").encode())
    except Exception:  # noqa: BLE001 - the error itself is reported on stderr regardless
        pass


def _same_stream(a: TextIO, b: TextIO) -> bool:
    """Whether two streams write to the same file or pipe (``False`` when either has no
    file descriptor, as a captured stream)."""
    try:
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _progress_mode(args: argparse.Namespace) -> progress.Mode:
    """``--progress`` (``auto``: a bar on a terminal, lines otherwise), except that with
    ``--json`` progress lines never share the JSON's stream: spark-submit merges the driver's
    stderr into its stdout (``PythonRunner``), where a reader expects the report alone."""
    mode = progress.Mode(getattr(args, "progress", progress.Mode.AUTO))
    if (mode == progress.Mode.AUTO and getattr(args, "json", False) and not sys.stderr.isatty()
            and _same_stream(sys.stdout, sys.stderr)):
        return progress.Mode.OFF
    return mode


def run_main(name: str, parser: argparse.ArgumentParser,
             execute: Callable[[argparse.Namespace, TextIO], int],
             argv: Sequence[str] | None) -> int:
    """The ``main`` of a job: parse, execute, and turn a :class:`CompactorError` into one JSON
    error line, a message on stderr and the error's exit code."""
    add_verbosity_arguments(parser)
    complete(parser)
    args = parser.parse_args(argv)
    code = run_guarded(name, execute, args, json_line=True)
    if argv is None:  # the job's process (spark-submit's Python) exits next
        exit_process(code)
    return code


def exit_process(code: int) -> NoReturn:
    """End the process with ``code`` once the command's outcome is reported, without the
    interpreter's teardown.

    delta-rs and Arrow start native thread pools (the Delta scan's Arrow scanner, the Rust
    runtime) that still run while Python finalizes its modules; their C++ destructors then
    race the interpreter's, and libstdc++ aborts the process ("terminate called without an
    active exception", SIGABRT, exit 134) after the command succeeded, rarely on an idle
    machine and often under load. The teardown has nothing left to do: reports are written,
    the ledger committed, locks are descriptors the kernel releases, pyspark's JVM ends when
    its stdin pipe closes (``java_gateway.launch_gateway``). Also, Python's exit restores
    SIGINT's default action, so a Ctrl-C during it used to kill a finished command with no
    word. So: flush, and ``_exit``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader went away (| head) or the stream closed
            pass
    os._exit(code)


def run_guarded(name: str, execute: Callable[[argparse.Namespace, TextIO], int],
                args: argparse.Namespace, *, json_line: bool) -> int:
    """Run a command; a :class:`CompactorError` (or any exception not expected, as an
    :class:`~compactor.errors.InternalError`) becomes a JSON error line on stdout (with
    ``json_line``), one message on stderr and the error's exit code: no command ends with a
    traceback (``COMPACTOR_DEBUG=1`` prints it for bug reports). Ctrl-C ends with one line
    saying what state the log dir is in (exit 130); a reader that goes away (``| head``) ends
    it quietly (exit 141). ``-q`` keeps everything but errors and ``--json`` output off
    stdout; ``-v`` lets Spark log."""
    if getattr(args, "verbose", False):
        from compactor.spark.session import set_verbose

        set_verbose(True)
    else:
        # py4j logs "closing down clientserver connection" at exit, and through the root
        # logger the tracebacks of the calls a Ctrl-C interrupts; a root handler of our own
        # keeps logging from installing its stderr default for them
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        if not logging.getLogger().handlers:
            logging.getLogger().addHandler(logging.NullHandler())
    quiet = getattr(args, "quiet", False)
    progress.configure(progress.Mode.OFF if quiet else _progress_mode(args))
    out: TextIO = sys.stdout
    if quiet and not json_line:
        out = io.StringIO()
    try:
        configure_storage(args)
        check_output_files(args)
        return int(execute(args, out))
    except KeyboardInterrupt:
        if "pyspark" in sys.modules:  # a JVM may be starting: it ignores the SIGINT
            from compactor.spark.session import stop_child_processes

            stop_child_processes()
        print(f"{name}: interrupted. Nothing half-done is left in place: each partition is "
              f"as it was or fully swapped; leftovers (.cleaned files, an unfinished swap) "
              f"are resolved by the next run or `compactor recover LOG_DIR`.",
              file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        storage.discard_stdout(sys.stdout.fileno())  # nobody reads any more: say nothing
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # noqa: BLE001 - the one place every failure is turned into a message
        if isinstance(exc, CompactorError):
            err = exc
        else:
            if os.environ.get("COMPACTOR_DEBUG"):
                traceback.print_exc()
            err = InternalError(f"unexpected {type(exc).__name__}: {first_line(exc)}")
        sys.stdout.flush()
        error_line = {"type": "error", **err.to_dict(), "exit_code": err.exit_code}
        _write_error_report(args, error_line)
        if json_line:
            print(json.dumps({"type": "error", **err.to_dict()}), flush=True)
        print(f"{name}: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    finally:
        progress.configure(progress.Mode.OFF)  # a caller in the same process gets none


def add_rolling_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``compactor rolling`` and of ``jobs/rolling.py``."""
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="the rolling plan (YAML): bootstrap_servers, and per broker its "
                             "name, node_id, server_properties and stop/start commands")
    parser.add_argument("--broker", action="append", default=[], metavar="NAME",
                        help="roll only this broker of the plan (repeatable; default: all, "
                             "in the plan's order)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the plan and the cluster's health and list what each "
                             "broker's roll would run; stop nothing")
    add_clock_arguments(parser, "the maintenance commands' clock")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--report-file", default=None, metavar="FILE",
                        help="also write the JSON report to FILE (schedulers)")


def add_optimize_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``compactor optimize`` and of ``jobs/optimize.py``."""
    parser.add_argument("--state-dir", required=True, help="the ledger's and runs' directory")
    parser.add_argument("--retain-hours", type=int, default=720,
                        help="vacuum keeps the files of every version younger than this "
                             "(time travel, VERSION AS OF, reaches that far back)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list what vacuum would delete; change nothing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--report-file", default=None, metavar="FILE",
                        help="also write the JSON result to FILE (schedulers)")
    add_storage_arguments(parser, lease=False)


def add_change_arguments(parser: argparse.ArgumentParser, action: str) -> None:
    """The arguments of ``erase retry`` and ``erase cancel`` (``action``)."""
    parser.add_argument("request_ids", nargs="+", metavar="REQUEST_ID",
                        help="the requests (see `compactor erase list`)")
    parser.add_argument("--state-dir", required=True, help="the ledger's directory")
    parser.add_argument("--reason", required=action == "cancel", default=None,
                        help="why (in the ledger's audit trail" + (
                            "; required)" if action == "cancel" else ")"))
    parser.add_argument("--now-ms", type=clock_ms, default=None,
                        help="the time recorded (epoch ms or ISO-8601; default: now)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--report-file", default=None, metavar="FILE",
                        help="also write the JSON result to FILE (schedulers)")
    add_storage_arguments(parser, lease=False)


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``erase request`` and of ``jobs/erase.py request``."""
    parser.add_argument("--state-dir", required=True,
                        help="the ledger's directory (not in a log dir)")
    parser.add_argument("--topic", required=True,
                        help=f"topic, or {ALL_TOPICS!r} for every topic")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--key", help="the record key (UTF-8)")
    who.add_argument("--key-hex", help="the record key as hex bytes")
    who.add_argument("--key-sha256", metavar="HEX",
                     help="the SHA-256 digest of the record key's bytes (64 hex digits, as "
                          "`compactor erase digest` prints it): the subject never reaches "
                          "this command, its argv or a scheduler's database")
    who.add_argument("--keys-file", help="one UTF-8 key per line; one request per key (a file "
                                         "only the job reads: the keys stay off the argv)")
    who.add_argument("--header", metavar="NAME=VALUE",
                     help="records whose header NAME has the UTF-8 value VALUE")
    who.add_argument("--header-sha256", metavar="NAME=HEX",
                     help="records whose header NAME has a value with this SHA-256 digest")
    parser.add_argument("--reason", required=True,
                        help="why, or the ticket id (required: the ledger and the audit "
                             "proof keep it; never the subject itself)")
    parser.add_argument("--deadline-days", type=int, default=30,
                        help="days until the request is overdue (GDPR Art. 12(3): one month)")
    parser.add_argument("--request-id", default=None,
                        help="the id (default, or empty: derived from topic and subject digest)")
    parser.add_argument("--now-ms", type=clock_ms, default=None,
                        help="the request's time (epoch ms or ISO-8601; default: now)")
    parser.add_argument("--log-dir", default=None,
                        help="the log dir the request is for: its topic must exist there (or "
                             "in the cluster's metadata), and --state-dir must lie outside it")
    parser.add_argument("--server-properties", default=None, metavar="FILE",
                        help="the broker's server.properties: the topic must exist in one of "
                             "its log.dirs or in the cluster's metadata log (without this and "
                             "--log-dir: among the topics of the runs the state dir recorded)")
    parser.add_argument("--metadata-log-dir", default=None, metavar="DIR",
                        help="with --log-dir: the directory holding __cluster_metadata-0")
    parser.add_argument("--leave-tombstone", action="store_true",
                        help="key erasure on compacted topics: replace the key's last record "
                             "by a bare tombstone at its offset instead of removing it, so "
                             "downstream state stores learn of the delete (the key bytes stay "
                             "until it expires)")
    parser.add_argument("--json", action="store_true", help="print the requests as JSON")
    parser.add_argument("--report-file", default=None, metavar="FILE",
                        help="also write the JSON result to FILE (schedulers)")
    add_storage_arguments(parser, lease=False)
