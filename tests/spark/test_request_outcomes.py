"""The outcomes of an apply set by Spark SQL for the requests nothing tells apart
(:class:`compactor.erasure.outcomes.Plain`) are exactly what the row function
(:func:`compactor.erasure.outcomes.applied_update`) gives each of them: the same ledger rows run
through :func:`compactor.spark.stages.request_outcomes` with and without the SQL path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import functions as F

from compactor.erasure import outcomes
from compactor.erasure.outcomes import ApplyContext, DirState, Matched
from compactor.erasure.status import APPLICABLE
from compactor.spark.stages import request_outcomes

pytestmark = pytest.mark.spark

PLACE = {"cluster_id": "c", "node_id": 1, "directory_id": "d", "log_dir": "/logs"}
KEY = "c/1/d"


def test_the_sql_outcomes_equal_the_row_function_on_every_kind_of_row(spark: Any) -> None:
    other = {"c/2/e": {"applied_run_id": "earlier", "records_erased": 3,
                       "tombstones_left": [{"dir": "t-0", "offset": 7}]}}
    rows = [
        # plain: pending, nothing matched, no place yet, a plain topic (three spellings of
        # "no place": null, empty, {})
        ("plain-null", "orders", "pending", None),
        ("plain-empty", "orders", "pending", ""),
        ("plain-braces", "orders", "pending", "{}"),
        ("plain-applied", "orders", "applied", None),
        # not plain, each for one reason
        ("matched", "orders", "pending", None),
        ("placed", "orders", "partially_verified", json.dumps(other)),
        ("every-topic", "*", "pending", None),
        ("unknown", "gone", "pending", None),
        ("blocked", "broken", "pending", None),
    ]
    ctx = ApplyContext(
        run_id="run-1", now_ms=1_000, place=PLACE, key=KEY,
        dirs=[DirState("orders-0", "orders", "live", False),
              DirState("broken-0", "broken", "live", True)],
        unknown_topics={"gone": "topic 'gone' has no partition in this log dir"},
        matched={"matched": Matched(frozenset({(0, 0, 5), (0, 0, 9)}), (("orders-0", 9),), 2)})
    frame = spark.createDataFrame(rows, "request_id string, topic string, status string, "
                                        "places string"
                                  ).withColumn("digest", F.lit(None).cast("binary"))
    plain = outcomes.plain_applied(ctx, APPLICABLE)
    assert plain.by_status  # the SQL path runs

    def outcome(row: dict[str, Any]) -> dict[str, Any]:
        return outcomes.applied_update(row, ctx)

    def collected(with_plain: bool) -> dict[str, dict[str, Any]]:
        result = request_outcomes(spark, frame, outcome, plain if with_plain else None)
        try:
            return {r["request_id"]: r.asDict() for r in result.collect()}
        finally:
            result.unpersist()

    by_sql, by_python = collected(True), collected(False)
    assert set(by_python) == {r[0] for r in rows}
    assert by_sql == by_python
    assert by_sql["plain-null"]["status"] == "applied" and json.loads(
        by_sql["plain-null"]["places"])[KEY]["applied_run_id"] == "run-1"
