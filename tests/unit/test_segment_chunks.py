"""``chunk_bounds``: the backward walk's chunks cover a segment exactly, cut between entries,
and leave whatever does not frame to the decoder (which raises the located error)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.codec.segment import chunk_bounds, iter_batches
from compactor.errors import TruncatedSegmentError


def _segment(sizes: list[int]) -> bytes:
    out, offset = [], 0
    for n in sizes:
        records = [NewRecord(offset_delta=i, timestamp=1, key=b"k", value=b"v" * 30)
                   for i in range(n)]
        out.append(encode_batch(NewRecordBatch(base_offset=offset, records=records)))
        offset += n
    return b"".join(out)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=30),
       max_bytes=st.integers(min_value=1, max_value=3000))
def test_chunks_cover_the_segment_between_entries(sizes, max_bytes) -> None:
    data = _segment(sizes)
    bounds = chunk_bounds(data, max_bytes)
    starts = [b.position for b in iter_batches(data)]
    assert bounds[0][0] == 0 and bounds[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # contiguous
    assert all(start in starts for start, _ in bounds)  # cut between entries
    for start, end in bounds:
        inside = list(iter_batches(data, start_position=start, end_position=end))
        assert end - start <= max_bytes or len(inside) == 1
    decoded = [b.position for s, e in bounds
               for b in iter_batches(data, start_position=s, end_position=e)]
    assert decoded == starts


def test_a_truncated_tail_stays_in_the_last_chunk_and_is_reported() -> None:
    data = _segment([5, 5, 5])
    cut = data[:-10]
    bounds = chunk_bounds(cut, 200)
    assert bounds[-1][1] == len(cut)
    with pytest.raises(TruncatedSegmentError) as err:
        list(iter_batches(cut, start_position=bounds[-1][0], end_position=bounds[-1][1]))
    assert err.value.position == [b.position for b in iter_batches(data)][-1]
