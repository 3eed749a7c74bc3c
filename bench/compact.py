"""Compaction benchmark: one round of the Spark job (local mode) over a generated log dir, with
a parse-only pass over the same files with our codec as the in-run baseline.

Usage: python bench/compact.py [--records 10000000] [--keys 1000000] [--value-bytes 110]
           [--partitions 4] [--tombstone-ratio 0.2] [--master local[2]] [--data-dir DIR]
           [--group-bytes 134217728] [--scale] [--json]
       python bench/compact.py --data-dir s3://bucket/prefix [--storage-option KEY=VALUE ...]
       python bench/compact.py --data-dir s3://bench/data --local-s3   # a SeaweedFS here

Prints, for a round in a fresh session, the same round again in the warm session, and (twice)
a round with groups of ``--group-bytes`` (several groups per partition: records are superseded
across groups through the distributed offset map): total and per-stage time of the job, input
MB/s and records/s, the parse-only time and
the ratio job/parse, and the peak resident memory of the driver (Python and JVM) and of the
Python workers (summed over the workers alive at the same moment), sampled every 100 ms.
The generated log dir is cached in ``--data-dir`` (default: a temp dir) and copied before the
run, since the job rewrites it in place.

Also measured in the same run: a framing-with-CRC pass (frame every batch, check its CRC-32C,
decode nothing: the practical read floor), and the cleaning throughput of one executor core
(the round's input bytes over the writer tasks' summed seconds). ``--scale`` adds a warm round
over 4x the records and keys (same ratio) and prints the time per record at 4x over 1x.
``--json`` ends with one JSON line of the tracked figures: ``ratio_cold``, ``ratio_warm``,
``ratio_shuffle`` (round / parse-only; the warm shuffle round, ``ratio_shuffle_first`` the
session's first one), ``mb_per_s_per_core`` (warm round),
``clean_vs_framing`` (cleaning MB/s per core / framing MB/s), ``ratio_warm_pure`` and
``writer_speedup`` (the warm round again with ``--writer pure``: the native kernels' in-run
baseline) and, with ``--scale``, ``linearity``.

With ``--data-dir s3://...`` the log dir is generated locally (in a temp dir), uploaded once
under the prefix, and the warm round runs a second time on a server-side copy of it in the
object store, beside the same round on the local copy: the ratio S3 / local is the measured
cost of object storage. ``--local-s3`` starts a SeaweedFS server on 127.0.0.1 for it (and stops
it at the end); otherwise the endpoint and credentials come from ``--storage-option`` and the
AWS environment, as for every command.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compactor.cleaner.scan import key_digest  # noqa: E402
from compactor.codec.compression import Codec  # noqa: E402
from compactor.codec.segment import iter_batches  # noqa: E402
from compactor.spark.session import LOCAL_CONF, driver_java_options  # noqa: E402
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate  # noqa: E402


class MemorySampler(threading.Thread):
    """Peak RSS of the JVM children of this process and of PySpark's Python workers."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.peak_jvm = 0
        self.peak_workers = 0

    @staticmethod
    def _rss_kib(pid: str) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def run(self) -> None:
        me = str(os.getpid())
        while not self.stop.is_set():
            jvm = workers = 0
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    stat = Path(f"/proc/{pid}/stat").read_text().split()
                except OSError:
                    continue
                if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
                    workers += self._rss_kib(pid)
                elif b"java" in cmd.split(b"\0")[0] and stat[3] == me:
                    jvm += self._rss_kib(pid)
            self.peak_jvm = max(self.peak_jvm, jvm)
            self.peak_workers = max(self.peak_workers, workers)
            self.stop.wait(0.1)


def parse_only(log_dir: Path) -> tuple[int, int, float]:
    """Records, bytes and seconds of one pass that frames, CRC-checks and decodes every
    record of every segment and digests its key (what the job's scans do, minus Spark)."""
    records = size = 0
    start = time.perf_counter()
    for log in sorted(log_dir.glob("*/*.log")):
        data = log.read_bytes()
        size += len(data)
        for batch in iter_batches(data, path=str(log)):
            for record in batch.iter_compiled():
                records += 1
                if record.key is not None:
                    key_digest(record.key)
    return records, size, time.perf_counter() - start


def framing_only(log_dir: Path) -> tuple[int, float]:
    """Bytes and seconds of one pass that frames every batch and checks its CRC-32C, decoding
    no record (the practical read floor of any cleaner)."""
    size = 0
    start = time.perf_counter()
    for log in sorted(log_dir.glob("*/*.log")):
        data = log.read_bytes()
        size += len(data)
        for _ in iter_batches(data, path=str(log)):
            pass
    return size, time.perf_counter() - start


def executor_cores(master: str) -> int:
    """Executor cores of a ``local[N]`` master (1 for ``local``, the CPU count for ``*``)."""
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    return (os.cpu_count() or 1) if inside == "*" else int(inside.split(",")[0])


def _config(args: argparse.Namespace, scale: int = 1) -> GeneratorConfig:
    records = args.records * scale
    return GeneratorConfig(
        topics=("bench",), partitions=args.partitions,
        records_per_partition=records // args.partitions,
        distinct_keys=max(1, args.keys * scale // args.partitions), zipf_exponent=0.0,
        value_bytes=args.value_bytes, tombstone_ratio=args.tombstone_ratio,
        null_key_ratio=0.0, header_ratio=0.0, max_batch_records=200,
        segment_bytes=args.segment_bytes, index_interval_bytes=4096,
        codecs=(Codec.NONE,), transactional_producers=0, leader_epochs=1,
        record_interval_ms=1, seed=1,
        # a cluster's metadata log says the topic is compacted, as on a real broker
        topic_configs={"bench": {"cleanup.policy": "compact"}},
    )


def _cached(args: argparse.Namespace, scale: int = 1, *, local: bool = False) -> Path:
    """The generated log dir of ``scale`` x the records and keys, generated once."""
    records, keys = args.records * scale, args.keys * scale
    name = (f"bench-compact-v2-{records}-{keys}-{args.value_bytes}-{args.partitions}-"
            f"{args.tombstone_ratio}-{args.segment_bytes}")
    cache = Path(tempfile.gettempdir() if local or not args.data_dir else args.data_dir) / name
    if not (cache / ".complete").exists():
        shutil.rmtree(cache, ignore_errors=True)
        start = time.perf_counter()
        generate(str(cache), _config(args, scale))
        (cache / ".complete").write_text("")
        print(f"generated {cache} in {time.perf_counter() - start:.1f} s")
    return cache


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000, help="records in total")
    ap.add_argument("--keys", type=int, default=1_000_000, help="distinct keys in total")
    ap.add_argument("--value-bytes", type=int, default=110)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--tombstone-ratio", type=float, default=0.2)
    ap.add_argument("--segment-bytes", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--data-dir", default=None,
                    help="cache of generated log dirs (a directory, or s3://bucket/prefix to "
                         "measure the round on object storage too)")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                    help="object-store setting, as for the compactor commands")
    ap.add_argument("--local-s3", action="store_true",
                    help="with --data-dir s3://: start a SeaweedFS server on 127.0.0.1 for it")
    ap.add_argument("--group-bytes", type=int, default=128 * 1024 * 1024,
                    help="segment.bytes of the third round, so partitions clean in several "
                         "groups and the offset map goes through the shuffle")
    ap.add_argument("--daemon", default="compactor.spark.daemon",
                    help="spark.python.daemon.module (pyspark.daemon: Spark's own, the "
                         "baseline of the preloading daemon the command line uses)")
    ap.add_argument("--scale", action="store_true",
                    help="also a warm round over 4x the records and keys: linearity")
    ap.add_argument("--json", action="store_true",
                    help="end with one JSON line of the tracked ratios")
    args = ap.parse_args()

    s3_dir = args.data_dir if args.data_dir and args.data_dir.startswith("s3://") else None
    cache = _cached(args, local=bool(s3_dir))
    name = cache.name
    work = Path(tempfile.mkdtemp(prefix="bench-compact-run-")) / "logs"
    shutil.copytree(cache, work, ignore=shutil.ignore_patterns(".complete"))
    os.sync()

    records, size, parse_s = parse_only(work)
    framed_size, framing_s = framing_only(work)
    print(f"input: {records:,} records, {size / 1e6:,.0f} MB in "
          f"{len(list(work.glob('*/*.log')))} segments, {args.keys:,} distinct keys")
    print(f"baseline parse-only pass (one Python process): {parse_s:.1f} s, "
          f"{records / parse_s / 1e6:.2f} M records/s, {size / parse_s / 1e6:.0f} MB/s")
    framing_mb_s = framed_size / framing_s / 1e6
    print(f"floor: framing with CRC, no decoding (one Python process): {framing_s:.2f} s, "
          f"{framing_mb_s:.0f} MB/s")

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("bench-compact")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g")
             # the command line's local sessions' settings, with the daemon of --daemon
             .config(map={**LOCAL_CONF, "spark.python.daemon.module": args.daemon})
             # the driver JVM's options of the command line's sessions (the class archive)
             .config("spark.driver.extraJavaOptions", driver_java_options(None))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    now_ms = DEFAULT_START_MS + args.records + 86_400_000
    exit_code = 0
    # run 1: a fresh session (Python workers start, the JVM compiles the shuffle paths), as a
    # spark-submit would; run 2: the same round on a fresh copy in the now warm session (with
    # Kafka's default segment.bytes of 1 GiB each partition cleans in one group, which needs no
    # shuffle; it is cleaned in one pass); run 3: smaller groups, so records are superseded
    # across groups through the distributed offset map (--task-keys 0: within the default
    # budget each partition's groups would be written in one task with one key table): the
    # session's first round down that path (its Spark stages run for the first time), then
    # run 4 the same again, warm;
    # run 5: run 2 again with the pure-Python writer (--writer pure), the in-run baseline of
    # the native kernels
    shuffle = {"segment.bytes": str(args.group_bytes)}
    rounds = [("cold session", {}), ("warm session", {}),
              (f"warm session, segment.bytes={args.group_bytes}, first such round", shuffle),
              (f"warm session, segment.bytes={args.group_bytes}, again", shuffle),
              ("warm session, --writer pure", {})]
    seconds, clean_mb_s = {}, {}
    for n, (label, configs) in enumerate(rounds):
        if n:
            shutil.rmtree(work)
            shutil.copytree(cache, work, ignore=shutil.ignore_patterns(".complete"))
            os.sync()  # the copy's dirty pages written now, not during the round's fsyncs
        code, seconds[label], clean_mb_s[label] = _timed_round(
            spark, str(work), now_ms, args.master, label, parse_s, configs,
            writer="pure" if "pure" in label else "native",
            task_keys=0 if configs is shuffle else None)
        exit_code |= code
    warm = rounds[1][0]
    figures = {
        "ratio_cold": seconds[rounds[0][0]] / parse_s, "ratio_warm": seconds[warm] / parse_s,
        "ratio_shuffle_first": seconds[rounds[2][0]] / parse_s,
        "ratio_shuffle": seconds[rounds[3][0]] / parse_s,
        "mb_per_s_per_core": size / seconds[warm] / 1e6 / executor_cores(args.master),
        "clean_mb_per_s_per_core": clean_mb_s[warm], "framing_mb_per_s": framing_mb_s,
        "clean_vs_framing": clean_mb_s[warm] / framing_mb_s,
        "ratio_warm_pure": seconds[rounds[4][0]] / parse_s,
        "writer_speedup": clean_mb_s[warm] / clean_mb_s[rounds[4][0]],
    }
    print(f"cleaning, one executor core: {clean_mb_s[warm]:.0f} MB/s = "
          f"{figures['clean_vs_framing']:.3f} x the framing floor (target >= 0.25); "
          f"the pure writer: {clean_mb_s[rounds[4][0]]:.0f} MB/s (native "
          f"{figures['writer_speedup']:.2f}x)")
    if args.scale:
        big = _cached(args, 4)
        shutil.rmtree(work)
        shutil.copytree(big, work, ignore=shutil.ignore_patterns(".complete"))
        os.sync()
        big_records = args.records * 4
        code, big_s, _ = _timed_round(spark, str(work), DEFAULT_START_MS + big_records
                                      + 86_400_000, args.master, "warm session, 4x input",
                                      parse_s * 4, {})
        exit_code |= code
        figures["linearity"] = (big_s / big_records) / (seconds[warm] / args.records)
        print(f"linearity: time per record at 4x / at 1x = {figures['linearity']:.2f} "
              f"(target <= 1.10)")
    if s3_dir:
        with _object_store(args) as options:
            exit_code |= _s3_round(spark, args, options, cache, f"{s3_dir}/{name}", now_ms,
                                   parse_s, seconds[rounds[1][0]])
    spark.stop()
    shutil.rmtree(work.parent, ignore_errors=True)
    if args.json:
        print(json.dumps({k: round(v, 4) for k, v in figures.items()}, sort_keys=True))
    return exit_code


@contextmanager
def _object_store(args: argparse.Namespace) -> Iterator[dict[str, str]]:
    """The ``--storage-option`` pairs, with a SeaweedFS server of our own under ``--local-s3``
    (its bucket created; stopped when the block ends)."""
    from compactor.tools.fixtures import s3_server

    options = dict(item.split("=", 1) for item in args.storage_option)
    if not args.local_s3:
        yield options
        return
    bucket = args.data_dir[len("s3://"):].split("/", 1)[0]
    with s3_server.running(tempfile.mkdtemp(prefix="bench-weed-")) as server:
        s3_server.create_bucket(server, bucket)
        yield {**options, "endpoint_url": server.endpoint_url,
               "access_key_id": server.access_key, "secret_access_key": server.secret_key,
               "region": server.region}


def _s3_round(spark, args: argparse.Namespace, options: dict[str, str],  # type: ignore[no-untyped-def]
              cache: Path, url: str, now_ms: int, parse_s: float, local_s: float) -> int:
    """The warm round again on a copy of the log dir in the object store."""
    import uuid

    from compactor.log import storage
    from compactor.log.storage.objects import ObjectStore
    from compactor.tools.fixtures.s3_server import copy_prefix, delete_prefix, upload_dir

    storage.configure(storage.StorageSettings(options=options))
    client = ObjectStore(options).client
    uploaded = f"{url}.uploaded"  # written last: a cache whose upload was cut short is redone
    if not storage.exists(uploaded):
        start = time.perf_counter()
        count = upload_dir(client, str(cache), url)
        storage.write_durable(uploaded, b"")
        print(f"uploaded {count} objects to {url} in {time.perf_counter() - start:.1f} s")
    run_url = f"{url}-run-{uuid.uuid4().hex[:8]}"
    copy_prefix(client, url, run_url)
    storage.remove(f"{run_url}/.complete")
    try:
        code, s3_s, _ = _timed_round(spark, run_url, now_ms, args.master, "warm session, on S3",
                                  parse_s, {})
    finally:
        delete_prefix(client, run_url)
    print(f"  ratio S3 / local disk, same round: {s3_s / local_s:.2f} "
          f"({s3_s:.1f} s / {local_s:.1f} s)")
    return code


def _timed_round(spark, work: str, now_ms: int, master: str, label: str,  # type: ignore[no-untyped-def]
                 parse_s: float, configs: dict[str, str],
                 writer: str = "native", task_keys: int | None = None
                 ) -> tuple[int, float, float]:
    """One round; its exit code, wall seconds and cleaning MB/s of one executor core (input
    bytes over the writer tasks' summed seconds)."""
    from compactor.maintenance.compact import run
    from compactor.maintenance.options import build_options

    sampler = MemorySampler()
    sampler.start()
    start = time.perf_counter()
    # the generated log dir has no broker configs: Kafka's defaults, with the round's own
    more = {} if task_keys is None else {"task_keys": task_keys}
    report = run(spark, build_options(work, now_ms=now_ms, config_all=configs,
                                      assume_kafka_defaults=True, writer=writer, **more))
    job_s = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()

    out_records = sum(p.records_out for p in report.partitions)
    out_bytes = sum(p.bytes_out for p in report.partitions)
    in_records = sum(p.records_in for p in report.partitions)
    in_bytes = sum(p.bytes_in for p in report.partitions)
    print(f"job ({master}, {label}): {job_s:.1f} s total; " + ", ".join(
        f"{k} {v:.1f} s" for k, v in report.stages_s.items()))
    groups = sum(len(p.plan.groups) for p in report.partitions if p.plan)
    cleaned = sum(p.status == "cleaned" for p in report.partitions)
    print(f"  {groups} groups in {cleaned} partitions")
    if not cleaned:  # a round that cleaned nothing measures nothing
        raise SystemExit("the round cleaned no partition: " + "; ".join(
            f"{p.tp}: {p.status} {p.reason}" for p in report.partitions))
    print(f"  input: {in_records:,} records, {in_bytes / 1e6:,.0f} MB -> "
          f"{out_records:,} records, {out_bytes / 1e6:,.0f} MB")
    print(f"  throughput: {in_records / job_s / 1e6:.2f} M records/s, "
          f"{in_bytes / job_s / 1e6:.0f} MB/s")
    print(f"  ratio job / parse-only: {job_s / parse_s:.2f}")
    driver_py = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak memory: driver Python {driver_py:.0f} MiB, driver JVM "
          f"{sampler.peak_jvm / 1024:.0f} MiB, Python workers {sampler.peak_workers / 1024:.0f} "
          f"MiB (sum of concurrent workers)")
    rewrite_s = sum(p.stages_s.get("rewrite", 0.0) for p in report.partitions)
    clean_mb_s = in_bytes / rewrite_s / 1e6 if rewrite_s else 0.0
    return (0 if report.exit_code == 0 else 1), job_s, clean_mb_s


if __name__ == "__main__":
    sys.exit(main())
