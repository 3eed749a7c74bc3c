"""Retention over a Kafka log dir, on the driver: ``compactor retain``, ``jobs/retain.py`` and
the retention step of ``run``. Retention reads only metadata (file names, sizes, mtimes, index
tails), as Kafka's ``UnifiedLog.deleteOldSegments`` does, so it needs no Spark.

Per partition: recover interrupted swaps, plan with :func:`compactor.retention.plan_retention`
(log start offset for every policy; ``retention.bytes`` and ``retention.ms`` when
``cleanup.policy`` contains ``delete``), delete the prefix
(:func:`compactor.log.swap.delete_segments`), then rewrite ``log-start-offset-checkpoint`` once for
the log dir.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactor.cleaner.policy import high_watermark
from compactor.cluster.catalog import METADATA_LOG, Catalog
from compactor.codec.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from compactor.config import REPORTED
from compactor.errors import CompactorError
from compactor.human import human_bytes, human_time
from compactor.log import storage, swap
from compactor.log.layout import (
    FUTURE,
    ForeignEntry,
    PartitionCopy,
    check_log_start,
    check_partition_files,
    load_partition,
    log_end_offset,
    open_log_dir,
    read_offset_checkpoint,
)
from compactor.log.names import METADATA_TOPIC
from compactor.log.recovery import recover_partitions
from compactor.maintenance.options import MaintenanceOptions, load_catalog
from compactor.maintenance.report import (
    REASONS,
    LogDirReport,
    Outcome,
    problem_line,
)
from compactor.model import TopicPartition
from compactor.retention import (
    RetentionPlan,
    check_safety_floor,
    explain_retention,
    plan_retention,
)
from compactor.state import runs as run_history
from compactor.state import tables as state_tables


@dataclass(kw_only=True)
class PartitionRetention:
    """One partition's line of the retention report."""

    tp: TopicPartition
    policy: str
    status: Outcome = Outcome.KEPT
    reason: str = ""
    plan: RetentionPlan | None = None
    segments_before: int = 0
    error: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    # the partition's files as listed before planning: what the deletion proves unchanged
    scanned: Mapping[str, str] = field(default_factory=dict, repr=False)
    strays: tuple[ForeignEntry, ...] = field(default=(), repr=False)  # reported in foreign
    explanation: str = ""  # the numbers behind the decision (retention.explain_retention)
    # no replication-offset-checkpoint entry: the high watermark is Kafka's 0 (or, with
    # --assume-committed, the log end)
    high_watermark_unknown: bool = False
    # the directory: the live partition's, or a "-future" copy's (a replica being moved
    # here from another log dir, which Kafka retains too: LogManager.cleanupLogs)
    dir_name: str = ""

    @property
    def future(self) -> bool:
        return bool(self.dir_name) and self.dir_name != self.tp.dir_name

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topic": self.tp.topic, "partition": self.tp.partition,
                               "cleanup_policy": self.policy, "status": self.status,
                               "reason": self.reason, "config": self.config,
                               "segments_before": self.segments_before}
        if self.future:
            out.update(dir=self.dir_name, copy=FUTURE)
        if self.explanation:
            out["explanation"] = self.explanation
        if self.plan is not None:
            p = self.plan
            out.update(
                log_start_offset=p.log_start_offset, new_log_start_offset=p.new_log_start_offset,
                log_end_offset=p.log_end_offset, high_watermark=p.high_watermark,
                segments_after=self.segments_before - len(p.deleted) + int(p.roll),
                rolled=p.roll, deleted_by_reason=p.by_reason(),
                deleted_segments=[s.base_offset for s, _ in p.deleted],
            )
            if self.high_watermark_unknown:
                out["high_watermark_unknown"] = True
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(kw_only=True)
class RetentionReport(LogDirReport):
    """Retention over a log dir (``retain``, and the second step of ``run``)."""

    dry_run: bool
    partitions: list[PartitionRetention] = field(default_factory=list)

    def lines(self) -> Sequence[PartitionRetention]:
        return self.partitions

    def to_dict(self) -> dict[str, Any]:
        return self.envelope(
            "retain", dry_run=self.dry_run,
            segments_deleted=sum(len(p.plan.deleted) for p in self.partitions if p.plan),
            bytes_deleted=sum(p.plan.bytes_deleted for p in self.partitions if p.plan))

    def summary(self, *, hints: bool = True) -> str:
        """The human summary; ``hints`` adds the catalog's (off when the compaction summary
        printed them already)."""
        lines = []
        verb = "would delete" if self.dry_run else "deleted"
        for p in self.partitions:
            if Outcome(p.status).is_problem and p.error:
                left = ("a prefix of its segments may be gone; the next run finishes"
                        if p.status == Outcome.FAILED else "left untouched")
                lines.append(problem_line(p.tp, p.status, p.error, left=left))
            elif p.plan is not None and p.plan.deleted:
                reasons = ", ".join(f"{r} {v['segments']} ({human_bytes(v['bytes'])})"
                                    for r, v in p.plan.by_reason().items() if v["segments"])
                lines.append(f"{p.tp}: {verb} {len(p.plan.deleted)} segments ({reasons}); log "
                             f"start {p.plan.log_start_offset} -> {p.plan.new_log_start_offset}"
                             + ("; rolled an empty segment at the log end" if p.plan.roll else "")
                             + (f" ({p.explanation})" if p.explanation else ""))
            elif p.status == Outcome.SKIPPED:
                lines.append(f"{p.tp}: left alone ({p.reason}: {REASONS.get(p.reason, '')})")
            else:
                lines.append(f"{p.tp}: nothing to delete"
                             + (f" ({p.explanation})" if p.explanation else ""))
        lines += self.footer(hints=hints)
        plans = [p.plan for p in self.partitions if p.plan is not None]
        lines.append(f"retain{' (dry run)' if self.dry_run else ''} as of "
                     f"{human_time(self.now_ms)}: {len(self.partitions)} partitions; {verb} "
                     f"{sum(len(p.deleted) for p in plans)} segments, "
                     f"{human_bytes(sum(p.bytes_deleted for p in plans))}")
        return "\n".join(lines)


def plan_log_dir(log_dir: str, catalog: Catalog, now_ms: int,
                 partitions: Sequence[TopicPartition | PartitionCopy], *,
                 unrecovered: Mapping[str, CompactorError] | None = None,
                 assume_committed: bool = False) -> list[PartitionRetention]:
    """Retention plans of every partition (reads metadata only; changes nothing). A partition
    whose metadata cannot be read, or whose interrupted swap could not be recovered
    (``unrecovered``, by directory name), is reported ``corrupt``; one the catalog says to
    leave alone (the metadata log, a stale topic id, no config, tiered storage) ``skipped``
    with the reason."""
    starts = read_offset_checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT)
    hws = read_offset_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT)
    out = []
    for one in partitions:
        tp, name = (one.tp, one.name) if isinstance(one, PartitionCopy) else (one, one.dir_name)
        cfg = catalog.configs[tp.topic]
        rep = PartitionRetention(tp=tp, policy=",".join(sorted(cfg.cleanup_policy)),
                                 config=cfg.describe(REPORTED), dir_name=name)
        skip = catalog.skip_reason(tp, retention=True)
        if skip is not None:
            rep.status, rep.reason = Outcome.SKIPPED, skip
            out.append(rep)
            continue
        pdir = storage.join(log_dir, name)
        try:
            if unrecovered and name in unrecovered:
                raise unrecovered[name]
            # everything the deletion will read is validated before anything changes
            part = load_partition(pdir)
            leo = log_end_offset(part)
            check_partition_files(part)
            check_log_start(part, starts.get(tp), leo, log_dir)
        except CompactorError as err:
            rep.status, rep.error = Outcome.of_read_error(err.code), err.to_dict()
            rep.reason = err.code
            out.append(rep)
            continue
        rep.segments_before = len(part.segments)
        rep.scanned = part.identities
        rep.strays = part.strays
        if part.segments:
            start = max(starts.get(tp, 0), part.segments[0].base_offset)
            hw = high_watermark(hws.get(tp), start, leo, assume_committed=assume_committed)
            rep.high_watermark_unknown = tp not in hws
            rep.plan = plan_retention(part.segments, config=cfg, log_start_offset=start,
                                      log_end_offset=leo, high_watermark=hw, now_ms=now_ms)
            rep.explanation = explain_retention(
                part.segments, rep.plan, cfg, now_ms,
                {k: v["source"] for k, v in (rep.config or {}).items()})
            rep.status = Outcome.WOULD_DELETE if rep.plan.deleted else Outcome.KEPT
        rep.reason = "expired" if rep.plan and rep.plan.deleted else "nothing_expired"
        out.append(rep)
    return out


def retain_locked(log_dir: str, catalog: Catalog, now_ms: int, *,
                  dry_run: bool = False, topics: frozenset[str] = frozenset(),
                  assume_committed: bool = False) -> RetentionReport:
    """Retention over a log dir whose lock the caller holds (``compactor run`` holds it
    across compaction and retention)."""
    ld = open_log_dir(log_dir)
    report = RetentionReport(log_dir=log_dir, now_ms=now_ms, dry_run=dry_run, catalog=catalog,
                             assume_committed=assume_committed)
    partitions: list[TopicPartition | PartitionCopy] = [
        tp for tp in ld.partitions if not topics or tp.topic in topics]
    # a replica being moved here (LogManager.cleanupLogs retains futureLogs too); its
    # checkpoint entries are its partition's in this log dir (the live one is in another)
    partitions += [c for c in ld.copies if c.kind == FUTURE and c.tp.topic in catalog.configs
                   and (not topics or c.tp.topic in topics) and c.tp not in ld.partitions]
    unrecovered: dict[str, CompactorError] = {}
    if not dry_run:
        report.recovered, unrecovered = recover_partitions(log_dir, [
            p.name if isinstance(p, PartitionCopy) else p.dir_name for p in partitions
            if catalog.skip_reason(p.tp if isinstance(p, PartitionCopy) else p,
                                   retention=True) is None])
    report.partitions = plan_log_dir(log_dir, catalog, now_ms, partitions,
                                     unrecovered=unrecovered, assume_committed=assume_committed)
    report.foreign = ld.foreign + tuple(s for rep in report.partitions for s in rep.strays)
    for r in ld.refused_of(lambda t: not topics or t in topics):
        report.partitions.append(PartitionRetention(
            tp=r.tp, policy=",".join(sorted(catalog.configs[r.tp.topic].cleanup_policy))
            if r.tp.topic in catalog.configs else "", status=Outcome.REFUSED,
            reason=r.error.code, error=r.error.to_dict()))
    if ld.metadata_log is not None:
        report.partitions.insert(0, PartitionRetention(
            tp=TopicPartition(METADATA_TOPIC, 0), policy="", status=Outcome.SKIPPED,
            reason=METADATA_LOG))
    starts: dict[TopicPartition, int | None] = {}
    for rep in report.partitions:
        plan = rep.plan
        if plan is None:
            continue
        if dry_run:
            continue
        pdir = storage.join(log_dir, rep.dir_name or rep.tp.dir_name)
        try:
            if plan.deleted:
                swap.delete_segments(pdir, plan, rep.scanned)
                rep.status = Outcome.DELETED
            # idempotent: a run after a crash finishes what the crashed one left
            swap.truncate_leader_epochs(pdir, plan.new_log_start_offset)
        except CompactorError as err:  # the others go on; this one says what happened
            rep.error, rep.reason = err.to_dict(), err.code
            rep.status = Outcome.FAILED  # a prefix may be gone: never reported as untouched
            continue
        starts[rep.tp] = (plan.new_log_start_offset
                          if plan.new_log_start_offset > plan.first_segment_base else None)
    if not dry_run:
        deleted = [rep for rep in report.partitions if rep.status == Outcome.DELETED]
        for step, write in (
                (LOG_START_OFFSET_CHECKPOINT,
                 lambda: swap.update_log_start_checkpoint(log_dir, starts)),
                (RECOVERY_POINT_CHECKPOINT, lambda: swap.raise_recovery_points(log_dir, {
                    rep.tp: rep.plan.new_log_start_offset for rep in deleted if rep.plan}))):
            try:
                write()
            except CompactorError as err:  # the deletions stand: say so, with the report
                report.failed_after_changes(step, err.with_remedy(
                    "the expired segments are deleted; only this checkpoint was not "
                    "rewritten (a stale one is harmless: the log start offset is at least "
                    "the first segment's base): fix the cause and run retain again to "
                    "rewrite it"), [str(rep.tp) for rep in deleted])
        report.settle_lease()
    return report


def prepare(opts: MaintenanceOptions, *, allow_aggressive: bool,
            state_dir: str | None) -> Catalog:
    """The per-topic configs of a command that may delete segments (``retain``, ``run``),
    checked before the log dir is locked: the safety floor, and a state dir outside the log
    dir.

    Raises:
        ConfigError: an invalid config, or retention below the floor without
            ``allow_aggressive``.
        LogDirError: the log dir is missing or unreadable.
    """
    catalog = load_catalog(opts)
    check_safety_floor({t: c for t, c in catalog.configs.items() if opts.selects(t)},
                       allow_aggressive=allow_aggressive)
    if state_dir:
        state_tables.check_state_dir(state_dir, opts.log_dir)
    return catalog


def perform(opts: MaintenanceOptions, catalog: Catalog, *,
            state_dir: str | None) -> tuple[RetentionReport, dict[str, Any]]:
    """``compactor retain`` under the log dir lock; the report and its JSON form (with the
    ledger's run id when a state dir is given and this is no dry run)."""
    started = int(time.time() * 1000)
    with storage.log_dir_lock(opts.log_dir):
        report = retain_locked(opts.log_dir, catalog, opts.now_ms, dry_run=opts.dry_run,
                               assume_committed=opts.assume_committed,
                               topics=opts.topics)
    result = report.to_dict()
    if state_dir and not opts.dry_run:
        result["run_id"] = run_history.record_report(state_dir, result, started,
                                                int(time.time() * 1000))
    return report, result
