"""The ledger's tables (:mod:`compactor.erasure.ledger`) through delta-spark, in the session
of an erasure command: the pending requests as a DataFrame, the outcomes' MERGE (its run
rows go in by delta-rs, as every command's: :func:`compactor.erasure.ledger.append_runs`).
Every write holds the state dir's writer lock and maps errors as the ledger's own
functions do (:func:`compactor.erasure.ledger.ledger_errors`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from compactor.erasure import ledger
from compactor.schemas.delta import ERASURE_REQUESTS_TABLE
from compactor.spark import delta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def requests_frame(spark: SparkSession, state_dir: str, statuses: frozenset[str], *,
                   version: int, not_applied_at: str | None = None) -> DataFrame:
    """The request rows in ``statuses`` at table ``version`` (and not yet applied at the
    place ``not_applied_at``) as a Spark DataFrame read by delta-spark, with the subject's
    digest as 32 bytes (``digest``) for the join against the scanned records."""
    return delta.read_requests(spark, ledger.table_path(state_dir, ERASURE_REQUESTS_TABLE),
                               statuses, version=version, not_applied_at=not_applied_at)


@ledger.ledger_errors("record erasure outcomes in the ledger", writes=True)
def merge_outcomes(state_dir: str, spark: SparkSession, outcomes: DataFrame,
                   columns: Sequence[str], meta: Mapping[str, str]) -> int:
    """MERGE the ``update`` rows of ``outcomes`` (``compactor.schemas.spark.REQUEST_OUTCOME``) into
    the requests table with delta-spark, one commit whose ``userMetadata`` is ``meta``: each sets
    ``columns`` of its request where the request is still in the status it was computed from
    (a retry or cancel committed meanwhile is not overwritten). Returns the rows updated."""
    return delta.merge_outcomes(spark, ledger.table_path(state_dir, ERASURE_REQUESTS_TABLE),
                                outcomes, columns, meta)


@ledger.ledger_errors("read the erasure request ledger")
def moved_requests(state_dir: str, spark: SparkSession, outcomes: DataFrame, limit: int, *,
                   read_at: int) -> tuple[dict[str, int], list[dict[str, object]]]:
    """:func:`compactor.spark.delta.moved_requests` of the requests table: call it holding the
    state dir's writer lock, so that it names exactly the requests the next
    :func:`merge_outcomes` leaves alone. ``read_at`` is the table version the run read its
    requests at: when that is still the table's version, no commit came between, nothing
    moved, and no Spark job joins the outcomes against the table."""
    if ledger.table_version(state_dir, ERASURE_REQUESTS_TABLE) == read_at:
        return {}, []
    return delta.moved_requests(spark, ledger.table_path(state_dir, ERASURE_REQUESTS_TABLE),
                                outcomes, limit)
