"""Where the time of a compaction round goes, inside the executor's writer: one partition's
round rewritten in this process (the same functions a Spark task runs, without Spark) under
cProfile, its own time split into decode, key and record decisions, re-encode, compression,
index building, file writes and fsync.

Usage: python bench/writer_profile.py [--records 1000000] [--keys 100000] [--value-bytes 110]
           [--codec none|gzip|snappy|lz4|zstd] [--path native|pure] [--top 12]

Prints the writer's wall time on both paths (native kernels and pure Python, each after a
warm-up group so the JIT's compile is not counted) beside the framing-with-CRC pass over the
same bytes (the in-run floor: ``clean_vs_framing`` is framing time / writer time), then, for
``--path``, the categories of its own time under cProfile (time inside a native kernel counts
as its Python caller's, in "native kernels") and the functions with the most own time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compactor.cleaner.policy import PartitionInput  # noqa: E402
from compactor.cleaner.scan import batch_header  # noqa: E402
from compactor.codec.compression import Codec  # noqa: E402
from compactor.codec.segment import iter_batches  # noqa: E402
from compactor.config import TopicConfig  # noqa: E402
from compactor.log import storage  # noqa: E402
from compactor.log.layout import load_partition, read_aborted_txns, remove_cleaned  # noqa: E402
from compactor.native import engine  # noqa: E402
from compactor.spark.writer import write_group  # noqa: E402
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate  # noqa: E402

#: Which category a function's own time belongs to: the first category one of whose
#: fragments occurs in ``file:function`` (cProfile names builtins ``<built-in method m.f>``);
#: the rest is "other (Python glue)".
CATEGORIES = (
    ("fsync", ("fsync", "fdatasync")),
    ("native kernels", ("fast.py", "kernels.py", "numba")),
    ("compression", ("compression.py", "zstd", "lz4", "snappy", "cramjam", "zlib.compress",
                     "zlib.decompress", "gzip")),
    ("checksums", ("crc32", "xxh")),
    ("file writes", ("storage", "_io.", "mmap", "posix.")),
    ("index building", ("indexes.py",)),
    ("re-encode", ("rebuild_batch", "encode_batch", "_encode", "_frame", "empty_batch_like",
                   "placeholder_batch", "filter_batch", "varint", "SegmentBuilder", "append")),
    ("decode", ("segment.py", "records.py", "legacy.py", "aiokafka", "_batch_at")),
    ("decisions", ("iter_drops", "policy.py", "rebatch.py", "writer.py")),
)


def category(filename: str, name: str) -> str:
    where = f"{filename}:{name}"
    for label, fragments in CATEGORIES:
        if any(fragment in where for fragment in fragments):
            return label
    return "other (Python glue)"


def framing_pass(paths: list[str]) -> float:
    """Seconds to frame and CRC-check every batch of the files (the practical read floor)."""
    start = time.perf_counter()
    for path in paths:
        with storage.mapped(path) as data:
            for _ in iter_batches(data, path=path):
                pass
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="records in the partition")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys")
    ap.add_argument("--value-bytes", type=int, default=110, help="bytes per value")
    ap.add_argument("--codec", default="none", choices=[c.name.lower() for c in Codec],
                    help="the producers' codec")
    ap.add_argument("--path", default="native", choices=("native", "pure"),
                    help="the writer path profiled")
    ap.add_argument("--top", type=int, default=12, help="functions listed by own time")
    args = ap.parse_args()

    codec = Codec[args.codec.upper()]
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    try:
        cfg = GeneratorConfig(
            topics=("bench",), partitions=1, records_per_partition=args.records,
            distinct_keys=args.keys, zipf_exponent=0.0, value_bytes=args.value_bytes,
            tombstone_ratio=0.2, null_key_ratio=0.0, header_ratio=0.0, max_batch_records=200,
            segment_bytes=4 * 1024 * 1024, index_interval_bytes=4096, codecs=(codec,),
            transactional_producers=0, leader_epochs=1, record_interval_ms=1, seed=1,
            metadata_log=False)
        generate(str(work / "logs"), cfg)
        pdir = str(work / "logs" / "bench-0")
        part = load_partition(pdir)
        topic = TopicConfig(cleanup_policy=frozenset({"compact"}))
        inp = PartitionInput(path=pdir, segments=part.segments, config=topic,
                             cleaner_checkpoint=None, log_start_checkpoint=None,
                             replication_checkpoint=None,
                             aborted_txns=tuple(read_aborted_txns(part)),
                             now_ms=DEFAULT_START_MS + args.records + 86_400_000,
                             # no broker left a replication checkpoint: its whole log is
                             # committed (without this the high watermark is unknown and the
                             # round cleans nothing)
                             assume_committed=True)
        headers = []
        for seg in part.segments:
            with storage.mapped(seg.log_path) as data:
                headers += [batch_header(b, seg.base_offset)
                            for b in iter_batches(data, path=seg.log_path)]
        plan = inp.plan(headers)
        decisions = {(h.segment_base, h.position): d for h, d in inp.decide(plan, headers)}
        if not plan.groups:
            raise SystemExit(f"nothing to clean in the generated log: {plan}")
        sources = [s.log_path for s in part.segments
                   if any(s.base_offset in g for g in plan.groups)]
        size = sum(os.path.getsize(p) for p in sources)
        framing_s = framing_pass(sources)

        def write(writer: str) -> list:
            messages = [write_group(inp, group, decisions, frozenset(),
                                    first_dirty=plan.first_dirty_offset,
                                    engine=engine(writer))
                        for group in plan.groups]
            for m in messages:
                assert m.error is None, m.error
                remove_cleaned(pdir, m.group_base)
            return messages

        write("native")  # warm-up: the JIT compiles (or loads its cache), the page cache fills
        walls = {}
        for label in ("pure", "native"):
            start = time.perf_counter()
            messages = write(label)
            walls[label] = time.perf_counter() - start
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        messages = write(args.path)
        profiler.disable()
        wall = time.perf_counter() - start

        stats = pstats.Stats(profiler)
        own: dict[str, float] = defaultdict(float)
        rows = []
        for (filename, _, name), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
            own[category(filename, name)] += tottime
            rows.append((tottime, f"{Path(filename).name}:{name}"))
        total = sum(own.values())
        records_in = sum(m.records_in for m in messages)
        print(f"writer: {len(plan.groups)} group(s), {records_in:,} records, {size / 1e6:.0f} MB "
              f"({args.codec}), one core")
        print(f"framing with CRC over the same bytes: {framing_s:.2f} s "
              f"({size / framing_s / 1e6:.0f} MB/s)")
        for label, seconds in walls.items():
            print(f"writer, {label:<6}: {seconds:.2f} s ({size / seconds / 1e6:.0f} MB/s; "
                  f"clean_vs_framing {framing_s / seconds:.3f})")
        print(f"native / pure: {walls['pure'] / walls['native']:.2f}x faster")
        print(f"profile of the {args.path} path: {wall:.2f} s wall under cProfile")
        print(f"{'category':<22} {'own s':>8} {'share':>7}")
        for label, seconds in sorted(own.items(), key=lambda kv: -kv[1]):
            print(f"{label:<22} {seconds:>8.2f} {seconds / total:>7.1%}")
        print(f"top {args.top} functions by own time:")
        for tottime, where in sorted(rows, reverse=True)[:args.top]:
            print(f"  {tottime:>7.2f} s  {where}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
