"""Where an erasure round's time goes: ``erase apply`` then ``erase verify`` against the
erasure benchmark's small ledger (``bench/erase.py``'s log dir and ledger, made there first),
several rounds in one Spark session, each phase of :mod:`compactor.maintenance.erase` timed.

Usage: python bench/erase_phases.py [--rounds 3] [--data-dir DIR] [--master local[2]] [--rss]

Prints one line per command and round: its seconds and each phase's (the phases are the
module's own functions, wrapped by a timer for this process only: reading the requests, the
scan and match, the plan, the rewrite, the swap, the outcomes, the run rows, the MERGE). The
first round is the session's first erasure; the later ones are warm. A profiling aid beside
``make bench-erase``, whose figures (and their baseline) it does not replace.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import erase as erase_bench  # noqa: E402  (bench/erase.py: the same log dir and ledger)

#: (module, function names) timed in each round
PHASES = {
    "compactor.maintenance.erase": ("_load", "_scan", "_plan_erasure", "_rewrite",
                                    "_settle_lease", "_record", "_remote_tier"),
    "compactor.erasure.ledger": ("pending_summary", "requests_with_digests", "outcome_rows"),
    "compactor.state.runs": ("record_runs",),
    "compactor.spark.ledger": ("merge_outcomes", "moved_requests"),
    "compactor.spark.stages": ("run_outcomes", "_scanned_rows", "requests_frame",
                               "_matched_on_driver"),
    "compactor.log.swap": ("commit_isolated",),
}


def _timed(seconds: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started
            if RSS:
                seconds[f"{name}_mib"] = max(seconds.get(f"{name}_mib", 0.0), _rss_mib())
    return wrapper


#: with ``--rss``, each phase's resident memory after it too (``<phase>_mib``, the most after
#: any call in the round): where the driver's memory grows
RSS = False


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    import importlib

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data-dir", default="/work/benchdata")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--small-subjects", type=int, default=1_000)
    ap.add_argument("--present", type=int, default=100)
    ap.add_argument("--rss", action="store_true",
                    help="also each phase's resident memory after it (MiB)")
    args = ap.parse_args()
    global RSS
    RSS = args.rss
    root = Path(args.data_dir)
    logs = next(root.glob(f"bench-compact-v2-{args.records}-{args.keys}-*"), None)
    ledger_dir = erase_bench.ledger_with(args.small_subjects, args.present, args.keys, root)
    if logs is None:
        print(f"no benchmark log dir in {root}: run bench/erase.py --data-dir {root} first",
              file=sys.stderr)
        return 1
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from compactor.maintenance import erase
    from compactor.maintenance.options import build_options
    from compactor.spark.session import get_spark
    from compactor.tools.ops.generator import DEFAULT_START_MS

    seconds: dict[str, float] = {}
    for module, names in PHASES.items():
        target = importlib.import_module(module)
        for name in names:
            setattr(target, name, _timed(seconds, name, getattr(target, name)))
    spark = get_spark(args.master, "bench-erase-phases")
    spark.sparkContext.setLogLevel("ERROR")
    now_ms = DEFAULT_START_MS + args.records + 86_400_000
    for n in range(args.rounds):
        work = erase_bench.fresh_copy(logs, "phases")
        state = erase_bench.fresh_copy(ledger_dir, "phases-ledger")
        opts = build_options(str(work), now_ms=now_ms, assume_kafka_defaults=True)
        for action in (erase.apply, erase.verify):
            seconds.clear()
            started = time.perf_counter()
            report = action(spark, opts, str(state))
            total = time.perf_counter() - started
            phases = " ".join(f"{k}={v:.2f}" for k, v in seconds.items())
            print(f"round {n} {action.__name__} {total:.2f} s ({report.status}): {phases}",
                  flush=True)
        shutil.rmtree(work.parent)
        shutil.rmtree(state.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
