"""The MERGE of erasure outcomes (delta-rs for outcomes on the driver, delta-spark for a
DataFrame's) changes only requests still in the status the run read: a ``cancel`` (delta-rs)
committed between the run's read and its MERGE stands. The summary a run reads first, and
the ledger's reads of files either library wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.erasure import ledger, rules, status
from compactor.schemas.spark import REQUEST_OUTCOME
from compactor.spark import ledger as spark_ledger

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("way", ["driver", "spark"])
def test_a_cancel_committed_during_the_run_is_not_overwritten(spark, tmp_path: Path,
                                                              way: str) -> None:
    """Outcomes held on the driver (a run of few requests: delta-rs's MERGE) and outcomes in
    a DataFrame (delta-spark's) leave a cancel committed meanwhile as it is, name it as moved,
    and commit with the run's metadata."""
    state = str(tmp_path / "state")
    ledger.init(state)
    ledger.add_requests(state, [r for i in range(3) for r in rules.new_requests(
        topic="accounts", digests=[rules.subject_digest(f"user-{i}".encode())],
        selector="key", header_name=None, reason="test", now_ms=1, deadline_days=30,
        request_id=f"r{i}")])
    summary = ledger.pending_summary(state, status.APPLICABLE)
    read = spark_ledger.requests_frame(spark, state, status.APPLICABLE, version=summary.version)
    rows = [{**dict.fromkeys(REQUEST_OUTCOME.fieldNames()), "request_id": r.request_id,
             "outcome": "update", "expected_status": r.status, "status": "applied",
             "run_id": "run-1", "records_erased": 4} for r in read.collect()]
    outcomes = rows if way == "driver" else spark.createDataFrame(rows, REQUEST_OUTCOME)
    # while the run works, an operator cancels r1 (a delta-rs commit)
    ledger.change_status(state, ["r1"], action="cancel", allowed=frozenset({"pending"}),
                         status="cancelled", reason="withdrawn", now_ms=2)
    moved = spark_ledger.moved_requests(state, spark, outcomes, 10, read_at=summary.version)
    assert moved == ({"applied": 1}, [{"request_id": "r1", "status": "cancelled",
                                       "computed": "applied", "records_erased": 4}])
    updated = spark_ledger.merge_outcomes(state, spark, outcomes, ("status", "run_id"),
                                          {"action": "apply", "run_id": "run-1"})
    assert updated == 2
    rows_now = {r["request_id"]: (r["status"], r["run_id"]) for r in
                DeltaTable(f"{state}/erasure_requests").to_pyarrow_table().to_pylist()}
    assert rows_now == {"r0": ("applied", "run-1"), "r1": ("cancelled", None),
                        "r2": ("applied", "run-1")}
    # the MERGE's commit carries the run's metadata, as the audit trail reads it
    last = ledger.history(state, "erasure_requests")[-1]
    assert (last["operation"], last["action"], last["run_id"]) == ("MERGE", "apply", "run-1")
    # nothing moved when the table is still at the version the run read
    assert spark_ledger.moved_requests(state, spark, outcomes, 10,
                                       read_at=ledger.table_version(state, "erasure_requests")
                                       ) == ({}, [])


def test_the_ledger_reads_files_of_many_statuses_whoever_wrote_them(tmp_path: Path) -> None:
    """delta-rs writes the files of its MERGE with ``string_view`` columns: once such a file
    holds requests in two statuses (three filed together, one cancelled), every filtered read
    of the ledger must still work (each failed with Arrow's "no kernel matching input types
    (string, string_view)" while the filter was pushed into the Parquet scan)."""
    state = str(tmp_path / "state")
    ledger.init(state)
    ledger.add_requests(state, [r for i in range(3) for r in rules.new_requests(
        topic="accounts", digests=[rules.subject_digest(f"user-{i}".encode())],
        selector="key", header_name=None, reason="test", now_ms=1, deadline_days=30,
        request_id=f"r{i}")])
    ledger.change_status(state, ["r1"], action="cancel", allowed=frozenset({"pending"}),
                         status="cancelled", reason="withdrawn", now_ms=2)
    assert ledger.has_requests(state, status.APPLICABLE)
    summary = ledger.pending_summary(state, status.APPLICABLE)
    assert summary.count == 2 and sorted(r["request_id"] for r in summary.rows or []) == [
        "r0", "r2"]
    assert ledger.statuses_by_run(state, ["none"], "run_id") == {}
    report = ledger.audit(state, "r1")
    assert report is not None and report["proof"]["status"] == "cancelled"
    counts = ledger.status(state, now_ms=3)["by_status"]
    assert {k: v for k, v in counts.items() if v} == {"pending": 2, "cancelled": 1}


def test_the_summarys_filter_holds_every_pending_subject_and_no_other_run_reads(
        tmp_path: Path) -> None:
    """The Bloom filter the scan broadcasts is built as the summary streams the ledger: every
    request a run reads is in it (a false negative would hide a subject from the erasure),
    whatever the number of batches; requests applied at the run's place already are not
    needed, and the filter is sized for every row in the statuses."""
    import hashlib

    state = str(tmp_path / "state")
    ledger.init(state)
    keys = [f"user-{i}".encode() for i in range(70_000)]  # more than one batch of 64 Ki rows
    ledger.add_requests(state, [r for k in keys for r in rules.new_requests(
        topic="accounts", digests=[rules.subject_digest(k)], selector="key",
        header_name=None, reason="test", now_ms=1, deadline_days=30, request_id=None)])
    summary = ledger.pending_summary(state, status.APPLICABLE)
    assert summary.count == len(keys)
    assert summary.digests.might_contain([hashlib.sha256(k).digest() for k in keys]).all()
    strangers = [hashlib.sha256(f"stranger-{i}".encode()).digest() for i in range(10_000)]
    assert summary.digests.might_contain(strangers).mean() < 0.01


def test_a_small_runs_rows_come_with_its_summary_as_spark_reads_them(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of few requests takes their rows from the summary's pass (no Spark job reads the
    table again): the same rows, at the same version, as delta-spark's read of them, with the
    requests applied at the run's place left out by the same rule; past
    ``ROWS_ON_DRIVER`` the summary keeps none."""
    state = str(tmp_path / "state")
    ledger.init(state)
    here, there = "c/1/d/logs", "c/2/e/logs"
    rows = [r for i in range(6) for r in rules.new_requests(
        topic="accounts" if i % 2 else "*", digests=[rules.subject_digest(f"user-{i}".encode())],
        selector="key" if i < 4 else "header", header_name=None if i < 4 else "email",
        reason="test", now_ms=1, deadline_days=30, request_id=f"r{i}")]
    ledger.add_requests(state, rows)
    spark_ledger.merge_outcomes(state, spark, spark.createDataFrame(
        [{**dict.fromkeys(REQUEST_OUTCOME.fieldNames()), "request_id": rid, "outcome": "update",
          "expected_status": "pending", "status": "applied", "run_id": "run-0",
          "places": f'{{"{place}": {{"applied_run_id": "run-0"}}}}'}
         for rid, place in (("r1", here), ("r2", there))], REQUEST_OUTCOME),
        ("status", "run_id", "places"), {"action": "apply", "run_id": "run-0"})
    columns = ledger.RUN_COLUMNS
    for place in (here, None):
        summary = ledger.pending_summary(state, status.APPLICABLE, not_applied_at=place)
        read = spark_ledger.requests_frame(spark, state, status.APPLICABLE,
                                           version=summary.version, not_applied_at=place)
        expected = sorted(({c: r[c] for c in columns} for r in read.collect()),
                          key=lambda r: r["request_id"])
        assert summary.rows is not None
        assert sorted(summary.rows, key=lambda r: r["request_id"]) == expected
        assert len(expected) == (5 if place else 6)
    monkeypatch.setattr(ledger, "ROWS_ON_DRIVER", 5)
    assert ledger.pending_summary(state, status.APPLICABLE, not_applied_at=here).rows is None
