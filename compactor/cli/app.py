"""The ``compactor`` command.

Sub-commands of the foundation: ``inspect``, ``generate``, ``recover``. Every failure maps to
an exit code declared in :mod:`compactor.errors`; ``--json`` output is one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import compactor
from compactor import progress
from compactor.cli import jobs
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
    add_storage_arguments,
    add_verbosity_arguments,
    complete,
    exit_process,
    run_guarded,
)
from compactor.cluster.metadata import parse_snapshot_name
from compactor.codec.compression import Codec
from compactor.config import (
    SERVER_PROPERTIES,
    broker_layer,
    parse_assignment,
    parse_topic_assignment,
    resolve_topic_config,
)
from compactor.errors import (
    EXIT_FAILURE,
    EXIT_OK,
    ConfigError,
)
from compactor.human import human_time
from compactor.log import storage
from compactor.log.layout import (
    parse_partition_dir_name,
)
from compactor.tools.ops import dump_log
from compactor.tools.ops.generator import GeneratorConfig, generate
from compactor.tools.ops.inspect import INDEX_KINDS, Problem, dump_index_file, inspect_path


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="compactor",
        description="Offline compaction, retention and GDPR erasure for Kafka log directories.",
    )
    parser.add_argument("--version", action="version",
                        version=f"kafka-compactor {compactor.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    _add_state_commands(sub)
    _add_tools(sub)
    _add_maintenance_commands(sub)
    _add_operations(sub)
    _add_erase_commands(sub)
    for command in _leaf_parsers(parser):
        add_verbosity_arguments(command)
    _describe(parser)
    return parser


def _add_state_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """``history`` and ``report``: a state dir's recorded runs."""
    hi = sub.add_parser("history", help="the runs recorded in a state dir, newest first "
                                        "(like Delta's DESCRIBE HISTORY)")
    hi.add_argument("--state-dir", required=True, help="the ledger's directory")
    hi.add_argument("--limit", type=int, default=None, help="at most this many runs "
                                                            "(default: all)")
    hi.add_argument("--json", action="store_true", help="one JSON object per run")
    add_storage_arguments(hi, lease=False)
    hi.set_defaults(handler=jobs.execute_history)

    rp_ = sub.add_parser("report", help="a recorded run as a self-contained HTML page "
                                        "(from the runs table of a state dir)")
    rp_.add_argument("--state-dir", required=True, help="the ledger's directory")
    rp_.add_argument("--run-id", default=None,
                     help="the run (see compactor history; default: the newest of --kind)")
    rp_.add_argument("--kind", default="maintenance",
                     help="without --run-id, the newest run of this kind: maintenance (run, "
                          "compact or retain; the default), run, compact, retain, "
                          "erase_apply, erase_verify, or any")
    rp_.add_argument("--html", required=True, metavar="FILE", help="where to write the page")
    add_storage_arguments(rp_, lease=False)
    rp_.set_defaults(handler=jobs.execute_report)


def _add_tools(sub: argparse._SubParsersAction[Parser]) -> None:
    """``inspect`` and ``generate``: reading and writing log dirs by hand."""
    p = sub.add_parser("inspect", help="dump and verify segments (like kafka-dump-log)")
    p.add_argument("path", help="a .log segment, KRaft snapshot (.checkpoint), .index, "
                                "timeindex, .txnindex or producer .snapshot file, a partition "
                                "directory or a log dir")
    p.add_argument("--records", action="store_true",
                   help="print every record with its key and payload as well (kafka-dump-log's "
                        "--deep-iteration --print-data-log)")
    p.add_argument("--verify", action="store_true",
                   help="check CRCs, offsets, indexes and txn indexes; exit non-zero on problems")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    add_storage_arguments(p, lease=False)
    p.set_defaults(handler=_cmd_inspect)

    g = sub.add_parser("generate", help="write a realistic sample Kafka log dir")
    _add_generate_arguments(g)
    g.set_defaults(handler=_cmd_generate)


def _add_generate_arguments(g: argparse.ArgumentParser) -> None:
    """The arguments of ``generate`` (a sample log dir's shape)."""
    g.add_argument("out_dir", help="the log dir to create (must not exist or be empty)")
    g.add_argument("--topics", default="orders-v2,user-profiles",
                   help="comma-separated topic names (default: %(default)s)")
    g.add_argument("--partitions", type=int, default=2, help="partitions per topic")
    g.add_argument("--records", type=int, default=5000, help="records per partition")
    g.add_argument("--keys", type=int, default=500, help="distinct keys per partition")
    g.add_argument("--value-bytes", type=int, default=100, help="bytes per record value")
    g.add_argument("--segment-bytes", type=int, default=64 * 1024,
                   help="roll a segment past this size (the topic's segment.bytes)")
    g.add_argument("--max-batch-records", type=int, default=20,
                   help="most records a producer puts in one batch")
    g.add_argument("--tombstone-ratio", type=float, default=0.1,
                   help="share of keyed records that are tombstones (null value)")
    g.add_argument("--null-key-ratio", type=float, default=0.01,
                   help="share of records without a key")
    g.add_argument("--transactional-ratio", type=float, default=0.3,
                   help="share of producers that write in transactions")
    g.add_argument("--abort-ratio", type=float, default=0.3,
                   help="share of transactions that abort")
    g.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd",
                   help="comma-separated codecs producers choose from (default: %(default)s)")
    g.add_argument("--open-transaction", action="store_true",
                   help="leave one transaction open at the end of each partition")
    g.add_argument("--legacy-records", type=int, default=0,
                   help="write the first N records of each partition as v0/v1 messages")
    g.add_argument("--start-ms", type=int, default=GeneratorConfig.start_ms,
                   help="timestamp of the first record (epoch ms)")
    g.add_argument("--record-interval-ms", type=int, default=50,
                   help="mean time between records (ms)")
    g.add_argument("--seed", type=int, default=0,
                   help="random seed: the same seed writes the same bytes")
    g.add_argument("--topic-config", action="append", default=[], metavar="TOPIC:KEY=VALUE",
                   help="a topic config written to the metadata log as a ConfigRecord")
    g.add_argument("--internal-topics", default="__consumer_offsets",
                   help="Kafka internal topics to create with their creation configs "
                        "(comma-separated, may be empty; default: %(default)s)")
    g.add_argument("--no-metadata-log", action="store_true",
                   help="write no __cluster_metadata-0 (a log dir whose cluster is unknown)")
    g.add_argument("--server-properties", default=None, metavar="FILE",
                   help="also write the owning broker's server.properties to FILE (its "
                        "node.id and log.dirs, plus every --broker-config)")
    g.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a static broker config for --server-properties, e.g. "
                        "log.retention.hours=720")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")


def _add_maintenance_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """``recover``, ``compact``, ``plan``, ``retain`` and ``run``: a log dir's maintenance."""
    r = sub.add_parser("recover", help="resolve interrupted swaps as a Kafka broker's loader does")
    add_recover_arguments(r)
    r.set_defaults(handler=jobs.execute_recover)

    c = sub.add_parser("compact", help="one compaction round over a log dir, on Spark")
    add_arguments(c)
    c.set_defaults(handler=jobs.over_log_dirs(jobs.execute_compact))
    pl = sub.add_parser("plan", help="dry run of compact: ranges, dirty ratio, groups")
    add_arguments(pl)
    pl.set_defaults(handler=jobs.over_log_dirs(jobs.execute_plan))

    rt = sub.add_parser("retain", help="Kafka retention: delete old segments by time, size and "
                                       "log start offset")
    add_config_arguments(rt, compaction=False)
    add_retention_arguments(rt)
    rt.set_defaults(handler=jobs.over_log_dirs(jobs.execute_retain))
    rn = sub.add_parser("run", help="compaction and retention per topic cleanup.policy "
                                    "(what schedulers call)")
    add_arguments(rn)
    add_retention_arguments(rn)
    rn.set_defaults(handler=jobs.over_log_dirs(jobs.execute_run))


def _add_operations(sub: argparse._SubParsersAction[Parser]) -> None:
    """``cluster``, ``optimize`` and ``rolling``: running the tool and its state."""
    cl = sub.add_parser("cluster", help="start/stop a local Spark standalone cluster "
                                        "(master + workers) from the pyspark package")
    cl.add_argument("action", choices=("start", "stop", "status"), help="what to do")
    cl.add_argument("--dir", required=True, help="pids, logs and work dirs of the cluster")
    cl.add_argument("--workers", type=int, default=2, help="worker processes")
    cl.add_argument("--cores", type=int, default=1, help="cores per worker")
    cl.add_argument("--memory", default="1g", help="memory per worker")
    cl.set_defaults(handler=_cmd_cluster)

    op = sub.add_parser("optimize", help="compact and vacuum the state dir's Delta tables "
                                         "(the ledger's audit trail stays whole)")
    add_optimize_arguments(op)
    op.set_defaults(handler=jobs.execute_optimize)

    ro = sub.add_parser("rolling", help="rolling maintenance of a live cluster: each broker "
                                        "in turn stopped, maintained, started, back in sync")
    add_rolling_arguments(ro)
    ro.set_defaults(handler=jobs.execute_rolling)


def _add_erase_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """``erase`` and its sub-commands: requests, apply, verify, status, the proof."""
    er = sub.add_parser("erase", help="GDPR erasure: init, request, digest, apply, verify, "
                                      "status, list, retry, cancel, report")
    esub = er.add_subparsers(dest="erase_command", required=True)
    rq = esub.add_parser("request", help="record erasure requests in the ledger (idempotent)")
    add_request_arguments(rq)
    rq.set_defaults(handler=jobs.execute_erase_request)
    for name, help_text in (("apply", "erase every pending request's records (Spark)"),
                            ("verify", "rescan and mark applied requests verified (Spark)")):
        p = esub.add_parser(name, help=help_text)
        add_erase_arguments(p, apply=name == "apply")
        p.set_defaults(handler=jobs.execute_erase, action=name)
    st = esub.add_parser("status", help="requests by status; exit 1 when one is overdue or "
                                        "failed, 6 when one is partially verified")
    add_status_arguments(st)
    st.set_defaults(handler=jobs.execute_erase_status)
    for name, help_text in jobs.CHANGES.items():
        ch = esub.add_parser(name, help=help_text)
        add_change_arguments(ch, name)
        ch.set_defaults(handler=jobs.execute_erase_change, action=name)
    dg = esub.add_parser("digest", help="print the SHA-256 digest of each subject read from "
                                        "stdin (one per line), for --key-sha256: the subject "
                                        "stays off every command line")
    dg.set_defaults(handler=_cmd_erase_digest)
    ini = esub.add_parser("init", help="create the ledger (before the first request, so "
                                       "that status and the erasure DAG find one)")
    ini.add_argument("--state-dir", required=True, help="the ledger's directory")
    add_storage_arguments(ini, lease=False)
    ini.set_defaults(handler=_cmd_erase_init)
    ls = esub.add_parser("list", help="every request: id, topic, selector, status, deadline")
    ls.add_argument("--state-dir", required=True, help="the ledger's directory")
    ls.add_argument("--json", action="store_true", help="one JSON object per request")
    add_storage_arguments(ls, lease=False)
    ls.set_defaults(handler=_cmd_erase_list)
    rp = esub.add_parser("report", help="the audit proof of one request")
    rp.add_argument("--state-dir", required=True, help="the ledger's directory")
    rp.add_argument("--request-id", required=True, help="the request (see erase list)")
    rp.add_argument("--json", action="store_true", help="the proof as one JSON object")
    rp.add_argument("--html", default=None, metavar="FILE",
                    help="also write the proof as one self-contained HTML page for an auditor "
                         "(the request and its digest, every place with times, the runs per "
                         "partition, the ledger's commits, the deadline's outcome)")
    add_storage_arguments(rp, lease=False)
    rp.set_defaults(handler=_cmd_erase_report)




def _describe(parser: argparse.ArgumentParser) -> None:
    """Each sub-command's ``--help`` opens with what its parent's listing says of it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.description is None and helps.get(name):
                    sub.description = str(helps[name])
                _describe(sub)


def _leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every sub-command's parser, nested ones (``erase apply``) included."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                found += _leaf_parsers(sub) or [sub]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``compactor`` console script."""
    parser = build_parser()
    complete(parser)
    args = parser.parse_args(argv)
    code = run_guarded("compactor", args.handler, args, json_line=getattr(args, "json", False))
    if argv is None:  # the console script: the process exits next, without a teardown
        exit_process(code)
    return code


def _cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    """``compactor inspect``: ``kafka-dump-log``'s text (``--json``: one object per batch,
    index entry or problem), and with ``--verify`` the problems found."""
    if args.progress == progress.Mode.AUTO and sys.stdout.isatty():
        progress.configure(progress.Mode.OFF)  # the dump streams to the same terminal
    path = storage.absolute(args.path)
    suffix = path[path.rfind("."):]
    if suffix in INDEX_KINDS and not storage.is_dir(path):
        dump = dump_index_file(path)
        if args.json:
            for entry in dump["entries"]:
                jobs.emit(out, {"type": dump["kind"], "path": path, **entry})
        else:
            out.writelines(line + "\n" for line in dump_log.index_lines(dump))
        return EXIT_OK
    segments = batches = records = 0
    problems: list[Problem] = []
    for item in inspect_path(path, dump=not args.verify or args.records or args.json,
                             records=args.records, verify=args.verify):
        if isinstance(item, Problem):
            problems.append(item)
            if args.json:
                jobs.emit(out, {"type": "problem", **item.to_dict()})
            continue
        segments += 1
        batches += item.batch_count
        records += item.record_count
        problems.extend(item.problems)
        if args.json:
            for b in item.batches:
                jobs.emit(out, {"type": "batch", "path": item.path, **b})
            jobs.emit(out, item.to_dict())
        elif item.batches or not args.verify:
            out.writelines(line + "\n" for line in dump_log.segment_lines(
                {"path": item.path, "base_offset": item.base_offset, "batches": item.batches},
                records=args.records, snapshot=parse_snapshot_name(storage.basename(item.path))))
    summary = {"type": "summary", "segments": segments, "batches": batches,
               "records": records, "problems": len(problems), "verified": args.verify}
    if args.json:
        jobs.emit(out, summary)
    else:
        for p in problems:
            out.write(f"PROBLEM {p}\n")
        status = ("OK" if not problems else "FAILED") if args.verify else "dumped"
        out.write(f"{status}: {segments} segments, {batches} batches, {records} records, "
                  f"{len(problems)} problems\n")
    if problems:
        print(f"compactor: inspect found {len(problems)} problem(s); first: {problems[0]}",
              file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _parse_codecs(text: str) -> tuple[Codec, ...]:
    codecs = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        try:
            codecs.append(Codec[name.upper()])
        except KeyError:
            raise ConfigError(
                f"unknown codec {name!r}; known codecs: "
                f"{', '.join(c.name.lower() for c in Codec)}"
            ) from None
    return tuple(codecs)


def _cmd_generate(args: argparse.Namespace, out: TextIO) -> int:
    if storage.exists(args.out_dir) and storage.is_dir(args.out_dir) and any(
        parse_partition_dir_name(n) for n in storage.list_dir(args.out_dir)
    ):
        raise ConfigError("output directory already holds partitions", path=args.out_dir,
                          remedy="choose an empty or new directory")
    topic_configs: dict[str, dict[str, str]] = {}
    for item in args.topic_config:
        topic, key, value = parse_topic_assignment(item)
        resolve_topic_config(topic, {key: value})  # a config Kafka would refuse is refused here
        topic_configs.setdefault(topic, {})[key] = value
    cfg = GeneratorConfig(
        topics=tuple(t.strip() for t in args.topics.split(",") if t.strip()),
        partitions=args.partitions,
        records_per_partition=args.records,
        distinct_keys=args.keys,
        value_bytes=args.value_bytes,
        segment_bytes=args.segment_bytes,
        max_batch_records=args.max_batch_records,
        tombstone_ratio=args.tombstone_ratio,
        null_key_ratio=args.null_key_ratio,
        transactional_ratio=args.transactional_ratio,
        abort_ratio=args.abort_ratio,
        codecs=_parse_codecs(args.codecs),
        open_transaction=args.open_transaction,
        legacy_records=args.legacy_records,
        start_ms=args.start_ms,
        record_interval_ms=args.record_interval_ms,
        seed=args.seed,
        metadata_log=not args.no_metadata_log,
        topic_configs=topic_configs,
        internal_topics=tuple(t for t in args.internal_topics.split(",") if t.strip()),
        static_configs=dict(parse_assignment(a) for a in args.broker_config),
    )
    if args.broker_config and not args.server_properties:
        raise ConfigError("--broker-config needs --server-properties FILE to write them to")
    if args.server_properties:  # a broker would not start with what Kafka refuses
        broker_layer(SERVER_PROPERTIES, cfg.static_configs, dynamic=False)
    summary = generate(args.out_dir, cfg, server_properties=args.server_properties
                       and storage.absolute(args.server_properties))
    if args.json:
        jobs.emit(out, {"type": "generate", **summary.to_dict()})
    else:
        total = sum(p.records for p in summary.partitions)
        size = sum(p.bytes for p in summary.partitions)
        out.write(f"generated {args.out_dir}: {len(summary.partitions)} partitions, "
                  f"{total} records, {size} bytes\n")
    return EXIT_OK


def _cmd_cluster(args: argparse.Namespace, out: TextIO) -> int:
    from compactor.tools.fixtures import local_cluster

    if args.action == "start":
        c = local_cluster.start(args.dir, workers=args.workers, cores=args.cores,
                                memory=args.memory)
        jobs.emit(out, {"type": "cluster", "master_url": c.master_url, "web_url": c.web_url,
                    "workers": c.workers})
    elif args.action == "stop":
        jobs.emit(out, {"type": "cluster", "stopped": local_cluster.stop(args.dir)})
    else:
        jobs.emit(out, {"type": "cluster", **local_cluster.status(args.dir)})
    return EXIT_OK


def _cmd_erase_init(args: argparse.Namespace, out: TextIO) -> int:
    from compactor.state import tables as state_tables

    created = state_tables.init(args.state_dir)
    out.write(f"{'created' if created else 'already there'}: the ledger in {args.state_dir}\n")
    return EXIT_OK


def _cmd_erase_digest(args: argparse.Namespace, out: TextIO) -> int:
    """``erase digest``: one hex SHA-256 per line of stdin (a terminal prompts, not echoing)."""
    from compactor.erasure.rules import subject_digest

    if sys.stdin.isatty():
        import getpass

        lines = [getpass.getpass("subject (not echoed): ")]
    else:
        lines = sys.stdin.read().splitlines()
    for line in lines:
        if line:
            out.write(subject_digest(line.encode()) + "\n")
    return EXIT_OK


def _cmd_erase_list(args: argparse.Namespace, out: TextIO) -> int:
    """``erase list``: each request written as the ledger streams it (``--json``: one JSON
    object whose ``requests`` array is written element by element). A ledger error met
    part-way ends the partial output with a line break, so the error's own line follows it
    (nothing is written when the first batch already fails)."""
    from compactor.erasure import ledger

    opening = '{"type":"requests","requests":['
    count = 0
    try:
        for r in ledger.list_requests(args.state_dir):
            if args.json:
                out.write(("," if count else opening)
                          + json.dumps(r, separators=(",", ":")))
            else:
                what = r["selector"] + (f" {r['header_name']}" if r["header_name"] else "")
                places = r["places"]
                clean = sum(p["verify_status"] == "clean" for p in places.values())
                out.write(f"{r['request_id']}  topic {r['topic']}  {what}  {r['status']}  "
                          f"requested {human_time(r['requested_at_ms'])[:10]}  "
                          f"deadline {human_time(r['deadline_ms'])[:10]}"
                          + (f"  places {clean}/{len(places)} clean" if places else "")
                          + ("  leave-tombstone" if r["leave_tombstone"] else "")
                          + (f"  reason: {r['reason']}" if r.get("reason") else "") + "\n")
            count += 1
    except BaseException:
        if args.json and count:
            out.write("\n")
        raise
    if args.json:
        out.write(("" if count else opening) + "]}\n")
    else:
        out.write(f"{count} requests\n")
    return EXIT_OK


def _cmd_erase_report(args: argparse.Namespace, out: TextIO) -> int:
    from compactor.erasure import ledger
    from compactor.maintenance import proof_html

    result = ledger.audit(args.state_dir, args.request_id)
    if result is None:
        raise ConfigError(f"no erasure request {args.request_id!r} in the ledger",
                          path=args.state_dir)
    result["state_dir"] = args.state_dir
    now = int(time.time() * 1000)
    if args.json:
        jobs.emit(out, result)
    else:
        out.write(_proof_text(result, now))
    if args.html:
        storage.write_output(storage.absolute(args.html),
                             proof_html.render(result, now_ms=now).encode())
        if not args.json:
            out.write(f"proof written to {args.html}\n")
    return EXIT_OK


def _proof_text(result: Mapping[str, Any], now_ms: int) -> str:
    """``erase report`` for a person: the request, the deadline's outcome, each place with
    its times, the runs' partitions and the ledger's commits."""
    from compactor.erasure.status import deadline_words

    proof, req = result["proof"], result["request"]
    lines = [f"request {req['request_id']} (topic {req['topic']}, {req['selector']} with "
             f"SHA-256 {req['subject_sha256']}): {proof['status']}",
             f"requested {human_time(req['requested_at_ms'])}"
             + (f", reason: {req['reason']}" if req.get("reason") else ""),
             f"deadline {deadline_words(req, now_ms)}",
             f"erased {proof['records_erased']} records"
             + (f" (and {proof['superseded_by_erased']} older values of the keys)"
                if proof.get("superseded_by_erased") else "")
             + (f"; rescan: {proof['segments_rescanned']} segments, "
                f"{proof['records_rescanned']} records, no residual match"
                if proof["verified_by_rescan"] else "; not verified by a rescan yet")]
    for key, place in sorted((proof.get("places") or {}).items()):
        lines.append(
            f"  {key if place.get('tier') else 'node ' + str(place.get('node_id'))} "
            f"{'' if place.get('tier') else place.get('log_dir') or key}: "
            + (f"applied {human_time(place['applied_at_ms'])} "
               f"({place.get('records_erased', 0)} records, "
               f"{place.get('segments_rewritten', 0)} segments)"
               if place.get("applied_at_ms") else "not applied")
            + (f", rescan {place['verify_status']}" if place.get("verify_status")
               else ", not rescanned")
            + (f" {human_time(place['verified_at_ms'])}" if place.get("verified_at_ms") else "")
            + (f" over {', '.join(place['scanned'])}" if place.get("scanned") else "")
            + "".join(f"; remote segment {x['segment_id']} ({x['partition']} offsets "
                      f"{x['start_offset']}-{x['end_offset']}) replaced by "
                      f"{x['new_segment_id']}" for x in place.get("remote_segments", [])))
    missing = proof.get("missing_replicas")
    if missing:
        lines.append(f"  still to scan: {len(missing)} replicas, e.g. node "
                     f"{missing[0]['node_id']} {missing[0]['partition']}")
    for kind in ("apply_runs", "verify_runs"):
        for r in result.get(kind) or []:
            lines.append(f"  {kind.split('_')[0]} run {r['run_id']} {r['topic']}-"
                         f"{r['partition']} in {r['log_dir']}: {r['status']}, finished "
                         f"{human_time(r['finished_at_ms'])}")
    for c in result["ledger_commits"]:
        lines.append(f"  ledger v{c['version']} {c['operation']} {c.get('action', '')} "
                     f"{c.get('run_id', '')}".rstrip()
                     + (f", reason: {c['reason']}" if c.get("reason") else ""))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
