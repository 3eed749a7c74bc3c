"""The MERGE of erasure outcomes (delta-rs for outcomes on the driver, delta-spark for a
DataFrame's) changes only requests still in the status the run read: a ``cancel`` (delta-rs)
committed between the run's read and its MERGE stands. The summary a run reads first, the
passes a run of many makes over the ledger, and the ledger's reads of files either library
wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from compactor.erasure import ledger, rules, status
from compactor.erasure.outcomes import KIND_COLUMNS, ROW_COLUMNS
from compactor.schemas.spark import REQUEST_OUTCOME
from compactor.spark import ledger as spark_ledger
from compactor.spark.stages import KindOutcomes, requests_frame
from compactor.state import tables as state_tables

pytestmark = pytest.mark.spark


def _filed(state: str, ids: list[str], topic: str = "accounts") -> None:
    ledger.add_requests(state, [r for i in ids for r in rules.new_requests(
        topic=topic, digests=[rules.subject_digest(f"user-{i}".encode())],
        selector="key", header_name=None, reason="test", now_ms=1, deadline_days=30,
        request_id=i)])


def _applied(spark: Any, read: list[dict[str, Any]], way: str) -> Any:
    """A run's ``applied`` outcomes of the requests it ``read`` (all pending, none
    individual) held as ``way`` holds them: rows on the driver, a DataFrame, or by kind."""
    rows = [{**dict.fromkeys(REQUEST_OUTCOME.fieldNames()), "request_id": r["request_id"],
             "outcome": "update", "expected_status": r["status"], "status": "applied",
             "run_id": "run-1", "records_erased": 4} for r in read]
    if way == "driver":
        return rows
    frame = spark.createDataFrame(rows, REQUEST_OUTCOME)
    if way == "spark":
        return frame
    shared = {**rows[0], "request_id": None}
    return KindOutcomes([], [({"topic": "accounts", "status": "pending", "places": None},
                              shared)], lambda: frame)


@pytest.mark.parametrize("way", ["driver", "spark", "kinds"])
def test_a_cancel_committed_during_the_run_is_not_overwritten(spark, tmp_path: Path,
                                                              way: str) -> None:
    """Outcomes held on the driver (a run of few requests: delta-rs's MERGE), in a DataFrame
    (delta-spark's) or by kind (delta-rs's MERGE by kind, which falls back to every
    request's outcome once the table moved) leave a cancel committed meanwhile as it is,
    name it as moved, and commit with the run's metadata."""
    state = str(tmp_path / "state")
    state_tables.init(state)
    _filed(state, ["r0", "r1", "r2"])
    summary = ledger.pending_summary(state, status.APPLICABLE)
    read = [r.asDict() for r in requests_frame(
        spark, ledger.RunLedger(state, status.APPLICABLE, summary.version)).collect()]
    outcomes = _applied(spark, read, way)
    # while the run works, an operator cancels r1 (a delta-rs commit)
    ledger.change_status(state, ["r1"], action="cancel", allowed=frozenset({"pending"}),
                         status="cancelled", reason="withdrawn", now_ms=2)
    moved = spark_ledger.moved_requests(state, spark, outcomes, 10, read_at=summary.version)
    assert moved == ({"applied": 1}, [{"request_id": "r1", "status": "cancelled",
                                       "computed": "applied", "records_erased": 4}])
    updated = spark_ledger.merge_outcomes(state, spark, outcomes, ("status", "run_id"),
                                          {"action": "apply", "run_id": "run-1"},
                                          read_at=summary.version)
    assert updated == 2
    rows_now = {r["request_id"]: (r["status"], r["run_id"]) for r in
                DeltaTable(f"{state}/erasure_requests").to_pyarrow_table().to_pylist()}
    assert rows_now == {"r0": ("applied", "run-1"), "r1": ("cancelled", None),
                        "r2": ("applied", "run-1")}
    # the MERGE's commit carries the run's metadata, as the audit trail reads it
    last = state_tables.history(state, "erasure_requests")[-1]
    assert (last["operation"], last["action"], last["run_id"]) == ("MERGE", "apply", "run-1")
    # nothing moved when the table is still at the version the run read
    assert spark_ledger.moved_requests(state, spark, outcomes, 10,
                                       read_at=state_tables.table_version(state, "erasure_requests")
                                       ) == ({}, [])


@pytest.mark.parametrize("moved", [False, True, "large"])
def test_a_request_filed_during_the_run_is_not_recorded_by_its_kind(
        spark, tmp_path: Path, moved: bool | str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outcomes held by kind name requests by what they are (topic, status, places): a
    request filed while the run worked is pending in the same topic, but the run never
    looked for its subject. The MERGE by kind runs only while the table is still at the
    version the run read; once it moved, every request's outcome goes in by id and the new
    request stays pending (it would have been recorded applied, a false proof). A table
    larger than the driver rewrites (``KIND_MERGE_ROWS``) is merged by id as well."""
    if moved == "large":
        monkeypatch.setattr(ledger, "KIND_MERGE_ROWS", 2)
    state = str(tmp_path / "state")
    state_tables.init(state)
    _filed(state, ["r0", "r1"])
    _filed(state, ["o0"], topic="orders")
    summary = ledger.pending_summary(state, status.APPLICABLE)
    read = [r.asDict() for r in requests_frame(
        spark, ledger.RunLedger(state, status.APPLICABLE, summary.version)).collect()
            if r["topic"] == "accounts"]
    outcomes = _applied(spark, read, "kinds")
    if moved is True:
        _filed(state, ["late"])  # while the run works, a new request of the same kind
    updated = spark_ledger.merge_outcomes(state, spark, outcomes, ("status", "run_id"),
                                          {"action": "apply", "run_id": "run-1"},
                                          read_at=summary.version)
    assert updated == 2
    rows_now = {r["request_id"]: r["status"] for r in
                DeltaTable(f"{state}/erasure_requests").to_pyarrow_table().to_pylist()}
    assert rows_now == {"r0": "applied", "r1": "applied", "o0": "pending",
                        **({"late": "pending"} if moved is True else {})}
    engine = DeltaTable(f"{state}/erasure_requests").history(1)[0]["engineInfo"]
    assert engine.startswith("Apache-Spark" if moved else "delta-rs")


def test_outcomes_by_kind_set_each_individual_request_by_its_id_whatever_its_spelling(
        spark, tmp_path: Path) -> None:
    """A MERGE by kind names its individual requests by id in its SQL (hex-encoded: an id is
    free text): each takes its own outcome, a blocked one none, never its kind's."""
    state = str(tmp_path / "state")
    state_tables.init(state)
    odd, blocked = "it's \"ü\" -- '); DROP", "blocked"
    _filed(state, [odd, blocked, "plain-1", "plain-2"])
    version = state_tables.table_version(state, "erasure_requests")
    base = {**dict.fromkeys(REQUEST_OUTCOME.fieldNames()), "expected_status": "pending",
            "run_id": "run-1"}
    own = [{**base, "request_id": odd, "outcome": "update", "status": "applied",
            "records_erased": 7},
           {**base, "request_id": blocked, "outcome": "blocked"}]
    shared = {**base, "outcome": "update", "status": "applied", "records_erased": 0}
    held = KindOutcomes(own, [({"topic": "accounts", "status": "pending", "places": None},
                               shared)], lambda: pytest.fail("the table did not move"))
    assert spark_ledger.merge_outcomes(state, spark, held, ("status", "records_erased"),
                                       {"action": "apply", "run_id": "run-1"},
                                       read_at=version) == 3
    rows = {r["request_id"]: (r["status"], r["records_erased"]) for r in
            DeltaTable(f"{state}/erasure_requests").to_pyarrow_table().to_pylist()}
    assert rows == {odd: ("applied", 7), blocked: ("pending", None),
                    "plain-1": ("applied", 0), "plain-2": ("applied", 0)}


def test_the_ledger_reads_files_of_many_statuses_whoever_wrote_them(tmp_path: Path) -> None:
    """delta-rs writes the files of its MERGE with ``string_view`` columns: once such a file
    holds requests in two statuses (three filed together, one cancelled), every filtered read
    of the ledger must still work (each failed with Arrow's "no kernel matching input types
    (string, string_view)" while the filter was pushed into the Parquet scan)."""
    state = str(tmp_path / "state")
    state_tables.init(state)
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
    # read file by file, its kinds as dictionaries: the rows delta-rs's own reader gives
    table = state_tables.open_table(f"{state}/erasure_requests")
    columns = ["request_id", "topic", "status", "places", "reason"]
    expected = sorted((r for r in DeltaTable(f"{state}/erasure_requests").to_pyarrow_table(
        columns=columns).to_pylist() if r["status"] == "pending"), key=lambda r: r["request_id"])
    batches = list(state_tables.record_batches(table, columns, ("status", {"pending"}),
                                               dictionary=("topic", "status", "places")))
    assert all(pa.types.is_dictionary(b.schema.field(c).type) for b in batches
               for c in ("topic", "status", "places"))
    assert sorted((r for b in batches for r in b.to_pylist()),
                  key=lambda r: r["request_id"]) == expected


def test_the_summarys_filter_holds_every_pending_subject_and_no_other_run_reads(
        tmp_path: Path) -> None:
    """The Bloom filter the scan broadcasts is built as the summary streams the ledger: every
    request a run reads is in it (a false negative would hide a subject from the erasure),
    whatever the number of batches; requests applied at the run's place already are not
    needed, and the filter is sized for every row in the statuses."""
    import hashlib

    state = str(tmp_path / "state")
    state_tables.init(state)
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
    state_tables.init(state)
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
        ("status", "run_id", "places"), {"action": "apply", "run_id": "run-0"}, read_at=-1)
    columns = ledger.RUN_COLUMNS
    seen = {}
    for place in (here, None):
        summary = ledger.pending_summary(state, status.APPLICABLE, not_applied_at=place)
        run = ledger.RunLedger(state, status.APPLICABLE, summary.version, place)
        read = requests_frame(spark, run)
        expected = sorted(({c: r[c] for c in columns} for r in read.collect()),
                          key=lambda r: r["request_id"])
        all_kinds = read.groupBy(*KIND_COLUMNS).count().collect()
        seen[place] = expected, sorted((k.asDict() for k in all_kinds), key=str)
        assert summary.rows is not None
        assert sorted(summary.rows, key=lambda r: r["request_id"]) == expected
        assert len(expected) == (5 if place else 6)
        # a run of many reads the same rows again by delta-rs, a pass at a time: those of
        # some digests, and the rows, kinds and first ids its outcomes by kind need
        some = {r["digest"] for r in expected[::2]}
        assert sorted(ledger.requests_with_digests(run, some, 10),
                      key=lambda r: r["request_id"]) == [r for r in expected
                                                         if r["digest"] in some]
        # the outcomes' rows, from what that pass kept (individual requests it found) and
        # from a pass of their own (one it did not find, or no pass before)
        for mine, kept in (({expected[0]["request_id"]}, run),
                           ({expected[0]["request_id"], "no-such-request"}, run),
                           ({expected[0]["request_id"]}, ledger.RunLedger(
                               state, status.APPLICABLE, summary.version, place))):
            held = ledger.outcome_rows(kept, mine, 2, 10)
            assert held is not None
            assert held.own == [{c: expected[0][c] for c in ROW_COLUMNS}]
            kinds = (read.where(~F.col("request_id").isin(sorted(mine)))
                     .groupBy(*KIND_COLUMNS).count().collect())
            assert sorted(held.kinds, key=str) == sorted((k.asDict() for k in kinds), key=str)
            assert held.first == [{c: r[c] for c in ROW_COLUMNS} for r in expected[:2]]
            assert ledger.outcome_rows(kept, mine, 2, len(kinds) - 1) is None
    monkeypatch.setattr(ledger, "ROWS_ON_DRIVER", 5)
    assert ledger.pending_summary(state, status.APPLICABLE, not_applied_at=here).rows is None
    # told the kinds it may hold, the summary of a run of many tallies them itself: the pass
    # after the scan then reads only the candidates' rows, and nothing at all when no
    # candidate shares the first 8 bytes of a request's digest
    for place, (expected, all_kinds) in seen.items():
        summary = ledger.pending_summary(state, status.APPLICABLE, not_applied_at=place,
                                         max_kinds=10)
        assert summary.rows is None and summary.tallied is not None
        run = ledger.RunLedger(state, status.APPLICABLE, summary.version, place,
                               tallied=summary.tallied)
        some = {r["digest"] for r in expected[::2]}
        assert sorted(ledger.requests_with_digests(run, some, 10),
                      key=lambda r: r["request_id"]) == [r for r in expected
                                                         if r["digest"] in some]
        held = ledger.outcome_rows(run, {expected[0]["request_id"]}, 2, 10)
        assert held is not None and held.own == [{c: expected[0][c] for c in ROW_COLUMNS}]
        assert held.first == [{c: r[c] for c in ROW_COLUMNS} for r in expected[:2]]
        run = ledger.RunLedger(state, status.APPLICABLE, summary.version, place,
                               tallied=summary.tallied)
        with monkeypatch.context() as no_read:
            no_read.setattr(ledger, "_run_batches", None)  # a pass would fail here
            assert ledger.requests_with_digests(run, {bytes(32), b"\xff" * 32}, 10) == []
            held = ledger.outcome_rows(run, set(), 2, 10)
        assert held is not None and held.own == []
        assert sorted(held.kinds, key=str) == all_kinds
        assert held.first == [{c: r[c] for c in ROW_COLUMNS} for r in expected[:2]]
        assert ledger.outcome_rows(run, set(), 2, len(all_kinds) - 1) is None


def _table(path: str) -> list[dict[str, Any]]:
    return sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["request_id"])


def test_outcomes_by_kind_leave_the_table_delta_sparks_merge_by_id_leaves(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver records outcomes by kind by rewriting the requests table a batch at a time
    (``state.tables.rewrite_rows``): the table it leaves is the one delta-spark's MERGE of
    every request's outcome by id leaves, value for value, on a ledger of several files (one
    of them written before two columns were added), batches smaller than a file, requests
    of kinds with and without an outcome, individual ids (one blocked, one moved to another
    status) and outcomes with nulls, long shared JSON and ints. The new files then read the
    same by delta-rs (a filtered read, the row count of its statistics) and delta-spark (a
    filtered read, data skipping on)."""
    import shutil

    import pyarrow as pa
    from deltalake import write_deltalake

    from compactor.schemas.delta import ERASURE_REQUESTS

    # batches of 3 rows, row groups of 7: a group gathers batches, some cut across files' ends
    monkeypatch.setattr(state_tables, "REWRITE_BATCH_ROWS", 3)
    monkeypatch.setattr(state_tables, "REWRITE_GROUP_ROWS", 7)
    state = str(tmp_path / "state")
    path = f"{state}/erasure_requests"
    # the first file as an earlier version wrote it: no coverage, no missing_replicas column
    old = [r for r in ERASURE_REQUESTS if r.name not in ("coverage", "missing_replicas")]
    first = [r for i in range(5) for r in rules.new_requests(
        topic="accounts", digests=[rules.subject_digest(f"old-{i}".encode())], selector="key",
        header_name=None, reason="test", now_ms=1, deadline_days=30, request_id=f"a{i}")]
    write_deltalake(path, pa.Table.from_pylist([ledger._request_row(r) for r in first],
                                               pa.schema(old)), mode="append")
    _filed(state, [f"b{i}" for i in range(7)])
    _filed(state, [f"o{i}" for i in range(4)], topic="orders")
    _filed(state, ["it's \"ü\"", "blocked", "moved"])
    place = '{"node 1 dir d": {"applied_run_id": "run-0", "log_dir": "/logs"}}'
    ledger.merge_outcomes(state, [
        {"request_id": rid, "outcome": "update", "expected_status": "pending",
         "status": "applied", "run_id": "run-0", "places": place}
        for rid in ("b2", "b5", "o1", "o3")], ("status", "run_id", "places"),
        {"action": "apply", "run_id": "run-0"})
    ledger.change_status(state, ["b4"], action="cancel", allowed=frozenset({"pending"}),
                         status="cancelled", reason="withdrawn", now_ms=2)
    before = _table(path)
    files = DeltaTable(path).to_pyarrow_dataset().get_fragments()
    assert sorted("coverage" in f.physical_schema.names for f in files)[:2] == [False, True]
    version = state_tables.table_version(state, "erasure_requests")
    assert version is not None
    columns = ("status", "run_id", "records_erased", "coverage", "places", "failure",
               "verified_at_ms")
    base = {**dict.fromkeys(REQUEST_OUTCOME.fieldNames()), "outcome": "update"}
    coverage = '[{"dir": "accounts-0", "segments": 20, "records": 9999020}]' * 20
    kinds = [({"topic": "accounts", "status": "pending", "places": None},
              {**base, "expected_status": "pending", "status": "applied", "run_id": "run-1",
               "records_erased": 0, "places": '{"node 1 dir d": {"applied_run_id": "run-1"}}'}),
             ({"topic": "accounts", "status": "applied", "places": place},
              {**base, "expected_status": "applied", "status": "verified", "run_id": "run-0",
               "coverage": coverage, "verified_at_ms": 9}),
             ({"topic": "orders", "status": "applied", "places": place},
              {**base, "expected_status": "applied", "status": "failed", "run_id": "run-0",
               "failure": '{"residual_matches": 1}', "places": None}),
             ({"topic": "orders", "status": "pending", "places": None},
              {**base, "outcome": "no_replica_here", "expected_status": "pending"})]
    own = [{**base, "request_id": "it's \"ü\"", "expected_status": "pending",
            "status": "applied", "run_id": "run-1", "records_erased": 7, "places": place},
           {**base, "request_id": "blocked", "outcome": "blocked"},
           {**base, "request_id": "moved", "expected_status": "applied", "status": "verified"}]
    # what each request gets, by the rule itself: its own outcome if it has one, else its
    # kind's, either only from the status it was computed from
    held = {r["request_id"]: r for r in own}
    by_kind = {(k["topic"], k["status"], k["places"]): o for k, o in kinds}
    each = [{**(held.get(r["request_id"])
                or by_kind.get((r["topic"], r["status"], r["places"]), {"outcome": "none"})),
             "request_id": r["request_id"]} for r in before]
    each = [o for o in each if o["outcome"] == "update"]
    reference = str(tmp_path / "reference")
    shutil.copytree(state, reference)
    meta = {"action": "verify", "run_id": "run-1"}
    expected_count = spark_ledger.merge_outcomes(
        reference, spark, spark.createDataFrame(each, REQUEST_OUTCOME), columns, meta,
        read_at=version)
    updated = ledger.merge_kinds(state, own, kinds, columns, meta, read_at=version)
    assert updated == expected_count == 14
    assert _table(path) == _table(f"{reference}/erasure_requests") != before
    last = state_tables.history(state, "erasure_requests")[-1]
    assert (last["action"], last["run_id"]) == ("verify", "run-1")
    # the new files write the columns of a value a row plain (no dictionary, uncompressed),
    # the others snappy-compressed, a kind's values by dictionary though a row group gathers
    # batches that each brought their own
    import pyarrow.parquet as pq

    written = {f.path for f in DeltaTable(path).to_pyarrow_dataset().get_fragments()
               } - {f.path for f in files}
    assert written
    for name in written:
        meta_data = pq.ParquetFile(f"{path}/{name}").metadata
        for g in range(meta_data.num_row_groups):
            chunks = {meta_data.row_group(g).column(i).path_in_schema:
                      meta_data.row_group(g).column(i) for i in range(meta_data.num_columns)}
            for column, chunk in chunks.items():
                plain = column in ledger.UNIQUE_COLUMNS
                assert chunk.compression == ("UNCOMPRESSED" if plain else "SNAPPY"), column
                if plain:
                    assert not {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} & set(chunk.encodings)
                elif column in ("topic", "status", "places", "coverage", "run_id"):
                    assert "RLE_DICTIONARY" in chunk.encodings, column
            assert meta_data.row_group(g).num_rows <= 7
    # the new files read by both libraries, filtered, and counted by their statistics
    assert ledger.status(state, now_ms=3)["by_status"]["verified"] == 2
    table = DeltaTable(path)
    assert ledger._rows(table) == len(before)
    import pyarrow.compute as pc

    frame = spark.read.format("delta").load(path)
    after = _table(path)
    for column in ("coverage", "failure", "places", "verified_at_ms", "missing_replicas"):
        for null in (True, False):
            want = sorted(r["request_id"] for r in after if (r[column] is None) == null)
            test = pc.field(column).is_null() if null else pc.field(column).is_valid()
            assert sorted(table.to_pyarrow_dataset().to_table(filter=test).column(
                "request_id").to_pylist()) == want, (column, null)
            assert sorted(r["request_id"] for r in frame.where(
                F.col(column).isNull() if null else F.col(column).isNotNull()).collect()
                          ) == want, (column, null)


def test_a_table_a_newer_writer_upgraded_is_not_rewritten_by_hand(spark, tmp_path: Path
                                                                  ) -> None:
    """The driver's rewrite writes the protocol the tool creates (reader 1, writer 2): once
    delta-spark upgraded the table (a CHECK constraint here, writer version 3, which the
    rewrite would not enforce), outcomes by kind go in by delta-spark's MERGE by id, which
    knows the features, and the table is right."""
    state = str(tmp_path / "state")
    state_tables.init(state)
    _filed(state, ["r0", "r1"])
    path = f"{state}/erasure_requests"
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT filed CHECK (requested_at_ms > 0)")
    assert DeltaTable(path).protocol().min_writer_version == 3
    summary = ledger.pending_summary(state, status.APPLICABLE)
    read = [r.asDict() for r in requests_frame(
        spark, ledger.RunLedger(state, status.APPLICABLE, summary.version)).collect()]
    outcomes = _applied(spark, read, "kinds")
    assert ledger.merge_kinds(state, outcomes.own, outcomes.kinds, ("status", "run_id"), {},
                              read_at=summary.version) is None
    assert state_tables.table_version(state, "erasure_requests") == summary.version
    assert spark_ledger.merge_outcomes(state, spark, outcomes, ("status", "run_id"),
                                       {"action": "apply", "run_id": "run-1"},
                                       read_at=summary.version) == 2
    assert {r["request_id"]: r["status"] for r in _table(path)} == {"r0": "applied",
                                                                     "r1": "applied"}
    assert DeltaTable(path).history(1)[0]["engineInfo"].startswith("Apache-Spark")
