"""chispa tests of every DataFrame transform of the round, on small hand-made inputs whose
expected output is worked out by hand (or by the pure policy functions for the grouped maps)."""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality

from compactor import transforms
from compactor.codec.records import ControlType
from compactor.config import TopicConfig
from compactor.generator import DEFAULT_START_MS
from compactor.logdir import load_partition
from compactor.policy import BatchRetention, PartitionInput
from compactor.scan import segment_headers
from schemas.spark import BATCH_HEADER, DECISION, RECORD, SEGMENT_TASK

pytestmark = pytest.mark.spark


def _record(offset: int, key: int | None, *, tombstone: bool = False, control: bool = False,
            aborted: bool = False, discard: bool = False, retain_deletes: bool = True,
            in_dirty: bool = True) -> tuple:
    return (0, 0, offset, key, None if key is None else 7, tombstone, control, aborted, discard,
            retain_deletes, in_dirty, None)


RECORDS = [
    _record(0, 1, in_dirty=False),          # superseded by 3 although below first dirty
    _record(1, 2),                          # latest of key 2
    _record(2, None),                       # null key
    _record(3, 1),                          # latest of key 1
    _record(4, 5, aborted=True, discard=True),  # aborted: neither kept nor in the map
    _record(5, 6, tombstone=True),          # tombstone within its horizon
    _record(6, 7, tombstone=True, retain_deletes=False),  # tombstone past its horizon
    _record(7, None, control=True),         # a marker kept
    _record(8, None, control=True, discard=True),  # a marker past its horizon
    _record(9, 3, in_dirty=False),          # key only below first dirty: kept
]


def test_latest_per_key(spark) -> None:
    df = spark.createDataFrame(RECORDS, RECORD)
    got = df.transform(transforms.latest_per_key).select("offset", "latest")
    expected = spark.createDataFrame(
        [(0, 3), (1, 1), (2, None), (3, 3), (4, None), (5, 5), (6, 6), (7, None), (8, None),
         (9, None)], "offset long, latest long")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_record_verdicts_and_drops(spark) -> None:
    df = spark.createDataFrame(RECORDS, RECORD).transform(transforms.latest_per_key)
    verdicts = df.transform(transforms.record_verdicts)
    expected = spark.createDataFrame(
        [(0, "superseded"), (1, None), (2, "null_key"), (3, None), (4, "aborted"), (5, None),
         (6, "tombstone_expired"), (7, None), (8, "marker_expired"), (9, None)],
        "offset long, reason string")
    assert_df_equality(verdicts.select("offset", "reason"), expected, ignore_row_order=True,
                       ignore_nullable=True)
    drops = verdicts.transform(transforms.dropped_records)
    assert_df_equality(
        drops, spark.createDataFrame(
            [(0, 0, o, r) for o, r in [(0, "superseded"), (2, "null_key"), (4, "aborted"),
                                       (6, "tombstone_expired"), (8, "marker_expired")]],
            drops.schema),
        ignore_row_order=True)


def test_dropped_records_leave_error_rows_out(spark) -> None:
    row = list(_record(0, None))
    row[-1] = '{"code": "CORRUPT_SEGMENT"}'
    df = (spark.createDataFrame([tuple(row)], RECORD).transform(transforms.latest_per_key)
          .transform(transforms.record_verdicts).transform(transforms.dropped_records))
    assert df.count() == 0


@pytest.fixture()
def partition(small_log: Path) -> PartitionInput:
    part = load_partition(str(small_log / "orders-v2-0"))
    return PartitionInput(path=part.path, segments=part.segments,
                          config=TopicConfig(cleanup_policy=frozenset({"compact"})),
                          cleaner_checkpoint=None, log_start_checkpoint=None,
                          replication_checkpoint=None, aborted_txns=(),
                          now_ms=DEFAULT_START_MS + 86_400_000)


def _pure_headers(inp: PartitionInput) -> list:
    return [h for s in inp.segments
            for h in segment_headers(Path(s.log_path).read_bytes(), s.log_path, s.base_offset)]


def test_scan_headers_equals_the_pure_scan(spark, partition: PartitionInput) -> None:
    tasks = spark.createDataFrame(
        [(0, s.base_offset, s.log_path) for s in partition.segments], SEGMENT_TASK)
    got = tasks.transform(transforms.scan_headers)
    expected = spark.createDataFrame(
        [(0, *(getattr(h, f) for f in transforms._HEADER_FIELDS), None)
         for h in _pure_headers(partition)], BATCH_HEADER)
    assert_df_equality(got, expected, ignore_row_order=True)


def test_plan_and_decide_match_the_policy(spark, partition: PartitionInput) -> None:
    headers_py = _pure_headers(partition)
    headers = spark.createDataFrame(
        [(0, *(getattr(h, f) for f in transforms._HEADER_FIELDS), None) for h in headers_py],
        BATCH_HEADER)
    inputs = {0: partition}
    (row,) = headers.transform(transforms.plan_rounds(inputs)).collect()
    plan = partition.plan(headers_py)
    assert transforms.plan_from_row(row.asDict()) == plan
    assert plan.will_clean

    decided = partition.decide(plan, headers_py)
    group_of = {b: g[0] for g in plan.groups for b in g}
    got = headers.transform(transforms.decide_batches(inputs, {0: plan}))
    expected = spark.createDataFrame([
        (0, group_of[h.segment_base], h.segment_base, h.position, h.base_offset, h.is_control,
         int(d.retention), d.aborted, d.discard_records, d.retain_deletes, d.marker_horizon,
         *((d.txn_entry.producer_id, d.txn_entry.first_offset, d.txn_entry.last_offset,
            d.txn_entry.last_stable_offset) if d.txn_entry else (None,) * 4))
        for h, d in decided], DECISION)
    assert_df_equality(got, expected, ignore_row_order=True)
    # the open transaction at the end bounds the round, and aborted data is decided as such
    assert plan.first_uncleanable_offset <= plan.last_stable_offset
    assert any(d.retention == BatchRetention.RETAIN_EMPTY for _, d in decided)
    assert any(h.control_type == ControlType.ABORT for h, _ in decided)


def test_scan_records_counts_every_record_of_the_round(spark, partition: PartitionInput) -> None:
    headers_py = _pure_headers(partition)
    plan = partition.plan(headers_py)
    headers = spark.createDataFrame(
        [(0, *(getattr(h, f) for f in transforms._HEADER_FIELDS), None) for h in headers_py],
        BATCH_HEADER)
    decisions = headers.transform(transforms.decide_batches({0: partition}, {0: plan}))
    records = decisions.transform(transforms.scan_records({0: partition}, {0: plan}))
    in_round = [h for h in headers_py if h.segment_base < plan.first_uncleanable_offset]
    expected_count = sum(h.records_count if h.magic == 2 else h.last_offset - h.base_offset + 1
                         for h in in_round)
    assert records.where("error is null").count() == expected_count
    assert records.where("is_control").count() == sum(h.records_count for h in in_round
                                                      if h.is_control)
    keyless_data = records.where("not is_control and not discard_records and key_hi is null")
    assert keyless_data.count() > 0  # the generator writes null keys
