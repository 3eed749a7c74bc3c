"""The Python worker daemon (``compactor.spark.daemon``): what it loads before it forks, and
that the session's workers come from it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark


def test_preload_loads_the_executor_code_but_nothing_that_starts_threads() -> None:
    probe = ("import json, sys\n"
             "from compactor.spark import daemon\n"
             "daemon.preload()\n"
             "from compactor.cleaner import fast\n"
             "print(json.dumps({'writer': 'compactor.spark.writer' in sys.modules,\n"
             "                  'kernels': bool(fast.decide_chunk.signatures),\n"
             "                  'pyarrow': 'pyarrow' in sys.modules,\n"
             "                  'pandas': 'pandas' in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == {"writer": True, "kernels": True, "pyarrow": False,
                               "pandas": False}


def test_workers_are_forked_from_the_preloading_daemon(spark) -> None:
    def probe(_: object) -> list[tuple]:
        import gc

        import pyspark.worker

        main = sys.modules["__main__"]
        return [(getattr(main.__spec__, "name", None), gc.get_freeze_count() > 0,
                 "compactor.cleaner.fast" in sys.modules,
                 # the pip-installed pyspark is its own SPARK_HOME here: its modules come
                 # from the package (bytecode cached), not from the pyspark.zip Spark ships
                 ".zip" in pyspark.worker.__file__,
                 any(p.endswith(("pyspark.zip", "-src.zip")) for p in sys.path))]

    rows = set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(probe).collect())
    assert rows == {("compactor.spark.daemon", True, True, False, False)}
