"""GDPR erasure on Spark: ``erase apply`` and ``erase verify`` (spark-submit entry point), and
the driver logic behind every ``compactor erase`` command.

    spark-submit jobs/erase.py apply  LOG_DIR --state-dir DIR [--now-ms MS] [--master URL] [--json]
    spark-submit jobs/erase.py verify LOG_DIR --state-dir DIR [--now-ms MS] [--master URL] [--json]
    spark-submit jobs/erase.py status --state-dir DIR [--now-ms MS] [--json]   (exit 1: overdue)

``apply`` takes the pending requests from the ledger (``compactor.ledger``), scans **every**
segment of the partitions they concern (the active one included) for records whose key or
named header matches a subject digest, rewrites only the segments holding matches
(executors write ``.cleaned`` segments; the driver swaps them in with the compaction swap
protocol), and only then marks the requests applied. A crash before that leaves them pending
and the log old or new per segment; the next ``apply`` finishes. ``verify`` rescans and marks
requests verified when no record of theirs remains; a residual match fails the request.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from pyspark.sql import SparkSession

from compactor import commit, ledger, storage, transforms
from compactor.codec.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from compactor.config import TopicConfig
from compactor.erasure import ErasureRequest, Matcher, keep_when_emptied
from compactor.errors import EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, CompactorError
from compactor.logdir import (
    PartitionLog,
    load_partition,
    open_log_dir,
    read_offset_checkpoint,
    recover_partition,
)
from compactor.model import TopicPartition
from compactor.options import (
    CompactOptions,
    add_erase_arguments,
    add_status_arguments,
    run_main,
    load_catalog,
)
from compactor.policy import BatchHeader
from jobs.compact import get_spark, segment_tasks
from schemas.spark import ERASURE_TASK

@dataclass(kw_only=True)
class _Scan:
    """What one erasure scan found, per partition id."""

    matches: dict[int, list[tuple[int, int, int, str]]] = field(default_factory=dict)
    segments: dict[int, int] = field(default_factory=dict)
    records: dict[int, int] = field(default_factory=dict)
    errors: dict[int, dict] = field(default_factory=dict)


def _scan(spark: SparkSession, parts: Mapping[int, PartitionLog],
          matchers: Mapping[int, Matcher]) -> _Scan:
    out = _Scan(matches={i: [] for i in parts}, segments={i: 0 for i in parts},
                records={i: 0 for i in parts})
    if not any(p.segments for p in parts.values()):
        return out
    for r in segment_tasks(spark, parts).transform(transforms.scan_erasure(matchers)).collect():
        if r.kind == "segment":
            if r.error:
                out.errors.setdefault(r.tp_id, json.loads(r.error))
            else:
                out.segments[r.tp_id] += 1
                out.records[r.tp_id] += r.records
        else:
            out.matches[r.tp_id].append((r.segment_base, r.position, r.offset, r.request_id))
    return out


def _headers(spark: SparkSession, parts: Mapping[int, PartitionLog]) -> dict[int, list[BatchHeader]]:
    out: dict[int, list[BatchHeader]] = {i: [] for i in parts}
    if not any(p.segments for p in parts.values()):
        return out
    for r in segment_tasks(spark, parts).transform(transforms.scan_headers).collect():
        if r.error is None:
            out[r.tp_id].append(transforms.header_from_row(r))
    for headers in out.values():
        headers.sort(key=lambda h: (h.segment_base, h.position))
    return out


def _pending(state_dir: str, status: str) -> list[ErasureRequest]:
    return [ledger.as_request(r) for r in ledger.load_requests(state_dir) if r["status"] == status]


def _load(log_dir: str, requests: Sequence[ErasureRequest]) -> tuple[
        dict[int, TopicPartition], dict[int, PartitionLog], dict[int, dict]]:
    ld = open_log_dir(log_dir)
    tps = {i: tp for i, tp in enumerate(
        tp for tp in ld.partitions if any(r.applies_to(tp.topic) for r in requests))}
    parts: dict[int, PartitionLog] = {}
    errors: dict[int, dict] = {}
    for i, tp in tps.items():
        try:
            parts[i] = load_partition(ld.partition_path(tp))
        except CompactorError as err:
            errors[i] = err.to_dict()
    return tps, parts, errors


def _start(action: str, log_dir: str, state_dir: str, now_ms: int,
           status: str) -> tuple[list[ErasureRequest], str, dict[str, Any]]:
    """The requests in ``status``, a new run id and the report skeleton (status ``ok``
    already when there is nothing to do)."""
    ledger.check_state_dir(state_dir, log_dir)
    requests = _pending(state_dir, status)
    run_id = f"erase-{action}-{now_ms}-{uuid.uuid4().hex[:8]}"
    report: dict[str, Any] = {"type": "report", "command": f"erase_{action}", "run_id": run_id,
                              "log_dir": log_dir, "now_ms": now_ms, "partitions": [],
                              "requests": []}
    if not requests:
        report["status"] = "ok"
    return requests, run_id, report


def apply(spark: SparkSession | None, log_dir: str, state_dir: str, now_ms: int, *,
          fsync: bool = True, metadata_log_dir: str | None = None) -> dict[str, Any]:
    """Erase every pending request's records from the log dir; returns the JSON report."""
    requests, run_id, report = _start("apply", log_dir, state_dir, now_ms, "pending")
    if not requests:
        return report
    started = int(time.time() * 1000)
    with storage.log_dir_lock(log_dir):
        ld = open_log_dir(log_dir)
        for tp in ld.partitions:
            if any(r.applies_to(tp.topic) for r in requests):
                recover_partition(ld.partition_path(tp))
        tps, parts, errors = _load(log_dir, requests)
        matchers = {i: Matcher.for_topic(tps[i].topic, requests) for i in parts}
        spark = spark or get_spark(None)
        found = _scan(spark, parts, matchers)
        errors.update(found.errors)
        # the writer's index settings; erasure itself does not depend on cleanup.policy
        configs = load_catalog(CompactOptions(
            log_dir=log_dir, now_ms=now_ms, assume_kafka_defaults=True,
            metadata_log_dir=metadata_log_dir)).configs
        messages = _rewrite(spark, log_dir, tps, parts, found, errors, configs, fsync=fsync)
        lines: dict[int, dict[str, Any]] = {}
        for i, tp in tps.items():
            line: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition}
            got = messages.get(i, [])
            if i in errors:
                line.update(status="corrupt", error=errors[i])
            elif any(m.error for m in got):
                for m in got:
                    commit.abort_group(ld.partition_path(tp), m)
                line.update(status="failed", error=next(m.error for m in got if m.error))
            else:
                commit.commit_partition(ld.partition_path(tp), got)
                line["status"] = "rewritten" if got else "unchanged"
            line.update(
                segments=len(parts[i].segments) if i in parts else 0,
                segments_scanned=found.segments.get(i, 0),
                records_scanned=found.records.get(i, 0),
                segments_rewritten=len(got) if line["status"] == "rewritten" else 0,
                records_erased=sum(m.records_in - m.records_out for m in got)
                if line["status"] == "rewritten" else 0,
                bytes_in=sum(m.bytes_in for m in got), bytes_out=sum(m.bytes_out for m in got),
                seconds=round(sum(m.seconds for m in got), 3),
            )
            lines[i] = line
    report["partitions"] = list(lines.values())
    updates, blocked = _applied_updates(requests, tps, lines, found, run_id, now_ms)
    report["requests"] = [{k: u[k] for k in ("request_id", "records_erased",
                                             "partitions_rewritten", "segments_rewritten")}
                          for u in updates] + [{"request_id": r, "status": "pending",
                                                "blocked_by": b} for r, b in blocked.items()]
    _record(state_dir, "apply", run_id, log_dir, now_ms, started, lines, updates)
    report["status"] = "partial" if blocked else "ok"
    return report


def _rewrite(spark: SparkSession, log_dir: str, tps: Mapping[int, TopicPartition],
             parts: Mapping[int, PartitionLog], found: _Scan, errors: Mapping[int, dict],
             configs: Mapping[str, TopicConfig], *, fsync: bool) -> dict[int, list]:
    """Write ``.cleaned`` copies of the segments holding matches (partitions without errors)."""
    hit = {i: parts[i] for i, m in found.matches.items() if m and i not in errors}
    if not hit:
        return {}
    hws = read_offset_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT)
    headers = _headers(spark, hit)
    tasks = []
    segments = {}
    for i, part in hit.items():
        hdrs = headers[i]
        leo = max((h.next_offset for h in hdrs), default=0)
        keep = keep_when_emptied(hdrs, min(hws.get(tps[i], leo), leo))
        by_segment: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
        for base, position, offset, _ in found.matches[i]:
            by_segment[base][position].add(offset)
        for base, erased in by_segment.items():
            seg = next(s for s in part.segments if s.base_offset == base)
            segments[(i, base)] = (part.path, seg, configs[tps[i].topic])
            tasks.append((i, base, json.dumps({str(p): sorted(o) for p, o in erased.items()}),
                          json.dumps(sorted(p for b, p in keep if b == base))))
    df = spark.createDataFrame(tasks, ERASURE_TASK).repartition(
        max(1, min(len(tasks), spark.sparkContext.defaultParallelism * 2)))
    out: dict[int, list] = defaultdict(list)
    for r in df.transform(transforms.rewrite_erased(segments, fsync=fsync)).collect():
        out[r.tp_id].append(transforms.message_from_row(r))
    return out


def _applied_updates(requests: Sequence[ErasureRequest], tps: Mapping[int, TopicPartition],
                     lines: Mapping[int, Mapping[str, Any]], found: _Scan, run_id: str,
                     now_ms: int) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    updates = []
    blocked: dict[str, list[str]] = {}
    for r in requests:
        mine = [i for i, tp in tps.items() if r.applies_to(tp.topic)]
        bad = [f"{tps[i]}" for i in mine if lines[i]["status"] in ("corrupt", "failed")]
        if bad:
            blocked[r.request_id] = bad
            continue
        offsets = {(i, base, off) for i in mine for base, _, off, rid in found.matches[i]
                   if rid == r.request_id}
        updates.append({
            "request_id": r.request_id, "status": "applied", "run_id": run_id,
            "records_erased": len(offsets),
            "partitions_rewritten": len({i for i, _, _ in offsets}),
            "segments_rewritten": len({(i, b) for i, b, _ in offsets}),
            "applied_at_ms": now_ms,
        })
    return updates, blocked


def verify(spark: SparkSession | None, log_dir: str, state_dir: str,
           now_ms: int) -> dict[str, Any]:
    """Rescan for every applied request; mark it verified (no record left) or failed."""
    requests, run_id, report = _start("verify", log_dir, state_dir, now_ms, "applied")
    if not requests:
        return report
    started = int(time.time() * 1000)
    with storage.log_dir_lock(log_dir):
        tps, parts, errors = _load(log_dir, requests)
        matchers = {i: Matcher.for_topic(tps[i].topic, requests) for i in parts}
        found = _scan(spark or get_spark(None), parts, matchers)
    errors.update(found.errors)
    lines = {}
    for i, tp in tps.items():
        line: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition,
                                "segments_scanned": found.segments.get(i, 0),
                                "records_scanned": found.records.get(i, 0),
                                "residual_matches": len(found.matches.get(i, []))}
        line["status"] = "corrupt" if i in errors else (
            "residual" if line["residual_matches"] else "clean")
        if i in errors:
            line["error"] = errors[i]
        lines[i] = line
    updates = []
    for r in requests:
        mine = [i for i, tp in tps.items() if r.applies_to(tp.topic)]
        if any(i in errors for i in mine):
            report["requests"].append({"request_id": r.request_id, "status": "applied",
                                       "unverified_because": [f"{tps[i]}" for i in mine
                                                              if i in errors]})
            continue
        residual = [{"topic": tps[i].topic, "partition": tps[i].partition,
                     "segment_base": base, "position": pos, "offset": off}
                    for i in mine for base, pos, off, rid in found.matches[i]
                    if rid == r.request_id]
        update = {"request_id": r.request_id, "verify_run_id": run_id,
                  "verified_segments_scanned": sum(found.segments[i] for i in mine),
                  "verified_records_scanned": sum(found.records[i] for i in mine)}
        if residual:
            update.update(status="failed", verified_at_ms=None,
                          failure=json.dumps({"residual_matches": len(residual),
                                              "first": residual[:10]}))
        else:
            update.update(status="verified", verified_at_ms=now_ms, failure=None)
        updates.append(update)
        report["requests"].append({k: update[k] for k in (
            "request_id", "status", "verified_segments_scanned", "verified_records_scanned")}
            | ({"residual": residual[:10]} if residual else {}))
    report["partitions"] = list(lines.values())
    _record(state_dir, "verify", run_id, log_dir, now_ms, started, lines, updates)
    failed = any(u["status"] == "failed" for u in updates)
    unverified = len(updates) < len(requests)
    report["status"] = "failed" if failed else ("partial" if unverified else "ok")
    return report


def _record(state_dir: str, action: str, run_id: str, log_dir: str, now_ms: int, started: int,
            lines: Mapping[int, Mapping[str, Any]], updates: Sequence[Mapping[str, Any]]) -> None:
    """The run's rows in ``runs``, then the requests' new state: one Delta commit each."""
    ledger.record_runs(state_dir, run_id=run_id, command=f"erase_{action}", log_dir=log_dir,
                       now_ms=now_ms, started_at_ms=started,
                       finished_at_ms=int(time.time() * 1000), seconds=None,
                       partitions=lines.values())
    ledger.update_requests(state_dir, updates, {
        "action": action, "run_id": run_id,
        "request_ids": ",".join(u["request_id"] for u in updates)})


def report_exit_code(report: Mapping[str, Any]) -> int:
    return {"ok": EXIT_OK, "partial": EXIT_PARTIAL}.get(report["status"], EXIT_FAILURE)


# ---------------------------------------------------------------------------------------------
# Entry point


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobs/erase.py",
                                     description="GDPR erasure over a Kafka log dir.")
    sub = parser.add_subparsers(dest="action", required=True)
    for name in ("apply", "verify"):
        p = sub.add_parser(name)
        add_erase_arguments(p, rewrites=name == "apply")
    add_status_arguments(sub.add_parser("status", help="exit 1 when a request is overdue"))
    return parser


def execute(args: argparse.Namespace, out: TextIO) -> int:
    if args.action == "status":  # the ledger only: no Spark
        from compactor.cli import erase_status_command

        return erase_status_command(args, out)
    now_ms = args.now_ms if args.now_ms is not None else int(time.time() * 1000)
    spark = get_spark(args.master)
    log_dir, state_dir = storage.absolute(args.log_dir), storage.absolute(args.state_dir)
    if args.action == "apply":
        report = apply(spark, log_dir, state_dir, now_ms, metadata_log_dir=args.metadata_log_dir)
    else:
        report = verify(spark, log_dir, state_dir, now_ms)
    out.write(json.dumps(report, separators=(",", ":")) + "\n")
    if not args.json:
        out.write(summary(report) + "\n")
    return report_exit_code(report)


def summary(report: Mapping[str, Any]) -> str:
    lines = [f"{p['topic']}-{p['partition']}: {p['status']}"
             + (f", {p['records_erased']} records erased in {p['segments_rewritten']} segments"
                if p.get("records_erased") else "")
             + (f", {p['records_scanned']} records scanned" if "residual_matches" in p else "")
             for p in report["partitions"]]
    lines += [f"request {r['request_id']}: " + ", ".join(
        f"{k} {v}" for k, v in r.items() if k != "request_id") for r in report["requests"]]
    lines.append(f"{report['command']} ({report['run_id']}): {report['status']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("erase", build_parser(), execute, argv)


if __name__ == "__main__":
    sys.exit(main())
