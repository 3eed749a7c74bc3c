"""The Python worker daemon (``compactor.spark.daemon``): what it loads before it forks, and
that the session's workers come from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark


def _probe(code: str, env: dict[str, str] | None = None) -> str:
    """What ``code`` prints, run in a fresh interpreter (nothing loaded or compiled yet)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env).stdout


def test_preload_loads_the_executor_code_and_arrow_but_starts_no_thread() -> None:
    probe = ("import json, os, sys\n"
             "def threads():\n"
             "    return sorted(open(f'/proc/self/task/{t}/comm').read().strip()\n"
             "                  for t in os.listdir('/proc/self/task'))\n"
             "import numpy\n"  # OpenBLAS's pool: shut down and restarted around fork
             "before = threads()\n"
             "from compactor.spark import daemon\n"
             "daemon.preload()\n"
             "from compactor.native import chunks\n"
             "print(json.dumps({'writer': 'compactor.spark.writer' in sys.modules,\n"
             "                  'kernels': bool(chunks.decide_chunk.signatures),\n"
             "                  'pyarrow': 'pyarrow' in sys.modules,\n"
             "                  'pandas': 'pandas' in sys.modules,\n"
             "                  'new threads': sorted(set(threads()) - set(before))\n"
             "                  or len(threads()) - len(before)}))\n")
    env = {k: v for k, v in os.environ.items() if k != "JE_ARROW_MALLOC_CONF"}
    assert json.loads(_probe(probe, env)) == {"writer": True, "kernels": True, "pyarrow": True,
                               "pandas": True, "new threads": 0}


def test_an_arrow_allocator_setting_of_the_users_own_leaves_pyarrow_to_the_workers() -> None:
    probe = ("import sys\n"
             "from compactor.spark import daemon\n"
             "daemon.preload()\n"
             "print('pyarrow' in sys.modules)\n")
    out = _probe(probe, {**os.environ, "JE_ARROW_MALLOC_CONF": "background_thread:true"})
    assert out.strip() == "False"


def test_the_kernels_are_loaded_for_read_only_and_writable_buffers() -> None:
    """Each kernel that reads a segment's bytes has a signature per kind of buffer, so a
    worker's first call with either compiles nothing."""
    probe = ("import json, numpy as np\n"
             "from compactor.native import chunks, fast, keytable\n"
             "from compactor.native import kernels\n"
             "fast.compile_kernels()\n"
             "found = {n: getattr(chunks, n) for n in ['frame_chunk', 'decide_chunk',\n"
             "         'filter_chunk', 'scan_chunk_keys']}\n"
             "found['decide_records'] = keytable.decide_records\n"
             "found |= {n: getattr(kernels, n) for n in ['parse_layout', 'rebuild_records']}\n"
             "counts = {n: len(k.signatures) for n, k in found.items()}\n"
             "layout = np.zeros((1, kernels.COLUMNS), np.int64)\n"
             "for buf in (np.frombuffer(b'', np.uint8), np.zeros(0, np.uint8)):\n"
             "    chunks.frame_chunk(buf, True)\n"
             "    chunks.scan_chunk_keys(buf, np.zeros(0, np.int64), layout)\n"
             "    kernels.parse_layout(buf, 0, 0, 0, 0, layout)\n"
             "print(json.dumps({'counts': counts, 'added': sum(len(k.signatures)\n"
             "                  for k in found.values()) - sum(counts.values())}))\n")
    out = json.loads(_probe(probe))
    assert out["counts"] == dict.fromkeys(out["counts"], 2)
    assert len(out["counts"]) == 7 and out["added"] == 0


def test_the_erasure_scan_kernel_is_loaded_for_what_a_scan_calls_it_with() -> None:
    """The erasure scan's kernel, warmed by ``compile_kernels``, compiles nothing more when a
    worker scans a segment (with or without the requests' Bloom filter, with or without
    header names)."""
    probe = ("import json, numpy as np\n"
             "from compactor import native\n"
             "from compactor.native import erasure\n"
             "from compactor.erasure.sketch import DigestFilter\n"
             "from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch\n"
             "native.compile_kernels()\n"
             "before = len(erasure._scan.signatures)\n"
             "data = encode_batch(NewRecordBatch(base_offset=0, records=[NewRecord(\n"
             "    offset_delta=0, timestamp=1, key=b'k', value=b'v', headers=(('h', b'x'),))]))\n"
             "probe = DigestFilter.empty(10).adding([bytes(32)]).probe()\n"
             "for keep in (None, probe):\n"
             "    for names in ((), ('h',)):\n"
             "        assert erasure.segment_digests(data, 'p', 0, names, keep) is not None\n"
             "print(json.dumps({'before': before,\n"
             "                  'added': len(erasure._scan.signatures) - before}))\n")
    out = json.loads(_probe(probe))
    assert out["before"] > 0 and out["added"] == 0


def test_workers_are_forked_from_the_preloading_daemon(spark) -> None:
    def probe(_: object) -> list[tuple]:
        import gc

        import pyspark.worker

        main = sys.modules["__main__"]
        return [(getattr(main.__spec__, "name", None), gc.get_freeze_count() > 0,
                 "compactor.native.fast" in sys.modules,
                 # the pip-installed pyspark is its own SPARK_HOME here: its modules come
                 # from the package (bytecode cached), not from the pyspark.zip Spark ships
                 ".zip" in pyspark.worker.__file__,
                 any(p.endswith(("pyspark.zip", "-src.zip")) for p in sys.path))]

    rows = set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(probe).collect())
    assert rows == {("compactor.spark.daemon", True, True, False, False)}


def test_workers_keep_chunk_sized_buffers_on_the_heap_and_keep_them_when_freed(spark) -> None:
    """The daemon's malloc settings (``keep_freed_memory``), inherited by its workers: a
    32 MiB block, a decompressed chunk's size, comes from the heap, not a mapping of its own
    (glibc's default maps anything over 128 KiB to 32 MiB), and the heap keeps it once freed
    (glibc's ``mallinfo2``, counted in the worker itself)."""

    def probe(_: object) -> list[tuple[int, int]]:
        import ctypes

        class MallInfo2(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost")]

        mallinfo2 = ctypes.CDLL(None).mallinfo2
        mallinfo2.restype = MallInfo2
        mapped = mallinfo2().hblkhd
        block = bytearray(32 << 20)
        mapped_for_it = mallinfo2().hblkhd - mapped
        del block
        return [(mapped_for_it, mallinfo2().fordblks)]

    rows = spark.sparkContext.parallelize(range(2), 2).mapPartitions(probe).collect()
    assert rows and all(mapped == 0 and free >= 32 << 20 for mapped, free in rows), rows


def test_the_rdd_api_and_the_sql_engine_share_one_daemon(spark) -> None:
    """What the session's start relies on to start the daemon before the SQL engine's first
    query is planned (``session.LOCAL_CONF``)."""
    import pyarrow as pa

    def rdd_parent(_: object) -> list[int]:
        return [os.getppid()]

    def sql_parent(batches):  # type: ignore[no-untyped-def]
        for _ in batches:
            yield pa.RecordBatch.from_pydict({"ppid": [os.getppid()]})

    rdd = set(spark.sparkContext.parallelize(range(2), 2).mapPartitions(rdd_parent).collect())
    sql = {r.ppid for r in spark.range(2, numPartitions=2).mapInArrow(sql_parent, "ppid long")
           .collect()}
    assert len(rdd) == 1 and rdd == sql


@pytest.mark.parametrize(("simplified", "jobs"), [("false", 2), ("true", 1)])
def test_the_session_start_runs_the_trivial_tasks_only_where_they_start_the_shared_daemon(
        spark, simplified: str, jobs: int) -> None:  # type: ignore[no-untyped-def]
    """With simplified tracebacks on (a session not of the command line's making), the SQL
    engine's workers have a daemon of their own: the trivial RDD tasks would start one that
    no stage uses, so only the Arrow query runs."""
    from compactor.spark import session

    tracker = spark.sparkContext.statusTracker()
    group = "kafka-compactor-worker-start"
    before = len(tracker.getJobIdsForGroup(group))
    saved = spark.conf.get(session.SIMPLIFIED_TRACEBACK)
    spark.conf.set(session.SIMPLIFIED_TRACEBACK, simplified)
    try:
        session._start_workers(spark)
    finally:
        spark.conf.set(session.SIMPLIFIED_TRACEBACK, saved)
    assert len(tracker.getJobIdsForGroup(group)) - before == jobs
