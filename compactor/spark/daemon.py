"""PySpark's Python worker daemon with the executor code loaded once, before it forks.

Spark starts one daemon per executor (``python -m pyspark.daemon``) and forks a Python worker
from it whenever a task finds no idle one: a round forks several per core. Each fresh worker
used to import numpy, numba and the codec and cleaner modules and load the writer's kernels
from numba's cache, about half a second of CPU before its first record. And a reused worker
runs a full garbage collection after every task (``pyspark.daemon.manager``), which walks
every object those imports made: numba's type system alone makes that tens of milliseconds a
task. With ``spark.python.daemon.module=compactor.spark.daemon`` the daemon imports and loads
all that once, then ``gc.freeze()`` moves it out of the collector's sight; every worker
inherits both through ``fork``.

Each worker's first Arrow task also used to import pyarrow and, through pyarrow's first
conversion of a Python list, pandas: another half second of CPU a worker. The daemon loads
those too.

Nothing loaded here starts a thread before the fork (pyspark's daemon warns that a thread
running at ``fork`` can deadlock the child): numba compiles and loads without threads, numpy's
OpenBLAS pool is shut down and restarted around ``fork`` by OpenBLAS itself, and Arrow's
bundled jemalloc, whose background thread would start as pyarrow loads, is told not to start
it (``tests/spark/test_daemon.py`` checks that the preload adds no thread).

The sessions the command line creates in local mode use this daemon; on a cluster whose
executors have the package installed, ``spark-submit --conf
spark.python.daemon.module=compactor.spark.daemon`` does the same (README, Running on Spark
clusters). Executors that only receive the ``--py-files`` archive cannot import it (the
archive reaches a worker's path after the fork): leave the setting out there.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback

#: the value of ``spark.python.daemon.module`` that selects this daemon
MODULE = "compactor.spark.daemon"
#: the bundled jemalloc's settings (``JE_ARROW_MALLOC_CONF``, read when pyarrow loads)
ARROW_JEMALLOC_ENV = "JE_ARROW_MALLOC_CONF"


def prefer_installed_pyspark() -> None:
    """Import pyspark (and py4j) from the installed packages rather than from the zip
    archives Spark puts first on a Python worker's path, when those archives are the installed
    packages' own (a pip-installed pyspark is its own ``SPARK_HOME``): the same files, but
    Python compiles a module imported from a zip archive anew in every process (zipimport
    keeps no bytecode) and re-reads the archive's directory whenever the import caches are
    invalidated (``pyspark.worker_util.setup_spark_files``, at each worker's first task):
    1.5 and 0.7 s of the workers' CPU in a cold demo round (py-spy). With another Spark
    installation (a cluster's), the path stays as Spark set it."""
    import importlib.metadata
    import importlib.util

    zips = [p for p in sys.path if os.path.basename(p) == "pyspark.zip"
            or (os.path.basename(p).startswith("py4j-") and p.endswith("-src.zip"))]
    if not zips:
        return
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if p not in zips]
    try:
        pyspark = importlib.util.find_spec("pyspark")
        lib = pyspark and pyspark.origin and os.path.join(os.path.dirname(pyspark.origin),
                                                          "python", "lib")
        same = bool(lib) and all(
            os.path.normpath(os.path.dirname(z)) == os.path.normpath(str(lib)) for z in zips)
        py4j = [z for z in zips if os.path.basename(z).startswith("py4j-")]
        if same and py4j:
            same = (importlib.util.find_spec("py4j") is not None
                    and os.path.basename(py4j[0])
                    == f"py4j-{importlib.metadata.version('py4j')}-src.zip")
    except (ImportError, ValueError, importlib.metadata.PackageNotFoundError):
        same = False
    if not same:
        sys.path[:] = saved
        return
    for z in zips:
        sys.path_importer_cache.pop(z, None)


# glibc's malloc parameters (``mallopt``, <malloc.h>)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: blocks of up to this many bytes come from the heap, which keeps them when freed; a larger
#: one is mapped for itself and unmapped when freed (glibc's threshold starts at 128 KiB)
MMAP_THRESHOLD = 64 * 1024**2
#: free memory at the heap's top a worker keeps for its next allocations (glibc: 128 KiB)
KEEP_FREED_BYTES = 512 * 1024**2


def keep_freed_memory() -> bool:
    """Have glibc's malloc serve the buffers of a writer task's chunks (a 16 MB chunk, its
    decompressed form: tens of MB each, hundreds of MB a partition) from the heap and keep
    what a task frees for the next allocations, instead of mapping every such buffer afresh
    and unmapping it when freed. A fresh mapping costs a page fault per 4 KiB page as it is
    first written: most of the glue left around an lz4 writer's kernels. Measured with these
    settings in ``bench/kafka_cleaner.py --repeat 3``: the lz4 round 81 -> 98 MB/s a core
    (1.39x -> 1.67x Kafka's cleaner), uncompressed 1.61x -> 1.74x. The cost: an idle worker
    keeps up to :data:`KEEP_FREED_BYTES` beyond what it holds, memory its tasks needed anyway.
    Returns whether the C library took the settings (another one, or none: nothing changes)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES))


def preload() -> None:
    """Import the executor modules and load the writer's kernels (numba, compactor/native), starting
    no thread."""
    import compactor.spark.writer  # noqa: F401  (codec, cleaner, numpy)
    from compactor.native import compile_kernels

    compile_kernels()
    # Arrow's bundled jemalloc starts its background thread when pyarrow loads unless told
    # otherwise; Arrow allocates from mimalloc by default, and with jemalloc chosen
    # (ARROW_DEFAULT_MEMORY_POOL) dirty pages are purged inline instead. A setting of the
    # user's own is kept, and pyarrow is then left to the workers: it may start the thread.
    os.environ.setdefault(ARROW_JEMALLOC_ENV, "background_thread:false")
    if os.environ[ARROW_JEMALLOC_ENV] != "background_thread:false":
        return
    import pyarrow as pa
    import pyspark.sql.pandas.serializers  # noqa: F401  (the Arrow UDF paths' serializers)

    # pyarrow imports pandas, when installed, the first time it converts a Python sequence
    # (pyarrow.array asks whether the object is pandas-like): half a second of every worker's
    # first task (py-spy, a cold demo round), paid here once instead
    pa.array([0])


def main() -> None:
    keep_freed_memory()  # inherited by every worker the daemon forks
    try:
        prefer_installed_pyspark()
        preload()
    except Exception:  # the workers import the same modules and report the error in context
        print("kafka-compactor: preloading the executor modules failed; each worker loads "
              "them itself:", file=sys.stderr)
        traceback.print_exc()
    from pyspark import daemon

    gc.collect()
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
