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


def test_a_step_whose_jobs_have_not_started_shows_no_task_count(
        spark, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """While the driver still plans (here: waits) before the step's first job, the step
    shows its running time with no total, not "0/0 tasks"."""
    import time

    out = io.StringIO()
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.0)  # a line at every poll
    progress.configure(progress.Mode.LINES, out)
    try:
        with spark_step(spark, "planning"):
            time.sleep(1.0)
            spark.sparkContext.parallelize(range(4), 2).count()
    finally:
        progress.configure(progress.Mode.OFF)
    lines = out.getvalue().splitlines()
    running = [line for line in lines if line.endswith("(running)")]
    assert running, lines
    assert not any("0/0" in line for line in running), lines
    assert re.fullmatch(r"planning: 2/2 tasks, \d+\.\d s", lines[-1]), lines
