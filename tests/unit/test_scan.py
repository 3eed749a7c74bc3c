"""The executor-side scan: vectorised key digests, the offset map's map-side combine, and the
per-batch drop rule the writer applies, each against a direct re-derivation."""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.cleaner.policy import BatchDecision, BatchRetention
from compactor.cleaner.rebatch import BatchDrops, iter_drops
from compactor.cleaner.rewrite import WRITERS
from compactor.cleaner.scan import (
    _PARTITION_MIX,
    BatchFlags,
    KeyedRows,
    concat_rows,
    key_digest,
    key_digests,
    keyed_records,
    locally_superseded,
    packed_order,
    superseded_mask,
)
from compactor.codec.records import NewRecord, NewRecordBatch, RecordBatch, encode_batch
from compactor.codec.segment import iter_batches
from compactor.errors import CompactorError
from compactor.native import engine


def segment_drops(batches: Sequence[RecordBatch], decisions: Sequence[BatchDecision],
                  superseded: Collection[int], first_dirty: int,
                  later: set[bytes] | None = None) -> list[BatchDrops]:
    """The writer's verdicts (:func:`iter_drops`) in segment order."""
    pairs = list(zip(batches, decisions, strict=True))
    drops = list(iter_drops(reversed(pairs), superseded, first_dirty, later))
    drops.reverse()
    return drops


@given(st.lists(st.binary(max_size=64), max_size=50))
def test_key_digests_equal_the_scalar_digest(keys: list[bytes]) -> None:
    hi, lo = key_digests(keys)
    assert list(zip(hi.tolist(), lo.tolist(), strict=True)) == [key_digest(k) for k in keys]


rows_strategy = st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=60)


#: how the test keys' digests' high halves differ: "shared", keys share one (the full sort);
#: "low", they differ in the low bits only, which the packed sort gives to the rows' indexes
#: (the full sort too); "high", they differ above those bits (the packed sort alone)
SPREADS = ("shared", "low", "high")


def _high(key: int, spread: str) -> int:
    return {"shared": key % 2, "low": key, "high": key << 40}[spread]


@given(rows_strategy, st.sampled_from(SPREADS), st.randoms(use_true_random=False))
def test_locally_superseded_is_the_brute_force_rule(rows: list[tuple[int, bool]], spread: str,
                                                    rng: random.Random) -> None:
    # the rows in offset order or not
    n = len(rows)
    offsets = list(range(n))
    if rng.random() < 0.5:
        rng.shuffle(offsets)
    keyed = KeyedRows(
        group_base=np.zeros(n, dtype=np.int64), offset=np.asarray(offsets, dtype=np.int64),
        key_hi=np.asarray([_high(k, spread) for k, _ in rows], dtype=np.int64),
        key_lo=np.asarray([k for k, _ in rows], dtype=np.int64),
        in_map=np.asarray([m for _, m in rows], dtype=bool),
    )
    expected = [any(k2 == k and m2 and offsets[j] > offsets[i]
                    for j, (k2, m2) in enumerate(rows))
                for i, (k, _) in enumerate(rows)]
    assert locally_superseded(keyed).tolist() == expected


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.booleans()), max_size=60),
       st.sampled_from(SPREADS), st.booleans(), st.randoms(use_true_random=False))
def test_superseded_mask_keeps_partitions_apart(rows: list[tuple[int, int, bool]], spread: str,
                                                collide: bool, rng: random.Random) -> None:
    # a bucket of the distributed offset map: rows of several partitions, where the same key
    # in another partition supersedes nothing (each partition has a map of its own). With
    # ``collide``, a key's high half in partition p is mixed with p the way the sort mixes it
    # in, so the same key of different partitions shares one sort value (the sort alone
    # cannot tell them apart)
    n = len(rows)
    offsets = [rng.randrange(8) for _ in range(n)]  # partitions' offsets overlap
    for i in range(n):  # one offset per (partition, offset), as in a log
        while any(rows[j][0] == rows[i][0] and offsets[j] == offsets[i] for j in range(i)):
            offsets[i] += 8
    mask = superseded_mask(np.asarray([p for p, _, _ in rows], dtype=np.int32),
                           np.asarray([_high(k, spread) ^ (_mixed(p) if collide else 0)
                                       for p, k, _ in rows], dtype=np.int64),
                           np.asarray([k for _, k, _ in rows], dtype=np.int64),
                           np.asarray(offsets, dtype=np.int64),
                           np.asarray([m for _, _, m in rows], dtype=bool))
    expected = [any(p2 == p and k2 == k and m2 and offsets[j] > offsets[i]
                    for j, (p2, k2, m2) in enumerate(rows))
                for i, (p, k, _) in enumerate(rows)]
    assert mask.tolist() == expected


@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(-3, 3), max_size=40),
       st.sampled_from([0, 32]))
def test_packed_order_groups_equal_values(values: list[int], index_bits: int) -> None:
    # index_bits 0: the argsort every row count above 2^32 takes
    order, tied = packed_order(np.asarray(values, dtype=np.int64), index_bits)
    assert sorted(order.tolist()) == list(range(len(values)))
    ordered = [values[i] for i in order.tolist()]
    pairs = list(zip(ordered, ordered[1:]))
    flags = tied.tolist()
    assert len(flags) == len(pairs)
    assert all(t for t, (a, b) in zip(flags, pairs) if a == b)  # equal neighbours are tied
    if all(a == b for t, (a, b) in zip(flags, pairs) if t):  # else the caller sorts fully
        runs = [v for i, v in enumerate(ordered) if i == 0 or ordered[i - 1] != v]
        assert len(runs) == len(set(values))  # equal values are next to each other


def _mixed(partition: int) -> int:
    """What :func:`superseded_mask`'s sort xors into a high half of ``partition`` (int64)."""
    return (partition * _PARTITION_MIX + (1 << 63)) % (1 << 64) - (1 << 63)  # wraps as int64


def _segment(*batches: NewRecordBatch) -> bytes:
    return b"".join(encode_batch(b) for b in batches)


@pytest.mark.parametrize("writer", WRITERS)
def test_keyed_records_skip_null_keys_and_unlisted_batches(writer: str) -> None:
    data = _segment(
        NewRecordBatch(base_offset=0, records=[
            NewRecord(offset_delta=0, timestamp=1, key=b"a", value=b"1"),
            NewRecord(offset_delta=1, timestamp=1, key=None, value=b"2"),
            NewRecord(offset_delta=2, timestamp=1, key=b"b", value=None),
        ]),
        NewRecordBatch(base_offset=3, records=[
            NewRecord(offset_delta=0, timestamp=1, key=b"c", value=b"3")]),
        NewRecordBatch(base_offset=4, records=[
            NewRecord(offset_delta=0, timestamp=1, key=b"a", value=b"4")]),
    )
    positions = [b.position for b in iter_batches(data)]
    flags = {positions[0]: BatchFlags(0, feeds_map=True),
             positions[2]: BatchFlags(4, feeds_map=False)}
    rows = keyed_records(data, "seg.log", flags, first_dirty=2, engine=engine(writer))
    assert rows.offset.tolist() == [0, 2, 4]
    assert rows.group_base.tolist() == [0, 0, 4]
    assert rows.in_map.tolist() == [False, True, False]  # below D, in D, aborted batch
    assert (rows.key_hi[0], rows.key_lo[0]) == key_digest(b"a")


def _decision(*, discard: bool = False, aborted: bool = False,
              retain_deletes: bool = True) -> BatchDecision:
    return BatchDecision(retention=BatchRetention.DELETE_EMPTY, aborted=aborted or discard,
                         discard_records=discard, retain_deletes=retain_deletes,
                         marker_horizon=False, txn_entry=None)


def _batch(base: int, *records: tuple[bytes | None, bytes | None]) -> object:
    (batch,) = iter_batches(encode_batch(NewRecordBatch(base_offset=base, records=[
        NewRecord(offset_delta=i, timestamp=1, key=k, value=v) for i, (k, v) in enumerate(records)
    ])))
    return batch


def test_segment_drops_by_reason() -> None:
    batch = _batch(10, (b"k", b"old"), (None, b"x"), (b"t", None), (b"j", b"new"))
    (drops,) = segment_drops([batch], [_decision(retain_deletes=False)], {10}, first_dirty=0)
    assert drops.offsets == (10, 11, 12) and drops.from_map == 1
    assert drops.reasons == {"superseded": 1, "null_key": 1, "tombstone_expired": 1}
    (drops,) = segment_drops([batch], [_decision()], {10}, first_dirty=0)
    assert drops.offsets == (10, 11) and drops.reasons == {"superseded": 1, "null_key": 1}
    (drops,) = segment_drops([batch], [_decision(discard=True)], set(), first_dirty=0)
    assert drops.offsets == (10, 11, 12, 13) and drops.reasons == {"aborted": 4}


def test_segment_drops_supersede_within_the_segment_like_the_scan() -> None:
    batches = [_batch(0, (b"a", b"1"), (b"b", b"1")),   # below first dirty
               _batch(2, (b"a", b"2"), (b"c", b"1")),   # aborted, kept: not in the map
               _batch(4, (b"c", b"2"), (b"b", None))]
    decisions = [_decision(), _decision(aborted=True), _decision()]
    drops = segment_drops(batches, decisions, set(), first_dirty=2)
    # a@0 is superseded by nothing in the map (a@2 is aborted); b@1 by b@5; c@3 by c@4
    assert [d.offsets for d in drops] == [(1,), (3,), ()]
    # the scan's combine reaches the same verdict by digest
    data = b"".join(b.raw for b in batches)
    positions = [b.position for b in iter_batches(data)]
    flags = {p: BatchFlags(0, feeds_map=not d.aborted) for p, d in zip(positions, decisions)}
    rows = keyed_records(data, "seg.log", flags, first_dirty=2, engine=engine("native"))
    assert rows.offset[locally_superseded(rows)].tolist() == [1, 3]


def test_a_record_superseded_by_the_map_still_supersedes_earlier_ones() -> None:
    # k@0 is superseded locally by k@1, which the map supersedes by a record elsewhere
    batch = _batch(0, (b"k", b"1"), (b"k", b"2"))
    (drops,) = segment_drops([batch], [_decision()], {1}, first_dirty=0)
    assert drops.offsets == (0, 1) and drops.from_map == 1


@given(st.lists(st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", None]), st.booleans()),
                         min_size=1, max_size=5), min_size=1, max_size=5),
       st.lists(st.booleans(), min_size=5, max_size=5), st.integers(0, 20), st.integers(0, 5),
       st.sampled_from(WRITERS))
def test_writer_and_scan_combine_agree(spec: list, aborted: list[bool], first_dirty: int,
                                       cut: int, path: str) -> None:
    """The writer's backward walk over a group of two segments (keys shared across them)
    supersedes exactly what the scan's combine over the group's rows does."""
    batches, base = [], 0
    for records in spec:
        batches.append(_batch(base, *((k, b"v" if live else None) for k, live in records)))
        base += len(records)
    decisions = [_decision(aborted=a) for a, _ in zip(aborted, batches)]
    cut = min(cut, len(batches))
    later: set[bytes] = set()
    drops = segment_drops(batches[cut:], decisions[cut:], set(), first_dirty, later)
    drops = segment_drops(batches[:cut], decisions[:cut], set(), first_dirty, later) + drops
    keyless = {r.offset for b in batches for r in b.records() if r.key is None}
    writer = sorted(o for d in drops for o in d.offsets if o not in keyless)
    parts = []
    for segment, segment_decisions in ((batches[:cut], decisions[:cut]),
                                       (batches[cut:], decisions[cut:])):
        data = b"".join(b.raw for b in segment)
        flags = {p: BatchFlags(0, feeds_map=not d.aborted) for p, d in zip(
            (b.position for b in iter_batches(data)), segment_decisions)}
        parts.append(keyed_records(data, "seg.log", flags, first_dirty, engine=engine(path)))
    rows = concat_rows(parts)
    assert writer == rows.offset[locally_superseded(rows)].tolist()


def test_a_listed_batch_past_the_end_is_a_located_error() -> None:
    """A batch the header scan listed but the segment no longer holds (it was truncated in
    between): the native key scan reports where, as a segment error, not a crash."""
    data = encode_batch(NewRecordBatch(base_offset=0, records=[
        NewRecord(offset_delta=0, timestamp=0, key=b"k", value=b"v")]))
    flags = {0: BatchFlags(0, feeds_map=True), len(data): BatchFlags(0, feeds_map=True)}
    with pytest.raises(CompactorError) as raised:
        keyed_records(data, "seg.log", flags, first_dirty=0, engine=engine("native"))
    assert raised.value.code == "TRUNCATED_SEGMENT"
    assert raised.value.path == "seg.log" and raised.value.position == len(data)
