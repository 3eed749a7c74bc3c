"""The maintenance commands as both the ``compactor`` sub-commands and the spark-submit jobs
(``jobs/*.py``) run them: one parser and one ``execute`` (parse, call
:mod:`compactor.maintenance`, render) per command.

    spark-submit jobs/compact.py LOG_DIR [--now-ms MS] [--config KEY=VALUE ...] [--dry-run]
    spark-submit jobs/retain.py  LOG_DIR [--now-ms MS] [--config KEY=VALUE ...] [--dry-run]
    spark-submit jobs/run.py     LOG_DIR [--now-ms MS] [--config KEY=VALUE ...] [--dry-run]
    spark-submit jobs/erase.py   apply|verify LOG_DIR --state-dir DIR [--now-ms MS] [--json]
    spark-submit jobs/erase.py   status --state-dir DIR [--now-ms MS] [--json]  (exit 1: overdue)
    spark-submit jobs/recover.py LOG_DIR [--dry-run] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

from compactor.cli.args import (
    Parser,
    add_arguments,
    add_change_arguments,
    add_config_arguments,
    add_erase_arguments,
    add_optimize_arguments,
    add_recover_arguments,
    add_request_arguments,
    add_retention_arguments,
    add_rolling_arguments,
    add_status_arguments,
    flag_value,
    log_dirs_of,
    now_ms,
    options_from_args,
    run_main,
)
from compactor.errors import EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, CompactorError, ConfigError
from compactor.human import human_bytes, human_time
from compactor.log import storage

Execute = Callable[[argparse.Namespace, TextIO], int]


def emit(out: TextIO, obj: Mapping[str, Any]) -> None:
    """One JSON object on one line."""
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")


def write_report_file(args: argparse.Namespace, result: Mapping[str, Any]) -> None:
    """``--report-file FILE``: the JSON result in one atomic write (schedulers read it)."""
    report_file = getattr(args, "report_file", None)
    if report_file:
        storage.write_output(storage.absolute(report_file),
                             (json.dumps(result, separators=(",", ":")) + "\n").encode())


def changed_by(result: Mapping[str, Any]) -> list[str]:
    """What a command's report says it changed on disk: its partitions cleaned, deleted from
    or rewritten (a ``run``'s two steps too), and the partitions recovery settled."""
    from compactor.maintenance.report import CHANGED

    reports = [result, *(result[k] for k in ("compaction", "retention")
                         if isinstance(result.get(k), Mapping))]
    changed = [line.get("dir") or f"{line.get('topic')}-{line.get('partition')}"
               for r in reports for line in r.get("partitions") or ()
               if line.get("status") in CHANGED]
    recovered = max((int(r.get("recovered_partitions") or 0) for r in reports), default=0)
    return list(dict.fromkeys(changed)) + ([f"{recovered} partition(s) recovered"]
                                           if recovered else [])


def render(out: TextIO, args: argparse.Namespace, result: Mapping[str, Any],
           summary: Callable[[], str], exit_code: int = EXIT_OK, *,
           changed: Sequence[str] | None = None,
           file_result: Mapping[str, Any] | None = None) -> int:
    """A command's report, and the command's exit code once its output files are written.

    The report goes to stdout first: with ``--json`` the JSON report line only, else the human
    summary only. Then the files: ``--metrics-file`` its metrics, ``--html-report`` its HTML
    page, last ``--report-file FILE`` the JSON report (in both modes, for schedulers and
    scripts; one atomic write). The paths were checked before the command changed anything
    (:func:`storage.output_problem`); a file that still fails (a full disk, ``/dev/full``, a
    path no check foresees) loses nothing: the report is already out, the file written last
    carries the failures in its ``log_dir_errors``, and each failure is one more line (stderr;
    with ``--json`` also an ``output_error`` line on stdout) saying whether the changes stand.
    Such a failure after changes exits 6 (partial), before any change with its own code.
    ``changed``: what the command changed, when its report does not say it in partition lines
    (the ledger's rows, a recovery's directories); ``file_result``: what ``--report-file``
    holds when it is more than the line on stdout."""
    if args.json:
        emit(out, result)
    else:
        out.write(summary() + "\n")
    out.flush()
    failures: list[dict[str, Any]] = []
    changed = list(changed) if changed is not None else changed_by(result)

    def attempt(option: str, path: str, data: Callable[[], bytes]) -> None:
        try:
            storage.write_output(storage.absolute(path), data())
        except CompactorError as err:
            failures.append({**err.with_remedy(
                (f"the changes stand ({', '.join(changed[:5])}"
                 f"{', ...' if len(changed) > 5 else ''}): the report on stdout says what "
                 f"was changed; free the disk or fix the path for the next run"
                 if changed else "nothing was changed; fix the path and run again")).to_dict(),
                "step": f"write {option}", "changed": changed, "exit_code": err.exit_code})

    if getattr(args, "metrics_file", None):
        from compactor.maintenance import metrics

        attempt("--metrics-file", args.metrics_file, lambda: metrics.text(
            metrics.registry_of(result, finished_at_s=time.time())))
    if getattr(args, "html_report", None):
        from compactor.maintenance import html_report

        attempt("--html-report", args.html_report,
                lambda: html_report.render(result).encode())
    if getattr(args, "report_file", None):
        whole = result if file_result is None else file_result
        final = ({**whole, "log_dir_errors": [*whole.get("log_dir_errors", []), *failures]}
                 if failures else whole)
        attempt("--report-file", args.report_file,
                lambda: (json.dumps(final, separators=(",", ":")) + "\n").encode())
    for failure in failures:
        if args.json:
            emit(out, {"type": "output_error", **failure})
        print(f"compactor: OUTPUT FILE NOT WRITTEN ({failure['step']}): {failure['message']} "
              f"({failure['path']}); remedy: {failure['remedy']}", file=sys.stderr)
    if not failures:
        return exit_code
    return EXIT_PARTIAL if changed else failures[0]["exit_code"]


@dataclass(frozen=True)
class Job:
    """A spark-submit job: its name (for messages), parser and ``execute``."""

    name: str
    build_parser: Callable[[], argparse.ArgumentParser]
    execute: Execute

    def main(self, argv: Sequence[str] | None = None) -> int:
        return run_main(self.name, self.build_parser(), self.execute, argv)


# -- several log dirs of one broker ------------------------------------------------------------


def check_one_broker(log_dirs: Sequence[str]) -> None:
    """Log dirs run together must be one broker's: the same ``node.id`` and ``cluster.id``
    in every ``meta.properties`` that has them (Kafka refuses to start otherwise).

    Raises:
        ConfigError: naming the dir that differs.
    """
    from compactor.log.layout import read_meta_properties

    seen: dict[str, tuple[str, str]] = {}
    for d in log_dirs:
        meta = read_meta_properties(d)
        for key in ("node.id", "cluster.id"):
            if key in meta and key in seen and seen[key][0] != meta[key]:
                raise ConfigError(
                    f"log dir {d} has {key}={meta[key]}, log dir {seen[key][1]} has "
                    f"{key}={seen[key][0]}: they are not one broker's", path=d,
                    remedy="run each broker's log dirs separately; nothing was changed")
            if key in meta:
                seen.setdefault(key, (meta[key], d))


def _worst(codes: Sequence[int]) -> int:
    """One exit code for several log dirs: the first failure, else 6 when one was partial."""
    failures = [c for c in codes if c not in (EXIT_OK, EXIT_PARTIAL)]
    return failures[0] if failures else EXIT_PARTIAL if EXIT_PARTIAL in codes else EXIT_OK


@contextlib.contextmanager
def broker_log_dirs(args: argparse.Namespace, *, lock: bool = True) -> Iterator[list[str]]:
    """The command's log dirs (:func:`log_dirs_of`), absolute; several are checked to be one
    broker's and every one is locked for the whole block, as the broker locks them (one is
    locked by its command, as before); without ``lock`` (a step that only reads them while
    the broker runs) none is."""
    dirs = [storage.absolute(d) for d in log_dirs_of(args)]
    if len(dirs) == 1:
        yield dirs
        return
    files = [f for f in ("report_file", "metrics_file", "html_report") if getattr(args, f, None)]
    if files:
        raise ConfigError(f"--{files[0].replace('_', '-')} takes one log dir's report",
                          remedy="run each log dir on its own with it, or use --json (one "
                                 "report line per log dir)")
    check_one_broker(dirs)
    with contextlib.ExitStack() as stack:
        for d in dirs if lock else ():
            stack.enter_context(storage.log_dir_lock(d))
        yield dirs


def one_log_dir(args: argparse.Namespace, log_dir: str, out: TextIO,
                several: bool) -> argparse.Namespace:
    """``args`` for one of the log dirs (a header line names it in a human run over several)."""
    if several and not args.json:
        out.write(f"== {log_dir}\n")
    return argparse.Namespace(**{**vars(args), "log_dir": log_dir})


def over_log_dirs(execute: Execute) -> Execute:
    """``execute`` on each log dir of a broker (given, or ``log.dirs`` of
    ``--server-properties``), every one locked for the whole run; one report per log dir
    (``--json``: one line each), the worst exit code."""

    @functools.wraps(execute)
    def each(args: argparse.Namespace, out: TextIO) -> int:
        with broker_log_dirs(args) as dirs:
            return _worst([execute(one_log_dir(args, d, out, len(dirs) > 1), out)
                           for d in dirs])

    return each


# -- compact and plan -------------------------------------------------------------------------


class _DryRunParser(Parser):
    """Takes ``--dry-run=true|false`` (a scheduler's rendered boolean) besides the bare flag,
    which stays a flag: ``--dry-run LOG_DIR`` keeps LOG_DIR as the log dir."""

    FLAGS = ("--dry-run", "--plan-only")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        plain = []
        for arg in sys.argv[1:] if args is None else args:
            name, eq, value = arg.partition("=")
            if eq and name in self.FLAGS:
                try:
                    if flag_value(value):
                        plain.append(name)
                except argparse.ArgumentTypeError as err:
                    self.error(f"argument {name}: {err}")
                continue
            plain.append(arg)
        return super().parse_known_args(plain, namespace)


def compact_parser() -> argparse.ArgumentParser:
    parser = _DryRunParser(prog="jobs/compact.py",
                           description="One compaction round over a Kafka log dir.")
    add_arguments(parser)
    parser.add_argument("--dry-run", "--plan-only", dest="dry_run", action="store_true",
                        help="plan, change nothing (--plan-only: the same, for old scripts; "
                             "--dry-run=true|false for schedulers that always pass it)")
    return parser


def execute_compact(args: argparse.Namespace, out: TextIO, *, dry_run: bool = False) -> int:
    """``compact`` (``plan`` with ``dry_run``): run the round, print the report."""
    from compactor.maintenance import compact

    outcome = compact.perform(options_from_args(args, dry_run=dry_run), master=args.master,
                              state_dir=getattr(args, "state_dir", None))

    def summary() -> str:
        lines = [outcome.report.summary()]
        preview = [r for r in outcome.retention if r.plan is not None and r.plan.deleted]
        if preview:
            lines.append(f"retention preview, on {compact.RETENTION_BASIS}:")
        for r in preview:
            assert r.plan is not None
            lines.append(f"  {r.tp}: would delete {len(r.plan.deleted)} segments "
                         f"({human_bytes(r.plan.bytes_deleted)}), log start offset -> "
                         f"{r.plan.new_log_start_offset}")
        return "\n".join(lines)

    return render(out, args, outcome.result, summary, outcome.report.exit_code)


def execute_plan(args: argparse.Namespace, out: TextIO) -> int:
    return execute_compact(args, out, dry_run=True)


# -- retain and run ---------------------------------------------------------------------------


def retain_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="jobs/retain.py",
                    description="Kafka retention over a log dir.")
    add_config_arguments(parser, compaction=False)
    add_retention_arguments(parser)
    return parser


def execute_retain(args: argparse.Namespace, out: TextIO) -> int:
    from compactor.maintenance import retain

    opts = options_from_args(args)
    catalog = retain.prepare(opts, allow_aggressive=args.allow_aggressive_retention,
                             state_dir=args.state_dir)
    report, result = retain.perform(opts, catalog, state_dir=args.state_dir)
    return render(out, args, result, report.summary, report.exit_code)


def run_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="jobs/run.py",
        description="Compaction and retention over a Kafka log dir, per topic cleanup.policy.")
    add_arguments(parser)
    add_retention_arguments(parser)
    return parser


def execute_run(args: argparse.Namespace, out: TextIO) -> int:
    """Both steps; one report; the worse of the two exit codes."""
    from compactor.maintenance import run

    outcome = run.perform(options_from_args(args), master=args.master,
                          allow_aggressive=args.allow_aggressive_retention,
                          state_dir=args.state_dir)

    def summary() -> str:
        parts = [outcome.compaction.summary()] if outcome.compaction else []
        return "\n".join([*parts, outcome.retention.summary(hints=outcome.compaction is None)])

    return render(out, args, outcome.result, summary, outcome.exit_code)


# -- erase --------------------------------------------------------------------------------------


def erase_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="jobs/erase.py",
                    description="GDPR erasure over a Kafka log dir.")
    sub = parser.add_subparsers(dest="action", required=True)
    for name in ("apply", "verify"):
        p = sub.add_parser(name)
        add_erase_arguments(p, apply=name == "apply")
    add_status_arguments(sub.add_parser("status", help="exit 1 when a request is overdue"))
    add_request_arguments(sub.add_parser("request", help="record erasure requests in the "
                                                         "ledger (idempotent)"))
    for name, text in CHANGES.items():
        add_change_arguments(sub.add_parser(name, help=text), name)
    return parser


CHANGES = {"retry": "apply and verify failed requests again",
           "cancel": "withdraw requests, with a reason"}


def execute_erase(args: argparse.Namespace, out: TextIO) -> int:
    """``erase apply``, ``erase verify`` (over each log dir of the broker) and (the ledger
    only, no Spark) ``erase status`` and ``erase request``."""
    if args.action == "status":
        return execute_erase_status(args, out)
    if args.action == "request":
        return execute_erase_request(args, out)
    if args.action in CHANGES:
        return execute_erase_change(args, out)
    return _execute_erase_scan(args, out)


def _execute_erase_scan(args: argparse.Namespace, out: TextIO) -> int:
    """``erase apply`` / ``verify`` over each of the broker's log dirs; a verify over several
    exits by what the ledger says of its requests once every dir was scanned (the first dir
    alone leaves a request partially verified that the last completes)."""
    from compactor.maintenance import erase
    from compactor.maintenance.options import build_options

    reports = []
    written = []  # each log dir's exit code once its output files are written
    remote = getattr(args, "remote", False)
    if remote != bool(getattr(args, "bootstrap_server", None)):
        raise ConfigError("--remote and --bootstrap-server HOST:PORT (a listener of the "
                          "cluster, whose remote log metadata manager it updates) go together")
    with broker_log_dirs(args, lock=not remote) as dirs:
        for d in dirs:
            one = one_log_dir(args, d, out, len(dirs) > 1)
            report = erase.perform(
                one.action, build_options(
                    d, now_ms=now_ms(one), dry_run=getattr(one, "dry_run", False),
                    metadata_log_dir=one.metadata_log_dir,
                    server_properties=one.server_properties,
                    assume_kafka_defaults=one.assume_kafka_defaults,
                    assume_committed=getattr(one, "assume_committed", False),
                    kafka_version=getattr(one, "kafka_version", None), writer=one.writer),
                storage.absolute(one.state_dir), master=one.master,
                exclude_pending_deletes=getattr(one, "exclude_pending_deletes", False),
                remote_bootstrap=one.bootstrap_server if remote else None)
            written.append(render(out, one, report.to_dict(), report.summary,
                                  report.exit_code))
            reports.append(report)
    if len(reports) > 1 and args.action == "verify":
        # the ledger's word once every dir was scanned, and any output file that failed
        failed_files = [w for w, r in zip(written, reports, strict=True) if w != r.exit_code]
        return _worst([erase.verify_exit_code(storage.absolute(args.state_dir), reports),
                       *failed_files])
    return _worst(written)


def execute_erase_request(args: argparse.Namespace, out: TextIO) -> int:
    """``erase request``: record erasure requests in the ledger (idempotent by request id)."""
    from compactor.erasure import ledger
    from compactor.erasure.rules import ALL_TOPICS, KEY, is_internal_topic, new_requests
    from compactor.state import tables as state_tables

    state_tables.check_state_dir(args.state_dir, args.log_dir)
    # a mistyped --state-dir must not become a ledger nothing else reads (apply refuses it too)
    state_tables.require_ledger(args.state_dir)
    if is_internal_topic(args.topic) and not getattr(args, "quiet", False):
        print(f"warning: {args.topic} is an internal topic (Kafka's own state under binary "
              "keys): only records whose key or header matches exactly are erased, and its "
              "coordinator may rebuild state from what remains", file=sys.stderr)
    if args.topic != ALL_TOPICS:
        _check_request_topic(args)
    selector, header_name, digests = _request_subjects(args)
    if args.deadline_days < 0:
        raise ConfigError(f"--deadline-days {args.deadline_days} is negative")
    if args.leave_tombstone and selector != KEY:
        raise ConfigError("--leave-tombstone applies to key erasure only (--key, --key-hex, "
                          "--keys-file): a header names no key to leave a tombstone for")
    reason = (args.reason or "").strip()
    if not reason:
        raise ConfigError("--reason is empty: an erasure request needs its reason or ticket "
                          "id, which the ledger and the audit proof keep",
                          remedy="give --reason (say 'GDPR Art. 17, ticket PRIV-123'); "
                                 "nothing was recorded")
    requests = new_requests(topic=args.topic, digests=digests, selector=selector,
                            header_name=header_name, reason=reason,
                            now_ms=now_ms(args), deadline_days=args.deadline_days,
                            request_id=args.request_id or None,
                            leave_tombstone=args.leave_tombstone)
    added, existing = ledger.add_requests(
        args.state_dir, requests,
        {"action": "request", "request_ids": ",".join(r.request_id for r in requests)})
    result = {"type": "requests", "added": added,
              "existing": [e["request_id"] for e in existing], "existing_requests": existing}
    return render(out, args, result, lambda: "\n".join(
        [f"{rid} added" for rid in added] + [_existing_words(e, reason) for e in existing]),
        changed=[f"request {r} added" for r in added])


def _existing_words(row: Mapping[str, Any], reason: str) -> str:
    """What ``erase request`` says of a request filed before: it is left exactly as it was."""
    filed = datetime.fromtimestamp(row["requested_at_ms"] / 1000, timezone.utc)
    kept = (f"its reason stays {row['reason']!r}" if row.get("reason") and row["reason"] != reason
            else "unchanged")
    return (f"{row['request_id']} exists (filed {filed:%Y-%m-%d %H:%M} UTC, "
            f"{row['status']}): {kept}; a request is never edited: to change it, "
            f"`compactor erase cancel {row['request_id']} --reason ...` and file it again under "
            f"another --request-id")


def _request_subjects(args: argparse.Namespace) -> tuple[str, str | None, list[str]]:
    """The selector, header name and subject digests of ``erase request``'s arguments. A raw
    subject is digested here and goes no further; errors never repeat it.

    Raises:
        ConfigError: a malformed subject argument.
    """
    from compactor.erasure.rules import HEADER, KEY, parse_subject_digest, subject_digest

    def given(option: str, text: str) -> str:
        try:
            return parse_subject_digest(text)
        except ValueError as err:
            raise ConfigError(f"{option}: {err}") from None

    if args.key is not None:
        return KEY, None, [subject_digest(args.key.encode())]
    if args.key_hex is not None:
        try:
            return KEY, None, [subject_digest(bytes.fromhex(args.key_hex))]
        except ValueError:
            raise ConfigError("--key-hex is not hex (the value is not repeated here: it is "
                              "the subject)") from None
    if args.key_sha256 is not None:
        return KEY, None, [given("--key-sha256", args.key_sha256)]
    if args.keys_file is not None:
        digests = [subject_digest(line.encode())
                   for line in storage.read_text(args.keys_file).splitlines() if line]
        if not digests:
            raise ConfigError("--keys-file holds no key", path=args.keys_file)
        return KEY, None, digests
    option, text = ("--header", args.header) if args.header is not None \
        else ("--header-sha256", args.header_sha256)
    header_name, sep, value = text.partition("=")
    if not sep or not header_name:
        raise ConfigError(f"{option} is not NAME=VALUE (header {header_name!r})")
    digest = subject_digest(value.encode()) if option == "--header" else given(option, value)
    return HEADER, header_name, [digest]


def _check_request_topic(args: argparse.Namespace) -> None:
    """A request's topic must be one the cluster has, whenever the tool can know its topics: a
    typo would otherwise be applied and verified over nothing, or wait for ever. Known from,
    in order: ``--log-dir`` (its partitions, else the cluster's metadata log),
    ``--server-properties`` (every one of the broker's log dirs, else the metadata log where
    Kafka keeps it), else the topics of the runs recorded in the state dir (a state dir no run
    wrote yet knows none: the request is taken).

    Raises:
        ConfigError: the topic is not among them, with the closest name.
    """
    import difflib

    from compactor.cluster.catalog import build_catalog
    from compactor.log.layout import open_log_dir, server_log_dirs
    from compactor.state import runs as run_history

    if args.log_dir or args.server_properties:
        paths = ([storage.absolute(args.log_dir)] if args.log_dir else
                 [storage.absolute(d) for d in server_log_dirs(args.server_properties)])
        if not paths:
            raise ConfigError("the broker's properties name no log.dirs",
                              path=args.server_properties)
        dirs = [open_log_dir(p) for p in paths]
        present = {c.tp.topic for ld in dirs for c in ld.copies_of(lambda _: True)}
        if args.topic in present:
            return
        # raises with the closest existing name when the metadata does not have it either
        build_catalog(dirs[0], config_all={}, config_topics={}, named_topics=[args.topic],
                      metadata_log_dir=args.metadata_log_dir,
                      server_properties=args.server_properties and storage.absolute(
                          args.server_properties))
        return
    seen = run_history.run_topics(args.state_dir)
    if not seen or args.topic in seen:
        return
    close = difflib.get_close_matches(args.topic, sorted(seen), n=1)
    raise ConfigError(
        f"topic {args.topic!r} is in no run recorded in this state dir ({len(seen)} topics seen"
        + (f"; did you mean {close[0]!r}?)" if close else ")"),
        path=args.state_dir,
        remedy="check --topic; to check it against the cluster itself, give --log-dir or "
               "--server-properties (a topic created since the last run is found there); "
               "nothing was recorded")


def execute_erase_status(args: argparse.Namespace, out: TextIO) -> int:
    """``erase status``, for alerting: exit 1 when a request is overdue or failed, 6 when one
    is partially verified (a replica not scanned clean yet), else 0."""
    from compactor import native
    from compactor.erasure import ledger

    # a large ledger's integrity check by the native kernel, as an apply's (the same digests)
    result = ledger.status(args.state_dir, now_ms(args),
                           hasher_for=functools.partial(native.integrity_digests, "native"))
    if getattr(args, "metrics_file", None):
        from compactor.maintenance import metrics

        storage.write_output(storage.absolute(args.metrics_file), metrics.text(
            metrics.overdue_registry(result["overdue_count"], result["requests"],
                                     result["failed_count"])))
    write_report_file(args, result)
    if args.json:
        emit(out, result)
    else:
        out.write(f"{result['requests']} requests: " + ", ".join(
            f"{k} {v}" for k, v in result["by_status"].items()) + "\n")
        for o in result["overdue"]:
            out.write(f"OVERDUE {o['request_id']} ({o['topic']}, {o['status']}) by "
                      f"{o['overdue_ms'] // 3_600_000} h\n")
        for f in result["failed"]:
            out.write(f"FAILED {f['request_id']} ({f['topic']}): {f['reason']}"
                      f"; fix the cause, then `compactor erase retry {f['request_id']}`, or "
                      f"withdraw it with `compactor erase cancel {f['request_id']} --reason ...`\n")
        for p in result["partially_verified"]:
            missing = p["missing_replicas"]
            out.write(f"PARTIAL {p['request_id']} ({p['topic']}): clean at "
                      f"{', '.join(p['places_verified']) or 'no place'}; still to scan: "
                      + (f"{len(missing)} replicas, e.g. node {missing[0]['node_id']} "
                         f"{missing[0]['partition']}" if missing
                         else "unknown (no metadata log)") + "\n")
        shown = result["shown_at_most"]
        for kind in ("overdue", "failed", "partially_verified"):
            if result[f"{kind}_count"] > shown:
                out.write(f"... {result[f'{kind}_count'] - shown} more {kind.replace('_', ' ')} "
                          f"(the first {shown} by request time are shown; `erase list "
                          f"--json` has them all)\n")
    if result["overdue_count"] or result["failed_count"]:
        return EXIT_FAILURE
    return EXIT_PARTIAL if result["partially_verified_count"] else EXIT_OK


def execute_erase_change(args: argparse.Namespace, out: TextIO) -> int:
    """``erase retry`` (failed -> pending: the next apply and verify take it again) and
    ``erase cancel`` (withdrawn with a reason: no alert, never applied again); each one
    commit in the ledger's audit trail."""
    from compactor.erasure import ledger
    from compactor.erasure.status import CANCELLABLE, RETRYABLE, RequestStatus

    retry = args.action == "retry"
    if not retry and not (args.reason or "").strip():
        raise ConfigError("erase cancel needs --reason: why the request is withdrawn goes "
                          "into the audit trail")
    changed = ledger.change_status(
        storage.absolute(args.state_dir), args.request_ids, action=args.action,
        allowed=RETRYABLE if retry else CANCELLABLE,
        status=RequestStatus.PENDING if retry else RequestStatus.CANCELLED,
        reason=args.reason or None, now_ms=now_ms(args))
    result = {"type": "requests", "action": args.action, "changed": changed}
    return render(out, args, result, lambda: "\n".join(
        f"{r} {'pending again' if retry else 'cancelled'}" for r in changed),
        changed=[f"request {r} {args.action}" for r in changed])


# -- recover ------------------------------------------------------------------------------------


def job_parser(job: str, description: str,
               add: Callable[[argparse.ArgumentParser], None]) -> Callable[[], Parser]:
    """The parser factory of ``jobs/<job>.py``: its arguments added by ``add``."""

    def build() -> Parser:
        parser = Parser(prog=f"jobs/{job}.py", description=description)
        add(parser)
        return parser

    return build


recover_parser = job_parser("recover", "Recover interrupted swaps in a Kafka log dir.",
                            add_recover_arguments)


def execute_recover(args: argparse.Namespace, out: TextIO) -> int:
    from compactor.maintenance.recover import recover

    changed = failed = 0
    lines: list[dict[str, Any]] = []
    for r in recover(args.log_dir, dry_run=args.dry_run):
        if r.error is not None:
            failed += 1
            lines.append({"type": "recover", "partition_dir": r.partition_dir,
                          "status": "failed", "error": r.error.to_dict()})
            if args.json:
                emit(out, lines[-1])
            else:
                out.write(f"{r.partition_dir}: NOT recovered, left as it was: {r.error}\n")
            continue
        assert r.plan is not None
        if r.plan.is_empty:
            continue
        changed += 1
        lines.append({"type": "recover", "partition_dir": r.partition_dir,
                      "dry_run": args.dry_run, "deleted": list(r.plan.deletes),
                      "renamed": [list(x) for x in r.plan.renames]})
        if args.json:
            emit(out, lines[-1])
        else:
            verb = "would" if args.dry_run else "did"
            out.write(f"{r.partition_dir}: {verb} delete {len(r.plan.deletes)} and rename "
                      f"{len(r.plan.renames)} files\n")
    summary = {"type": "summary", "partitions_recovered": changed,
               "partitions_failed": failed, "dry_run": args.dry_run}
    return render(
        out, args, summary, lambda: (f"recover: {changed} partition(s) had leftovers of "
                                     f"interrupted swaps" + (f", {failed} could not be recovered"
                                                             if failed else "")),
        EXIT_PARTIAL if failed else EXIT_OK,
        changed=[] if args.dry_run else [line["partition_dir"] for line in lines
                                         if "renamed" in line],
        file_result={**summary, "partitions": lines})


# -- optimize ---------------------------------------------------------------------------------


optimize_parser = job_parser("optimize", "Compact and vacuum the state dir's Delta tables.",
                             add_optimize_arguments)


def execute_optimize(args: argparse.Namespace, out: TextIO) -> int:
    """``compactor optimize``: the state dir's tables compacted, vacuumed, checkpointed."""
    from compactor.state import tables as state_tables

    if args.retain_hours < 1:
        raise ConfigError(f"--retain-hours {args.retain_hours}: at least 1 (a writer's "
                          f"files of the last hour may not be committed yet)")
    state_dir = storage.absolute(args.state_dir)
    state_tables.require_state_tables(state_dir)
    tables = state_tables.optimize(state_dir, retention_hours=args.retain_hours,
                             dry_run=args.dry_run)
    result = {"type": "optimize", "state_dir": state_dir, "dry_run": args.dry_run,
              "tables": tables}
    write_report_file(args, result)
    if args.json:
        emit(out, result)
    else:
        for t in tables:
            out.write(f"{t['table']}: {t['files_before']} -> {t['files_after']} files "
                      f"(compacted {t['files_compacted']}), "
                      f"{'would vacuum' if args.dry_run else 'vacuumed'} "
                      f"{t['files_vacuumed']}; version {t['version']}\n")
    return EXIT_OK


# -- rolling ----------------------------------------------------------------------------------


rolling_parser = job_parser("rolling", "Rolling maintenance: one broker at a time, stopped, "
                                       "maintained, started and back in sync.",
                            add_rolling_arguments)


def execute_rolling(args: argparse.Namespace, out: TextIO) -> int:
    """``compactor rolling``: exit 0 when every broker rolled, 1 when a step failed (the
    broker it stopped was started again; no further broker was touched)."""
    from compactor.maintenance import rolling

    plan = rolling.load_plan(args.config)
    clock = [*(["--now-ms", str(now_ms(args))] if args.now_ms is not None else []),
             *(["--allow-past-now"] if args.allow_past_now else []),
             *(["--allow-future-now"] if args.allow_future_now else [])]

    def announce(text: str) -> None:
        if not args.json and not getattr(args, "quiet", False):
            print(text, file=sys.stderr, flush=True)

    report = rolling.roll(plan, clock=clock, only=args.broker, dry_run=args.dry_run,
                          announce=announce)
    report["exit_code"] = EXIT_OK if report["status"] == "ok" else EXIT_FAILURE
    write_report_file(args, report)
    if args.json:
        emit(out, report)
    else:
        for b in report["brokers"]:
            out.write(f"{b['name']} (node {b['node_id']}): {b['status']}\n")
            for step in b["steps"]:
                if step["status"] == "would_run":
                    out.write(f"  {step['step']}: would run: {step['command']}\n")
                    continue
                extra = step.get("problems") or step.get("lagging") or step.get("output") or ""
                if isinstance(extra, list):
                    extra = "; ".join(extra)
                out.write(f"  {step['step']}: {step['status']} ({step['seconds']} s)"
                          + (f": {extra}" if extra and step["status"] == "failed" else "")
                          + "\n")
        if report["not_started"]:
            out.write(f"not touched: {', '.join(report['not_started'])}\n")
        out.write(f"rolling: {report['status']}" + (" (dry run)" if args.dry_run else "")
                  + "\n")
    return int(report["exit_code"])


# -- history ----------------------------------------------------------------------------------


def execute_report(args: argparse.Namespace, out: TextIO) -> int:
    """``compactor report``: a recorded run as an HTML page."""
    from compactor.maintenance import html_report
    from compactor.maintenance.history import run_report

    report = run_report(storage.absolute(args.state_dir), args.run_id,
                        kind=getattr(args, "kind", "maintenance"))
    storage.write_output(storage.absolute(args.html), html_report.render(report).encode())
    parts = [report[k] for k in ("compaction", "retention") if report.get(k)] or [report]
    partitions = {(p["topic"], p["partition"]) for part in parts for p in part["partitions"]}
    out.write(f"wrote {args.html}: {report['command']} run {report['run_id']} "
              f"({len(partitions)} partitions)\n")
    return EXIT_OK


def execute_history(args: argparse.Namespace, out: TextIO) -> int:
    """``compactor history``: the runs recorded in the state dir, newest first."""
    from compactor.maintenance.history import history

    runs = history(storage.absolute(args.state_dir), limit=args.limit)
    if args.json:
        for run in runs:
            emit(out, {"type": "run", **run})
        return EXIT_OK
    out.write(f"{'started (UTC)':<20} {'command':<13} {'partitions':>10}  {'in':>10} "
              f"{'out':>10}  status  run id  log dir\n")
    for run in runs:
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(run["by_status"].items()))
        out.write(f"{human_time(run['started_at_ms'])[:19]:<20} {run['command']:<13} "
                  f"{run['partitions']:>10}  {human_bytes(run['bytes_in']):>10} "
                  f"{human_bytes(run['bytes_out']):>10}  {statuses}  {run['run_id']}  "
                  f"{run['log_dir']}\n")
    if not runs:
        out.write("no runs recorded yet (commands record them with --state-dir)\n")
    return EXIT_OK


COMPACT = Job("compact", compact_parser, over_log_dirs(execute_compact))
RETAIN = Job("retain", retain_parser, over_log_dirs(execute_retain))
RUN = Job("run", run_parser, over_log_dirs(execute_run))
ERASE = Job("erase", erase_parser, execute_erase)
ROLLING = Job("rolling", rolling_parser, execute_rolling)
OPTIMIZE = Job("optimize", optimize_parser, execute_optimize)
RECOVER = Job("recover", recover_parser, execute_recover)
