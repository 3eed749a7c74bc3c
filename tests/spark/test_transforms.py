"""chispa tests of every DataFrame transform of the round, on small hand-made inputs whose
expected output is worked out by hand (or by the pure policy functions for the grouped maps)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compactor.cleaner.planning import OVER_TASK_KEYS
from compactor.cleaner.policy import BatchRetention, CleaningPlan, PartitionInput
from compactor.cleaner.rewrite import WRITERS
from compactor.cleaner.scan import key_digest, key_offsets, segment_headers
from compactor.codec.records import ControlType
from compactor.codec.segment import iter_batches
from compactor.config import TopicConfig
from compactor.erasure.sketch import DigestFilter
from compactor.errors import CompactorError
from compactor.log.layout import load_partition, read_aborted_txns
from compactor.model import SegmentInfo
from compactor.native import engine
from compactor.schemas.spark import (
    BATCH_HEADER,
    COMMIT_MESSAGE,
    DECISION,
    ERASURE_SCAN,
    ERASURE_TASK,
    GROUP_SLOT,
    KEY_BUCKET,
    KEY_OFFSET,
    ONE_PASS,
    SEGMENT_TASK,
    SUPERSEDED,
)
from compactor.spark import transforms
from compactor.spark.stages import (
    ARROW_BATCH_LIMIT,
    ROUND_ARROW_BATCH_BYTES,
    group_slots,
    partition_slots,
    round_settings,
)
from compactor.spark.writer import write_erased_segment, write_group, write_groups
from compactor.tools.ops.generator import DEFAULT_START_MS

pytestmark = pytest.mark.spark


def _keyed(offset: int, key: int, *, group: int = 0, in_map: bool = True) -> tuple:
    return (0, group, offset, key, 7, in_map, None)


KEYED = [
    _keyed(0, 1, in_map=False),       # below first dirty, superseded by 3
    _keyed(1, 2),                     # latest of key 2
    _keyed(3, 1, group=3),            # latest of key 1 (another group)
    _keyed(4, 2, in_map=False),       # aborted batch in the dirty section: not in the map,
    #                                   superseded by nothing later -> kept by the map
    _keyed(5, 6),                     # only record of key 6
    _keyed(9, 3, in_map=False),       # key only below first dirty: kept
    (1, 0, 2, 1, 7, True, None),      # key 1 of another partition: a map of its own
]


def _packed(spark, keyed: list[tuple], buckets: int,
            within: Callable[[int], list[int]] = lambda offset: []) -> DataFrame:
    """``KEY_BUCKET`` rows of keyed record tuples (tp, group, offset, key_hi, key_lo, in_map,
    error), one row per record, packed by hand: a key's rows share the bucket of its
    ``key_lo`` (the only thing the map asks of buckets); a row carries ``within(offset)`` as
    offsets superseded within its group."""
    slots = partition_slots(spark, buckets)

    def row(tp, group, offset, hi, lo, in_map, error):
        if error is not None:
            return (tp, group, slots[0], b"", b"", b"", b"", b"", error)
        carried = within(offset)
        return (tp, group, slots[lo % buckets], struct.pack("<q", offset),
                struct.pack("<q", hi), struct.pack("<q", lo), struct.pack("<?", in_map),
                transforms.pack_offsets(np.asarray(carried, np.int64)), None)

    return spark.createDataFrame([row(*k) for k in keyed], KEY_BUCKET)


def _superseded(df: DataFrame) -> list[tuple[int, int, int]]:
    """(tp, group, offset) of every record of ``SUPERSEDED`` rows, sorted."""
    return sorted((r.tp_id, r.group_base, offset) for r in df.collect()
                  for offset in transforms.unpack_offsets(r.offsets).tolist())


def test_superseded_records(spark) -> None:
    # hand-derived from the rows' comments: only offset 0 has a later key-1 record in the map
    got = _packed(spark, KEYED, 3).transform(transforms.superseded_records(3))
    assert _superseded(got) == [(0, 0, 0)]


def test_superseded_records_group_each_key_in_one_bucket(spark) -> None:
    # many keys over few buckets, each key's rows from several groups of two partitions: a
    # row is superseded by the later in-map row of its key in its own partition, wherever
    # the shuffle put the rows (a bucket holds many keys and both partitions)
    rows = [(tp, g, 100 * g + k, k, k, g != 2, None)
            for tp in (0, 1) for g in range(3) for k in range(40 + tp)]
    # partition 1's key 40 has a later in-map record in group 3, which supersedes its
    # records of groups 1 and 2 too, and nothing of partition 0's key 40
    rows.append((1, 3, 340, 40, 40, True, None))
    rows.append((0, 0, 99, 40, 40, False, None))
    # each row also carries two offsets of its group superseded within it (made up: the
    # bucket passes them through to the group's writer, whichever bucket that is)
    got = _packed(spark, rows, 4, within=lambda offset: [10_000 + 2 * offset,
                                                         10_001 + 2 * offset])
    got = got.transform(transforms.superseded_records(4))
    # group 2 is not in the map, so a key's group-1 record is its latest in-map one and
    # supersedes its group-0 record only
    expected = sorted([(tp, 0, k) for tp in (0, 1) for k in range(40 + tp)]
                      + [(1, 1, 140), (1, 2, 240)])
    assert _superseded(got) == expected
    carried = sorted((r.tp_id, r.group_base, offset) for r in got.collect()
                     for offset in transforms.unpack_offsets(r.within).tolist())
    assert carried == sorted((tp, g, 10_000 + 2 * o + i) for tp, g, o, *_ in rows
                             for i in (0, 1))


def test_superseded_records_leave_error_rows_out(spark) -> None:
    rows = [*KEYED, (0, 0, -1, None, None, False, '{"code": "CORRUPT_SEGMENT"}')]
    got = _packed(spark, rows, 2).transform(transforms.superseded_records(2))
    assert _superseded(got) == [(0, 0, 0)]


@pytest.fixture()
def partition(small_log: Path) -> PartitionInput:
    part = load_partition(str(small_log / "orders-v2-0"))
    return PartitionInput(path=part.path, segments=part.segments,
                          config=TopicConfig(cleanup_policy=frozenset({"compact"})),
                          cleaner_checkpoint=None, log_start_checkpoint=None,
                          # no checkpoint entry: the whole log counts as committed, as the
                          # operator says with --assume-committed (Kafka's own default is 0)
                          replication_checkpoint=None, assume_committed=True,
                          aborted_txns=(), now_ms=DEFAULT_START_MS + 86_400_000)


def _tasks(inp: PartitionInput) -> list[tuple]:
    """``SEGMENT_TASK`` rows of a partition, written out by hand."""
    bases = [s.base_offset for s in inp.segments]
    return [(0, s.base_offset, s.log_path, bases[k + 1] if k + 1 < len(bases) else None)
            for k, s in enumerate(inp.segments)]


def _pure_headers(inp: PartitionInput) -> list:
    return [h for s in inp.segments
            for h in segment_headers(Path(s.log_path).read_bytes(), s.log_path, s.base_offset)]


@pytest.mark.parametrize("writer", WRITERS)
def test_scan_headers_equals_the_pure_scan(spark, partition: PartitionInput, writer: str) -> None:
    tasks = spark.createDataFrame(
        _tasks(partition), SEGMENT_TASK)
    got = tasks.transform(transforms.scan_headers(writer))
    expected = spark.createDataFrame(
        [(0, *(getattr(h, f) for f in transforms.HEADER_FIELDS), None)
         for h in _pure_headers(partition)], BATCH_HEADER)
    assert_df_equality(got, expected, ignore_row_order=True)


def _expected_decisions(tp_id: int, partition: PartitionInput, plan: CleaningPlan,
                        headers: list) -> list[tuple]:
    """The ``DECISION`` rows of the plan's batches, from the policy's own decisions."""
    group_of = {b: g[0] for g in plan.groups for b in g}
    return [(tp_id, group_of[h.segment_base], h.segment_base, h.position, h.base_offset,
             h.is_control, int(d.retention), d.aborted, d.discard_records, d.retain_deletes,
             d.marker_horizon,
             *((d.txn_entry.producer_id, d.txn_entry.first_offset, d.txn_entry.last_offset,
                d.txn_entry.last_stable_offset) if d.txn_entry else (None,) * 4))
            for h, d in partition.decide(plan, headers)]


@pytest.mark.parametrize("decide", [False, True])
def test_plan_and_decide_match_the_policy(spark, partition: PartitionInput,
                                          decide: bool) -> None:
    # several groups (the rounds whose batches the plan stage decides when asked to), and
    # the partition's aborted transactions (a round whose transaction checks fail has none)
    partition = dataclasses.replace(
        partition, aborted_txns=tuple(read_aborted_txns(load_partition(partition.path))),
        config=dataclasses.replace(partition.config, segment_bytes=40_000))
    headers_py = _pure_headers(partition)
    headers = spark.createDataFrame(
        [(0, *(getattr(h, f) for f in transforms.HEADER_FIELDS), None) for h in headers_py],
        BATCH_HEADER)
    inputs = {0: partition}
    planned = headers.transform(transforms.plan_rounds(inputs, decide=decide))
    (row,) = planned.where(F.col("plan").isNotNull()).select("plan.*").collect()
    plan = partition.plan(headers_py)
    assert row.error is None and transforms.plan_from_row(row.asDict()) == plan
    assert plan.will_clean and len(plan.groups) > 1

    decided = partition.decide(plan, headers_py)
    got = headers.transform(transforms.decide_batches(inputs, {0: plan}))
    expected = spark.createDataFrame(_expected_decisions(0, partition, plan, headers_py),
                                     DECISION)
    assert_df_equality(got, expected, ignore_row_order=True)
    # the plan stage's own decisions, when asked for, are the same rows
    made = planned.where(F.col("plan").isNull()).drop("plan")
    if decide:
        assert_df_equality(made, expected, ignore_row_order=True, ignore_nullable=True)
    else:
        assert made.count() == 0
    # the open transaction at the end bounds the round, and aborted data is decided as such
    assert plan.first_uncleanable_offset <= plan.last_stable_offset
    assert any(d.retention == BatchRetention.RETAIN_EMPTY for _, d in decided)
    assert any(h.control_type == ControlType.ABORT for h, _ in decided)


def test_scan_keys_emits_keyed_records_not_superseded_in_their_group(spark,
                                                                     partition: PartitionInput,
                                                              small_log: Path) -> None:
    headers_py = _pure_headers(partition)
    plan = partition.plan(headers_py)
    headers = spark.createDataFrame(
        [(0, *(getattr(h, f) for f in transforms.HEADER_FIELDS), None) for h in headers_py],
        BATCH_HEADER)
    decisions = headers.transform(transforms.decide_batches({0: partition}, {0: plan}))
    slots = group_slots(spark, [(0, g[0]) for g in plan.groups])
    buckets = partition_slots(spark, 3)
    got = decisions.transform(transforms.scan_keys({0: partition}, {0: plan}, slots,
                                                   buckets)).collect()

    group_of = {b: g[0] for g in plan.groups for b in g}
    rows = []
    for h, d in partition.decide(plan, headers_py):
        if h.is_control or d.discard_records:
            continue
        seg = next(s for s in partition.segments if s.base_offset == h.segment_base)
        batch = next(b for b in iter_batches(Path(seg.log_path).read_bytes())
                     if b.position == h.position)
        for r in batch.records():
            if r.key is not None:
                hi, lo = key_digest(r.key)
                in_map = not d.aborted and r.offset >= plan.first_dirty_offset
                rows.append((h.segment_base, (0, group_of[h.segment_base], r.offset, hi, lo,
                                              in_map, None)))
    # a row superseded by an in-map row of its key in its own group stays home
    latest_in_group: dict[tuple, int] = {}
    for _, row in rows:
        if row[5]:
            key = (row[1], row[3], row[4])
            latest_in_group[key] = max(latest_in_group.get(key, -1), row[2])
    expected = [row for _, row in rows
                if row[2] >= latest_in_group.get((row[1], row[3], row[4]), -1)]
    assert 0 < len(expected) < len(rows)
    unpacked = [(r.tp_id, r.group_base, *fields, None) for r in got for fields in zip(
        *(np.frombuffer(getattr(r, c), dtype=t).tolist() for c, t in (
            ("offsets", "<i8"), ("key_hi", "<i8"), ("key_lo", "<i8"), ("in_map", "?"))),
        strict=True)]
    assert all(r.error is None and r.offsets for r in got)  # a bucket without records: no row
    assert sorted(unpacked) == sorted(expected)
    # the ones that stay home go to their group's writer as offsets, spread over its rows
    kept = set(expected)
    assert sorted((r.group_base, o) for r in got
                  for o in transforms.unpack_offsets(r.within).tolist()
                  ) == sorted((row[1], row[2]) for _, row in rows if row not in kept)
    # every record of a key in one bucket, of those given; a group's bucket once at most
    bucket_of: dict[tuple[int, int], set[int]] = {}
    for r in got:
        for hi, lo in zip(np.frombuffer(r.key_hi, "<i8").tolist(),
                          np.frombuffer(r.key_lo, "<i8").tolist(), strict=True):
            bucket_of.setdefault((hi, lo), set()).add(r.bucket)
    assert all(len(b) == 1 and b <= set(buckets) for b in bucket_of.values())
    assert len({r.bucket for r in got}) == 3
    assert len({(r.group_base, r.bucket) for r in got}) == len(got)


def test_with_slots_adds_the_group_slot(spark) -> None:
    slots = spark.createDataFrame([(0, 0, 11), (0, 40, 12), (1, 0, 13)], GROUP_SLOT)
    rows = spark.createDataFrame([(0, 0, 5), (0, 40, 41), (1, 0, 2), (2, 0, 9)],
                                 "tp_id int, group_base long, offset long")
    got = rows.transform(transforms.with_slots(slots)).select("tp_id", "group_base", "offset",
                                                              "slot")
    expected = spark.createDataFrame([(0, 0, 5, 11), (0, 40, 41, 12), (1, 0, 2, 13)],
                                     "tp_id int, group_base long, offset long, slot long")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_partition_slots_land_each_in_its_own_shuffle_partition(spark) -> None:
    # Spark's own shuffle is the judge: the k-th value goes to partition k
    n = 64
    slots = partition_slots(spark, n)
    landed = (spark.createDataFrame([(k, v) for k, v in enumerate(slots)], "k int, id long")
              .repartition(n, "id").rdd
              .mapPartitionsWithIndex(lambda i, rows: [(r.k, i) for r in rows]).collect())
    assert sorted(landed) == [(k, k) for k in range(n)]


@pytest.mark.parametrize("count", [1, 4, 23])
def test_group_slots_give_every_group_a_task_of_its_own(spark, count: int) -> None:
    keys = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.coalescePartitions.enabled")
    previous = {key: spark.conf.get(key) for key in keys}
    groups = [(tp_id, base) for tp_id in range(count) for base in (0, 4000)][:count]
    try:
        spark.conf.set("spark.sql.shuffle.partitions", "3")
        slots = group_slots(spark, groups)
        rows = spark.createDataFrame([(tp_id, base, n) for tp_id, base in groups
                                      for n in range(4)], "tp_id int, group_base long, n int")

        def task(table: pa.Table) -> pa.Table:
            return pa.table({"tp_id": table.column("tp_id").unique(),
                             "group_base": table.column("group_base").unique(),
                             "task": pa.array([TaskContext.get().partitionId()], pa.int32())})

        got = (rows.transform(transforms.with_slots(slots)).groupBy("slot")
               .applyInArrow(task, "tp_id int, group_base long, task int").collect())
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)
    # one row per group (a group never split), every group in a task of its own
    assert sorted((r.tp_id, r.group_base) for r in got) == sorted(groups)
    assert len({r.task for r in got}) == count


@pytest.mark.parametrize("session_bytes", [None, 1 << 30, 4096])
def test_a_round_sets_the_round_arrow_limit_and_restores_the_session(
        spark, partition: PartitionInput, session_bytes: int | None) -> None:
    key = ARROW_BATCH_LIMIT
    before = spark.conf.get(key)
    try:
        if session_bytes is not None:
            spark.conf.set(key, str(session_bytes))
        own = spark.conf.get(key)
        with round_settings(spark, {0: partition}):
            during = int(spark.conf.get(key))
        after = spark.conf.get(key)
    finally:
        spark.conf.set(key, before)
    # the round's limit, or the session's own where it is lower (Spark's default is 64 MiB,
    # written "67108864b"); the session's after it
    assert during == min(64 << 20 if session_bytes is None else session_bytes,
                         ROUND_ARROW_BATCH_BYTES)
    assert after == own


def _copy_partition(inp: PartitionInput, dest: Path) -> PartitionInput:
    """The same partition input over a copy of the partition dir."""
    shutil.copytree(inp.path, dest)
    return dataclasses.replace(inp, path=str(dest), segments=load_partition(str(dest)).segments)


def _without_seconds(df: DataFrame) -> DataFrame:
    return df.drop("seconds")


def test_rewrite_groups_equals_the_writer_called_directly(spark, partition: PartitionInput,
                                                          tmp_path: Path) -> None:
    # several groups, so the offset map supersedes records across groups
    inp = dataclasses.replace(partition, config=dataclasses.replace(partition.config,
                                                                    segment_bytes=40_000))
    twin = _copy_partition(inp, tmp_path / "twin" / "orders-v2-0")
    headers_py = _pure_headers(inp)
    plan = inp.plan(headers_py)
    assert len(plan.groups) > 1
    decided = inp.decide(plan, headers_py)

    # the offset map's verdicts, derived here from the raw keys: a record not superseded
    # within its own group whose key has a later offset-map record (in a later group)
    group_of = {b: g[0] for g in plan.groups for b in g}
    records = []  # (group, offset, key, enters the map)
    for h, d in decided:
        if h.is_control or d.discard_records:
            continue
        seg = next(s for s in inp.segments if s.base_offset == h.segment_base)
        batch = next(b for b in iter_batches(Path(seg.log_path).read_bytes())
                     if b.position == h.position)
        records += [(group_of[h.segment_base], r.offset, r.key,
                     not d.aborted and r.offset >= plan.first_dirty_offset)
                    for r in batch.records() if r.key is not None]
    superseded_rows, within_rows = [], []  # and the ones superseded within their group
    for group, offset, key, _ in records:
        later = [(g, o) for g, o, k, fed in records if k == key and fed and o > offset]
        if later and all(g != group for g, _ in later):
            superseded_rows.append((0, group, offset))
        elif any(g == group for g, _ in later):
            within_rows.append((0, group, offset))
    assert superseded_rows and within_rows

    inputs, plans = {0: inp}, {0: plan}
    slots = group_slots(spark, [(0, g[0]) for g in plan.groups])
    headers = spark.createDataFrame(
        [(0, *(getattr(h, f) for f in transforms.HEADER_FIELDS), None) for h in headers_py],
        BATCH_HEADER)
    decisions = headers.transform(transforms.decide_batches(inputs, plans))
    by_group: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for rows, side in ((superseded_rows, 0), (within_rows, 1)):
        for tp, group, offset in rows:
            by_group.setdefault((tp, group), ([], []))[side].append(offset)
    superseded = spark.createDataFrame(  # as buckets send them: a group's in pieces
        [(tp, group, transforms.pack_offsets(np.asarray(a, np.int64)),
          transforms.pack_offsets(np.asarray(sorted(b), np.int64)))
         for (tp, group), (offsets, within) in by_group.items()
         for a, b in ((offsets[::2], within[1::2]), (offsets[1::2], within[::2]))], SUPERSEDED)
    got = transforms.rewrite_groups(inputs, plans, slots)(decisions, superseded)

    # the writer called directly finds what goes within a group by key, in its key table
    by_batch = {(h.segment_base, h.position): d for h, d in decided}
    expected = []
    for group in plan.groups:
        offsets = {o for _, g, o in superseded_rows if g == group[0]}
        message = write_group(twin, group, by_batch, offsets,
                              first_dirty=plan.first_dirty_offset, engine=engine("native"))
        assert message.error is None
        expected.append(transforms.message_to_row(0, message))
    assert_df_equality(_without_seconds(got),
                       _without_seconds(spark.createDataFrame(expected, COMMIT_MESSAGE)),
                       ignore_row_order=True)
    written = sorted(p.name for p in Path(inp.path).glob("*.cleaned"))
    assert written and written == sorted(p.name for p in Path(twin.path).glob("*.cleaned"))
    for name in written:
        assert (Path(inp.path) / name).read_bytes() == (Path(twin.path) / name).read_bytes()


def _erasure_subject(partition: PartitionInput) -> bytes:
    """A key that occurs in the partition."""
    seg = partition.segments[0]
    return next(r.key for b in iter_batches(Path(seg.log_path).read_bytes())
                if not b.is_control for r in b.records() if r.key is not None)


def _key_rows(partition: PartitionInput, wanted: Callable[[bytes], bool]) -> list[tuple]:
    """What the erasure scan should emit: the records read by the codec's plain record
    iterator and hashed here, a segment row per segment and a ``key`` row per keyed record
    whose key ``wanted`` says, and a ``batch`` row per batch an apply's partition-wide
    checks read (one with a producer id or the transactional flag, and the segment's last)
    with its header as the pure header scan reads it."""
    expected = []
    header_columns = [f.name for f in ERASURE_SCAN.fields[12:]]
    none = (None,) * len(header_columns)
    for s in partition.segments:
        batches = list(iter_batches(Path(s.log_path).read_bytes()))
        records = [(b, r) for b in batches if not b.is_control for r in b.records()]
        expected.append((0, s.base_offset, "segment", None, None, None, None, None, None,
                         len(batches), len(records), None, *none))
        expected += [(0, s.base_offset, "key", b.position, r.offset, None,
                      hashlib.sha256(r.key).digest(), hashlib.sha256(r.key).digest(),
                      r.value is None and not r.headers, None, None, None, *none)
                     for b, r in records if r.key is not None and wanted(r.key)]
        headers = segment_headers(Path(s.log_path).read_bytes(), s.log_path, s.base_offset)
        expected += [(0, s.base_offset, "batch", h.position, None, None, None, None, None,
                      None, None, None, *(getattr(h, c) for c in header_columns))
                     for h in headers
                     if h.producer_id >= 0 or h.is_transactional or h is headers[-1]]
    return expected


def test_scan_erasure_emits_the_digests_the_requests_filter_may_hold(
        spark, partition: PartitionInput) -> None:
    """Every keyed record's digest when the filter holds every key; the subject's records
    alone when it holds the subject alone (at this size no false positive is likely); the
    batches' headers when asked (an apply's rewrite), else none."""
    tasks = spark.createDataFrame(_tasks(partition), SEGMENT_TASK)
    keys = {r.key for s in partition.segments
            for b in iter_batches(Path(s.log_path).read_bytes()) if not b.is_control
            for r in b.records() if r.key is not None}
    subject = _erasure_subject(partition)
    for wanted, with_headers in ((keys, True), ({subject}, True), ({subject}, False)):
        sketch = spark.sparkContext.broadcast(DigestFilter.empty(len(wanted)).adding(
            [hashlib.sha256(k).digest() for k in wanted]))
        got = tasks.transform(transforms.scan_erasure(
            frozenset(), sketch, with_headers=with_headers)).collect()
        expected = [r for r in _key_rows(partition, lambda key: key in wanted)  # noqa: B023
                    if with_headers or r[2] != "batch"]
        assert sum(row[2] == "key" for row in expected) >= (10 if wanted is keys else 1)
        assert_df_equality(spark.createDataFrame(got, ERASURE_SCAN),
                           spark.createDataFrame(expected, ERASURE_SCAN), ignore_row_order=True)


def _subject_records(seg: SegmentInfo, subject: bytes) -> list[tuple[int, int]]:
    """(batch position, offset) of the segment's records keyed ``subject`` (plain codec)."""
    return [(b.position, r.offset) for b in iter_batches(Path(seg.log_path).read_bytes())
            if not b.is_control for r in b.records() if r.key == subject]


def test_scan_key_offsets_equals_the_pure_scan(spark, partition: PartitionInput) -> None:
    wanted = frozenset({hashlib.sha256(_erasure_subject(partition)).digest()})
    tasks = spark.createDataFrame(
        _tasks(partition), SEGMENT_TASK)
    got = tasks.transform(transforms.scan_key_offsets({0: wanted}))
    expected = [(0, s.base_offset, position, offset, digest, None)
                for s in partition.segments
                for position, offset, digest in key_offsets(Path(s.log_path).read_bytes(),
                                                            s.log_path, wanted)]
    assert expected
    assert_df_equality(got, spark.createDataFrame(expected, KEY_OFFSET), ignore_row_order=True)


def test_rewrite_erased_equals_the_writer_called_directly(spark, partition: PartitionInput,
                                                          tmp_path: Path) -> None:
    subject = _erasure_subject(partition)
    twin = _copy_partition(partition, tmp_path / "twin" / "orders-v2-0")
    tasks, expected, segments = [], [], {}
    for seg, twin_seg in zip(partition.segments, twin.segments, strict=True):
        found = _subject_records(seg, subject)
        if not found:
            continue
        erased: dict[int, list[int]] = {}
        tombstones: dict[int, list[int]] = {}
        *older, last = found  # the segment's last match stays as a bare tombstone
        for position, offset in older:
            erased.setdefault(position, []).append(offset)
        tombstones[last[0]] = [last[1]]
        tasks.append((0, seg.base_offset, json.dumps(erased), json.dumps([]),
                      json.dumps(tombstones)))
        segments[(0, seg.base_offset)] = (partition.path, seg, partition.config)
        message = write_erased_segment(twin.path, twin_seg, erased, set(), twin.config,
                                       tombstones=tombstones)
        assert message.error is None
        assert message.dropped.get("erased", 0) == len(found) - 1
        expected.append(transforms.message_to_row(0, message))
    assert tasks
    got = (spark.createDataFrame(tasks, ERASURE_TASK)
           .transform(transforms.rewrite_erased(segments)))
    assert_df_equality(_without_seconds(got),
                       _without_seconds(spark.createDataFrame(expected, COMMIT_MESSAGE)),
                       ignore_row_order=True)
    for path in Path(twin.path).glob("*.cleaned"):
        assert (Path(partition.path) / path.name).read_bytes() == path.read_bytes()


def test_clean_in_one_pass_equals_plan_and_writer_called_directly(
        spark, partition: PartitionInput, tmp_path: Path) -> None:
    # 0: one group, written; 1: several groups with more keys than a task's key table may
    # hold, planned and decided (for the distributed offset map), not written; 2: a corrupt
    # segment, refused
    partition = dataclasses.replace(partition, aborted_txns=tuple(
        read_aborted_txns(load_partition(partition.path))))
    twin = _copy_partition(partition, tmp_path / "twin" / "orders-v2-0")
    several = _copy_partition(
        dataclasses.replace(partition, config=dataclasses.replace(partition.config,
                                                                  segment_bytes=40_000)),
        tmp_path / "several" / "orders-v2-0")
    corrupt = _copy_partition(partition, tmp_path / "corrupt" / "orders-v2-0")
    victim = Path(corrupt.segments[1].log_path)
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(CompactorError) as refused:
        segment_headers(bytes(data), str(victim), corrupt.segments[1].base_offset)

    headers_py = _pure_headers(partition)
    plan = partition.plan(headers_py)
    assert plan.will_clean and len(plan.groups) == 1
    decided = partition.decide(plan, headers_py)
    message = write_group(twin, plan.groups[0],
                          {(h.segment_base, h.position): d for h, d in decided}, set(),
                          first_dirty=plan.first_dirty_offset, engine=engine("native"))
    assert message.error is None
    several_headers = _pure_headers(several)
    several_plan = several.plan(several_headers)
    assert several_plan.will_clean and len(several_plan.groups) > 1

    inputs = {0: partition, 1: several, 2: corrupt}
    got = (spark.range(2, numPartitions=2)
           .transform(transforms.clean_in_one_pass(
               inputs, [[1, 2], [0]], write=True,
               task_keys=1))
           .withColumn("messages", _messages_without_seconds("messages")))
    expected = spark.createDataFrame([
        (0, transforms.plan_to_row(0, plan), [transforms.message_to_row(0, message)], None,
         None, None),
        (1, transforms.plan_to_row(1, several_plan), [], None, OVER_TASK_KEYS,
         _expected_decisions(1, several, several_plan, several_headers)),
        (2, None, None, json.dumps(refused.value.to_dict()), None, None),
    ], ONE_PASS).withColumn("messages", _messages_without_seconds("messages"))
    assert_df_equality(got, expected, ignore_row_order=True)
    written = sorted(p.name for p in Path(partition.path).glob("*.cleaned"))
    assert written and written == sorted(p.name for p in Path(twin.path).glob("*.cleaned"))
    for name in written:
        assert (Path(partition.path) / name).read_bytes() == (Path(twin.path) / name).read_bytes()
    assert not list(Path(several.path).glob("*.cleaned"))
    assert not list(Path(corrupt.path).glob("*.cleaned"))


def _round_keys(inp: PartitionInput, plan: CleaningPlan) -> tuple[int, int]:
    """``(records, distinct keys)`` of the data batches of the plan's groups, read with the
    pure decoder: the keys bound what a key table of the round holds."""
    records, keys = 0, set()
    for seg in inp.segments:
        if not any(seg.base_offset in group for group in plan.groups):
            continue
        for batch in iter_batches(Path(seg.log_path).read_bytes(), path=seg.log_path):
            if not batch.is_control:
                for record in batch.records():
                    records += 1
                    if record.key is not None:
                        keys.add(record.key)
    return records, len(keys)


def test_clean_in_one_pass_writes_several_groups_within_task_keys(
        spark, partition: PartitionInput, tmp_path: Path) -> None:
    """A round of several groups whose keys fit ``task_keys`` (and whose records do not: the
    budget counts keys): written in the task, one key table for all its groups, as
    ``write_groups`` called directly writes it."""
    partition = dataclasses.replace(partition, aborted_txns=tuple(
        read_aborted_txns(load_partition(partition.path))), config=dataclasses.replace(
            partition.config, segment_bytes=40_000))  # legacy entries: native falls back
    several = _copy_partition(partition, tmp_path / "several" / "orders-v2-0")
    twin = _copy_partition(partition, tmp_path / "twin" / "orders-v2-0")
    headers = _pure_headers(several)
    plan = several.plan(headers)
    assert plan.will_clean and len(plan.groups) > 1
    decided = twin.decide(plan, headers)
    direct = write_groups(twin, plan.groups, {(h.segment_base, h.position): d for h, d in decided},
                          first_dirty=plan.first_dirty_offset, engine=engine("native"))
    assert direct and all(m.error is None for m in direct)
    records, keys = _round_keys(several, plan)
    assert keys < records
    (row,) = (spark.range(1).transform(transforms.clean_in_one_pass(
        {0: several}, [[0]], write=True, task_keys=keys))
        .withColumn("messages", _messages_without_seconds("messages")).collect())
    assert row.error is None and row.decisions is None
    assert [transforms.message_from_row(m) for m in row.messages] == [
        dataclasses.replace(m, seconds=0.0, tp_id=0) for m in direct]
    written = sorted(p.name for p in Path(several.path).glob("*.cleaned"))
    assert len(written) >= 3 * len(plan.groups)
    assert written == sorted(p.name for p in Path(twin.path).glob("*.cleaned"))
    for name in written:
        assert (Path(several.path) / name).read_bytes() == (Path(twin.path) / name).read_bytes()


def _messages_without_seconds(column: str):
    return F.transform(F.col(column), lambda m: m.dropFields("seconds"))


def test_clean_in_one_pass_without_write_only_plans(spark, partition: PartitionInput) -> None:
    partition = dataclasses.replace(partition, aborted_txns=tuple(
        read_aborted_txns(load_partition(partition.path))))
    before = {p.name: p.read_bytes() for p in Path(partition.path).iterdir()}
    (row,) = (spark.range(1).transform(
        transforms.clean_in_one_pass({0: partition}, [[0]], write=False)).collect())
    assert row.messages == [] and row.error is None and row.decisions is None
    assert transforms.plan_from_row(row.plan.asDict()) == partition.plan(_pure_headers(partition))
    assert {p.name: p.read_bytes() for p in Path(partition.path).iterdir()} == before


def test_collector_paused_for_a_unit_of_work_and_restored_after() -> None:
    """The executors' pause of the cyclic collector (``transforms._collector_paused``): no
    collection runs inside it however much is allocated, one runs again after it, and it
    leaves the collector as it found it: enabled after an error too, still disabled inside
    an outer pause."""
    import gc

    from compactor.spark.transforms import _collector_paused

    collections: list[str] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(phase)

    def allocate() -> None:
        for _ in range(50_000):
            pair: list[object] = []
            pair.append(pair)  # a cycle: only the collector frees it

    gc.callbacks.append(seen)
    try:
        assert gc.isenabled()
        with _collector_paused():
            assert not gc.isenabled()
            allocate()
            during = len(collections)  # read inside: the first allocation after may collect
        assert during == 0 and gc.isenabled()
        allocate()
        assert collections, "the collector ran again after the pause"

        with pytest.raises(ValueError), _collector_paused():
            raise ValueError
        assert gc.isenabled()

        with _collector_paused():
            with _collector_paused():
                pass
            assert not gc.isenabled()
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(seen)
        gc.enable()
