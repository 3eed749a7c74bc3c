"""``chunk_ranges``: the backward walk's chunks cover a segment exactly, cut between the
planned entries, and leave whatever is not where the plan says to the decoder (which raises
the located error)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.codec.segment import chunk_ranges, iter_batches
from compactor.errors import CompactorError


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
    starts = [b.position for b in iter_batches(data)]
    bounds = chunk_ranges(starts, len(data), max_bytes)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # contiguous
    assert all(start in starts for start, _ in bounds)  # cut between entries
    for start, end in bounds:
        inside = list(iter_batches(data, start_position=start, end_position=end))
        assert end - start <= max_bytes or len(inside) == 1
    decoded = [b.position for s, e in bounds
               for b in iter_batches(data, start_position=s, end_position=e)]
    assert decoded == starts
    assert chunk_ranges([], 0, max_bytes) == []


def test_a_segment_that_is_not_what_the_plan_says_is_reported_by_the_decoder() -> None:
    data = _segment([5, 5, 5])
    starts = [b.position for b in iter_batches(data)]
    wrong = [0, starts[1] + 7, starts[2]]  # the plan's second entry is mid-batch now
    bounds = chunk_ranges(wrong, len(data), 1)
    assert bounds[0] == (0, wrong[1])
    with pytest.raises(CompactorError):
        list(iter_batches(data, start_position=bounds[0][0], end_position=bounds[0][1]))
