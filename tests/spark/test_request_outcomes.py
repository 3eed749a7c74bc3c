"""The outcomes Spark gives the requests a run found nothing of, one computation per kind of
row (topic, status, places: :attr:`compactor.erasure.outcomes.RunContext.individual`), are
exactly what the row functions (:func:`compactor.erasure.outcomes.applied_update`,
:func:`~compactor.erasure.outcomes.verified_update`) give each request: the same ledger rows
run through :func:`compactor.spark.stages.request_outcomes` with and without the kinds; and a
run gets the same rows, counts and report computed on the driver (a run of few requests) and
held by kind (a run of many, few of them individual, read again from the ledger by the driver):
:func:`compactor.spark.stages.run_outcomes`."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from compactor.erasure import outcomes
from compactor.erasure.ledger import RunLedger
from compactor.erasure.outcomes import (
    KIND_COLUMNS,
    ApplyContext,
    DirState,
    Matched,
    VerifyContext,
)
from compactor.erasure.rules import place_key
from compactor.schemas.delta import ERASURE_REQUESTS_TABLE
from compactor.schemas.spark import REQUEST_OUTCOME
from compactor.spark.stages import (
    KindOutcomes,
    RunOutcomes,
    RunRequests,
    outcome_summary,
    request_outcomes,
    run_outcomes,
)

pytestmark = pytest.mark.spark

PLACE = {"cluster_id": "c", "node_id": 1, "directory_id": "d", "log_dir": "/logs"}
KEY = place_key(PLACE)
OTHER = {"node 2 dir e": {"cluster_id": "c", "node_id": 2, "directory_id": "e",
                          "log_dir": "/logs", "applied_run_id": "earlier", "records_erased": 3,
                          "tombstones_left": [{"dir": "t-0", "offset": 7}]}}
APPLIED_HERE = {KEY: {**PLACE, "applied_run_id": "run-1", "records_erased": 0}}
REPLICAS = [{"partition": "orders-0", "node_id": 1, "directory_id": "d"},
            {"partition": "orders-0", "node_id": 2, "directory_id": "e"}]


def _frame(spark: Any, rows: list[tuple[str, str, str, str | None]]) -> Any:
    return spark.createDataFrame(rows, "request_id string, topic string, status string, "
                                       "places string"
                                 ).withColumn("digest", F.lit(None).cast("binary"))


def _outcomes(spark: Any, rows: list[tuple[str, str, str, str | None]],
              outcome: Callable[[Mapping[str, Any]], Mapping[str, Any]],
              individual: frozenset[str] | None) -> dict[str, dict[str, Any]]:
    result = request_outcomes(spark, _frame(spark, rows), outcome, individual)
    try:
        return {r["request_id"]: r.asDict() for r in result.collect()}
    finally:
        result.unpersist()


def _ledger(state: Path, rows: list[tuple[str, str, str, str | None]]) -> RunLedger:
    """The rows as a ledger's requests table (the columns a run's passes read), for a run
    of many: read again by delta-rs (:class:`RunLedger`), and by delta-spark when it falls
    back to every request's outcome."""
    from deltalake import write_deltalake

    write_deltalake(str(state / ERASURE_REQUESTS_TABLE), pa.table({
        "request_id": [r[0] for r in rows], "topic": [r[1] for r in rows],
        "status": [r[2] for r in rows], "places": pa.array([r[3] for r in rows], pa.string()),
        "subject_sha256": ["00" * 32] * len(rows)}))
    return RunLedger(str(state), frozenset(r[2] for r in rows), 0)


def _run(spark: Any, rows: list[tuple[str, str, str, str | None]],
         outcome: Callable[[Mapping[str, Any]], Mapping[str, Any]], individual: frozenset[str],
         *, way: str, state: Path) -> tuple[dict[str, dict[str, Any]], dict[str, int], list[Any]]:
    """A run's rows, counts and first rows (by a limit shorter than the rows): computed on
    the driver, which holds the request rows (``driver``: :func:`run_outcomes` keeps a
    list); held by kind for a run of many, read from the ledger in ``state`` (``kinds``:
    each request's row is its own outcome or its kind's, and the fallback's frame gives the
    same); or every row on the executors (``executors``: :func:`request_outcomes`,
    :func:`outcome_summary`)."""
    frame = _frame(spark, rows)
    names = REQUEST_OUTCOME.fieldNames()
    if way == "executors":
        full = request_outcomes(spark, frame, outcome, individual)
        result = RunOutcomes(full, *outcome_summary(full, names, 4))
    else:
        requests: RunRequests = [r.asDict() for r in frame.collect()] if way == "driver" \
            else _ledger(state, rows)
        result = run_outcomes(spark, requests, outcome, individual, names, 4)
    try:
        if isinstance(result.result, list):
            got = result.result
        elif isinstance(result.result, KindOutcomes):
            assert way == "kinds"
            own = {o["request_id"]: o for o in result.result.own}
            shared = {tuple(k[c] for c in KIND_COLUMNS): o for k, o in result.result.kinds}
            got = [own[r["request_id"]] if r["request_id"] in own else
                   {**shared[(r["topic"], r["status"], r["places"])],
                    "request_id": r["request_id"]} for r in frame.collect()]
            fallback = {r["request_id"]: r.asDict() for r in result.result.frame().collect()}
            assert fallback == {r["request_id"]: {n: r.get(n) for n in names} for r in got}
        else:
            assert way == "executors"
            got = [r.asDict() for r in result.result.collect()]
        return ({r["request_id"]: {n: r.get(n) for n in names} for r in got}, result.counts,
                result.shown)
    finally:
        result.unpersist()


def _by_kind_equals_by_row(spark: Any, rows: list[tuple[str, str, str, str | None]],
                           outcome: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                           individual: frozenset[str], state: Path
                           ) -> dict[str, dict[str, Any]]:
    """The outcomes by kind, once checked equal to the row function's on every row, and to
    the driver's (rows, counts by status and report) for a run of few requests."""
    by_kind = _outcomes(spark, rows, outcome, individual)
    by_row = _outcomes(spark, rows, outcome, None)
    assert set(by_row) == {r[0] for r in rows}
    assert by_kind == by_row
    driver = _run(spark, rows, outcome, individual, way="driver", state=state)
    kinds = _run(spark, rows, outcome, individual, way="kinds", state=state)
    executors = _run(spark, rows, outcome, individual, way="executors", state=state)
    assert driver[0] == by_row
    assert driver == kinds == executors
    assert sum(driver[1].values()) == len(rows)
    assert [r["request_id"] for r in driver[2]] == sorted(by_row)[:4]
    return by_kind


def test_an_applys_outcomes_by_kind_equal_the_row_function_on_every_kind_of_row(
        spark: Any, tmp_path: Path) -> None:
    rows = [
        # many requests of one kind each (three spellings of "no place": null, empty, {})
        *((f"plain-{i}", "orders", "pending", None) for i in range(5)),
        ("plain-empty", "orders", "pending", ""),
        ("plain-braces", "orders", "pending", "{}"),
        ("plain-applied", "orders", "applied", None),
        ("placed", "orders", "partially_verified", json.dumps(OTHER)),
        ("placed-2", "orders", "partially_verified", json.dumps(OTHER)),
        ("every-topic", "*", "pending", None),
        ("unknown", "gone", "pending", None),
        ("blocked", "broken", "pending", None),
        # of a kind with plain rows, but the run matched its records
        ("matched", "orders", "pending", None),
    ]
    ctx = ApplyContext(
        run_id="run-1", now_ms=1_000, place=PLACE, key=KEY,
        dirs=[DirState("orders-0", "orders", "live", False),
              DirState("broken-0", "broken", "live", True)],
        unknown_topics={"gone": "topic 'gone' has no partition in this log dir"},
        matched={"matched": Matched(frozenset({(0, 0, 5), (0, 0, 9)}), (("orders-0", 9),), 2)})

    by_kind = _by_kind_equals_by_row(
        spark, rows, functools.partial(outcomes.applied_update, ctx=ctx), ctx.individual,
        tmp_path)
    assert by_kind["matched"]["records_erased"] == 1
    assert json.loads(by_kind["plain-3"]["places"])[KEY]["applied_run_id"] == "run-1"


def test_a_verifys_outcomes_by_kind_equal_the_row_function_on_every_kind_of_row(
        spark: Any, tmp_path: Path) -> None:
    applied = json.dumps(APPLIED_HERE)
    rows = [
        *((f"clean-{i}", "orders", "applied", applied) for i in range(5)),
        ("clean-other", "orders", "partially_verified", json.dumps({**OTHER, **APPLIED_HERE})),
        ("never-placed", "orders", "applied", None),
        ("every-topic", "*", "applied", applied),
        ("unscanned", "broken", "applied", applied),
        ("elsewhere", "absent", "applied", applied),
        ("tiered", "remote", "applied", applied),
        # of a kind with clean rows, but the run found its records again
        ("residual", "orders", "applied", applied),
    ]
    ctx = VerifyContext(
        run_id="verify-1", now_ms=2_000, place=PLACE, key=KEY,
        dirs=[DirState("orders-0", "orders", "live", False, segments=3, records=30),
              DirState("broken-0", "broken", "live", True),
              DirState("remote-0", "remote", "live", False, segments=1, records=4,
                       tiered=True)],
        residual={"residual": [{"dir": "orders-0", "segment_base": 0, "position": 0,
                                "offset": 5}]},
        replicas={"orders": REPLICAS, "*": None, "broken": REPLICAS, "absent": [],
                  "remote": [{"partition": "remote-0", "node_id": 1, "directory_id": "d"}]})

    by_kind = _by_kind_equals_by_row(
        spark, rows, functools.partial(outcomes.verified_update, ctx=ctx), ctx.individual,
        tmp_path)
    assert by_kind["residual"]["status"] == "failed"
    assert by_kind["clean-2"]["status"] == "partially_verified"
    assert by_kind["tiered"]["status"] == "verified_local_only"
