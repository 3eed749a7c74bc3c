"""The generated row converters: every dataclass the Spark stages ship survives the trip to a
row of its schema and back (Hypothesis), and a row has the column values Spark expects."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.cleaner.policy import CleaningPlan, SkipReason
from compactor.cleaner.rewrite import PURE
from compactor.cleaner.scan import KeyedRows, combine_group
from compactor.model import CommitMessage
from compactor.schemas.spark import COMMIT_MESSAGE, PLAN
from compactor.spark import rows, transforms

offsets = st.integers(min_value=0, max_value=2**62)
plans = st.builds(
    CleaningPlan, log_start_offset=offsets, log_end_offset=offsets, high_watermark=offsets,
    last_stable_offset=offsets, first_dirty_offset=offsets, first_uncleanable_offset=offsets,
    checkpoint_reset=st.booleans(), clean_bytes=offsets, cleanable_bytes=offsets,
    compaction_delay_ms=st.integers(min_value=0, max_value=2**40),
    groups=st.lists(st.lists(offsets, min_size=1, max_size=4).map(tuple), max_size=4).map(tuple),
    reason=st.sampled_from(SkipReason))
errors = st.none() | st.fixed_dictionaries({"code": st.text(max_size=8),
                                            "position": st.none() | offsets})
messages = st.builds(
    CommitMessage, group_base=offsets, source_bases=st.lists(offsets, max_size=4).map(tuple),
    tp_id=st.integers(min_value=0, max_value=1000),
    cleaned_suffixes=st.lists(st.sampled_from([".log", ".index", ".timeindex", ".txnindex"]),
                              unique=True).map(tuple),
    log_checksum=st.integers(min_value=0, max_value=2**32 - 1), bytes_in=offsets,
    records_in=offsets, dropped=st.dictionaries(st.sampled_from(["superseded", "aborted"]),
                                                offsets),
    seconds=st.floats(min_value=0, max_value=1e6), error=errors)


@given(plans)
def test_a_plan_survives_its_row(plan: CleaningPlan) -> None:
    row = rows.to_row(plan, PLAN, tp_id=3, error=None)
    assert list(row) == PLAN.fieldNames()
    assert rows.from_row(CleaningPlan, row) == plan


@given(messages)
def test_a_commit_message_survives_its_row(message: CommitMessage) -> None:
    row = rows.to_row(message, COMMIT_MESSAGE, tp_id=message.tp_id)
    assert list(row) == COMMIT_MESSAGE.fieldNames()
    assert rows.from_row(CommitMessage, row) == message


def test_column_values_are_what_spark_expects() -> None:
    plan = CleaningPlan(log_start_offset=0, log_end_offset=10, high_watermark=10,
                        last_stable_offset=10, first_dirty_offset=0, first_uncleanable_offset=8,
                        checkpoint_reset=False, clean_bytes=0, cleanable_bytes=100,
                        compaction_delay_ms=0, groups=((0, 4), (8,)),
                        reason=SkipReason.BELOW_DIRTY_RATIO)
    row = rows.to_row(plan, PLAN, tp_id=1, error=None)
    assert row["groups"] == [[0, 4], [8]] and row["reason"] == 4 and row["error"] is None
    assert row["dirty_ratio"] == plan.dirty_ratio  # a property becomes its column
    message = CommitMessage(group_base=0, source_bases=(0, 4), dropped={"superseded": 2},
                            error={"code": "X"})
    row = rows.to_row(message, COMMIT_MESSAGE, tp_id=7)
    assert row["tp_id"] == 7 and row["source_bases"] == [0, 4]
    assert json.loads(row["dropped"]) == {"superseded": 2} and json.loads(row["error"]) == {
        "code": "X"}


# -- packed offsets (``within`` of KEY_BUCKET, both offset columns of SUPERSEDED) -------------

dense_or_sparse = st.tuples(st.integers(0, 2**40), st.sets(st.integers(0, 3_000), max_size=400)
                            | st.sets(st.integers(0, 2**31), max_size=40))


@given(dense_or_sparse)
def test_packed_offsets_come_back_as_given(start_and_gaps) -> None:
    start, relative = start_and_gaps
    given_offsets = [start + r for r in sorted(relative)]
    packed = transforms.pack_offsets(np.asarray(given_offsets, np.int64))
    assert transforms.unpack_offsets(packed).tolist() == given_offsets
    # never larger than the offsets themselves, and a bit each when that is at most a third
    assert len(packed) <= 1 + 8 * len(given_offsets)
    if given_offsets:
        bitmap = 16 + (given_offsets[-1] - given_offsets[0] + 1 + 7) // 8
        assert len(packed) == 1 + (bitmap if 3 * bitmap <= 8 * len(given_offsets)
                                   else 8 * len(given_offsets))


@given(dense_or_sparse, st.randoms(use_true_random=False))
def test_packed_offsets_in_any_order_come_back_as_the_same_set(start_and_gaps, rnd) -> None:
    # pack_offsets takes offsets in any order (the list form keeps it): a bitmap must be
    # cut from the least offset, not the first one given
    start, relative = start_and_gaps
    given_offsets = [start + r for r in relative]
    rnd.shuffle(given_offsets)
    packed = transforms.pack_offsets(np.asarray(given_offsets, np.int64))
    assert sorted(transforms.unpack_offsets(packed).tolist()) == sorted(given_offsets)


def test_a_value_not_packed_by_pack_offsets_is_refused() -> None:
    for value in (b"\x00abc", b"\x01" + b"\x00" * 15, b"\x02" + b"\x00" * 8,
                  b"\x01" + np.array([5, 9], "<i8").tobytes() + b"\xff\xff\xff"):
        with pytest.raises(ValueError):
            transforms.unpack_offsets(value)


def _grouped(rows: KeyedRows, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows' indices by bucket and each bucket's count, by the reference's combine."""
    _, order, counts = combine_group(rows, buckets, PURE)
    return order, counts


def test_a_group_without_rows_to_shuffle_still_hands_on_what_it_superseded() -> None:
    # no keyed record of the group left to shuffle (cannot happen: each record superseded
    # within it has a later one of its key that travels), yet its writer must get them
    empty = np.zeros(0, np.int64)
    rows = KeyedRows(group_base=empty, offset=empty, key_hi=empty, key_lo=empty,
                     in_map=np.zeros(0, bool))
    within = np.array([7, 8, 11], np.int64)
    table = transforms.key_buckets(3, 5, rows, *_grouped(rows, 3), np.array([40, 41, 42], np.int64),
                                   within=within)
    assert table.num_rows == 1
    (row,) = table.to_pylist()
    assert (row["tp_id"], row["group_base"], row["offsets"]) == (3, 5, b"")
    assert transforms.unpack_offsets(row["within"]).tolist() == [7, 8, 11]
    # and a group with rows spreads them over its buckets' rows, each offset once
    rows = KeyedRows(group_base=np.full(4, 5), offset=np.array([12, 13, 14, 15]),
                     key_hi=np.arange(4), key_lo=np.arange(4), in_map=np.ones(4, bool))
    table = transforms.key_buckets(3, 5, rows, *_grouped(rows, 3), np.array([40, 41, 42], np.int64),
                                   within=within)
    assert table.num_rows == 3
    assert sorted(o for v in table.column("within").to_pylist()
                  for o in transforms.unpack_offsets(v).tolist()) == [7, 8, 11]


@given(st.lists(st.tuples(*(st.integers(0, 2**40) for _ in range(14))), max_size=5))
def test_a_batch_header_survives_its_arrow_row(values: list[tuple[int, ...]]) -> None:
    """``headers_from_arrow`` makes each header from its row's values in ``BATCH_HEADER``'s
    order: that must be ``BatchHeader``'s own, field by field."""
    import pyarrow as pa

    from compactor.cleaner.policy import BatchHeader

    assert tuple(transforms.HEADER_FIELDS) == BatchHeader._fields
    headers = sorted({BatchHeader(**dict(zip(BatchHeader._fields, v))) for v in values},
                     key=lambda h: (h.segment_base, h.position))
    headers = list({(h.segment_base, h.position): h for h in headers}.values())
    table = pa.table({name: [getattr(h, name) for h in headers]
                      for name in transforms.HEADER_FIELDS})
    assert transforms.headers_from_arrow(table) == headers
