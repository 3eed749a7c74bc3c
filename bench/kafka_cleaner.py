"""Kafka's own cleaner and our round on the same bytes (issue 33; a first cut).

Usage: python bench/kafka_cleaner.py [--records 2000000] [--keys 200000] [--value-bytes 110]
           [--partitions 2] [--codec none|lz4|zstd] [--buffer-bytes 134217728]
           [--master local[2]] [--data-dir DIR] [--no-check]

Generates a log dir (cached in ``--data-dir``), then on fresh copies of it:

- Kafka 4.1.2's ``Cleaner`` (``tests/kafka/KafkaClean.java``, one thread, the JDK's source
  launcher, an MD5 offset map of ``--buffer-bytes``: Kafka's ``log.cleaner.dedupe.buffer.size``
  default is 128 MiB, several passes when the keys do not fit), partition after partition as
  one cleaner thread takes them; its MB/s is the bytes its passes read over the seconds they
  took inside the JVM, and its wall time the processes' (JVM start and log load included);
- our round (``compactor.maintenance.compact.run``, a new Spark session, cold, then warm), with
  the same ``now``; per core is the input bytes over the writer tasks' summed seconds, wall the
  round's.

Then both outputs are compared record by record (offset and key of every record left), and one
JSON line prints ``kafka_mb_s_per_thread``, ``ours_mb_s_per_core``, ``vs_kafka_per_core`` and
``vs_kafka_wall`` (Kafka's wall over ours).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compactor.codec.compression import Codec  # noqa: E402
from compactor.codec.segment import iter_batches  # noqa: E402
from compactor.tools.generator import DEFAULT_START_MS, GeneratorConfig, generate  # noqa: E402
from tests.kafka.broker import classpath  # noqa: E402

HARNESS = Path(__file__).resolve().parents[1] / "tests" / "kafka" / "KafkaClean.java"
TOPIC = "bench"
CONFIGS = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "86400000", "segment.bytes": str(1 << 30)}


def _generated(args: argparse.Namespace) -> Path:
    root = Path(args.data_dir or tempfile.gettempdir())
    name = (f"kafka-cleaner-{args.records}-{args.keys}-{args.value_bytes}-{args.partitions}-"
            f"{args.codec}-{args.segment_bytes}")
    out = root / name
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    codec = {"none": Codec.NONE, "lz4": Codec.LZ4, "zstd": Codec.ZSTD}[args.codec]
    generate(str(out), GeneratorConfig(
        topics=(TOPIC,), partitions=args.partitions,
        records_per_partition=args.records // args.partitions, distinct_keys=args.keys,
        value_bytes=args.value_bytes, segment_bytes=args.segment_bytes, tombstone_ratio=0.1,
        zipf_exponent=0.0, max_batch_records=200,
        null_key_ratio=0.0, transactional_ratio=0.0, codecs=(codec,), seed=33,
        metadata_log=False))
    (out / ".complete").write_text("")
    return out


def _copy(src: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".complete"))
    os.sync()
    return dest


def _kafka(logs: Path, now: int, buffer_bytes: int, work: Path) -> dict[str, float]:
    props = work / "topic.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in CONFIGS.items()))
    read = seconds = wall = passes = 0.0
    for part in sorted(p for p in logs.iterdir() if p.is_dir() and p.name.startswith(TOPIC)):
        started = time.perf_counter()
        proc = subprocess.run(
            ["java", "-Xmx1g", "-cp", classpath(), str(HARNESS), str(part), str(now),
             str(props), "0", "0", str(2**62), "-1", str(buffer_bytes)],
            capture_output=True, text=True, timeout=3600)
        wall += time.perf_counter() - started
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        read += out["bytes_read"]
        seconds += out["seconds"]
        passes += out["passes"]
        for leftover in part.glob("*.deleted"):
            leftover.unlink()
    return {"bytes_read": read, "seconds": seconds, "wall": wall, "passes": passes}


def _ours(spark, logs: Path, now: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from compactor.maintenance.compact import run
    from compactor.maintenance.options import build_options

    started = time.perf_counter()
    report = run(spark, build_options(str(logs), now_ms=now, config_all=CONFIGS,
                                      assume_kafka_defaults=True))
    wall = time.perf_counter() - started
    cleaned = [p for p in report.partitions if p.status == "cleaned"]
    if not cleaned:
        raise SystemExit("our round cleaned nothing")
    return {"bytes_in": sum(p.bytes_in for p in cleaned),
            "rewrite_s": sum(p.stages_s.get("rewrite", 0.0) for p in cleaned), "wall": wall}


def _records(logs: Path) -> dict[str, list[tuple[int, bytes | None]]]:
    out = {}
    for part in sorted(p for p in logs.iterdir() if p.is_dir() and p.name.startswith(TOPIC)):
        rows = []
        for seg in sorted(part.glob("*.log")):
            for batch in iter_batches(seg.read_bytes()):
                if not batch.is_control:
                    rows += [(r.offset, r.key) for r in batch.compiled_records()]
        out[part.name] = rows
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=110)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--segment-bytes", type=int, default=16 * 1024 * 1024,
                        help="the generated segments' size (the active one is not cleaned)")
    parser.add_argument("--codec", choices=("none", "lz4", "zstd"), default="none")
    parser.add_argument("--buffer-bytes", type=int, default=128 * 1024 * 1024)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--no-check", action="store_true")
    args = parser.parse_args()
    cores = int(args.master.split("[")[1].rstrip("]")) if "[" in args.master else 1

    source = _generated(args)
    now = DEFAULT_START_MS + args.records + 86_400_000 * 3
    work = Path(tempfile.mkdtemp(prefix="kafka-cleaner-"))
    try:
        kafka_dir = _copy(source, work / "kafka")
        kafka = _kafka(kafka_dir, now, args.buffer_bytes, work)
        if not kafka["seconds"]:
            raise SystemExit("Kafka's cleaner found nothing to clean (one segment per partition? "
                             "lower --segment-bytes)")
        kafka_mb_s = kafka["bytes_read"] / kafka["seconds"] / 1e6
        print(f"Kafka's cleaner (one thread, {args.buffer_bytes >> 20} MiB map): "
              f"{kafka['bytes_read'] / 1e6:,.0f} MB read in {kafka['seconds']:.1f} s "
              f"({kafka_mb_s:.0f} MB/s) in {kafka['passes']:.0f} passes; processes "
              f"{kafka['wall']:.1f} s")

        from compactor.spark.session import get_spark

        spark = get_spark(args.master, "bench-kafka-cleaner")
        spark.sparkContext.setLogLevel("ERROR")
        rounds = {}
        for label in ("cold", "warm"):
            ours_dir = _copy(source, work / f"ours-{label}")
            rounds[label] = _ours(spark, ours_dir, now)
            r = rounds[label]
            print(f"our round ({label}, {args.master}): {r['wall']:.1f} s; "
                  f"{r['bytes_in'] / r['rewrite_s'] / 1e6:.0f} MB/s per core (writer tasks)")
        spark.stop()
        if not args.no_check:
            theirs, ours = _records(kafka_dir), _records(work / "ours-warm")
            if theirs != ours:
                diff = [p for p in theirs if theirs[p] != ours.get(p)]
                raise SystemExit(f"Kafka's cleaner and ours left different records in {diff}")
            print("both left the same records (offset and key of each)")
        warm = rounds["warm"]
        ours_mb_s = warm["bytes_in"] / warm["rewrite_s"] / 1e6
        print(json.dumps({
            "codec": args.codec, "keys": args.keys, "records": args.records,
            "buffer_bytes": args.buffer_bytes, "kafka_passes": kafka["passes"],
            "kafka_mb_s_per_thread": round(kafka_mb_s, 1),
            "ours_mb_s_per_core": round(ours_mb_s, 1),
            "vs_kafka_per_core": round(ours_mb_s / kafka_mb_s, 3),
            "vs_kafka_wall": round(kafka["wall"] / rounds["cold"]["wall"], 3),
            "cores": cores}, sort_keys=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
