"""The ledger's tables (:mod:`compactor.erasure.ledger`) in the session of an erasure command:
a run whose outcomes the driver holds, itself or by kind, MERGEs them by delta-rs; a run whose
outcomes the executors computed MERGEs them through delta-spark; every run's
rows go in by delta-rs (:func:`compactor.state.runs.append_runs`).
Every write holds the state dir's writer lock and maps errors as the ledger's own
functions do (:func:`compactor.state.tables.ledger_errors`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from compactor.erasure import ledger
from compactor.schemas.delta import ERASURE_REQUESTS_TABLE
from compactor.spark import delta
from compactor.spark.stages import KindOutcomes
from compactor.state import tables as state_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from compactor.spark.stages import RunResult


def merge_outcomes(state_dir: str, spark: SparkSession, outcomes: RunResult,
                   columns: Sequence[str], meta: Mapping[str, str], *, read_at: int) -> int:
    """MERGE the ``update`` rows of a run's ``outcomes`` (``REQUEST_OUTCOME`` rows of
    ``schemas/spark.py``) into the requests table, one commit whose metadata is ``meta``:
    each sets ``columns`` of its request where the request is still in the status it was
    computed from (a retry or cancel committed meanwhile is not overwritten). Outcomes on
    the driver go in by delta-rs (:func:`compactor.erasure.ledger.merge_outcomes`), outcomes
    by kind by delta-rs while the table is still at ``read_at``, the version the run read
    (:func:`compactor.erasure.ledger.merge_kinds`), the rest by delta-spark. Returns the
    rows updated."""
    if isinstance(outcomes, list):
        return ledger.merge_outcomes(state_dir, outcomes, columns, meta)
    if isinstance(outcomes, KindOutcomes):
        updated = ledger.merge_kinds(state_dir, outcomes.own, outcomes.kinds, columns, meta,
                                     read_at=read_at)
        if updated is not None:
            return updated
        outcomes = outcomes.frame()
    return _merge_frame(state_dir, spark, outcomes, columns, meta)


@state_tables.ledger_errors("record erasure outcomes in the ledger", writes=True)
def _merge_frame(state_dir: str, spark: SparkSession, outcomes: DataFrame,
                 columns: Sequence[str], meta: Mapping[str, str]) -> int:
    return delta.merge_outcomes(spark, state_tables.table_path(state_dir, ERASURE_REQUESTS_TABLE),
                                outcomes, columns, meta)


def moved_requests(state_dir: str, spark: SparkSession, outcomes: RunResult, limit: int, *,
                   read_at: int) -> tuple[dict[str, int], list[dict[str, object]]]:
    """The ``update`` outcomes whose request is no longer in the status they were computed
    from, counted by computed status, the first ``limit`` by request id: call it holding the
    state dir's writer lock, so that it names exactly the requests the next
    :func:`merge_outcomes` leaves alone. ``read_at`` is the table version the run read its
    requests at: when that is still the table's version, no commit came between, nothing
    moved, and nothing is read. Outcomes on the driver are checked there
    (:func:`compactor.erasure.ledger.moved_requests`), a DataFrame's (or, once the table
    moved, every request's outcome of a run held by kind) in Spark."""
    if state_tables.table_version(state_dir, ERASURE_REQUESTS_TABLE) == read_at:
        return {}, []
    if isinstance(outcomes, list):
        return ledger.moved_requests(state_dir, outcomes, limit)
    if isinstance(outcomes, KindOutcomes):
        outcomes = outcomes.frame()
    return _moved_in_frame(state_dir, spark, outcomes, limit)


@state_tables.ledger_errors("read the erasure request ledger")
def _moved_in_frame(state_dir: str, spark: SparkSession, outcomes: DataFrame, limit: int
                    ) -> tuple[dict[str, int], list[dict[str, object]]]:
    return delta.moved_requests(spark, state_tables.table_path(state_dir, ERASURE_REQUESTS_TABLE),
                                outcomes, limit)
