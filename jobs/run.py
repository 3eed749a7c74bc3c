"""spark-submit entry point of ``compactor run``: what a scheduler calls. Per topic, by its
``cleanup.policy`` (kafka-semantics §5.2, §5.8):

* ``delete``: retention by log start offset, ``retention.bytes`` and ``retention.ms``;
* ``compact``: a compaction round, then log-start-offset retention;
* ``compact,delete``: a compaction round, then full retention.

    spark-submit jobs/run.py LOG_DIR [--now-ms MS] [--config KEY=VALUE ...]
        [--topic-config TOPIC:KEY=VALUE ...] [--topic-configs FILE] [--master URL] [--json]
        [--dry-run] [--allow-aggressive-retention]

The log dir lock is held across both steps. ``--dry-run`` plans the compaction round and the
retention (on the segments as they are now) and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from compactor import ledger, storage
from compactor.errors import EXIT_OK
from compactor.options import (
    add_arguments,
    add_retention_arguments,
    run_main,
)
from jobs import compact, retain


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobs/run.py",
        description="Compaction and retention over a Kafka log dir, per topic cleanup.policy.")
    add_arguments(parser)
    add_retention_arguments(parser)
    return parser


def execute(args: argparse.Namespace, out: TextIO) -> int:
    """Run both steps from parsed arguments, print one JSON report line (and a summary);
    returns the exit code (the worse of the two steps)."""
    opts, catalog = retain.prepare(args, plan_only=args.dry_run)
    started = int(time.time() * 1000)
    compacting = any(cfg.compact and cfg.configured for t, cfg in catalog.configs.items()
                     if opts.selects(t))
    spark = compact.get_spark(args.master) if compacting else None
    with storage.log_dir_lock(opts.log_dir):
        round_report = compact.run_locked(spark, opts, catalog) if spark else None
        retention = retain.retain_locked(opts.log_dir, catalog, opts.now_ms,
                                         dry_run=args.dry_run, topics=opts.topics)
    codes = [retention.exit_code] + ([round_report.exit_code] if round_report else [])
    code = max(codes) if any(c != EXIT_OK for c in codes) else EXIT_OK
    report = {"type": "report", "command": "run", "log_dir": opts.log_dir,
              "now_ms": opts.now_ms, "dry_run": args.dry_run,
              "status": "ok" if code == EXIT_OK else "partial",
              "compaction": round_report.to_dict() if round_report else None,
              "retention": retention.to_dict()}
    if args.state_dir and not args.dry_run:
        finished = int(time.time() * 1000)
        for part in (report["compaction"], report["retention"]):
            if part is not None:
                part["run_id"] = ledger.record_report(args.state_dir, part, started, finished)
    out.write(json.dumps(report, separators=(",", ":")) + "\n")
    if not args.json:
        if round_report:
            out.write(round_report.summary() + "\n")
        out.write(retention.summary(hints=round_report is None) + "\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("run", build_parser(), execute, argv)


if __name__ == "__main__":
    sys.exit(main())
