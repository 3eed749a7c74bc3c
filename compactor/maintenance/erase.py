"""GDPR erasure on Spark, on the driver: ``compactor erase apply`` and ``erase verify`` (also
``jobs/erase.py``).

``apply`` reads the pending requests from the ledger (``compactor.erasure.ledger``) as a Spark
DataFrame, scans **every** segment of the partitions they concern (the active one included)
and matches each record's key digest (or a named header's value digest) against them with a
join inside Spark, rewrites only the segments holding matches
(executors write ``.cleaned`` segments; the driver swaps them in with the compaction swap
protocol), and only then records the requests applied, with a Delta MERGE of outcomes computed row
by row on the executors (:mod:`compactor.erasure.outcomes`): the driver holds what the run
found, never the list of requests. A crash before that leaves them pending and the log old or
new per segment; the next ``apply`` finishes. ``verify`` rescans and marks requests verified
when no record of theirs remains; a residual match fails the request.
"""

from __future__ import annotations

import difflib
import functools
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor import native
from compactor.cleaner.policy import BatchHeader, high_watermark
from compactor.cleaner.verify import txn_problems
from compactor.cluster.catalog import HOW_TO_CONFIGURE, Catalog
from compactor.codec.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from compactor.config import TopicConfig
from compactor.erasure import ledger, outcomes
from compactor.erasure.outcomes import ApplyContext, DirState, Matched, VerifyContext
from compactor.erasure.rules import (
    ALL_TOPICS,
    HEADER,
    covers_topic,
    keep_when_emptied,
    latest_per_key,
    place_key,
    superseded_by_erased,
)
from compactor.erasure.status import APPLICABLE, DONE, VERIFIABLE, RequestStatus, failure_words
from compactor.errors import CompactorError, ConfigError, RemoteTierError, SwapRecoveryError
from compactor.log import storage, swap
from compactor.log.layout import (
    DELETE,
    LIVE,
    STRAY,
    PartitionLog,
    check_partition_files,
    check_unlinked,
    load_partition,
    open_log_dir,
    read_aborted_txns,
    read_offset_checkpoint,
    read_properties,
    read_topic_id,
)
from compactor.log.recovery import recover_partitions
from compactor.maintenance import erase_remote
from compactor.maintenance.erase_report import ErasureReport, dry_run_words
from compactor.maintenance.options import MaintenanceOptions, load_catalog, state_store
from compactor.maintenance.report import CHANGED, ErasureOutcome, RunStatus, lease_loss
from compactor.model import TopicPartition
from compactor.remote import tier
from compactor.spark import delta as spark_delta
from compactor.spark import ledger as spark_ledger
from compactor.spark import stages as spark_stages
from compactor.spark.session import LazySession
from compactor.state import runs as run_history
from compactor.state import tables as state_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: the copy of a partition in the broker's remote tier (a ``remote:<partition>`` directory)
REMOTE = "remote"


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
    """A record one request matched, with what the request says of it (from the join)."""

    segment_base: int
    position: int
    offset: int
    request_id: str
    key_digest: bytes | None
    bare_tombstone: bool
    selector: str
    leave_tombstone: bool
    request: Mapping[str, Any]  # the request's status, places and tombstones left


@dataclass(kw_only=True)
class _Scan:
    """What one erasure scan found, per directory id."""

    matches: dict[int, list[_Match]] = field(default_factory=dict)
    segments: dict[int, int] = field(default_factory=dict)
    records: dict[int, int] = field(default_factory=dict)
    errors: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: the batch headers the partition-wide checks read of each local directory with a match
    #: (an apply's ``with_headers``: :func:`compactor.erasure.rules.partition_check_batches`)
    headers: dict[int, list[BatchHeader]] = field(default_factory=dict)


def _scan(session: SparkSession, parts: Mapping[int, PartitionLog], dirs: Mapping[int, _Dir],
          requests: spark_stages.RunRequests, pending: ledger.PendingSummary, writer: str,
          remote: spark_stages.RemoteScan | None = None, *, with_headers: bool = False
          ) -> _Scan:
    ids = [*parts, *(remote.segments if remote else ())]
    out = _Scan(matches={i: [] for i in ids}, segments={i: 0 for i in ids},
                records={i: 0 for i in ids})
    topics = {i: dirs[i].tp.topic for i in ids}
    segments, matches, out.headers = spark_stages.erasure_matches(
        session, parts, topics, requests, pending.header_names, pending.digests,
        writer=writer, remote=remote, with_headers=with_headers)
    for r in segments:
        if r.error:
            out.errors.setdefault(r.tp_id, json.loads(r.error))
        else:
            out.segments[r.tp_id] += 1
            out.records[r.tp_id] += r.records
    for r in matches:
        out.matches[r.tp_id].append(_Match(
            r.segment_base, r.position, r.offset, r.request_id, r.key_digest,
            bool(r.bare_tombstone), r.selector, bool(r.leave_tombstone),
            {"status": r.status, "places": r.places, "tombstones_left": r.tombstones_left}))
    for found in out.matches.values():
        found.sort(key=lambda m: (m.segment_base, m.position, m.offset, m.request_id))
    return out


def _pending(state_dir: str, statuses: frozenset[str], opts: MaintenanceOptions, *,
             not_applied_at: str | None = None) -> ledger.PendingSummary:
    """The ledger's checked summary of the requests a run takes up, its integrity digests by
    the native kernel where the run's writer and the ledger's size make it pay
    (:func:`compactor.native.integrity_digests`)."""
    return ledger.pending_summary(
        state_dir, statuses, not_applied_at=not_applied_at,
        hasher_for=functools.partial(native.integrity_digests, opts.writer),
        max_kinds=spark_stages.HELD_BY_KIND)


def _requests(state_dir: str, statuses: frozenset[str], pending: ledger.PendingSummary, *,
              not_applied_at: str | None = None) -> spark_stages.RunRequests:
    """The run's requests in ``statuses`` (not yet applied at ``not_applied_at``) at the table
    version its ``pending`` summary read: the rows the summary kept when they are few, else
    the ledger to read them from again a pass at a time."""
    if pending.rows is not None:
        return pending.rows
    return ledger.RunLedger(state_dir, statuses, pending.version, not_applied_at,
                            tallied=pending.tallied)


def _covered(topics: frozenset[str]) -> Callable[[str], bool]:
    """Whether a topic is covered by a request on one of ``topics``."""
    return lambda topic: any(covers_topic(t, topic) for t in topics)


def _load(log_dir: str, wanted: Callable[[str], bool], *, recover: bool) -> tuple[
        dict[int, _Dir], dict[int, PartitionLog], dict[int, dict[str, Any]]]:
    """Every directory holding data of the ``wanted`` topics (live partitions and their
    ``-future``, ``-delete`` and ``-stray`` copies), read; those that cannot be read come back
    as errors.

    With ``recover``, each directory's interrupted swap is first settled as Kafka's
    ``LogLoader.load`` will settle it when the broker starts (:func:`recover_partitions`), so
    that what is scanned is what a broker will serve. A directory whose leftovers remain (the
    recovery failed, or ``recover`` is off: a dry run changes nothing) is an error: its
    ``.swap`` files may become segments that no scan read."""
    ld = open_log_dir(log_dir)
    unrecovered: dict[str, CompactorError] = {}
    if recover:
        _, unrecovered = recover_partitions(log_dir, [c.name for c in ld.copies_of(wanted)])
    copies = ld.copies_of(wanted)
    dirs = {i: _Dir(c.tp, c.kind, c.name, storage.join(log_dir, c.name))
            for i, c in enumerate(copies)}
    parts: dict[int, PartitionLog] = {}
    errors: dict[int, dict[str, Any]] = {}
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
            if d.name in unrecovered:
                raise unrecovered[d.name]
            part = load_partition(d.path)
            if part.leftovers:
                raise SwapRecoveryError(
                    f"an interrupted swap left {', '.join(part.leftovers[:3])}"
                    + (f" and {len(part.leftovers) - 3} more" if len(part.leftovers) > 3
                       else "") + ": a broker settles them when it loads the log "
                    "(LogLoader.load), so the segments it would serve are not yet known",
                    path=d.path, remedy="run `compactor recover` on the log dir (or the "
                    "command without --dry-run, which recovers first), then run again")
            check_unlinked(part)  # the subject must not outlive the swap under another name
            check_partition_files(part)
            parts[i] = part
        except CompactorError as err:
            errors[i] = err.to_dict()
    return dirs, parts, errors


@dataclass(kw_only=True)
class _Remote:
    """What a verify reads of the broker's remote tier (:func:`_remote_tier`)."""

    scan: spark_stages.RemoteScan | None = None
    #: remote directories that cannot be read: their requests stay unverified
    errors: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: live directory -> why its remote segments are out of reach here (not covered)
    not_covered: dict[str, str] = field(default_factory=dict)
    #: remote directory id -> its remote segments (any state), by start offset
    listed: dict[int, list[tier.RemoteSegment]] = field(default_factory=dict)


def _remote_tier(dirs: dict[int, _Dir], live: Collection[int], catalog: Catalog,
                 log_dir: str) -> _Remote:
    """The remote tier of the tiered topics' partitions read here (KIP-405): when the broker's
    ``server.properties`` turn its remote tier on, one ``remote:<partition>`` directory is
    added to ``dirs`` per live partition of a topic with ``remote.storage.enable`` whose
    remote log metadata is in this log dir: the segments it names
    (:func:`compactor.remote.tier.list_segments`), read through the broker's
    RemoteStorageManager. A partition whose metadata lives on another broker, or any when the
    tier's helper is not built, is not covered (``verified_local_only``, as without the
    settings); metadata that cannot be read leaves its requests unverified. ``live``: the
    ids of the live directories whose partitions may be read."""
    out = _Remote()
    if catalog.server_properties is None or not tier.enabled(
            read_properties(catalog.server_properties)):
        return out
    tiered = {i: d for i, d in dirs.items() if d.kind == LIVE and i in live
              and (cfg := catalog.configs.get(d.tp.topic)) is not None
              and cfg.remote_storage_enable}
    if not tiered:
        return out
    helper = spark_delta.folder("tier")
    if not tier.helper_built(helper):
        out.not_covered = {d.name: f"the remote tier's helper is not built in {helper} "
                                   f"(`python -m compactor.tools.build.jars` builds it; it needs "
                                   f"javac)"
                           for d in tiered.values()}
        return out
    wanted: dict[str, tuple[str, str, int]] = {}
    remote_dir: dict[str, int] = {}
    for i, d in tiered.items():
        r = max(dirs) + 1
        dirs[r] = _Dir(d.tp, REMOTE, f"{REMOTE}:{d.name}", f"{REMOTE}:{d.name}")
        remote_dir[d.name] = r
        topic_id = read_topic_id(d.path)
        if topic_id is None:
            out.errors[r] = RemoteTierError(
                "the partition has no partition.metadata, so its topic id, which names its "
                "remote segments, is unknown", path=d.path).to_dict()
        else:
            wanted[d.name] = (topic_id, d.tp.topic, d.tp.partition)
    if not wanted:
        return out
    try:
        listing = tier.list_segments(helper, catalog.server_properties, log_dir, wanted)
    except RemoteTierError as err:
        out.errors.update({remote_dir[name]: err.to_dict() for name in wanted})
        return out
    segments: dict[int, list[tuple[str, int, int]]] = {}
    for name in wanted:
        if name in listing.unknown:
            del dirs[remote_dir[name]]
            out.not_covered[name] = listing.unknown[name]
            continue
        out.listed[remote_dir[name]] = [x for x in listing.segments if x.partition_name == name]
        segments[remote_dir[name]] = [(x.segment_id, x.start_offset, x.end_offset)
                                      for x in out.listed[remote_dir[name]]]
    out.scan = spark_stages.RemoteScan(helper, catalog.server_properties, log_dir, segments)
    return out


def _unknown_topics(topics: frozenset[str], dirs: Mapping[int, _Dir],
                    catalog: Catalog) -> dict[str, str]:
    """Requested topic -> why it is unknown (no directory holds it and the cluster's metadata
    does not name it): a request on it can never be proven erased."""
    present = {d.tp.topic for d in dirs.values()}
    known = present | (set(catalog.metadata.topic_ids) if catalog.metadata else set())
    out = {}
    for topic in sorted(topics):
        if topic == ALL_TOPICS or topic in present:
            continue
        close = difflib.get_close_matches(topic, sorted(known), n=1)
        out[topic] = (f"topic {topic!r} has no partition in this log dir"
                      + (" (the cluster's metadata knows it: its partitions live in "
                         "another log dir)" if topic in known else
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
                  configs: Mapping[str, TopicConfig]) -> _Plan:
    """Which records go (Kafka's ``Cleaner.shouldRetainRecord`` keeps only a key's latest record, so
    on a compacted topic an erased latest record takes the key's older records with it,
    :func:`compactor.erasure.rules.superseded_by_erased`) and which stay as bare tombstones."""
    plan = _Plan()
    wanted: dict[int, set[bytes]] = {}
    for i, matches in found.matches.items():
        compacted = configs[dirs[i].tp.topic].compact
        latest = latest_per_key((m.key_digest, m.offset) for m in matches
                                if m.key_digest is not None and m.leave_tombstone
                                and compacted)
        for m in matches:
            if m.key_digest is not None and latest.get(m.key_digest) == m.offset:
                plan.add(plan.tombstones, i, m.segment_base, m.position, m.offset)
                left = plan.tombstones_left.setdefault(m.request_id, [])
                if (dirs[i].name, m.offset) not in left:
                    left.append((dirs[i].name, m.offset))
            else:
                plan.add(plan.erased, i, m.segment_base, m.position, m.offset)
            # a key matched by a header (not by its own digest) may have older records
            if compacted and m.key_digest is not None and m.selector == HEADER:
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


#: a report lists at most this many requests (with counts of all): a million subjects must
#: not make a million-line report on the driver
REPORT_REQUESTS = 1000


def _start(action: str, opts: MaintenanceOptions, state_dir: str) -> ErasureReport:
    """The report of a new run (its id made here), once the state dir and its ledger are
    checked."""
    state_tables.check_state_dir(state_dir, opts.log_dir)
    state_tables.require_ledger(state_dir)
    return ErasureReport(command=f"erase_{action}",
                         run_id=f"erase-{action}-{opts.now_ms}-{uuid.uuid4().hex[:8]}",
                         log_dir=opts.log_dir, now_ms=opts.now_ms,
                         dry_run=opts.dry_run if action == "apply" else None)


def _catalog(opts: MaintenanceOptions) -> Catalog:
    # erasure applies to every topic; its cleanup.policy (the compacted-topic rule) and
    # remote.storage.enable (what a verify proves) must be the cluster's: a topic whose are
    # not known is refused (Catalog.erasure_refusal), never erased as a guess
    return load_catalog(opts)


def _refused(dirs: Mapping[int, _Dir], catalog: Catalog) -> dict[int, dict[str, Any]]:
    """Directory id -> why it is neither rewritten nor counted as scanned clean."""
    out = {}
    for i, d in dirs.items():
        reason = catalog.erasure_refusal(d.tp.topic)
        if reason is not None:
            out[i] = ConfigError(reason, remedy=HOW_TO_CONFIGURE).to_dict()
    return out


def _session(spark: SparkSession | None, master: str | None, state_dir: str) -> LazySession:
    return LazySession(master, spark, object_store=state_store(state_dir), delta_tables=True)


def apply(spark: SparkSession | None, opts: MaintenanceOptions, state_dir: str, *,
          master: str | None = None, exclude_pending_deletes: bool = False) -> ErasureReport:
    """Erase the records of every request not yet applied here (this log dir of this
    broker) from every copy on disk. ``opts.dry_run`` scans and reports what would be
    rewritten, changing nothing. A Spark session (``spark``, else a new one on ``master``)
    starts only when a request is pending here."""
    report = _start("apply", opts, state_dir)
    log_dir, now_ms, dry_run, run_id = opts.log_dir, opts.now_ms, opts.dry_run, report.run_id
    if not ledger.has_requests(state_dir, APPLICABLE):
        return report
    started = int(time.time() * 1000)
    catalog = _catalog(opts)
    place = catalog.place(log_dir)
    here = place_key(place)
    # a request is applied once per place: other log dirs and brokers still take it
    pending = _pending(state_dir, APPLICABLE, opts, not_applied_at=here)
    if pending.count == 0:
        return report
    wanted = _covered(pending.topics)
    session = _session(spark, master, state_dir)
    with storage.log_dir_lock(log_dir):
        dirs, parts, errors = _load(log_dir, wanted, recover=not dry_run)
        refused = _refused(dirs, catalog)
        parts = {i: p for i, p in parts.items() if i not in refused}
        unknown = _unknown_topics(pending.topics, dirs, catalog)
        requests = _requests(state_dir, APPLICABLE, pending, not_applied_at=here)
        found = _scan(session(spark_stages.input_bytes(parts)), parts, dirs, requests, pending,
                      opts.writer, with_headers=not dry_run)
        errors.update(found.errors)
        plan = _plan_erasure(session, dirs, parts, found, catalog.configs)
        errors.update({i: e for i, e in found.errors.items() if i not in errors})
        held = {i for i, d in dirs.items() if exclude_pending_deletes and d.kind in (DELETE, STRAY)}
        writable = {i for i in parts if i not in errors and i not in held}
        messages = {} if dry_run else _rewrite(session, log_dir, dirs, parts, plan, writable,
                                               catalog.configs, errors, found.headers,
                                               assume_committed=opts.assume_committed,
                                               writer=opts.writer)
        lines: dict[int, dict[str, Any]] = {}
        for i, d in dirs.items():
            line: dict[str, Any] = d.line()
            got = messages.get(i, [])
            touched = plan.segments(i)
            if i in refused:
                line.update(status=ErasureOutcome.BLOCKED, error=refused[i])
            elif i in errors:
                line.update(status=ErasureOutcome.CORRUPT, error=errors[i])
            elif i in held and found.matches.get(i):
                line["status"] = ErasureOutcome.RESIDUAL_COPY  # --exclude-pending-deletes
            elif dry_run:
                line["status"] = (ErasureOutcome.WOULD_REWRITE if touched
                                  else ErasureOutcome.UNCHANGED)
            elif any(m.error for m in got):
                for m in got:
                    swap.abort_group(d.path, m)
                line.update(status=ErasureOutcome.FAILED,
                            error=next(m.error for m in got if m.error))
            elif (failure := swap.commit_isolated(d.path, got, parts[i].identities)) is not None:
                line.update(status=ErasureOutcome.FAILED, error=failure.to_dict())
            else:
                line["status"] = (ErasureOutcome.REWRITTEN if got
                                  else ErasureOutcome.UNCHANGED)
            done = line["status"] in (ErasureOutcome.REWRITTEN, ErasureOutcome.WOULD_REWRITE)
            line.update(
                segments=len(parts[i].segments) if i in parts else 0,
                segments_scanned=found.segments.get(i, 0),
                records_scanned=found.records.get(i, 0),
                records_matched=len({m.offset for m in found.matches.get(i, [])}),
                segments_rewritten=len(touched) if done else 0,
                records_erased=sum(m.records_in - m.records_out for m in got)
                if line["status"] == ErasureOutcome.REWRITTEN else 0,
                superseded_by_erased=plan.superseded.get(i, 0) if done else 0,
                tombstones_left=sum(len(o) for seg in plan.tombstones.get(i, {}).values()
                                    for o in seg.values()) if done else 0,
                bytes_in=sum(m.bytes_in for m in got), bytes_out=sum(m.bytes_out for m in got),
                seconds=round(sum(m.seconds for m in got), 3),
            )
            if i in held and found.matches.get(i):
                line["residual_offsets"] = sorted({m.offset for m in found.matches[i]})[:100]
            lines[i] = line
        if not dry_run:
            _settle_lease(log_dir, lines)
    report.partitions = list(lines.values())
    ctx = ApplyContext(
        run_id=run_id, now_ms=now_ms, place=place, key=here, unknown_topics=unknown,
        dirs=[DirState(d.name, d.tp.topic, d.kind, ErasureOutcome(lines[i]["status"]).is_problem)
              for i, d in dirs.items()],
        matched=_matched(found, plan, dirs))
    result = _apply_outcomes(session, requests, ctx, report)
    counts = result.counts
    try:
        blocked = counts.get(outcomes.BLOCKED, 0) > 0

        def status() -> RunStatus:
            return RunStatus.LOCKED if report.locked else RunStatus.of(
                failed=counts.get(RequestStatus.FAILED, 0) > 0, partial=blocked)

        # a dry run ends as the real run would (its exit code too), in conditional words
        report.status = status()
        if dry_run:
            dry_run_words(report.requests)
            return report
        try:
            report.record_moved(*_record(state_dir, "apply", run_id, log_dir, now_ms, started,
                                         lines, result.result, session(), APPLIED_COLUMNS,
                                         pending.version))
            report.status = status()
        except CompactorError as err:  # the rewrites stand: say so, with the report
            rewritten = [line["dir"] for line in lines.values()
                         if line["status"] == ErasureOutcome.REWRITTEN]
            report.ledger_error = {**err.with_remedy(
                f"{len(rewritten)} partition(s) were rewritten ({', '.join(rewritten[:5])}) "
                f"but the ledger does not record it: the requests stay pending; fix the "
                f"ledger's problem and run `erase apply` again (it finds the erased records "
                f"gone and records the requests applied)").to_dict(), "rewritten": rewritten}
            if report.status == RunStatus.OK:
                report.status = RunStatus.PARTIAL
        return report
    finally:
        result.unpersist()


def apply_remote(spark: SparkSession | None, opts: MaintenanceOptions, state_dir: str,
                 bootstrap: str, *, master: str | None = None) -> ErasureReport:
    """The remote step of an apply (KIP-405), while the cluster runs: erase every request
    not yet applied to the remote tier whose metadata this log dir holds (the place
    ``remote tier via`` this log dir) from the remote segments of its tiered topics. The
    segments are listed and scanned as a verify reads them; each one that holds a subject is
    replaced by an erased copy through the cluster's RLMM at ``bootstrap`` and the broker's
    RSM (:func:`compactor.maintenance.erase_remote.erase_remote_segments`), after the
    replacements an earlier run left interrupted are settled. The log dir is only read (no
    lock: its broker runs); its local segments are ``erase apply``'s, with the broker stopped.
    """
    report = _start("apply", opts, state_dir)
    log_dir, now_ms, run_id = opts.log_dir, opts.now_ms, report.run_id
    catalog = _catalog(opts)
    if catalog.server_properties is None or not tier.enabled(
            read_properties(catalog.server_properties)):
        raise ConfigError("`erase apply --remote` needs the broker's server.properties with "
                          f"{tier.SYSTEM_ENABLE}=true (--server-properties)")
    helper = spark_delta.folder("tier")
    props = catalog.server_properties
    report.remote_resolved = [r.line() for r in erase_remote.resolve_interrupted(
        helper, props, log_dir, bootstrap, state_dir)]
    if any(r.get("error") for r in report.remote_resolved):
        report.status = RunStatus.PARTIAL
    if not ledger.has_requests(state_dir, APPLICABLE):
        return report
    started = int(time.time() * 1000)
    place = {**catalog.place(log_dir), "tier": REMOTE}
    here = place_key(place)
    pending = _pending(state_dir, APPLICABLE, opts, not_applied_at=here)
    if pending.count == 0:
        return report
    session = _session(spark, master, state_dir)
    copies = [c for c in open_log_dir(log_dir).copies_of(_covered(pending.topics))
              if c.kind == LIVE]
    dirs = {i: _Dir(c.tp, c.kind, c.name, storage.join(log_dir, c.name))
            for i, c in enumerate(copies)}
    refused = _refused(dirs, catalog)
    remote = _remote_tier(dirs, set(dirs) - set(refused), catalog, log_dir)
    errors = {**remote.errors}
    requests = _requests(state_dir, APPLICABLE, pending, not_applied_at=here)
    session(0)
    found = (_scan(session(), {}, dirs, requests, pending, opts.writer, remote.scan)
             if remote.scan is not None else _Scan())
    errors.update(found.errors)
    plan = _plan_erasure(session, dirs, {}, found, catalog.configs)
    replaced = {} if opts.dry_run else _rewrite_remote(
        helper, props, log_dir, bootstrap, state_dir, remote, plan,
        [i for i in remote.listed if i not in errors and plan.segments(i)], dirs,
        catalog.configs)
    lines: dict[int, dict[str, Any]] = {}
    for i, d in dirs.items():
        if d.kind != REMOTE and i not in refused:
            continue  # a live directory: the local apply's
        line: dict[str, Any] = {**d.line(), "segments_scanned": found.segments.get(i, 0),
                                "records_scanned": found.records.get(i, 0),
                                "records_matched": len({m.offset
                                                        for m in found.matches.get(i, [])})}
        rewritten, failure = replaced.get(i, ([], None))
        if i in refused:
            line.update(status=ErasureOutcome.BLOCKED, error=refused[i])
        elif i in errors:
            line.update(status=ErasureOutcome.CORRUPT, error=errors[i])
        elif opts.dry_run:
            line["status"] = (ErasureOutcome.WOULD_REWRITE if plan.segments(i)
                              else ErasureOutcome.UNCHANGED)
        else:
            line["status"] = (ErasureOutcome.FAILED if failure else ErasureOutcome.REWRITTEN
                              if rewritten else ErasureOutcome.UNCHANGED)
            if failure:
                line["error"] = failure
        line.update(segments_rewritten=len(rewritten),
                    records_erased=sum(r.records_in - r.records_out for r in rewritten),
                    remote_segments_rewritten=[
                        {"segment_id": r.segment_id, "new_segment_id": r.new_segment_id,
                         "start_offset": r.start_offset, "end_offset": r.end_offset}
                        for r in rewritten])
        lines[i] = line
    for name, why in remote.not_covered.items():
        d = next(x for x in dirs.values() if x.name == name)
        lines[len(dirs) + len(lines)] = {**d.line(), "dir": f"{REMOTE}:{name}", "copy": REMOTE,
                                         "status": ErasureOutcome.SKIPPED,
                                         "remote_not_covered": why}
    report.partitions = list(lines.values())
    ctx = ApplyContext(
        run_id=run_id, now_ms=now_ms, place=place, key=here, unknown_topics={},
        dirs=[DirState(d.name, d.tp.topic, d.kind, ErasureOutcome(lines[i]["status"]).is_problem)
              for i, d in dirs.items() if i in lines],
        matched=_matched(found, plan, dirs),
        remote_segments={(i, r.start_offset): {"partition": str(dirs[i].tp), **{
            k: getattr(r, k) for k in ("segment_id", "new_segment_id", "start_offset",
                                       "end_offset")}}
            for i, (done, _) in replaced.items() for r in done})
    result = _apply_outcomes(session, requests, ctx, report)
    counts = result.counts
    try:
        failed = any(line.get("error") for line in lines.values())
        report.status = RunStatus.of(failed=counts.get(RequestStatus.FAILED, 0) > 0,
                                     partial=failed or report.status == RunStatus.PARTIAL
                                     or counts.get(outcomes.BLOCKED, 0) > 0)
        if opts.dry_run:
            dry_run_words(report.requests)
            return report
        report.record_moved(*_record(state_dir, "apply", run_id, log_dir, now_ms, started,
                                     lines, result.result, session(), APPLIED_COLUMNS,
                                     pending.version))
        return report
    finally:
        result.unpersist()


def _rewrite_remote(helper: str, props: str, log_dir: str, bootstrap: str, state_dir: str,
                    remote: _Remote, plan: _Plan, ids: Collection[int], dirs: Mapping[int, _Dir],
                    configs: Mapping[str, TopicConfig]
                    ) -> dict[int, tuple[list[erase_remote.RemoteRewrite], dict[str, Any] | None]]:
    """The remote segments of the directories ``ids`` that hold erased records, replaced by
    their erased copies (one helper for them all): per directory, the replacements and the
    first failure (the others stand). A topic with ``retention.bytes`` refuses a segment
    Kafka would count twice while both copies are finished
    (:func:`compactor.remote.tier.counted_twice`): its size-based retention could delete the
    oldest remote segment early."""
    out: dict[int, tuple[list[erase_remote.RemoteRewrite], dict[str, Any] | None]] = {
        i: ([], None) for i in ids}
    targets: list[tuple[int, erase_remote.RemoteTarget]] = []
    for i in ids:
        listed = remote.listed[i]
        served = {x.start_offset: x for x in listed if x.state == tier.SERVED}
        config = configs[dirs[i].tp.topic]
        for base in sorted(plan.segments(i)):
            segment = served.get(base)
            if segment is None:
                err = RemoteTierError("the remote segment holding the subject is not served "
                                      "(its copy or deletion is under way): run again later",
                                      base_offset=base)
            elif config.retention_bytes >= 0 and tier.counted_twice(segment, listed):
                err = RemoteTierError(
                    f"remote segment {segment.segment_id} is the last of a leader epoch, and "
                    f"the topic has retention.bytes={config.retention_bytes}: while its erased "
                    "copy and it are both finished, Kafka's size-based retention counts both "
                    "(RLMExpirationTask.buildRetentionSizeData) and could delete the oldest "
                    "remote segment early", base_offset=base,
                    remedy="raise the topic's retention.bytes by the segment's size (or set "
                           "-1) while the erasure runs, then restore it; or run again once a "
                           "later segment of the epoch is in the remote tier")
            else:
                targets.append((i, erase_remote.RemoteTarget(
                    segment, plan.erased.get(i, {}).get(base, {}), config,
                    plan.tombstones.get(i, {}).get(base))))
                continue
            if out[i][1] is None:
                out[i] = (out[i][0], err.to_dict())
    try:
        results = erase_remote.erase_remote_segments(
            helper, props, log_dir, bootstrap, [t for _, t in targets], state_dir=state_dir)
    except RemoteTierError as err:
        results = [err] * len(targets)
    for (i, _), result in zip(targets, results, strict=True):
        if isinstance(result, RemoteTierError):
            if out[i][1] is None:
                out[i] = (out[i][0], result.to_dict())
        else:
            out[i][0].append(result)
    return out


#: the ledger columns an apply and a verify set (``compactor.schemas.spark.REQUEST_OUTCOME``)
APPLIED_COLUMNS = ("status", "run_id", "records_erased", "superseded_by_erased",
                   "partitions_rewritten", "segments_rewritten", "applied_at_ms",
                   "tombstones_left", "places", "failure")
VERIFIED_COLUMNS = ("status", "verify_run_id", "verified_at_ms", "verified_segments_scanned",
                    "verified_records_scanned", "coverage", "remote_tier", "places",
                    "missing_replicas", "failure")
#: what an apply's report says of each request it lists
APPLY_REPORTED = ("request_id", "outcome", "status", "records_erased", "superseded_by_erased",
                  "partitions_rewritten", "segments_rewritten", "failure", "blocked_by")
VERIFY_REPORTED = ("request_id", "outcome", "status", "verified_segments_scanned",
                   "verified_records_scanned", "residual", "missing_replicas", "tiered_topics",
                   "unverified_because", "expected_status")


def _settle_lease(log_dir: str, lines: Mapping[int, dict[str, Any]]) -> None:
    """An apply that lost the log dir's lease (S3: another run took it) leaves every directory
    it did not rewrite ``locked`` (:meth:`LogDirReport.settle_lease`): its requests stay
    pending, and the run exits 4."""
    error = lease_loss(log_dir)
    if error is None:
        return
    for line in lines.values():
        if line["status"] not in CHANGED:
            line.update(status=ErasureOutcome.LOCKED, error=error)


def _matched(found: _Scan, plan: _Plan, dirs: Mapping[int, _Dir]) -> dict[str, Matched]:
    """What the apply erased of each request that matched here (the requests that did not
    match are not on the driver at all)."""
    offsets: dict[str, set[tuple[int, int, int]]] = defaultdict(set)
    for i, matches in found.matches.items():
        for m in matches:
            offsets[m.request_id].add((i, m.segment_base, m.offset))
    return {rid: Matched(frozenset(o), tuple(plan.tombstones_left.get(rid, ())),
                         plan.superseded_by_request.get(rid, 0))
            for rid, o in offsets.items()}


def _apply_outcomes(session: LazySession, requests: spark_stages.RunRequests, ctx: ApplyContext,
                    report: ErasureReport) -> spark_stages.RunOutcomes:
    """Every request's outcome of an apply (the caller unpersists it), counted, and the first
    of them in ``report``."""
    result = spark_stages.run_outcomes(
        session(), requests, functools.partial(outcomes.applied_update, ctx=ctx),
        ctx.individual, APPLY_REPORTED, REPORT_REQUESTS)
    report.requests = [_apply_entry(r) for r in result.shown]
    report.requests_by_outcome = result.counts
    return result


def _apply_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    if row["outcome"] == outcomes.BLOCKED:
        return {"request_id": row["request_id"], "status": RequestStatus.PENDING,
                "blocked_by": json.loads(row["blocked_by"])}
    entry = {k: json.loads(row[k]) if k == "failure" else row[k]
             for k in ("request_id", "status", "records_erased", "superseded_by_erased",
                       "partitions_rewritten", "segments_rewritten", "failure")
             if row.get(k) is not None}
    if entry.get("failure"):
        entry["reason"] = failure_words(entry["failure"])
    return entry


def _rewrite(spark: LazySession, log_dir: str, dirs: Mapping[int, _Dir],
             parts: Mapping[int, PartitionLog], plan: _Plan, writable: set[int],
             configs: Mapping[str, TopicConfig], errors: dict[int, dict[str, Any]],
             headers: Mapping[int, Sequence[BatchHeader]], *,
             assume_committed: bool = False, writer: str = "native") -> dict[int, list[Any]]:
    """Write ``.cleaned`` copies of the segments holding erased records (readable
    directories only; ``headers``: their batches the checks read, from the erasure's scan;
    ``writer``: the engine that frames them); a
    directory whose transaction index fails the partition-wide check
    (:func:`compactor.cleaner.verify.txn_problems`) is added to ``errors`` and left alone."""
    hit = {i: parts[i] for i in writable if plan.segments(i)}
    if not hit:
        return {}
    hws = read_offset_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT)
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
        first = part.segments[0].base_offset if part.segments else 0
        keep = keep_when_emptied(hdrs, high_watermark(hws.get(dirs[i].tp), first, leo,
                                                      assume_committed=assume_committed))
        erased, bare = plan.erased.get(i, {}), plan.tombstones.get(i, {})
        for base in sorted(plan.segments(i)):
            seg = next(s for s in part.segments if s.base_offset == base)
            segments[(i, base)] = (part.path, seg, configs[dirs[i].tp.topic])
            tasks.append((i, base,
                          json.dumps({str(p): sorted(o) for p, o in erased.get(base, {}).items()}),
                          json.dumps(sorted(p for b, p in keep if b == base)),
                          json.dumps({str(p): sorted(o) for p, o in bare.get(base, {}).items()})))
    out: dict[int, list[Any]] = defaultdict(list)
    for message in spark_stages.rewrite_segments(spark(), tasks, segments, writer=writer):
        out[message.tp_id].append(message)
    return out


def verify(spark: SparkSession | None, opts: MaintenanceOptions, state_dir: str, *,
           master: str | None = None) -> ErasureReport:
    """Rescan every copy on disk for every applied request; mark it verified (no record
    left but the bare tombstones it asked to leave, and at least one segment scanned),
    ``verified_local_only`` when a tiered topic's remote segments are out of reach (the
    broker's remote tier settings not given), or failed (with the directories and offsets
    found). With them, the remote segments are scanned too (:func:`_remote_tier`)."""
    report = _start("verify", opts, state_dir)
    log_dir, now_ms, run_id = opts.log_dir, opts.now_ms, report.run_id
    pending = _pending(state_dir, VERIFIABLE, opts)
    if pending.count == 0:
        return report
    started = int(time.time() * 1000)
    catalog = _catalog(opts)
    session = _session(spark, master, state_dir)
    with storage.log_dir_lock(log_dir):
        # what a broker would serve: an interrupted swap settled first, as its loader will
        dirs, parts, errors = _load(log_dir, _covered(pending.topics), recover=True)
        refused = _refused(dirs, catalog)
        parts = {i: p for i, p in parts.items() if i not in refused}
        remote = _remote_tier(dirs, set(parts), catalog, log_dir)
        errors.update(remote.errors)
        requests = _requests(state_dir, VERIFIABLE, pending)
        found = _scan(session(spark_stages.input_bytes(parts)), parts, dirs, requests, pending,
                      opts.writer, remote.scan)
    errors.update(found.errors)
    errors.update(refused)  # an unknown policy proves nothing: the request stays applied

    place = catalog.place(log_dir)
    key = place_key(place)
    lines = {}
    residual: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for i, d in dirs.items():
        left = [m for m in found.matches.get(i, []) if not outcomes.accepted_tombstone(
            m.request, key, d.name, m.offset, m.bare_tombstone)]
        for m in left:
            residual[m.request_id].append({**d.line(), "segment_base": m.segment_base,
                                           "position": m.position, "offset": m.offset})
        line: dict[str, Any] = {**d.line(), "segments_scanned": found.segments.get(i, 0),
                                "records_scanned": found.records.get(i, 0),
                                "residual_matches": len(left)}
        line["status"] = (ErasureOutcome.BLOCKED if i in refused else ErasureOutcome.CORRUPT
                          if i in errors else ErasureOutcome.RESIDUAL if line["residual_matches"]
                          else ErasureOutcome.CLEAN)
        if i in errors:
            line["error"] = errors[i]
        if d.name in remote.not_covered:
            line["remote_not_covered"] = remote.not_covered[d.name]
        if i in remote.listed:  # the proof names every remote segment it read
            line["remote_segments"] = [{"segment_id": x.segment_id,
                                        "start_offset": x.start_offset,
                                        "end_offset": x.end_offset, "state": x.state}
                                       for x in remote.listed[i]]
        lines[i] = line
    scanned_remote = {d.name for i, d in dirs.items() if d.kind == REMOTE and i not in errors}
    ctx = VerifyContext(
        run_id=run_id, now_ms=now_ms, place=place, key=key, residual=dict(residual),
        dirs=[DirState(d.name, d.tp.topic, d.kind, i in errors,
                       segments=found.segments.get(i, 0), records=found.records.get(i, 0),
                       # its remote segments are not covered unless they were read here
                       tiered=d.kind == LIVE and bool(
                           catalog.configs[d.tp.topic].remote_storage_enable
                           if d.tp.topic in catalog.configs else False)
                       and f"{REMOTE}:{d.name}" not in scanned_remote, line=d.line())
              for i, d in dirs.items()],
        replicas={t: catalog.replicas_of(_covered(frozenset({t}))) for t in pending.topics})
    result = spark_stages.run_outcomes(
        session(), requests, functools.partial(outcomes.verified_update, ctx=ctx),
        ctx.individual, VERIFY_REPORTED, REPORT_REQUESTS)
    try:
        report.requests = [_verify_entry(r) for r in result.shown]
        report.requests_by_outcome = result.counts
        report.partitions = list(lines.values())
        report.record_moved(*_record(state_dir, "verify", run_id, log_dir, now_ms, started,
                                     lines, result.result, session(), VERIFIED_COLUMNS,
                                     pending.version))
    finally:
        result.unpersist()
    counts = report.requests_by_outcome or {}
    failed = counts.get(RequestStatus.FAILED, 0) > 0
    unverified = (counts.get(RequestStatus.PARTIALLY_VERIFIED, 0) > 0
                  or counts.get(outcomes.UNVERIFIED, 0) > 0)
    report.status = RunStatus.of(failed=failed, partial=unverified)
    return report


def _verify_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    if row["outcome"] == outcomes.UNVERIFIED:
        return {"request_id": row["request_id"], "status": row["expected_status"],
                "unverified_because": json.loads(row["unverified_because"])}
    if row["outcome"] == outcomes.NO_REPLICA_HERE:
        return {"request_id": row["request_id"], "status": row["expected_status"],
                "no_replica_here": True}
    entry = {k: row[k] for k in ("request_id", "status", "verified_segments_scanned",
                                 "verified_records_scanned")}
    if row.get("failure"):
        entry["reason"] = failure_words(json.loads(row["failure"]))
    if row.get("residual"):
        entry["residual"] = json.loads(row["residual"])
    missing = json.loads(row["missing_replicas"]) if row.get("missing_replicas") else None
    if missing:
        entry.update(missing_replicas=missing[:20], missing_replica_count=len(missing))
    elif missing is None:
        entry["missing_replicas"] = "no metadata log: where the replicas live is unknown"
    if row.get("tiered_topics"):
        entry.update(remote_tier="not_covered", tiered_topics=json.loads(row["tiered_topics"]))
    return entry


def _record(state_dir: str, action: str, run_id: str, log_dir: str, now_ms: int, started: int,
            lines: Mapping[int, Mapping[str, Any]], result: spark_stages.RunResult,
            spark: SparkSession,
            columns: Sequence[str], read_at: int) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The run's rows in ``runs``, then the requests' new state (a MERGE of the ``update``
    outcomes): one Delta commit each (the MERGE by delta-rs for outcomes on the driver, by
    delta-spark for a DataFrame's), both under the state dir's writer lock.

    Under that lock, first, the requests whose status moved since the run read them (an
    ``erase cancel`` or ``retry`` committed meanwhile): the MERGE leaves them as they are now,
    and the run's rows name them (``requests_changed``), so the ledger says that this run
    erased (or verified) their records anyway. Returns them, as
    :func:`compactor.spark.ledger.moved_requests` finds them."""
    with storage.state_dir_lock(state_dir):
        counts, moved = spark_ledger.moved_requests(state_dir, spark, result, REPORT_REQUESTS,
                                                    read_at=read_at)
        run_history.record_runs(state_dir, run_id=run_id, command=f"erase_{action}",
                           log_dir=log_dir, now_ms=now_ms, started_at_ms=started,
                           finished_at_ms=int(time.time() * 1000), seconds=None,
                           partitions=lines.values(),
                           requests_changed=moved)
        spark_ledger.merge_outcomes(state_dir, spark, result, columns,
                                    {"action": action, "run_id": run_id}, read_at=read_at)
    return counts, moved


def verify_exit_code(state_dir: str, reports: Sequence[ErasureReport]) -> int:
    """The exit code of verifies run one after the other over a broker's log dirs: by what
    the ledger says afterwards of the requests they verified (failed: 7; not yet verified
    everywhere: 6), any run left partial by an unreadable dir (6), and any run that failed."""
    if any(r.status == RunStatus.FAILED for r in reports):
        return RunStatus.FAILED.exit_code
    statuses = ledger.statuses_by_run(state_dir, [r.run_id for r in reports], "verify_run_id")
    unverified = any((r.requests_by_outcome or {}).get(outcomes.UNVERIFIED) for r in reports)
    return RunStatus.of(failed=bool(statuses.get(RequestStatus.FAILED)),
                        partial=not set(statuses) <= DONE or unverified).exit_code


def perform(action: str, opts: MaintenanceOptions, state_dir: str, *, master: str | None,
            exclude_pending_deletes: bool = False,
            remote_bootstrap: str | None = None) -> ErasureReport:
    """``erase apply`` or ``erase verify`` (``action``) of the log dir ``opts`` names (made by
    :func:`compactor.maintenance.options.build_options`), in a Spark session on ``master``
    when there is something to scan; with ``remote_bootstrap``, an apply's remote step
    (:func:`apply_remote`)."""
    if action == "apply" and remote_bootstrap is not None:
        return apply_remote(None, opts, state_dir, remote_bootstrap, master=master)
    if action == "apply":
        return apply(None, opts, state_dir, master=master,
                     exclude_pending_deletes=exclude_pending_deletes)
    return verify(None, opts, state_dir, master=master)
