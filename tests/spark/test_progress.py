"""Progress from Spark's status tracker: tasks of the step's own jobs only, stages a job skips
(its shuffle output exists already) not counted; one line per step when not on a terminal."""

from __future__ import annotations

import io
import operator
import re

import pytest

from compactor import progress
from compactor.spark.progress import spark_step

pytestmark = pytest.mark.spark


def test_a_step_counts_its_tasks_and_not_skipped_stages(spark) -> None:  # type: ignore[no-untyped-def]
    out = io.StringIO()
    progress.configure(progress.Mode.LINES, out)
    try:
        sc = spark.sparkContext
        pairs = sc.parallelize(range(100), 3).map(lambda x: (x % 5, x)).reduceByKey(
            operator.add, 2)
        with spark_step(spark, "first"):
            first = pairs.collect()
        with spark_step(spark, "again"):  # the 3 map tasks' shuffle output is reused
            again = pairs.collect()
        with progress.step("local", total=4, unit="files") as step:
            for _ in range(4):
                step.advance()
    finally:
        progress.configure(progress.Mode.OFF)
    assert sorted(first) == sorted(again)
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"first: 5/5 tasks, \d+\.\d s", lines[0]), lines
    assert re.fullmatch(r"again: 2/2 tasks, \d+\.\d s", lines[1]), lines
    assert re.fullmatch(r"local: 4/4 files, \d+\.\d s", lines[2]), lines
    assert len(lines) == 3
