"""Kafka's own cleaner and our round on the same bytes, side by side in one run (issue 33).

Usage: python bench/kafka_cleaner.py [--records 10000000] [--keys 1000000] [--value-bytes 110]
           [--partitions 4] [--segment-bytes 67108864] [--codecs none,lz4,zstd]
           [--buffers default,one-pass] [--shuffle-codecs none] [--group-bytes 67108864]
           [--master local[2]] [--repeat 1] [--data-dir DIR] [--no-check] [--generate-only]
           [--scaling]

For each codec a log dir is generated (cached in ``--data-dir``: 4 partitions of 64 MiB
segments by default, uniform keys, 20% tombstones, batches of up to 200 records), then on
fresh copies:

- **Kafka's cleaner**: Kafka 4.1.2's ``Cleaner`` in one JVM with one thread, as a broker's
  ``CleanerThread`` takes the partitions one after the other (``tests/kafka/KafkaClean.java``,
  compiled once; ``UnifiedLog`` opened as after a clean shutdown, ``cleanableOffsets`` at the
  same ``now``, ``doClean`` passes until the dirty section is clean: several when the keys
  overflow the MD5 offset map of ``log.cleaner.dedupe.buffer.size``). ``default`` is Kafka's
  128 MiB (one thread: ``LogCleaner`` splits the buffer over ``log.cleaner.threads``),
  ``one-pass`` a buffer large enough for the largest partition's keys (24 bytes a slot, 0.9
  load factor: ``SkimpyOffsetMap``, ``Cleaner.buildOffsetMap``). Its MB/s per thread is the
  log's cleaned bytes over the seconds its passes took (map and copy, ``System.nanoTime``);
  ``kafka_stats_mb_s`` is the figure of its own log line (``CleanerStats.bytesRead``, which
  counts every pass's re-read, over the same seconds).
- **ours, cold**: ``compactor compact`` in a new process, as a user runs it (interpreter,
  Spark's JVM, the round); its wall time against Kafka's process (JVM start and log load
  included), the same way on both sides.
- **ours, warm**: the same round in a warm session (the writer's kernels compiled, the
  executors' Python workers started); per core is the cleaned bytes over the round's wall
  time times the cores (everything counted: listing, planning, the key scan, the writer,
  the commit, idle cores), and ``ours_clean_mb_s_per_core`` the writer tasks' own figure.
- **ours, several groups** (``--shuffle-codecs``): the round again with ``segment.bytes`` of
  ``--group-bytes``, several groups a partition, so records are superseded across groups:
  in one task a partition with one key table (``groups_one_task``, the default within
  ``--task-keys``), then through the distributed offset map (``shuffle``,
  ``--task-keys 0``); each the session's first such round, then ``--repeat`` warm ones.
  Each prints what its stages wrote to the shuffle (Spark's own count, after compression),
  a record and a batch of its input; with ``--scaling`` each runs again on ``local[1]`` in a
  process of its own (a first round, then a warm one), and ``local1_over_local2`` is that
  warm wall over the ``local[2]`` one.

With ``--repeat N`` Kafka's cleaner (each buffer) and our warm round run N times, one after
the other in turn with our cold process, and the figures are their medians, with the range of
the N ratios of a Kafka run to the round beside it (``vs_kafka_per_core_range``,
``vs_kafka_wall_range``): this machine's speed drifts by 10-15% over minutes, and the
alternation exposes both sides to the same drift. The several-group rounds run N warm times
too, after Kafka's runs (their ratios pair the runs in order), and ``first_over_warm`` is the
first round over the median warm one.

Kafka's output and each of ours are then compared record by record (offset and key of every
record left) and one JSON line per codec prints ``kafka_mb_s_per_thread``,
``ours_mb_s_per_core``, ``vs_kafka_per_core`` (per buffer), ``vs_kafka_wall`` (Kafka's process
over our cold process) and the shuffle figures. See ``docs/benchmarks.md``.
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
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.compact import executor_cores  # noqa: E402
from compactor.codec.compression import Codec  # noqa: E402
from compactor.codec.segment import iter_batches  # noqa: E402
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate  # noqa: E402
from tests.kafka.broker import classpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "kafka" / "KafkaClean.java"
TOPIC = "bench"
DEFAULT_BUFFER = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size (CleanerConfig)
SLOT_BYTES = 16 + 8  # SkimpyOffsetMap: an MD5 digest and an offset per slot
LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
CODECS = {"none": Codec.NONE, "lz4": Codec.LZ4, "zstd": Codec.ZSTD, "gzip": Codec.GZIP,
          "snappy": Codec.SNAPPY}


def _configs(segment_bytes: int) -> dict[str, str]:
    """The topic's configs on both sides (ours through the round, Kafka's as a file)."""
    return {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "86400000", "segment.bytes": str(segment_bytes)}


def _generated(args: argparse.Namespace, codec: str) -> Path:
    root = Path(args.data_dir or tempfile.gettempdir())
    # v2: lz4 batches written by lz4's fast compressor, as a producer at Kafka's default level
    out = root / (f"kafka-cleaner-v2-{args.records}-{args.keys}-{args.value_bytes}-"
                  f"{args.partitions}-{args.segment_bytes}-{codec}")
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    generate(str(out), GeneratorConfig(
        topics=(TOPIC,), partitions=args.partitions,
        records_per_partition=args.records // args.partitions,
        distinct_keys=max(1, args.keys // args.partitions), zipf_exponent=0.0,
        value_bytes=args.value_bytes, tombstone_ratio=0.2, null_key_ratio=0.0,
        header_ratio=0.0, max_batch_records=200, segment_bytes=args.segment_bytes,
        index_interval_bytes=4096, codecs=(CODECS[codec],), transactional_producers=0,
        leader_epochs=1, record_interval_ms=1, seed=33, metadata_log=False))
    (out / ".complete").write_text("")
    print(f"generated {out} in {time.perf_counter() - started:.0f} s", flush=True)
    return out


def _copy(src: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".complete"))
    os.sync()
    return dest


def _median(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run with the median ``key`` (the lower middle one of an even count)."""
    return sorted(runs, key=lambda r: r[key])[(len(runs) - 1) // 2]


def _partitions(logs: Path) -> list[Path]:
    return sorted(p for p in logs.iterdir() if p.is_dir() and p.name.startswith(TOPIC + "-"))


def _compile(work: Path) -> Path:
    """KafkaClean.java compiled once, so no process pays the source launcher's compile."""
    classes = work / "classes"
    subprocess.run(["javac", "-nowarn", "-cp", classpath(), "-d", str(classes), str(HARNESS)],
                   check=True, capture_output=True)
    return classes


def _kafka(logs: Path, now: int, buffer_bytes: int, work: Path, classes: Path,
           configs: dict[str, str]) -> dict[str, float]:
    """Kafka's cleaner over every partition in one JVM, one thread."""
    props = work / "topic.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in configs.items()))
    heap = max(1024, (buffer_bytes >> 20) + 768)
    started = time.perf_counter()
    proc = subprocess.run(
        ["java", f"-Xmx{heap}m", "-cp", f"{classes}{os.pathsep}{classpath()}", "KafkaClean",
         os.pathsep.join(str(p) for p in _partitions(logs)), str(now), str(props), "0", "0",
         str(2**62), "-1", str(buffer_bytes)],
        capture_output=True, text=True, timeout=7200)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    for part in _partitions(logs):
        for leftover in part.glob("*.deleted"):  # a broker deletes them later
            leftover.unlink()
    return {"bytes_read": sum(x["bytes_read"] for x in lines),
            "seconds": sum(x["seconds"] for x in lines),
            "passes": max(x["passes"] for x in lines), "wall": wall}


def _cold(logs: Path, now: int, master: str, configs: dict[str, str]) -> dict[str, float]:
    """``compactor compact`` in a new process; its wall time and the bytes it cleaned."""
    cmd = [str(Path(sys.executable).with_name("compactor")), "compact", str(logs),
           "--assume-kafka-defaults", "--now-ms", str(now), "--master", master, "--json",
           "-q", "--progress", "off"]
    for k, v in configs.items():
        cmd += ["--config", f"{k}={v}"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"compactor compact exited {proc.returncode}: {proc.stderr[-3000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    cleaned = [p for p in report["partitions"] if p["status"] == "cleaned"]
    return {"wall": wall, "bytes_in": sum(p["bytes_in"] for p in cleaned)}


def _round(spark: Any, logs: Path, now: int, configs: dict[str, str], *,
           task_keys: int | None = None) -> dict[str, Any]:
    from compactor.maintenance.compact import run
    from compactor.maintenance.options import build_options

    more = {} if task_keys is None else {"task_keys": task_keys}
    last_stage = _stages(spark)[0]
    started = time.perf_counter()
    report = run(spark, build_options(str(logs), now_ms=now, config_all=configs,
                                      assume_kafka_defaults=True, **more))
    wall = time.perf_counter() - started
    shuffled = _stages(spark, after=last_stage)[1]
    cleaned = [p for p in report.partitions if p.status == "cleaned"]
    if len(cleaned) != len(report.partitions):
        raise SystemExit("our round did not clean every partition: " + "; ".join(
            f"{p.tp}: {p.status} {p.reason}" for p in report.partitions))
    return {"wall": wall, "bytes_in": sum(p.bytes_in for p in cleaned),
            "records_in": sum(p.records_in for p in cleaned),
            "batches_in": sum(p.batches_in for p in cleaned),
            "shuffle_bytes": shuffled,
            "groups": sum(len(p.plan.groups) for p in cleaned if p.plan),
            "rewrite_s": sum(p.stages_s.get("rewrite", 0.0) for p in cleaned),
            "stages": dict(report.stages_s)}


def _stages(spark: Any, after: int = -1) -> tuple[int, int | None]:
    """The session's last completed stage id, and the bytes its completed stages after stage
    ``after`` wrote to the shuffle, as Spark counts them (its REST API's
    ``shuffleWriteBytes``: after compression); ``(-1, None)`` without the session's UI. By
    stage id, not a difference of totals: Spark keeps only the last ``spark.ui.retainedStages``
    stages."""
    import urllib.request

    url = spark.sparkContext.uiWebUrl
    if not url:
        return -1, None
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/stages?status=complete",
                                timeout=30) as answer:
        stages = json.load(answer)
    return (max((int(s["stageId"]) for s in stages), default=-1),
            sum(int(s.get("shuffleWriteBytes", 0)) for s in stages
                if int(s["stageId"]) > after))


def _round_elsewhere(master: str, source: str, work: str, now: int, configs: dict[str, str],
                     task_keys: int | None, out: Any) -> None:
    """In a child process (``--scaling``): a session on ``master``, its first round on a copy
    of ``source``, then a warm one; their walls into ``out``."""
    from compactor.spark.session import get_spark

    spark = get_spark(master, f"bench-kafka-cleaner-{master}")
    spark.sparkContext.setLogLevel("ERROR")
    walls = []
    for turn in ("first", "warm"):
        logs = _copy(Path(source), Path(work) / turn)
        walls.append(_round(spark, logs, now, configs, task_keys=task_keys)["wall"])
        shutil.rmtree(logs)
    spark.stop()
    out.put(walls)


def _scaled_round(master: str, source: Path, work: Path, now: int, configs: dict[str, str],
                  task_keys: int | None) -> list[float]:
    """:func:`_round_elsewhere` in a spawned process (a process has one Spark session, on
    one master): the first and the warm round's walls."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_round_elsewhere, args=(
        master, str(source), str(work), now, configs, task_keys, out))
    child.start()
    walls = out.get()
    child.join()
    if child.exitcode:
        raise SystemExit(f"the round on {master} failed (exit {child.exitcode})")
    return walls


def _records(logs: Path) -> dict[str, list[tuple[int, bytes | None]]]:
    out = {}
    for part in _partitions(logs):
        rows = []
        for seg in sorted(part.glob("*.log")):
            for batch in iter_batches(seg.read_bytes()):
                if not batch.is_control:
                    rows += [(r.offset, r.key) for r in batch.compiled_records()]
        out[part.name] = rows
    return out


def _buffers(names: str, args: argparse.Namespace) -> dict[str, int]:
    largest = args.keys // args.partitions  # distinct keys of a partition, at most
    one_pass = int(largest / LOAD_FACTOR * SLOT_BYTES) + (1 << 20)
    sizes = {"default": DEFAULT_BUFFER, "one-pass": max(DEFAULT_BUFFER, one_pass)}
    return {n: sizes[n] if n in sizes else int(n) for n in names.split(",")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=110)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024 * 1024,
                        help="the generated segments' size (the active one is not cleaned)")
    parser.add_argument("--codecs", default="none,lz4,zstd")
    parser.add_argument("--buffers", default="default",
                        help="Kafka's dedupe buffer sizes: default (128 MiB), one-pass or bytes")
    parser.add_argument("--shuffle-codecs", default="none",
                        help="codecs to time the distributed offset map's round on ('' none)")
    parser.add_argument("--group-bytes", type=int, default=64 * 1024 * 1024,
                        help="segment.bytes of the distributed map's round (its groups' size)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--scaling", action="store_true",
                        help="also the several-group rounds on local[1], in a process of "
                             "their own: their wall over local[2]'s")
    parser.add_argument("--repeat", type=int, default=1,
                        help="Kafka's cleaner and our warm round in turn this many times "
                             "(medians reported, with the range of the ratios)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--generate-only", action="store_true")
    args = parser.parse_args()
    cores = executor_cores(args.master)
    codecs = args.codecs.split(",")
    buffers = _buffers(args.buffers, args)
    sources = {c: _generated(args, c) for c in codecs}
    if args.generate_only:
        return 0
    now = DEFAULT_START_MS + args.records + 86_400_000 * 3
    configs = _configs(2**31 - 1)  # Int.MaxValue: one group a partition, as Kafka groups
    work = Path(tempfile.mkdtemp(prefix="kafka-cleaner-", dir=args.data_dir))
    spark = None
    try:
        classes = _compile(work)
        for codec in codecs:
            source = sources[codec]
            out: dict[str, Any] = {"codec": codec, "records": args.records, "keys": args.keys,
                                   "cores": cores}
            kafka: dict[str, list[dict[str, float]]] = {name: [] for name in buffers}
            warms: list[dict[str, Any]] = []
            colds: list[dict[str, float]] = []
            for turn in range(args.repeat):
                for name, buffer_size in buffers.items():
                    kafka_dir = _copy(source, work / f"kafka-{name}")
                    kafka[name].append(_kafka(kafka_dir, now, buffer_size, work, classes,
                                              configs))
                    if name != next(iter(buffers)):
                        shutil.rmtree(kafka_dir)
                colds.append(_cold(_copy(source, work / "cold"), now, args.master, configs))
                shutil.rmtree(work / "cold")
                if spark is None:
                    from compactor.spark.session import get_spark

                    spark = get_spark(args.master, "bench-kafka-cleaner")
                    spark.sparkContext.setLogLevel("ERROR")
                    first = _round(spark, _copy(source, work / "first"), now, configs)
                    shutil.rmtree(work / "first")
                    out["ours_first_round_s"] = round(first["wall"], 2)
                warms.append(_round(spark, _copy(source, work / "warm"), now, configs))
            cold = _median(colds, "wall")
            size = cold["bytes_in"]
            warm = _median(warms, "wall")
            ours = size / warm["wall"] / cores / 1e6
            print(f"[{codec}] {size / 1e6:,.0f} MB cleaned; ours: cold process "
                  f"{cold['wall']:.1f} s, warm round {warm['wall']:.1f} s = {ours:.0f} MB/s per "
                  f"core ({', '.join(f'{k} {v:.1f}' for k, v in warm['stages'].items())})"
                  + (f"; the medians of {args.repeat}: cold "
                     + ", ".join(f"{c['wall']:.1f}" for c in colds) + " s, warm "
                     + ", ".join(f"{w['wall']:.1f}" for w in warms) + " s"
                     if args.repeat > 1 else ""),
                  flush=True)
            out.update(ours_mb_s_per_core=round(ours, 1),
                       ours_clean_mb_s_per_core=round(size / warm["rewrite_s"] / 1e6, 1),
                       ours_cold_process_s=round(cold["wall"], 2),
                       ours_warm_round_s=round(warm["wall"], 2), mb=round(size / 1e6),
                       repeat=args.repeat)
            for name, runs in kafka.items():
                k = _median(runs, "seconds")
                mb_s = size / k["seconds"] / 1e6
                ratios = sorted(r["seconds"] / w["wall"] / cores for r, w in zip(runs, warms))
                print(f"[{codec}] Kafka's cleaner, {buffers[name] >> 20} MiB map ({name}): "
                      f"{k['passes']} pass(es), {k['seconds']:.1f} s cleaning = {mb_s:.0f} MB/s "
                      f"per thread (its own line: {k['bytes_read'] / k['seconds'] / 1e6:.0f} "
                      f"MB/s of {k['bytes_read'] / 1e6:,.0f} MB read); process {k['wall']:.1f} s"
                      f"; ours {ours / mb_s:.2f}x per core"
                      + (f" (each turn: {', '.join(f'{x:.2f}' for x in ratios)}x)"
                         if args.repeat > 1 else ""), flush=True)
                out[name] = {"buffer_bytes": buffers[name], "kafka_passes": k["passes"],
                             "kafka_mb_s_per_thread": round(mb_s, 1),
                             "kafka_stats_mb_s": round(k["bytes_read"] / k["seconds"] / 1e6, 1),
                             "kafka_process_s": round(k["wall"], 2),
                             "vs_kafka_per_core": round(ours / mb_s, 3),
                             "vs_kafka_per_core_range": [round(ratios[0], 3),
                                                         round(ratios[-1], 3)],
                             "vs_kafka_wall": round(k["wall"] / cold["wall"], 3),
                             "vs_kafka_wall_range": [
                                 round(min(r["wall"] / c["wall"] for r, c in zip(runs, colds)), 3),
                                 round(max(r["wall"] / c["wall"] for r, c in zip(runs, colds)), 3)]}

            several: dict[str, Path] = {}  # the several-group rounds' outputs, checked below
            if codec in args.shuffle_codecs.split(","):
                kafka_mb_s = size / _median(kafka[next(iter(kafka))], "seconds")["seconds"] / 1e6
                # the round with several groups a partition: in one task per partition (one
                # key table, the default within --task-keys), then through the distributed
                # offset map (--task-keys 0)
                for key, task_keys, what in (
                        ("groups_one_task", None, "one task a partition"),
                        ("shuffle", 0, "distributed offset map")):
                    rounds = []
                    for turn in range(1 + args.repeat):  # the session's first, then warm ones
                        several[key] = _copy(source, work / key)
                        r = _round(spark, several[key], now, _configs(args.group_bytes),
                                   task_keys=task_keys)
                        rounds.append(r)
                        stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
                        print(f"[{codec}] {r['groups']} groups, {what}, "
                              f"{'warm' if turn else 'first'}: "
                              f"{r['wall']:.1f} s = {size / r['wall'] / cores / 1e6:.0f} MB/s "
                              f"per core ({stages})", flush=True)
                    first, warm_runs = rounds[0], rounds[1:]
                    warm = _median(warm_runs, "wall")
                    mb_s = size / warm["wall"] / cores / 1e6
                    out[key] = {
                        "groups": warm["groups"], "ours_mb_s_per_core": round(mb_s, 1),
                        "ours_warm_round_s": round(warm["wall"], 2),
                        "vs_kafka_per_core": round(mb_s / kafka_mb_s, 3),
                        "first_over_warm": round(first["wall"] / warm["wall"], 3)}
                    if warm["shuffle_bytes"] is not None:
                        # what the round's stages wrote to the shuffle, a record and a batch
                        # of its input (docs/benchmarks.md states what each costs)
                        out[key].update(
                            shuffle_mb=round(warm["shuffle_bytes"] / 1e6, 1),
                            shuffle_bytes_per_record=round(
                                warm["shuffle_bytes"] / warm["records_in"], 2),
                            shuffle_bytes_per_batch=round(
                                warm["shuffle_bytes"] / warm["batches_in"], 1))
                        print(f"[{codec}] {what}: shuffle written "
                              f"{warm['shuffle_bytes'] / 1e6:.1f} MB = "
                              f"{out[key]['shuffle_bytes_per_record']:.2f} bytes a record "
                              f"({warm['records_in']:,} records, {warm['batches_in']:,} "
                              "batches)", flush=True)
                    if args.scaling and args.master == "local[2]":
                        # the same round on one core, in its own process: what the round
                        # spreads over two cores (1.0: nothing; 2.0: all of it)
                        one = _scaled_round("local[1]", source, work / f"{key}-local1", now,
                                            _configs(args.group_bytes), task_keys)
                        out[key].update(local1_warm_round_s=round(one[1], 2),
                                        local1_over_local2=round(one[1] / warm["wall"], 3))
                        print(f"[{codec}] {what} on local[1]: first {one[0]:.1f} s, warm "
                              f"{one[1]:.1f} s = {one[1] / warm['wall']:.2f}x the local[2] "
                              "round", flush=True)
                    if args.repeat > 1:
                        # Kafka's runs of the same codec (default buffer) were earlier turns;
                        # pair them in order, as the plain round's ratios are
                        ratios = sorted(r["seconds"] / w["wall"] / cores
                                        for r, w in zip(kafka[next(iter(kafka))], warm_runs))
                        out[key]["vs_kafka_per_core_range"] = [round(ratios[0], 3),
                                                               round(ratios[-1], 3)]
                        print(f"[{codec}] {what}: the median of {args.repeat} warm rounds, "
                              f"{mb_s:.0f} MB/s per core = {mb_s / kafka_mb_s:.2f}x Kafka "
                              f"(each: {', '.join(f'{x:.2f}' for x in ratios)}x); first/warm "
                              f"{first['wall'] / warm['wall']:.2f}", flush=True)

            if not args.no_check:
                theirs = _records(work / f"kafka-{next(iter(buffers))}")
                for name, logs in {"warm": work / "warm", **several}.items():
                    mine = _records(logs)
                    if theirs != mine:
                        diff = [p for p in theirs if theirs[p] != mine.get(p)]
                        raise SystemExit(f"Kafka's cleaner and our {name} round left different "
                                         f"records in {diff}")
                out["same_records"] = sum(len(v) for v in mine.values())
                print(f"[{codec}] Kafka and each of our rounds ({', '.join(['warm', *several])})"
                      f" left the same {out['same_records']:,} records (offset and key of each)",
                      flush=True)
            for name in ("warm", *several, *(f"kafka-{n}" for n in buffers)):
                shutil.rmtree(work / name, ignore_errors=True)
            print(json.dumps(out, sort_keys=True), flush=True)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
