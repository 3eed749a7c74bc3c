"""``compactor run`` and ``jobs/run.py``: what a scheduler calls. Per topic, by its
``cleanup.policy`` (Kafka's ``LogCleaner`` cleans compacted logs, ``UnifiedLog.deleteOldSegments``
applies retention; a ``compact,delete`` topic gets both):

* ``delete``: retention by log start offset, ``retention.bytes`` and ``retention.ms``;
* ``compact``: log-start-offset retention, then a compaction round;
* ``compact,delete``: full retention, then a compaction round.

Retention runs first (:func:`perform` says why). The log dir lock is held across both steps.
A dry run plans the retention and the compaction round (on the segments as they are now) and
changes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from compactor.errors import EXIT_OK
from compactor.log import storage
from compactor.maintenance import compact, retain
from compactor.maintenance.options import MaintenanceOptions
from compactor.maintenance.report import RunStatus
from compactor.spark.session import LazySession
from compactor.state import runs as run_history


@dataclass(frozen=True)
class RunOutcome:
    """Both steps: the compaction round (``None`` when no selected topic compacts), the
    retention, the combined JSON report and exit code (the worse of the two steps)."""

    compaction: compact.RoundReport | None
    retention: retain.RetentionReport
    result: dict[str, Any]
    exit_code: int


def perform(opts: MaintenanceOptions, *, master: str | None, allow_aggressive: bool,
            state_dir: str | None) -> RunOutcome:
    catalog = retain.prepare(opts, allow_aggressive=allow_aggressive, state_dir=state_dir)
    started = int(time.time() * 1000)
    compacting = any(cfg.compact and cfg.configured for t, cfg in catalog.configs.items()
                     if opts.selects(t))
    session = LazySession(master)  # the run rows go in by delta-rs: no Delta in Spark
    with storage.log_dir_lock(opts.log_dir):
        # retention first. Kafka guarantees no order for a compact,delete log: its cleaner
        # thread cleans the filthiest log, then runs deleteOldSegments on every compacted one
        # (LogCleaner.CleanerThread.cleanFilthiestLog, LogCleanerManager.deletableLogs), so a
        # log is retained on every pass and cleaned only when it is the filthiest: in a
        # running broker its expired segments go before a pass merges them with young ones.
        # Compacting first would keep expired records a broker deletes (a merged group is one
        # young segment, and retention stops at the first segment it must keep); retention
        # first also spares compacting what is about to go. tests/kafka/test_run_order.py
        # has a broker judge it.
        retention = retain.retain_locked(opts.log_dir, catalog, opts.now_ms,
                                         assume_committed=opts.assume_committed,
                                         dry_run=opts.dry_run, topics=opts.topics)
        round_report = (compact.run_locked(session, opts, catalog) if compacting else None)
    # a run that decided nothing because no topic's configs are known is not a success:
    # retention judges every partition, and no topic compacts whose configs are unknown
    if retention.unconfigured and (round_report is None or round_report.unconfigured):
        status = RunStatus.UNCONFIGURED
        code = status.exit_code
    else:
        codes = [retention.exit_code] + ([round_report.exit_code] if round_report else [])
        code = max(codes) if any(c != EXIT_OK for c in codes) else EXIT_OK
        status = RunStatus.of(partial=code != EXIT_OK)
    result: dict[str, Any] = {
        "type": "report", "command": "run", "log_dir": opts.log_dir, "now_ms": opts.now_ms,
        "dry_run": opts.dry_run, "status": status,
        **({"unconfigured": retention.unconfigured_because()}
           if status == RunStatus.UNCONFIGURED else {}),
        "compaction": round_report.to_dict() if round_report else None,
        "retention": retention.to_dict()}
    if state_dir and not opts.dry_run:
        finished = int(time.time() * 1000)
        run_id = run_history.new_run_id("run", opts.now_ms)  # both steps: one run of the history
        for part in (result["compaction"], result["retention"]):
            if part is not None:
                part["run_id"] = run_history.record_report(state_dir, part, started, finished,
                                                      run_id)
    return RunOutcome(round_report, retention, result, code)
