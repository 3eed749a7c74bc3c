"""A compaction round over a Kafka log dir, on the driver: ``compactor compact``, ``compactor
plan`` and ``jobs/compact.py``.

The driver locks the log dir, recovers interrupted swaps, plans each partition, lets the
executors write ``.cleaned`` segments, then commits partition by partition (counts must
balance) and moves ``cleaner-offset-checkpoint``. A corrupt partition is reported and left
untouched while the others are compacted (exit code 6).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor import native
from compactor.cleaner.planning import offset_map_reason, one_task_scans, round_path
from compactor.cleaner.policy import CleaningPlan, PartitionInput, SkipReason, explain
from compactor.cleaner.rebatch import DROP_REASONS
from compactor.cluster.catalog import METADATA_LOG, Catalog
from compactor.cluster.release import TARGET
from compactor.codec.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from compactor.config import REPORTED, TopicConfig
from compactor.errors import (
    CompactorError,
    CorruptSegmentError,
)
from compactor.human import human_bytes, human_time
from compactor.log import storage, swap
from compactor.log.layout import (
    ForeignEntry,
    check_log_start,
    check_partition_files,
    load_partition,
    log_end_offset,
    open_log_dir,
    read_aborted_txns,
    read_offset_checkpoint,
)
from compactor.log.names import METADATA_TOPIC
from compactor.log.recovery import (
    planned_recovery_errors,
    recover_partitions,
)
from compactor.maintenance.options import MaintenanceOptions, load_catalog
from compactor.maintenance.report import (
    REASONS,
    LogDirReport,
    Outcome,
    problem_line,
)
from compactor.maintenance.retain import PartitionRetention, plan_log_dir
from compactor.model import CommitMessage, TopicPartition
from compactor.retention import check_now_after_newest
from compactor.spark import stages as spark_stages
from compactor.spark.session import LazySession
from compactor.state import runs as run_history
from compactor.state import tables as state_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


METADATA_TP = TopicPartition(METADATA_TOPIC, 0)


# ---------------------------------------------------------------------------------------------
# The round


@dataclass(kw_only=True)
class PartitionReport:
    """One partition's line of the JSON report."""

    tp: TopicPartition
    status: Outcome = Outcome.SKIPPED
    reason: str = ""
    explanation: str = ""  # the numbers behind the reason (policy.explain)
    plan: CleaningPlan | None = None
    segments_before: int = 0
    segments_after: int = 0
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    batches_in: int = 0
    batches_out: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    expected_input_bytes: int = 0
    stages_s: dict[str, float] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    config: dict[str, Any] | None = None  # the effective configs and their sources
    measured: bool = True  # False in a plan: no output figures exist (null, not 0)
    writers: dict[int, str] = field(default_factory=dict)  # group base -> the path that wrote it
    # one_task or offset_map, and why (planning.offset_map_reason): a round written or tried
    round_path: str = ""
    round_path_reason: str = ""
    high_watermark_unknown: bool = False  # no replication-offset-checkpoint entry
    placeholders: int = 0  # empty batches kept at groups' ends where Kafka keeps none

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topic": self.tp.topic, "partition": self.tp.partition,
                               "status": self.status, "reason": self.reason,
                               "config": self.config}
        if self.explanation:
            out["explanation"] = self.explanation
        if self.plan is not None:
            p = self.plan
            out.update(
                log_start_offset=p.log_start_offset, log_end_offset=p.log_end_offset,
                high_watermark=p.high_watermark, last_stable_offset=p.last_stable_offset,
                first_dirty_offset=p.first_dirty_offset,
                first_uncleanable_offset=p.first_uncleanable_offset,
                dirty_ratio=round(p.dirty_ratio, 6), compaction_delay_ms=p.compaction_delay_ms,
                groups=[list(g) for g in p.groups], expected_input_bytes=self.expected_input_bytes,
            )
            if self.high_watermark_unknown:
                out["high_watermark_unknown"] = True
        out["segments_before"] = self.segments_before
        if self.measured:
            out.update(segments_after=self.segments_after,
                       records_in=self.records_in, records_out=self.records_out,
                       bytes_in=self.bytes_in, bytes_out=self.bytes_out,
                       batches_in=self.batches_in, batches_out=self.batches_out,
                       dropped={r: self.dropped.get(r, 0) for r in DROP_REASONS},
                       stages_s={k: round(v, 3) for k, v in self.stages_s.items()})
        else:  # a plan predicts no output: the figures are unknown, not zero
            out.update(dict.fromkeys(("segments_after", "records_in", "records_out", "bytes_in",
                                      "bytes_out", "batches_in", "batches_out", "dropped",
                                      "stages_s")))
        if self.writers:
            out["writers"] = {str(base): path for base, path in sorted(self.writers.items())}
        if self.placeholders:
            out["placeholders"] = self.placeholders
        if self.round_path:
            out.update(round_path=self.round_path, round_path_reason=self.round_path_reason)
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(kw_only=True)
class RoundReport(LogDirReport):
    """A compaction round (``compact``) or its plan (``plan``)."""

    command: str
    partitions: list[PartitionReport] = field(default_factory=list)
    stages_s: dict[str, float] = field(default_factory=dict)

    def lines(self) -> Sequence[PartitionReport]:
        return self.partitions

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for p in self.partitions:
            counts[p.status] = counts.get(p.status, 0) + 1
        return self.envelope(self.command, partitions_by_status=counts,
                             stages_s={k: round(v, 3) for k, v in self.stages_s.items()})

    def summary(self) -> str:
        lines = []
        for p in self.partitions:
            if p.status == Outcome.CLEANED:
                lines.append(f"{p.tp}: cleaned {p.records_in:,} -> {p.records_out:,} records, "
                             f"{human_bytes(p.bytes_in)} -> {human_bytes(p.bytes_out)}, segments "
                             f"{p.segments_before} -> {p.segments_after}")
            elif p.status == Outcome.WOULD_CLEAN:
                lines.append(f"{p.tp}: would clean ({p.explanation})")
            elif Outcome(p.status).is_problem and p.error:
                left = ("each group left old or new" if p.error.get("stage") == "swap"
                        else "left untouched")
                lines.append(problem_line(p.tp, p.status, p.error, left=left))
            else:
                lines.append(f"{p.tp}: {p.status} ({p.reason}: "
                             f"{p.explanation or REASONS.get(p.reason, '')})")
        lines += self.footer()
        lines.append(self.totals_line())
        return "\n".join(lines)

    def totals_line(self) -> str:
        """The run in one line: when (the clock the rules used), partitions by status, bytes
        and records in and out, time by stage."""
        counts: dict[str, int] = {}
        for p in self.partitions:
            counts[p.status] = counts.get(p.status, 0) + 1
        by_status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        cleaned = [p for p in self.partitions if p.status == Outcome.CLEANED]
        moved = ""
        if cleaned:
            moved = (f"; {human_bytes(sum(p.bytes_in for p in cleaned))} -> "
                     f"{human_bytes(sum(p.bytes_out for p in cleaned))}, "
                     f"{sum(p.records_in for p in cleaned):,} -> "
                     f"{sum(p.records_out for p in cleaned):,} records")
        total = sum(self.stages_s.values())
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in self.stages_s.items())
        return (f"{self.command} as of {human_time(self.now_ms)}: {len(self.partitions)} "
                f"partitions ({by_status}){moved}; {total:.1f} s"
                + (f" ({stages})" if stages else ""))


class _Stages:
    def __init__(self, report: RoundReport) -> None:
        self.report = report
        self.t = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.report.stages_s[name] = self.report.stages_s.get(name, 0.0) + now - self.t
        self.t = now

    def split(self, measured: Mapping[str, float]) -> None:
        """Stages timed elsewhere (the session's start) that end now."""
        for name, seconds in measured.items():
            self.report.stages_s[name] = self.report.stages_s.get(name, 0.0) + seconds
        self.t = time.perf_counter()


def load_partition_input(log_dir: str, tp: TopicPartition, cfg: TopicConfig,
                         opts: MaintenanceOptions,
                         checkpoints: Mapping[str, Mapping[TopicPartition, int]],
                         strays: list[ForeignEntry] | None = None, *,
                         kafka_release: tuple[int, int] = TARGET) -> PartitionInput:
    """What the round of one partition needs; entries of its directory that Kafka does not
    keep there are added to ``strays`` (reported, never touched)."""
    pdir = storage.join(log_dir, tp.dir_name)
    part = load_partition(pdir)
    if strays is not None:
        strays.extend(part.strays)
    check_partition_files(part)
    log_start = checkpoints[LOG_START_OFFSET_CHECKPOINT].get(tp)
    if log_start is not None:
        check_log_start(part, log_start, log_end_offset(part), log_dir)
    aborted = read_aborted_txns(part)
    return PartitionInput(
        path=pdir, segments=part.segments, config=cfg,
        cleaner_checkpoint=checkpoints[CLEANER_OFFSET_CHECKPOINT].get(tp),
        log_start_checkpoint=checkpoints[LOG_START_OFFSET_CHECKPOINT].get(tp),
        replication_checkpoint=checkpoints[REPLICATION_OFFSET_CHECKPOINT].get(tp),
        aborted_txns=tuple(aborted), now_ms=opts.now_ms,
        assume_committed=opts.assume_committed, kafka_release=kafka_release,
        sources=tuple(sorted(part.identities.items())),
    )


def run(spark: SparkSession, opts: MaintenanceOptions) -> RoundReport:
    """One round over the log dir; see the module docstring.

    Raises:
        ConfigError: invalid topic configs (nothing is read or changed).
        LogDirLockedError: a broker or another run holds the log dir.
        LogDirError: the log dir is missing or unreadable.
    """
    catalog = load_catalog(opts)
    with storage.log_dir_lock(opts.log_dir):
        return run_locked(LazySession(existing=spark), opts, catalog)


def run_locked(session: LazySession, opts: MaintenanceOptions, catalog: Catalog) -> RoundReport:
    """:func:`run` for a caller that holds the log dir lock and read the catalog; the Spark
    session is started only when a selected partition has segments to scan.

    Raises:
        ConfigError: the native writer without numba (before anything is read or changed).
    """
    native.engine(opts.writer)  # the executors build it again; here it fails before any work
    log_dir = open_log_dir(opts.log_dir)
    configs = catalog.configs
    report = RoundReport(command="plan" if opts.dry_run else "compact",
                         log_dir=opts.log_dir, now_ms=opts.now_ms, catalog=catalog,
                         assume_committed=opts.assume_committed)
    stages = _Stages(report)
    unrecovered: dict[str, CompactorError] = {}
    selected = [tp.dir_name for tp in log_dir.partitions
                if opts.selects(tp.topic) and catalog.skip_reason(tp) is None]
    if not opts.dry_run:
        report.recovered, unrecovered = recover_partitions(opts.log_dir, selected)
    else:  # a plan refuses what the round would refuse: leftovers recovery cannot resolve
        unrecovered = planned_recovery_errors(opts.log_dir, selected)
    stages.done("recover")
    checkpoints = {name: read_offset_checkpoint(opts.log_dir, name) for name in
                   (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                    REPLICATION_OFFSET_CHECKPOINT)}
    tps = list(log_dir.partitions)
    reports = {i: PartitionReport(tp=tp, config=configs[tp.topic].describe(REPORTED),
                                  measured=not opts.dry_run)
               for i, tp in enumerate(tps)}
    report.partitions = list(reports.values())
    if log_dir.metadata_log is not None:
        report.partitions.insert(0, PartitionReport(tp=METADATA_TP, reason=METADATA_LOG,
                                                    measured=not opts.dry_run))
    report.foreign = log_dir.foreign
    for r in log_dir.refused_of(opts.selects):
        report.partitions.append(PartitionReport(tp=r.tp, status=Outcome.REFUSED,
                                                 reason=r.error.code, error=r.error.to_dict(),
                                                 measured=not opts.dry_run))
    inputs: dict[int, PartitionInput] = {}
    strays: list[ForeignEntry] = []
    for i, tp in enumerate(tps):
        if not opts.selects(tp.topic):
            reports[i].reason = "not_selected"
            continue
        skip = catalog.skip_reason(tp)
        if skip is not None:
            reports[i].reason = skip
            continue
        if not configs[tp.topic].compact:
            reports[i].reason = "not_compacted"
            reports[i].explanation = (f"cleanup.policy="
                                      f"{','.join(sorted(configs[tp.topic].cleanup_policy))} "
                                      f"has no compact")
            continue
        try:
            if tp.dir_name in unrecovered:
                raise unrecovered[tp.dir_name]
            inputs[i] = load_partition_input(opts.log_dir, tp, configs[tp.topic], opts,
                                             checkpoints, strays,
                                             kafka_release=catalog.kafka_release.version)
        except CompactorError as err:
            reports[i].status = Outcome.of_read_error(err.code)
            reports[i].error, reports[i].reason = err.to_dict(), err.code
            continue
        reports[i].segments_before = reports[i].segments_after = len(inputs[i].segments)
        reports[i].high_watermark_unknown = inputs[i].replication_checkpoint is None
    report.foreign += tuple(strays)
    if opts.check_past_now and not opts.dry_run:
        check_now_after_newest(opts.now_ms, {
            str(tps[i]): max(s.largest_timestamp_ms for s in inp.segments)
            for i, inp in inputs.items() if inp.segments})
    scanned = None
    if not inputs:  # nothing to scan: no session
        if not opts.dry_run:
            report.settle_lease()
            stages.done("commit")
        return report
    stages.done("metadata")
    # what the JVM itself works through: the partitions the distributed stages may read (a
    # partition one task cleans costs the JVM one task to schedule, whatever its size)
    spark = session(spark_stages.input_bytes(
        {i: inp for i, inp in inputs.items() if not _fits_one_task(inp, opts.task_keys)}))
    stages.split(session.startup_s)
    try:
        with spark_stages.round_settings(spark, inputs):
            plans, scanned, messages, handed_on = _plan(spark, inputs, reports, stages, opts)
            to_clean = {i: p for i, p in plans.items() if p.will_clean}
            resets = {tps[i]: p.first_dirty_offset for i, p in plans.items()
                      if p.checkpoint_reset and not p.will_clean}
            if opts.dry_run:
                for i in to_clean:
                    reports[i].status = Outcome.WOULD_CLEAN
                return report
            written = {m.tp_id for m in messages}  # by their one-pass task
            rest = {i: p for i, p in to_clean.items() if i not in written}
            for i, p in to_clean.items():
                reports[i].round_path, reports[i].round_path_reason = round_path(
                    p, by_one_task=i in written, handed_on=handed_on.get(i),
                    offset_map_why=_offset_map_reason(inputs[i], opts.task_keys))
            if rest:
                messages += spark_stages.write_cleaned_segments(
                    spark, inputs, rest,
                    writer=opts.writer, on_stage=stages.done,
                    headers=scanned.headers if scanned else None,
                    decisions=scanned.decisions if scanned else None)
            if to_clean:
                done = _commit(inputs, to_clean, messages, reports)
                resets.update({tps[i]: to_clean[i].first_uncleanable_offset for i in done})
    finally:
        if scanned is not None:
            scanned.unpersist()
    try:
        swap.update_cleaner_checkpoint(opts.log_dir, resets)
    except CompactorError as err:  # the swaps stand: say so, with the report
        err = err.with_remedy(
            "the cleaned partitions are swapped in and complete; only the cleaner checkpoint "
            "did not move, so the next round cleans them again from the old checkpoint "
            "(harmless): fix the cause and run again")
        report.failed_after_changes(CLEANER_OFFSET_CHECKPOINT, err, [
            str(p.tp) for p in report.partitions if p.status == Outcome.CLEANED])
    report.settle_lease()
    stages.done("commit")
    return report




def _plan(spark: SparkSession, inputs: dict[int, PartitionInput],
          reports: Mapping[int, PartitionReport], stages: _Stages, opts: MaintenanceOptions,
          ) -> tuple[dict[int, CleaningPlan], spark_stages.Scanned | None, list[CommitMessage],
                     dict[int, str]]:
    """Plan every readable partition; a partition a check refuses is reported corrupt and
    dropped from ``inputs``.

    A partition small enough for one task (:func:`one_task_scans`) is cleaned in one pass
    (one task scans, plans and, unless this is a plan, writes it when
    :func:`offset_map_reason` gives no reason not to: :func:`spark_stages.clean_in_one_pass`).
    The others have their headers scanned segment by
    segment (kept cached for the rewrite, with the batch decisions of the rounds the
    distributed offset map writes, made as they are planned). A partition the one pass
    planned but did not write (its key table passed ``--task-keys``, or that is 0) goes to
    the distributed offset map with the batch decisions its task made: it is neither scanned
    nor decided again.

    Returns:
        The plans, the cached rows (``None`` when no partition needed them), the commit
        messages of the groups the one pass wrote, and why it handed rounds on.
    """
    small = {i: inp for i, inp in inputs.items()
             if one_task_scans(inp.segments, inp.config.segment_bytes,
                               inp.config.segment_index_bytes)}
    one_pass = spark_stages.clean_in_one_pass(spark, small, write=not opts.dry_run,
                                              writer=opts.writer, task_keys=opts.task_keys)
    plans, errors, messages = one_pass.plans, one_pass.errors, one_pass.messages
    stages.done("one_pass")
    rest = {i: inp for i, inp in inputs.items() if i not in small}
    more, more_errors, scanned = spark_stages.scan_and_plan(spark, rest, writer=opts.writer,
                                                            decide=not opts.dry_run)
    if one_pass.scanned is not None:
        scanned = one_pass.scanned + scanned
    plans.update(more)
    errors.update(more_errors)
    for i, error in errors.items():
        del inputs[i]
        reports[i].status = Outcome.of_read_error(error["code"])
        reports[i].error, reports[i].reason = error, error["code"]
    for i, inp in inputs.items():
        if i not in plans:  # no batch at all
            plans[i] = inp.plan([])
        plan = plans[i]
        reports[i].plan = plan
        reports[i].reason = SkipReason(plan.reason).name.lower()
        reports[i].explanation = explain(plan, inp.config)
        by_base = {s.base_offset: s.size_bytes for s in inp.segments}
        reports[i].expected_input_bytes = sum(by_base[b] for g in plan.groups for b in g)
    stages.done("scan_and_plan")
    return plans, scanned, messages, one_pass.handed_on


def _offset_map_reason(inp: PartitionInput, task_keys: int) -> str | None:
    return offset_map_reason(inp.segments, inp.config.segment_bytes,
                             inp.config.segment_index_bytes, task_keys)


def _fits_one_task(inp: PartitionInput, task_keys: int) -> bool:
    return _offset_map_reason(inp, task_keys) is None


def _commit(inputs: Mapping[int, PartitionInput], plans: Mapping[int, CleaningPlan],
            messages: Sequence[CommitMessage], reports: Mapping[int, PartitionReport]) -> list[int]:
    """Swap in every partition whose groups all succeeded with balanced counts; abort the
    others. Returns the committed partition ids."""
    by_tp: dict[int, list[CommitMessage]] = {}
    for m in messages:
        by_tp.setdefault(m.tp_id, []).append(m)
    done = []
    for i, plan in plans.items():
        got = by_tp.get(i, [])
        rep = reports[i]
        problem = next((m.error for m in got if m.error), None)
        written = sorted(m.group_base for m in got)
        if problem is None and written != sorted(g[0] for g in plan.groups):
            problem = CorruptSegmentError(
                "not every group of the partition produced a cleaned segment",
                path=inputs[i].path).to_dict()
        if problem is None:
            dropped: dict[str, int] = {}
            for m in got:
                for reason, n in m.dropped.items():
                    dropped[reason] = dropped.get(reason, 0) + n
            records_in = sum(m.records_in for m in got)
            records_out = sum(m.records_out for m in got)
            if records_in != records_out + sum(dropped.values()):
                problem = CorruptSegmentError(
                    f"counts do not balance: {records_in} records in, {records_out} retained, "
                    f"{sum(dropped.values())} dropped", path=inputs[i].path).to_dict()
        if problem is not None:
            for m in got:
                swap.abort_group(inputs[i].path, m)
            code = problem.get("code", "")
            rep.status = Outcome.of_write_error(code)
            rep.error, rep.reason = {**problem, "stage": "rewrite"}, code
            continue
        started = time.perf_counter()
        failure = swap.commit_isolated(inputs[i].path, got, dict(inputs[i].sources))
        if failure is not None:  # the others go on; this one is old or new per group
            rep.status, rep.reason = Outcome.FAILED, failure.code
            rep.error = {**failure.to_dict(), "stage": "swap"}
            continue
        # the partition's own share of the round: its groups' executor time, its swap
        rep.stages_s = {"rewrite": sum(m.seconds for m in got),
                        "commit": time.perf_counter() - started}
        rep.status, rep.dropped = Outcome.CLEANED, dropped
        rep.records_in, rep.records_out = records_in, records_out
        rep.bytes_in = sum(m.bytes_in for m in got)
        rep.bytes_out = sum(m.bytes_out for m in got)
        rep.batches_in = sum(m.batches_in for m in got)
        rep.batches_out = sum(m.batches_out for m in got)
        rep.segments_after = rep.segments_before - sum(len(m.source_bases) - 1 for m in got)
        rep.writers = {m.group_base: m.writer for m in got}
        rep.placeholders = sum(m.placeholders for m in got)
        done.append(i)
    return done


# ---------------------------------------------------------------------------------------------
# The command


#: How a plan's retention preview is computed (in the report and the human summary).
RETENTION_BASIS = ("today's segments, before compaction: a round that cleans a partition "
                   "leaves fewer bytes and segments, so retention may then delete less")


@dataclass(frozen=True)
class CompactOutcome:
    """What ``compact`` and ``plan`` produced: the round, its JSON report (with the ledger's
    run id, and for a plan each partition's retention preview) and that preview."""

    report: RoundReport
    result: dict[str, Any]
    retention: Sequence[PartitionRetention] = ()


def perform(opts: MaintenanceOptions, *, master: str | None,
            state_dir: str | None = None) -> CompactOutcome:
    """``compactor compact`` (``plan`` when ``opts.dry_run``): configs and the state dir are
    checked before Spark starts; the round runs under the log dir lock; the report is recorded
    in the ledger's ``runs`` table when a state dir is given (not for a plan)."""
    if state_dir:
        state_tables.check_state_dir(state_dir, opts.log_dir)
    catalog = load_catalog(opts)  # config errors before Spark starts
    started = int(time.time() * 1000)
    session = LazySession(master)  # the run rows go in by delta-rs: no Delta in Spark
    with storage.log_dir_lock(opts.log_dir):  # a held lock before Spark starts too
        report = run_locked(session, opts, catalog)
    result = report.to_dict()
    retention: list[PartitionRetention] = []
    if opts.dry_run:
        # what retention would delete, computed on today's segments (not on what the round
        # would leave: that needs the rewrite itself; RETENTION_BASIS says so in the report)
        log_dir = open_log_dir(opts.log_dir)
        retention = plan_log_dir(opts.log_dir, catalog, opts.now_ms, [
            tp for tp in log_dir.partitions if opts.selects(tp.topic)])
        by_tp = {(r.tp.topic, r.tp.partition): r.to_dict() for r in retention}
        result["retention_basis"] = RETENTION_BASIS
        for p in result["partitions"]:
            p["retention"] = by_tp.get((p["topic"], p["partition"]))
    if state_dir:  # a plan is recorded too (command "plan", no output figures)
        result["run_id"] = run_history.record_report(state_dir, result, started,
                                                int(time.time() * 1000))
    return CompactOutcome(report, result, retention)
