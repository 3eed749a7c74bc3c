"""Spark work as progress steps: each step runs its jobs in a job group of its own (so the
Spark UI names them too), and a thread polls Spark's status tracker for the group's tasks done
and total (``SparkContext.statusTracker``)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from compactor import progress

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

POLL_S = 0.25
_ids = itertools.count()


def _tasks(sc: SparkContext, group: str) -> tuple[int, int]:
    """Tasks completed and in total over the stages of the group's jobs so far.

    Stages a job skips (their output was cached or shuffled already) never run a task, and
    the tracker cannot tell them from stages still waiting: in a finished job a stage that
    completed no task was skipped; in a running one, a stage that has not started counts only
    when it comes after a started one (a skipped stage precedes the stages that read it)."""
    tracker = sc.statusTracker()
    done = total = 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is None:
            continue
        stages = [s for s in map(tracker.getStageInfo, info.stageIds) if s is not None]
        started = [s.stageId for s in stages if s.numCompletedTasks or s.numActiveTasks]
        finished = info.status == "SUCCEEDED"
        for stage in stages:
            ran = stage.numCompletedTasks or stage.numActiveTasks
            if ran or (not finished and started and stage.stageId > max(started)):
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done, total


@contextmanager
def spark_step(spark: SparkSession, name: str, *,
               total_bytes: int | None = None) -> Iterator[None]:
    """Run the body's Spark jobs as the step ``name``."""
    sc = spark.sparkContext
    group = f"kafka-compactor-{next(_ids)}-{name}"
    sc.setJobGroup(group, f"kafka-compactor: {name}")
    try:
        if not progress.enabled():
            yield
            return
        with progress.step(name, total_bytes=total_bytes) as step:
            stop = threading.Event()

            def poll() -> None:
                while not stop.wait(POLL_S):
                    done, total = _tasks(sc, group)
                    if total:  # before that the driver is still planning: no "0/0" yet
                        step.update(done, total)

            poller = threading.Thread(target=poll, name=f"progress-{name}", daemon=True)
            poller.start()
            try:
                yield
            finally:
                stop.set()
                poller.join()
                step.update(*_tasks(sc, group))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
