"""The distributed offset map's map-side combine (``compactor/native/offsetmap.py``) against
the rule itself: a row goes when a later row of exactly its key digest enters the map, and
the rows that travel are grouped by bucket in file order. Checked by brute force on rows
built to collide (digests sharing a high half or a low half, so the table's probe and the
bucket of two different keys meet), and against the reference's sort
(:func:`compactor.cleaner.scan.combine_group` on the pure engine)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.cleaner.rewrite import PURE
from compactor.cleaner.scan import KeyedRows, combine_group
from compactor.native import engine
from compactor.native.offsetmap import combine_keys

#: digests as (high, low) halves: shared halves and the signed extremes on purpose
_HALVES = st.sampled_from([0, 1, -1, 7, 2**63 - 1, -(2**63), 123456789, -987654321])


@st.composite
def _rows(draw: st.DrawFn) -> KeyedRows:
    pool = draw(st.lists(st.tuples(_HALVES, _HALVES), min_size=1, max_size=10, unique=True))
    n = draw(st.integers(0, 60))
    keys = [draw(st.sampled_from(pool)) for _ in range(n)]
    gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    offset = np.cumsum(np.asarray(gaps, np.int64)) + draw(st.integers(0, 10**12))
    return KeyedRows(group_base=np.zeros(n, np.int64), offset=offset.astype(np.int64),
                     key_hi=np.asarray([k[0] for k in keys], np.int64).reshape(n),
                     key_lo=np.asarray([k[1] for k in keys], np.int64).reshape(n),
                     in_map=np.asarray(draw(st.lists(st.booleans(), min_size=n, max_size=n)),
                                       bool).reshape(n))


def _brute_force(rows: KeyedRows, buckets: int) -> tuple[list[bool], list[int], list[int]]:
    n = len(rows)
    keys = list(zip(rows.key_hi.tolist(), rows.key_lo.tolist(), strict=True))
    superseded = [any(keys[j] == keys[i] and rows.in_map[j] and rows.offset[j] > rows.offset[i]
                      for j in range(n)) for i in range(n)]
    bucket = [(lo % 2**64) % buckets for _, lo in keys]
    order = [i for b in range(buckets) for i in range(n) if not superseded[i] and bucket[i] == b]
    counts = [sum(1 for i in range(n) if not superseded[i] and bucket[i] == b)
              for b in range(buckets)]
    return superseded, order, counts


@settings(max_examples=300, deadline=None)
@given(rows=_rows(), buckets=st.sampled_from([1, 2, 3, 17, 200, 70_000]))
def test_the_native_combine_is_the_rule(rows: KeyedRows, buckets: int) -> None:
    found = combine_keys(rows.key_hi, rows.key_lo, rows.offset, rows.in_map, buckets)
    assert found is not None
    superseded, order, counts = found
    expected = _brute_force(rows, buckets)
    assert (superseded.tolist(), order.tolist(), counts.tolist()) == expected
    # the reference's sort gives the same, so either engine hands the shuffle the same rows
    reference = combine_group(rows, buckets, PURE)
    assert [a.tolist() for a in reference] == list(expected)


def test_offsets_that_do_not_ascend_go_to_the_reference() -> None:
    # the table's one pass vouches only for rows in offset order; the reference sorts
    rows = KeyedRows(group_base=np.zeros(3, np.int64), offset=np.array([5, 9, 7], np.int64),
                     key_hi=np.ones(3, np.int64), key_lo=np.ones(3, np.int64),
                     in_map=np.ones(3, bool))
    assert combine_keys(rows.key_hi, rows.key_lo, rows.offset, rows.in_map, 4) is None
    superseded, order, counts = combine_group(rows, 4, engine("native"))
    assert superseded.tolist() == [True, False, True]
    assert order.tolist() == [1] and counts.tolist() == [0, 1, 0, 0]
