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

Only what starts no thread of its own before the fork is loaded here (pyspark's daemon warns
that a thread running at ``fork`` can deadlock the child): numba compiles and loads without
threads, numpy's OpenBLAS pool is shut down and restarted around ``fork`` by OpenBLAS itself,
and pyarrow, whose import starts an allocator thread (and imports pandas), is left for the
worker to import: :mod:`compactor.spark.writer` and everything it imports never import it
(``tests/spark/test_daemon.py`` checks both).

The sessions the command line creates in local mode use this daemon; on a cluster whose
executors have the package installed, ``spark-submit --conf
spark.python.daemon.module=compactor.spark.daemon`` does the same (README, Running on Spark
clusters). Executors that only receive the ``--py-files`` archive cannot import it (the
archive reaches a worker's path after the fork): leave the setting out there.
"""

from __future__ import annotations

import gc
import sys
import traceback

#: the value of ``spark.python.daemon.module`` that selects this daemon
MODULE = "compactor.spark.daemon"


def preload() -> None:
    """Import the executor modules that start no thread and load the writer's kernels."""
    import compactor.spark.writer  # noqa: F401  (codec, cleaner, numpy, numba)
    from compactor.cleaner.fast import compile_kernels

    compile_kernels()


def main() -> None:
    try:
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
