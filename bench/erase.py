"""Erasure benchmark: ``erase apply`` and ``erase verify`` rounds against few and many pending
subjects, beside a compaction round over the same log dir, in one process and one Spark
session.

Usage: python bench/erase.py [--records 10000000] [--keys 1000000] [--subjects 1000000]
           [--present 100] [--small-subjects 1000] [--master local[2]] [--data-dir DIR] [--json]

The log dir is the compaction benchmark's (``bench/compact.py``: 10 M records, 1 M keys, 4
partitions, 1.1 GB; cached in ``--data-dir``); the ledger holds ``--subjects`` pending key
requests, of which ``--present`` name keys of the log (the others digests no record has), and
is cached beside it. In one session (delta-spark, as the commands start theirs), each round on
a fresh copy of the log dir and of the ledger:

1. a compaction round (cold: the session's first, it warms the JVM and the Python workers);
2. the compaction round again, warm: **the baseline**;
3. ``erase apply`` then ``erase verify`` with ``--small-subjects`` pending requests, the
   session's first erasure;
4. the same again, warm;
5. ``erase apply`` then ``erase verify`` with ``--subjects`` pending requests;
6. round 4 with ``--writer pure``, whose erased log dir must equal round 4's byte for byte;
7. ``erase status`` of round 5's ledger, and of the ledger of ``--subjects`` requests as made,
   each of them pending and past its deadline: all listed as overdue.

Prints each round's time and the driver's peak memory during it (its Python process and its
JVM, sampled every 100 ms), the ratios to the compaction round (targets: apply 1.5 with few
subjects, 2.0 with many; verify 1.0), the first erasure's to a warm one (1.5) and the pure
path's times. ``--json`` ends with one JSON line of those figures (``compact_s``,
``apply_small_s``, ``apply_s``, ``verify_small_s``, ``verify_s``, ``first_apply_small_s``,
``pure_apply_small_s``, ``pure_verify_small_s``, the ``ratio_*``, the ``driver_*_mib`` and
``pure_output_equal``, ``status_s`` and ``status_python_mib``: ``erase status`` of the
big round's ledger; ``status_overdue_s``: of the overdue one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compact as compact_bench  # noqa: E402  (bench/compact.py: the same log dir)

from compactor.tools.ops.generator import DEFAULT_START_MS  # noqa: E402
from tests.helpers import tree_digest  # noqa: E402

T = TypeVar("T")


class DriverMemory(threading.Thread):
    """Peak resident memory of this process (the driver's Python) and of its JVM children,
    sampled every 100 ms from /proc."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.python_kib = self.jvm_kib = 0

    def run(self) -> None:
        me = str(os.getpid())
        while not self.stop.is_set():
            jvm = 0
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text().split()
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if stat[3] == me and b"java" in cmd.split(b"\0")[0]:
                    jvm += compact_bench.MemorySampler._rss_kib(pid)
            self.python_kib = max(self.python_kib, compact_bench.MemorySampler._rss_kib(me))
            self.jvm_kib = max(self.jvm_kib, jvm)
            self.stop.wait(0.1)


#: the ledger's requests are due this many days after they were made
DEADLINE_DAYS = 30


def ledger_with(subjects: int, present: int, keys: int, cache_root: Path) -> Path:
    """A state dir whose ledger holds ``subjects`` pending key requests on topic ``bench``,
    ``present`` of them for keys the log has; made once."""
    from compactor.erasure import ledger, rules
    from compactor.state import tables as state_tables

    cache = cache_root / f"bench-erase-ledger-v1-{subjects}-{present}-{keys}"
    if (cache / ".complete").exists():
        return cache
    shutil.rmtree(cache, ignore_errors=True)
    started = time.perf_counter()
    stride = max(1, keys // max(1, present))
    digests = [hashlib.sha256(f"key-{i * stride:08d}".encode()).hexdigest()
               for i in range(present)]
    digests += [hashlib.sha256(f"absent-{i}".encode()).hexdigest()
                for i in range(subjects - present)]
    state_tables.init(str(cache))
    batch = 250_000
    for start in range(0, len(digests), batch):
        requests = rules.new_requests(
            topic="bench", digests=digests[start:start + batch], selector="key",
            header_name=None, reason="benchmark", now_ms=DEFAULT_START_MS,
            deadline_days=DEADLINE_DAYS,
            request_id=None)
        ledger.add_requests(str(cache), requests)
    (cache / ".complete").write_text("")
    print(f"ledger of {subjects:,} requests ({present} present) made in "
          f"{time.perf_counter() - started:.1f} s: {cache}")
    return cache


def fresh_copy(source: Path, name: str) -> Path:
    """A copy of ``source`` for one round, flushed to disk before the round starts: the
    copy's 1.1 GB of dirty pages would otherwise be written back during the round it is for
    (an apply writes as much again), and the rounds' times varied by seconds with it."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-erase-{name}-")) / source.name
    shutil.copytree(source, work, ignore=shutil.ignore_patterns(".complete"))
    os.sync()
    return work


def timed(label: str, fn: Callable[[], T]) -> tuple[float, DriverMemory, T]:
    import gc

    gc.collect()
    sampler = DriverMemory()
    sampler.start()
    started = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - started
    sampler.stop.set()
    sampler.join()
    print(f"{label}: {seconds:.1f} s; driver peak: Python {sampler.python_kib / 1024:.0f} MiB, "
          f"JVM {sampler.jvm_kib / 1024:.0f} MiB")
    return seconds, sampler, result


@dataclass
class Round:
    """An apply and the verify after it: their times and memory, the erased log dir's files
    by digest (``tests.helpers.tree_digest``; its copy is deleted as the round ends) and the
    ledger they wrote."""

    apply_s: float
    verify_s: float
    memory: DriverMemory
    verify_memory: DriverMemory
    files: dict[str, str]
    ledger: Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--subjects", type=int, default=1_000_000,
                    help="pending requests of the big erasure round")
    ap.add_argument("--small-subjects", type=int, default=1_000,
                    help="pending requests of the small erasure round")
    ap.add_argument("--present", type=int, default=100,
                    help="requests naming keys the log has (the rest match nothing)")
    ap.add_argument("--value-bytes", type=int, default=110)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--tombstone-ratio", type=float, default=0.2)
    ap.add_argument("--segment-bytes", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--data-dir", default=None, help="cache of the log dir and the ledgers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.data_dir = args.data_dir or tempfile.gettempdir()

    logs = compact_bench._cached(args)
    root = Path(args.data_dir)
    # made in a child process, so this one's memory is the driver's alone
    import multiprocessing

    for n in (args.small_subjects, args.subjects):
        child = multiprocessing.get_context("spawn").Process(
            target=ledger_with, args=(n, args.present, args.keys, root))
        child.start()
        child.join()
        assert child.exitcode == 0, f"making the ledger of {n} subjects failed"
    small = ledger_with(args.small_subjects, args.present, args.keys, root)
    big_state = ledger_with(args.subjects, args.present, args.keys, root)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from compactor.maintenance import erase
    from compactor.maintenance.compact import run
    from compactor.maintenance.options import MaintenanceOptions, build_options
    from compactor.spark.session import get_spark

    spark = get_spark(args.master, "bench-erase")
    spark.sparkContext.setLogLevel("ERROR")
    now_ms = DEFAULT_START_MS + args.records + 86_400_000

    def compaction() -> float:
        work = fresh_copy(logs, "compact")
        seconds, memory, report = timed("compaction round", lambda: run(
            spark, MaintenanceOptions(log_dir=str(work), now_ms=now_ms,
                                      assume_kafka_defaults=True)))
        assert report.exit_code == 0, report.exit_code
        shutil.rmtree(work.parent)
        return seconds

    def erasure(state: Path, label: str, writer: str = "native") -> Round:
        """An apply on fresh copies of the log dir and the ledger, then a verify of them."""
        work, ledger_copy = fresh_copy(logs, "erase"), fresh_copy(state, "ledger")
        opts = build_options(str(work), now_ms=now_ms, assume_kafka_defaults=True,
                             writer=writer)
        apply_s, memory, report = timed(f"erase apply, {label}", lambda: erase.apply(
            spark, opts, str(ledger_copy)).to_dict())
        verify_s, verify_memory, verified = timed(f"erase verify, {label}", lambda: erase.verify(
            spark, opts, str(ledger_copy)).to_dict())
        for r in (report, verified):
            erased = sum(p.get("records_erased", 0) for p in r["partitions"])
            print(f"  {r['command']} {r['status']}: {erased:,} records erased, requests "
                  f"{r.get('requests_by_outcome')}")
        # the copies go as the round ends: a later round's writes slowed by half with four
        # rounds' 1.1 GB copies left on this disk (the rewrite 1.1 -> 2.3 s, measured)
        files = tree_digest(work)
        shutil.rmtree(work.parent)
        return Round(apply_s, verify_s, memory, verify_memory, files, ledger_copy)

    compaction()  # the session's first round: JVM and workers warm up
    compact_s = compaction()
    first = erasure(small, f"{args.small_subjects:,} subjects, the session's first")
    warm = erasure(small, f"{args.small_subjects:,} subjects")
    big = erasure(big_state, f"{args.subjects:,} subjects")
    pure = erasure(small, f"{args.small_subjects:,} subjects, --writer pure", writer="pure")
    same = warm.files == pure.files
    # `erase status` as the command runs it (its integrity check's hasher too): of the big
    # round's ledger after its verify (a ledger of that many rows with places), and of the
    # big ledger as made, every request pending and past its deadline (an operator's
    # backlog: each is listed as overdue); no Spark, read batch by batch
    import functools

    from compactor import native
    from compactor.erasure import ledger as ledger_module
    from compactor.erasure.rules import DAY_MS

    hasher_for = functools.partial(native.integrity_digests, "native")
    status_s, status_memory, _ = timed(
        f"erase status, {args.subjects:,} requests",
        lambda: ledger_module.status(str(big.ledger), now_ms, hasher_for=hasher_for))
    late_ms = DEFAULT_START_MS + (DEADLINE_DAYS + 1) * DAY_MS
    overdue_s, _, overdue = timed(
        f"erase status, {args.subjects:,} requests all overdue",
        lambda: ledger_module.status(str(big_state), late_ms, hasher_for=hasher_for))
    assert overdue["overdue_count"] == args.subjects, overdue["overdue_count"]
    print(f"the native and the pure path's erased log dirs are byte for byte equal: {same}")
    for r in (first, warm, big, pure):
        shutil.rmtree(r.ledger.parent)
    figures = {
        "compact_s": compact_s,
        "apply_small_s": warm.apply_s, "apply_s": big.apply_s,
        "verify_small_s": warm.verify_s, "verify_s": big.verify_s,
        "first_apply_small_s": first.apply_s, "pure_apply_small_s": pure.apply_s,
        "pure_verify_small_s": pure.verify_s,
        "ratio_apply_small": warm.apply_s / compact_s, "ratio_apply": big.apply_s / compact_s,
        "ratio_verify_small": warm.verify_s / compact_s, "ratio_verify": big.verify_s / compact_s,
        "ratio_first_to_warm": first.apply_s / warm.apply_s,
        "driver_python_mib_small": warm.memory.python_kib / 1024,
        "driver_python_mib": big.memory.python_kib / 1024,
        "driver_jvm_mib_small": warm.memory.jvm_kib / 1024,
        "driver_jvm_mib": big.memory.jvm_kib / 1024,
        "pure_output_equal": same, "status_s": status_s,
        "status_python_mib": status_memory.python_kib / 1024, "status_overdue_s": overdue_s,
    }
    print(f"apply / compaction: {figures['ratio_apply_small']:.2f} with "
          f"{args.small_subjects:,} subjects (target <= 1.5), {figures['ratio_apply']:.2f} with "
          f"{args.subjects:,} (target <= 2.0)")
    print(f"verify / compaction: {figures['ratio_verify_small']:.2f} and "
          f"{figures['ratio_verify']:.2f} (target <= 1.0)")
    print(f"the session's first apply / a warm one: {figures['ratio_first_to_warm']:.2f} "
          f"(target <= 1.5)")
    print(f"--writer pure: apply {pure.apply_s:.1f} s, verify {pure.verify_s:.1f} s")
    print(f"driver Python peak: {figures['driver_python_mib_small']:.0f} MiB with "
          f"{args.small_subjects:,} subjects, {figures['driver_python_mib']:.0f} MiB with "
          f"{args.subjects:,}; JVM {figures['driver_jvm_mib_small']:.0f} / "
          f"{figures['driver_jvm_mib']:.0f} MiB")
    if args.json:
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v
                          for k, v in figures.items()}))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
