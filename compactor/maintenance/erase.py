"""GDPR erasure on Spark, on the driver: ``compactor erase apply`` and ``erase verify`` (also
``jobs/erase.py``).

``apply`` takes the pending requests from the ledger (``compactor.erasure.ledger``), scans **every**
segment of the partitions they concern (the active one included) for records whose key or
named header matches a subject digest, rewrites only the segments holding matches
(executors write ``.cleaned`` segments; the driver swaps them in with the compaction swap
protocol), and only then marks the requests applied. A crash before that leaves them pending
and the log old or new per segment; the next ``apply`` finishes. ``verify`` rescans and marks
requests verified when no record of theirs remains; a residual match fails the request.
"""

from __future__ import annotations

import difflib
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


from compactor.log import swap
from compactor.erasure import ledger
from compactor.log import storage
from compactor.spark import stages as spark_stages
from compactor.codec.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from compactor.cluster.catalog import HOW_TO_CONFIGURE, Catalog
from compactor.config import TopicConfig
from compactor.erasure.rules import (
    APPLICABLE,
    DONE,
    VERIFIABLE,
    missing_replicas,
    place_key,
    totals,
    ALL_TOPICS,
    HEADER,
    ErasureRequest,
    Matcher,
    keep_when_emptied,
    latest_per_key,
    superseded_by_erased,
)
from compactor.errors import EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, CompactorError, ConfigError
from compactor.log.layout import (
    check_partition_files,
    DELETE,
    LIVE,
    STRAY,
    PartitionLog,
    load_partition,
    open_log_dir,
    read_aborted_txns,
    read_offset_checkpoint,
    recover_partitions,
)
from compactor.model import TopicPartition
from compactor.cleaner.verify import txn_problems
from compactor.maintenance.options import MaintenanceOptions, load_catalog
from compactor.maintenance.report import Outcome
from compactor.spark.session import LazySession

# a directory whose topic's cleanup.policy or remote.storage.enable is not known: left as it
# is, and no request that covers it is applied or verified there
BLOCKED = "blocked"

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class _Dir:
    """One directory holding a copy of a partition: the live one or a ``-future``, ``-delete``
    or ``-stray`` copy (:class:`compactor.log.layout.PartitionCopy`)."""

    tp: TopicPartition
    kind: str
    name: str
    path: str

    def line(self) -> dict[str, Any]:
        return {"topic": self.tp.topic, "partition": self.tp.partition, "dir": self.name,
                "copy": self.kind}


@dataclass(frozen=True, slots=True)
class _Match:
    segment_base: int
    position: int
    offset: int
    request_id: str
    key_digest: bytes | None
    bare_tombstone: bool


@dataclass(kw_only=True)
class _Scan:
    """What one erasure scan found, per directory id."""

    matches: dict[int, list[_Match]] = field(default_factory=dict)
    segments: dict[int, int] = field(default_factory=dict)
    records: dict[int, int] = field(default_factory=dict)
    errors: dict[int, dict] = field(default_factory=dict)


def _scan(spark: LazySession, parts: Mapping[int, PartitionLog],
          matchers: Mapping[int, Matcher]) -> _Scan:
    out = _Scan(matches={i: [] for i in parts}, segments={i: 0 for i in parts},
                records={i: 0 for i in parts})
    if not any(p.segments for p in parts.values()):
        return out
    session = spark(spark_stages.input_bytes(parts))
    for r in spark_stages.erasure_scan(session, parts, matchers):
        if r.kind == "segment":
            if r.error:
                out.errors.setdefault(r.tp_id, json.loads(r.error))
            else:
                out.segments[r.tp_id] += 1
                out.records[r.tp_id] += r.records
        else:
            out.matches[r.tp_id].append(_Match(r.segment_base, r.position, r.offset,
                                               r.request_id, r.key_digest, r.bare_tombstone))
    return out


def _requests_in(state_dir: str, statuses: frozenset[str]) -> list[ErasureRequest]:
    return [ledger.as_request(r) for r in ledger.load_requests(state_dir)
            if r["status"] in statuses]


def _load(log_dir: str, requests: Sequence[ErasureRequest],
          unrecovered: Mapping[str, CompactorError] | None = None) -> tuple[
        dict[int, _Dir], dict[int, PartitionLog], dict[int, dict]]:
    """Every directory holding data of the requests' topics (live partitions and their
    ``-future``, ``-delete`` and ``-stray`` copies), read; those in ``unrecovered`` (by name)
    and those that cannot be read come back as errors."""
    ld = open_log_dir(log_dir)
    wanted = lambda t: any(r.applies_to(t) for r in requests)  # noqa: E731
    copies = ld.copies_of(wanted)
    dirs = {i: _Dir(c.tp, c.kind, c.name, storage.join(log_dir, c.name))
            for i, c in enumerate(copies)}
    parts: dict[int, PartitionLog] = {}
    errors: dict[int, dict] = {}
    # a directory no command may touch (a duplicate, a non-canonical name) still holds the
    # subject's data: it blocks apply and verify of the requests on its topic
    for r in ld.refused_of(wanted):
        i = len(dirs)
        dirs[i] = _Dir(r.tp, LIVE, r.name, storage.join(log_dir, r.name))
        errors[i] = r.error.to_dict()
    for i, d in dirs.items():
        if i in errors:
            continue
        try:
            if unrecovered and d.name in unrecovered:
                raise unrecovered[d.name]
            part = load_partition(d.path)
            check_partition_files(part)
            parts[i] = part
        except CompactorError as err:
            errors[i] = err.to_dict()
    return dirs, parts, errors


def _unknown_topics(requests: Sequence[ErasureRequest], dirs: Mapping[int, _Dir],
                    catalog: Catalog) -> dict[str, str]:
    """Request id -> why its topic is unknown (no directory holds it and the cluster's
    metadata does not name it): such a request can never be proven erased."""
    present = {d.tp.topic for d in dirs.values()}
    known = present | (set(catalog.metadata.topic_ids) if catalog.metadata else set())
    out = {}
    for r in requests:
        if r.topic == ALL_TOPICS or r.topic in present:
            continue
        close = difflib.get_close_matches(r.topic, sorted(known), n=1)
        out[r.request_id] = (f"topic {r.topic!r} has no partition in this log dir"
                             + (" (the cluster's metadata knows it: its partitions live in "
                                "another log dir)" if r.topic in known else
                                f"; did you mean {close[0]!r}?" if close else ""))
    return out


@dataclass(kw_only=True)
class _Plan:
    """What an apply erases, per directory id: the matched records, the older records of
    compacted keys that go with them, and the records left as bare tombstones."""

    erased: dict[int, dict[int, dict[int, set[int]]]] = field(default_factory=dict)
    tombstones: dict[int, dict[int, dict[int, set[int]]]] = field(default_factory=dict)
    superseded: dict[int, int] = field(default_factory=dict)
    superseded_by_request: dict[str, int] = field(default_factory=dict)
    tombstones_left: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def add(self, target: dict[int, dict[int, dict[int, set[int]]]], i: int, base: int,
            position: int, offset: int) -> None:
        target.setdefault(i, {}).setdefault(base, {}).setdefault(position, set()).add(offset)

    def segments(self, i: int) -> set[int]:
        return set(self.erased.get(i, {})) | set(self.tombstones.get(i, {}))


def _plan_erasure(spark: LazySession, dirs: Mapping[int, _Dir],
                  parts: Mapping[int, PartitionLog], found: _Scan,
                  requests: Mapping[str, ErasureRequest],
                  configs: Mapping[str, TopicConfig]) -> _Plan:
    """Which records go (Kafka's ``Cleaner.shouldRetainRecord`` keeps only a key's latest record, so on a
    compacted topic an erased latest record takes the key's older records with it,
    :func:`compactor.erasure.rules.superseded_by_erased`) and which stay as bare tombstones."""
    plan = _Plan()
    wanted: dict[int, set[bytes]] = {}
    for i, matches in found.matches.items():
        compacted = configs[dirs[i].tp.topic].compact
        latest = latest_per_key((m.key_digest, m.offset) for m in matches
                                if m.key_digest is not None
                                and requests[m.request_id].leave_tombstone and compacted)
        for m in matches:
            if m.key_digest is not None and latest.get(m.key_digest) == m.offset:
                plan.add(plan.tombstones, i, m.segment_base, m.position, m.offset)
                left = plan.tombstones_left.setdefault(m.request_id, [])
                if (dirs[i].name, m.offset) not in left:
                    left.append((dirs[i].name, m.offset))
            else:
                plan.add(plan.erased, i, m.segment_base, m.position, m.offset)
            # a key matched by a header (not by its own digest) may have older records
            if compacted and m.key_digest is not None and \
                    requests[m.request_id].selector == HEADER:
                wanted.setdefault(i, set()).add(m.key_digest)
    if not wanted:
        return plan
    scanned = {i: parts[i] for i in wanted}
    others: dict[int, list[tuple[int, int, int, bytes]]] = {i: [] for i in wanted}
    frozen = {i: frozenset(keys) for i, keys in wanted.items()}
    for r in spark_stages.key_offsets(spark(), scanned, frozen):
        if r.error:
            found.errors.setdefault(r.tp_id, json.loads(r.error))
        else:
            others[r.tp_id].append((r.segment_base, r.position, r.offset, r.key_digest))
    for i, rows in others.items():
        matched: dict[bytes, set[int]] = {}
        owner: dict[tuple[bytes, int], str] = {}
        for m in found.matches[i]:
            if m.key_digest is not None:
                matched.setdefault(m.key_digest, set()).add(m.offset)
                owner[(m.key_digest, m.offset)] = m.request_id
        extra = superseded_by_erased(matched, ((k, o) for _, _, o, k in rows))
        where = {(k, o): (b, p) for b, p, o, k in rows}
        for key, offsets in extra.items():
            request_id = owner[(key, max(matched[key]))]
            for offset in offsets:
                base, position = where[(key, offset)]
                plan.add(plan.erased, i, base, position, offset)
            plan.superseded[i] = plan.superseded.get(i, 0) + len(offsets)
            plan.superseded_by_request[request_id] = (
                plan.superseded_by_request.get(request_id, 0) + len(offsets))
    return plan


def _start(action: str, log_dir: str, state_dir: str, now_ms: int,
           statuses: frozenset[str]) -> tuple[list[ErasureRequest], str, dict[str, Any]]:
    """The requests in ``statuses``, a new run id and the report skeleton (status ``ok``
    already when there is nothing to do)."""
    ledger.check_state_dir(state_dir, log_dir)
    ledger.require_ledger(state_dir)
    requests = _requests_in(state_dir, statuses)
    run_id = f"erase-{action}-{now_ms}-{uuid.uuid4().hex[:8]}"
    report: dict[str, Any] = {"type": "report", "command": f"erase_{action}", "run_id": run_id,
                              "log_dir": log_dir, "now_ms": now_ms, "partitions": [],
                              "requests": []}
    if not requests:
        report["status"] = "ok"
    return requests, run_id, report


def _catalog(log_dir: str, now_ms: int, metadata_log_dir: str | None,
             server_properties: str | None, assume_kafka_defaults: bool) -> Catalog:
    # erasure applies to every topic; its cleanup.policy (the compacted-topic rule) and
    # remote.storage.enable (what a verify proves) must be the cluster's: a topic whose are
    # not known is refused (Catalog.erasure_refusal), never erased as a guess
    return load_catalog(MaintenanceOptions(
        log_dir=log_dir, now_ms=now_ms, metadata_log_dir=metadata_log_dir,
        server_properties=server_properties, assume_kafka_defaults=assume_kafka_defaults))


def _refused(dirs: Mapping[int, _Dir], catalog: Catalog) -> dict[int, dict[str, Any]]:
    """Directory id -> why it is neither rewritten nor counted as scanned clean."""
    out = {}
    for i, d in dirs.items():
        reason = catalog.erasure_refusal(d.tp.topic)
        if reason is not None:
            out[i] = ConfigError(reason, remedy=HOW_TO_CONFIGURE).to_dict()
    return out


def apply(spark: SparkSession | None, log_dir: str, state_dir: str, now_ms: int, *,
          master: str | None = None, fsync: bool = True, metadata_log_dir: str | None = None,
          server_properties: str | None = None, assume_kafka_defaults: bool = False,
          exclude_pending_deletes: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Erase the records of every request not yet applied here (this log dir of this
    broker) from every copy on disk; returns the JSON report. ``dry_run`` scans and reports what would be rewritten, changing nothing. A Spark
    session (``spark``, else a new one on ``master``) starts only when there is something to
    scan."""
    requests, run_id, report = _start("apply", log_dir, state_dir, now_ms, APPLICABLE)
    report["dry_run"] = dry_run
    if not requests:
        return report
    started = int(time.time() * 1000)
    catalog = _catalog(log_dir, now_ms, metadata_log_dir, server_properties,
                       assume_kafka_defaults)
    here = place_key(catalog.place(log_dir))
    # a request is applied once per place: other log dirs and brokers still take it
    requests = [r for r in requests if "applied_run_id" not in r.places.get(here, {})]
    if not requests:
        report["status"] = "ok"
        return report
    with storage.log_dir_lock(log_dir):
        ld = open_log_dir(log_dir)
        unrecovered: dict[str, CompactorError] = {}
        if not dry_run:
            _, unrecovered = recover_partitions(log_dir, [
                c.name for c in ld.copies_of(lambda t: any(r.applies_to(t) for r in requests))])
        dirs, parts, errors = _load(log_dir, requests, unrecovered)
        refused = _refused(dirs, catalog)
        parts = {i: p for i, p in parts.items() if i not in refused}
        unknown = _unknown_topics(requests, dirs, catalog)
        matchers = {i: Matcher.for_topic(dirs[i].tp.topic, requests) for i in parts}
        session = LazySession(master, spark)
        found = _scan(session, parts, matchers)
        errors.update(found.errors)
        by_id = {r.request_id: r for r in requests}
        plan = _plan_erasure(session, dirs, parts, found, by_id, catalog.configs)
        errors.update({i: e for i, e in found.errors.items() if i not in errors})
        held = {i for i, d in dirs.items() if exclude_pending_deletes and d.kind in (DELETE, STRAY)}
        writable = {i for i in parts if i not in errors and i not in held}
        messages = {} if dry_run else _rewrite(session, log_dir, dirs, parts, plan, writable,
                                               catalog.configs, errors, fsync=fsync)
        lines: dict[int, dict[str, Any]] = {}
        for i, d in dirs.items():
            line: dict[str, Any] = d.line()
            got = messages.get(i, [])
            touched = plan.segments(i)
            if i in refused:
                line.update(status=BLOCKED, error=refused[i])
            elif i in errors:
                line.update(status=Outcome.CORRUPT, error=errors[i])
            elif i in held and found.matches.get(i):
                line["status"] = "residual_copy"  # --exclude-pending-deletes: reported, kept
            elif dry_run:
                line["status"] = "would_rewrite" if touched else "unchanged"
            elif any(m.error for m in got):
                for m in got:
                    swap.abort_group(d.path, m)
                line.update(status=Outcome.FAILED, error=next(m.error for m in got if m.error))
            elif (failure := swap.commit_isolated(d.path, got, parts[i].identities)) is not None:
                line.update(status=Outcome.FAILED, error=failure.to_dict())
            else:
                line["status"] = "rewritten" if got else "unchanged"
            done = line["status"] in ("rewritten", "would_rewrite")
            line.update(
                segments=len(parts[i].segments) if i in parts else 0,
                segments_scanned=found.segments.get(i, 0),
                records_scanned=found.records.get(i, 0),
                records_matched=len({m.offset for m in found.matches.get(i, [])}),
                segments_rewritten=len(touched) if done else 0,
                records_erased=sum(m.records_in - m.records_out for m in got)
                if line["status"] == "rewritten" else 0,
                superseded_by_erased=plan.superseded.get(i, 0) if done else 0,
                tombstones_left=sum(len(o) for seg in plan.tombstones.get(i, {}).values()
                                    for o in seg.values()) if done else 0,
                bytes_in=sum(m.bytes_in for m in got), bytes_out=sum(m.bytes_out for m in got),
                seconds=round(sum(m.seconds for m in got), 3),
            )
            if i in held and found.matches.get(i):
                line["residual_offsets"] = sorted({m.offset for m in found.matches[i]})[:100]
            lines[i] = line
    report["partitions"] = list(lines.values())
    updates, blocked = _applied_updates(requests, dirs, lines, found, plan, unknown, run_id,
                                        now_ms, catalog.place(log_dir))
    report["requests"] = [{k: json.loads(u[k]) if k == "failure" else u[k]
                           for k in ("request_id", "status", "records_erased",
                                     "superseded_by_erased", "partitions_rewritten",
                                     "segments_rewritten", "failure")
                           if u.get(k) is not None}
                          for u in updates] + [{"request_id": r, "status": "pending",
                                                "blocked_by": b} for r, b in blocked.items()]
    failed = any(u["status"] == "failed" for u in updates)
    # a dry run ends as the real run would (its exit code too), in conditional words
    report["status"] = "failed" if failed else ("partial" if blocked else "ok")
    if dry_run:
        for r in report["requests"]:
            r["status"] = DRY_RUN_STATUS[r["status"]]
        return report
    try:
        _record(state_dir, "apply", run_id, log_dir, now_ms, started, lines, updates)
    except CompactorError as err:  # the rewrites stand: say so, with the report
        rewritten = [line["dir"] for line in lines.values() if line["status"] == "rewritten"]
        report["ledger_error"] = {**err.with_remedy(
            f"{len(rewritten)} partition(s) were rewritten ({', '.join(rewritten[:5])}) but "
            f"the ledger does not record it: the requests stay pending; fix the ledger's "
            f"problem and run `erase apply` again (it finds the erased records gone and "
            f"records the requests applied)").to_dict(), "rewritten": rewritten}
        if report["status"] == "ok":
            report["status"] = "partial"
    return report


# what an apply would record, said by --dry-run (which records nothing)
DRY_RUN_STATUS = {"applied": "would_be_applied", "partially_verified": "would_be_applied",
                  "failed": "would_fail", "pending": "would_stay_pending"}


def _rewrite(spark: LazySession, log_dir: str, dirs: Mapping[int, _Dir],
             parts: Mapping[int, PartitionLog], plan: _Plan, writable: set[int],
             configs: Mapping[str, TopicConfig], errors: dict[int, dict], *,
             fsync: bool) -> dict[int, list]:
    """Write ``.cleaned`` copies of the segments holding erased records (readable
    directories only); a directory whose transaction index fails the partition-wide check
    (:func:`compactor.cleaner.verify.txn_problems`) is added to ``errors`` and left alone."""
    hit = {i: parts[i] for i in writable if plan.segments(i)}
    if not hit:
        return {}
    hws = read_offset_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT)
    headers = spark_stages.batch_headers(spark(), hit)
    tasks = []
    segments = {}
    for i, part in hit.items():
        hdrs = headers[i]
        try:
            problems = txn_problems(part.path, hdrs, read_aborted_txns(part))
        except CompactorError as err:
            problems = [err]
        if problems:
            errors[i] = problems[0].to_dict()
            continue
        leo = max((h.next_offset for h in hdrs), default=0)
        keep = keep_when_emptied(hdrs, min(hws.get(dirs[i].tp, leo), leo))
        erased, bare = plan.erased.get(i, {}), plan.tombstones.get(i, {})
        for base in sorted(plan.segments(i)):
            seg = next(s for s in part.segments if s.base_offset == base)
            segments[(i, base)] = (part.path, seg, configs[dirs[i].tp.topic])
            tasks.append((i, base,
                          json.dumps({str(p): sorted(o) for p, o in erased.get(base, {}).items()}),
                          json.dumps(sorted(p for b, p in keep if b == base)),
                          json.dumps({str(p): sorted(o) for p, o in bare.get(base, {}).items()})))
    out: dict[int, list] = defaultdict(list)
    for message in spark_stages.rewrite_segments(spark(), tasks, segments, fsync=fsync):
        out[message.tp_id].append(message)
    return out


def _applied_updates(requests: Sequence[ErasureRequest], dirs: Mapping[int, _Dir],
                     lines: Mapping[int, Mapping[str, Any]], found: _Scan, plan: _Plan,
                     unknown: Mapping[str, str], run_id: str, now_ms: int,
                     place: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The ledger updates of an apply at ``place`` (one log dir of one broker): what it
    erased there joins what earlier applies erased elsewhere (``places``); a request
    verified on some replicas stays ``partially_verified``."""
    updates = []
    blocked: dict[str, list[str]] = {}
    for r in requests:
        if r.request_id in unknown:  # never provable: refused with the reason
            updates.append({"request_id": r.request_id, "status": "failed", "run_id": run_id,
                            "applied_at_ms": now_ms, "records_erased": 0,
                            "superseded_by_erased": 0, "partitions_rewritten": 0,
                            "segments_rewritten": 0, "tombstones_left": "[]",
                            "failure": json.dumps({"unknown_topic": unknown[r.request_id]})})
            continue
        mine = [i for i, d in dirs.items() if r.applies_to(d.tp.topic)]
        bad = [dirs[i].name for i in mine
               if lines[i]["status"] in (Outcome.CORRUPT, Outcome.FAILED, BLOCKED)]
        if bad:
            blocked[r.request_id] = bad
            continue
        offsets = {(i, m.segment_base, m.offset) for i in mine for m in found.matches[i]
                   if m.request_id == r.request_id}
        left = plan.tombstones_left.get(r.request_id, [])
        here = {**place, "applied_run_id": run_id, "applied_at_ms": now_ms,
                "records_erased": len(offsets) - len(left),
                "superseded_by_erased": plan.superseded_by_request.get(r.request_id, 0),
                "partitions_rewritten": len({i for i, _, _ in offsets}),
                "segments_rewritten": len({(i, b) for i, b, _ in offsets}),
                "tombstones_left": [{"dir": d, "offset": o} for d, o in left]}
        key = place_key(place)
        places = {**r.places, key: {**r.places.get(key, {}), **here}}
        updates.append({
            "request_id": r.request_id,
            "status": "partially_verified" if r.status == "partially_verified" else "applied",
            "run_id": run_id, **totals(places), "applied_at_ms": now_ms,
            "tombstones_left": json.dumps([t for p in places.values()
                                           for t in p.get("tombstones_left", [])]),
            "places": json.dumps(places, sort_keys=True), "failure": None,
        })
    return updates, blocked


def verify(spark: SparkSession | None, log_dir: str, state_dir: str, now_ms: int, *,
           master: str | None = None, metadata_log_dir: str | None = None,
           server_properties: str | None = None,
           assume_kafka_defaults: bool = False) -> dict[str, Any]:
    """Rescan every copy on disk for every applied request; mark it verified (no record
    left but the bare tombstones it asked to leave, and at least one segment scanned),
    ``verified_local_only`` when a tiered topic's remote segments could not be scanned, or
    failed (with the directories and offsets found)."""
    requests, run_id, report = _start("verify", log_dir, state_dir, now_ms, VERIFIABLE)
    if not requests:
        return report
    started = int(time.time() * 1000)
    catalog = _catalog(log_dir, now_ms, metadata_log_dir, server_properties,
                       assume_kafka_defaults)
    with storage.log_dir_lock(log_dir):
        dirs, parts, errors = _load(log_dir, requests)
        refused = _refused(dirs, catalog)
        parts = {i: p for i, p in parts.items() if i not in refused}
        matchers = {i: Matcher.for_topic(dirs[i].tp.topic, requests) for i in parts}
        found = _scan(LazySession(master, spark), parts, matchers)
    errors.update(found.errors)
    errors.update(refused)  # an unknown policy proves nothing: the request stays applied
    by_id = {r.request_id: r for r in requests}

    place = catalog.place(log_dir)
    key = place_key(place)

    def accepted(i: int, m: _Match) -> bool:  # a tombstone the request asked to leave here
        request = by_id[m.request_id]
        left = request.places.get(key, {}).get("tombstones_left")
        here = ({(t["dir"], t["offset"]) for t in left} if left is not None
                else set(request.tombstones_left))
        return m.bare_tombstone and (dirs[i].name, m.offset) in here

    lines = {}
    for i, d in dirs.items():
        line: dict[str, Any] = {**d.line(), "segments_scanned": found.segments.get(i, 0),
                                "records_scanned": found.records.get(i, 0),
                                "residual_matches": sum(not accepted(i, m)
                                                        for m in found.matches.get(i, []))}
        line["status"] = BLOCKED if i in refused else Outcome.CORRUPT if i in errors else (
            "residual" if line["residual_matches"] else "clean")
        if i in errors:
            line["error"] = errors[i]
        lines[i] = line
    updates = []
    for r in requests:
        mine = [i for i, d in dirs.items() if r.applies_to(d.tp.topic)]
        if any(i in errors for i in mine):
            report["requests"].append({"request_id": r.request_id, "status": "applied",
                                       "unverified_because": [dirs[i].name for i in mine
                                                              if i in errors]})
            continue
        residual = [{**dirs[i].line(), "segment_base": m.segment_base, "position": m.position,
                     "offset": m.offset}
                    for i in mine for m in found.matches[i]
                    if m.request_id == r.request_id and not accepted(i, m)]
        scanned = sum(found.segments[i] for i in mine)
        tiered = sorted({dirs[i].tp.topic for i in mine
                         if catalog.configs[dirs[i].tp.topic].remote_storage_enable})
        coverage = [{**place, **dirs[i].line(), "segments": found.segments[i],
                     "records": found.records[i]} for i in mine]
        replicas = catalog.replicas_of(r.applies_to)
        expected_here = replicas is None or any(
            x["node_id"] == place["node_id"] and x["directory_id"] in (None, place[
                "directory_id"]) for x in replicas)
        if not residual and not scanned and not expected_here:
            # no replica of the request's topics lives here: this place proves nothing
            report["requests"].append({"request_id": r.request_id, "status": r.status,
                                       "no_replica_here": key})
            continue
        here = {**r.places.get(key, {}), **place, "verify_run_id": run_id,
                "tiered_topics": tiered,
                "verified_at_ms": now_ms if not residual and scanned else None,
                "verify_status": "residual" if residual else "clean" if scanned
                else "nothing_scanned",
                "scanned": sorted(dirs[i].name for i in mine if dirs[i].kind == LIVE)}
        places = {**r.places, key: here}
        missing = missing_replicas(places, replicas) if replicas is not None else None
        # a tiered topic anywhere (this log dir or another place's) leaves remote segments
        # that no scan here reaches
        tiered = sorted({t for p in places.values() for t in p.get("tiered_topics", [])})
        update = {"request_id": r.request_id, "verify_run_id": run_id,
                  "verified_segments_scanned": scanned,
                  "verified_records_scanned": sum(found.records[i] for i in mine),
                  "coverage": json.dumps(coverage),
                  "remote_tier": "not_covered" if tiered else None,
                  "places": json.dumps(places, sort_keys=True),
                  "missing_replicas": json.dumps(missing) if missing is not None else None}
        if residual or not scanned:
            failure = ({"residual_matches": len(residual), "first": residual[:10]} if residual
                       else {"nothing_scanned": "no segment of the request's topic was "
                                                "scanned, so nothing proves the erasure"})
            update.update(status="failed", verified_at_ms=None, failure=json.dumps(failure))
        elif missing is None or missing:
            # clean here, but other replicas (or, without the metadata, unknown ones) may
            # still hold the subject: not verified until every one is scanned clean
            update.update(status="partially_verified", verified_at_ms=None, failure=None)
        else:
            update.update(status="verified_local_only" if tiered else "verified",
                          verified_at_ms=now_ms, failure=None)
        updates.append(update)
        report["requests"].append({k: update[k] for k in (
            "request_id", "status", "verified_segments_scanned", "verified_records_scanned")}
            | ({"residual": residual[:10]} if residual else {})
            | ({"missing_replicas": missing[:20], "missing_replica_count": len(missing)}
               if missing else {})
            | ({"missing_replicas": "no metadata log: where the replicas live is unknown"}
               if missing is None else {})
            | ({"remote_tier": "not_covered", "tiered_topics": tiered} if tiered else {}))
    report["partitions"] = list(lines.values())
    _record(state_dir, "verify", run_id, log_dir, now_ms, started, lines, updates)
    failed = any(u["status"] == "failed" for u in updates)
    unverified = any(u["status"] == "partially_verified" for u in updates) or any(
        "unverified_because" in r for r in report["requests"])
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


def verify_exit_code(state_dir: str, reports: Sequence[Mapping[str, Any]]) -> int:
    """The exit code of verifies run one after the other over a broker's log dirs: by what
    the ledger says of their requests afterwards (failed: 1; not yet verified everywhere, or
    left unverified by an unreadable dir: 6), and any run that failed."""
    if any(r["status"] == "failed" for r in reports):
        return EXIT_FAILURE
    ids = {q["request_id"] for r in reports for q in r["requests"]}
    statuses = {row["status"] for row in ledger.load_requests(state_dir)
                if row["request_id"] in ids}
    if "failed" in statuses:
        return EXIT_FAILURE
    return EXIT_OK if statuses <= DONE else EXIT_PARTIAL


def perform(action: str, log_dir: str, state_dir: str, now_ms: int, *, master: str | None,
            dry_run: bool = False, exclude_pending_deletes: bool = False,
            metadata_log_dir: str | None = None, server_properties: str | None = None,
            assume_kafka_defaults: bool = False) -> dict[str, Any]:
    """``erase apply`` or ``erase verify`` (``action``), in a Spark session on ``master`` when
    there is something to scan; returns the JSON report (its exit code:
    :func:`report_exit_code`)."""
    if action == "apply":
        return apply(None, log_dir, state_dir, now_ms, master=master, dry_run=dry_run,
                     exclude_pending_deletes=exclude_pending_deletes,
                     metadata_log_dir=metadata_log_dir, server_properties=server_properties,
                     assume_kafka_defaults=assume_kafka_defaults)
    return verify(None, log_dir, state_dir, now_ms, master=master,
                  metadata_log_dir=metadata_log_dir, server_properties=server_properties,
                  assume_kafka_defaults=assume_kafka_defaults)


def summary(report: Mapping[str, Any]) -> str:
    """The human summary of an ``erase apply`` or ``verify`` report (a dry run's in
    conditional words: it changed nothing)."""
    dry = report.get("dry_run", False)
    lines = [f"{p['dir']}: {p['status']}"
             + (f", {p['records_erased']} records erased in {p['segments_rewritten']} segments"
                if p.get("records_erased") else "")
             + (f", {p['records_matched']} records would be erased in "
                f"{p['segments_rewritten']} segments" if dry and p.get("records_matched")
                else "")
             + (f", {p['records_scanned']} records scanned" if "residual_matches" in p else "")
             for p in report["partitions"]]
    lines += [f"request {r['request_id']}: " + ", ".join(
        (f"would erase {v}" if dry and k == "records_erased" else f"{k} {v}")
        for k, v in r.items() if k != "request_id") for r in report["requests"]]
    if report.get("ledger_error"):
        e = report["ledger_error"]
        lines.append(f"LEDGER NOT UPDATED: {e['message']} ({e.get('path')}); remedy: "
                     f"{e['remedy']}")
    lines.append(f"{report['command']} ({report['run_id']}): "
                 + (f"dry run, nothing changed; the run would end {report['status']}" if dry
                    else report["status"]))
    return "\n".join(lines)
