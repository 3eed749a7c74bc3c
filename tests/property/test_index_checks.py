"""The segment index checks' column test (``verify._offset_and_time_indexes_clean``) against
their entry-by-entry loops: it may send a clean index to the loops, never pass one the loops
would refuse, and :func:`compactor.cleaner.verify.index_problems` reports exactly what the
loops alone report. Indexes are built as a broker writes them from random batches, then
mutated one way at a time (an entry moved, a timestamp lowered, slots swapped, bytes cut,
preallocated zero slots, a negative value)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from compactor.cleaner import verify
from compactor.cleaner.policy import NO_CONTROL_TYPE, BatchHeader

BASE = 1_000


@st.composite
def _segment(draw: st.DrawFn) -> tuple[list[BatchHeader], bytes, bytes]:
    """Batches (now and then overlapping the one before, as a damaged log's do, or after a
    gap a cleaner left) and their indexes as ``LogSegment.append`` writes them, each entry
    now and then off by a little: an offset in the gap before its batch or in the batch
    before, a timestamp below the largest so far."""
    headers, offset, position, stamp, last = [], BASE, 0, 0, BASE - 1
    for _ in range(draw(st.integers(0, 8))):
        offset = max(BASE, last + draw(st.integers(-1, 3)))
        # now and then a batch that ends before the one before it (offset_problems says so)
        last = (last - 1 if headers and draw(st.integers(0, 9)) == 0
                else max(last + 1, offset + draw(st.integers(0, 3))))
        size = draw(st.integers(61, 200))
        stamp = max(0, stamp + draw(st.integers(-5, 20)))
        headers.append(BatchHeader(
            segment_base=BASE, position=position, size_in_bytes=size, base_offset=offset,
            last_offset=last, magic=2, is_control=False, is_transactional=False,
            control_type=NO_CONTROL_TYPE, producer_id=-1, producer_epoch=-1,
            max_timestamp=stamp, horizon_ms=-1, records_count=last - offset + 1))
        position += size
    off = st.sampled_from([0, 0, 0, 0, -1, -2, 1])  # mostly where a broker puts them
    index, time_index, so_far = [], [], -1
    for k, h in enumerate(headers):
        so_far = max(so_far, h.max_timestamp)
        if draw(st.booleans()):  # LogSegment.append indexes a batch now and then
            if k + 1 < len(headers) and draw(st.integers(0, 9)) == 0:
                # the next batch's offset at a position inside this one: no batch starts there
                index.append((headers[k + 1].base_offset - BASE, h.position + 1))
            else:
                index.append((h.base_offset - BASE + draw(off), h.position))
            if not time_index or so_far > time_index[-1][0]:
                time_index.append((so_far + min(0, draw(off)), h.last_offset - BASE + draw(off)))
    if headers and (not time_index or time_index[-1][0] < so_far):  # onBecomeInactiveSegment
        time_index.append((so_far + min(0, draw(off)), headers[-1].last_offset - BASE + draw(off)))
    return (headers, b"".join(struct.pack(">ii", *e) for e in index),
            b"".join(struct.pack(">qi", *e) for e in time_index))


def _mutated(draw: st.DrawFn, data: bytes, size: int) -> bytes:
    slots = [bytearray(data[i:i + size]) for i in range(0, len(data), size)]
    how = draw(st.sampled_from(["none", "none", "shift", "swap", "cut", "zeros", "negative"]))
    event(how)
    if how == "cut" and data:
        return data[:-1]
    if how == "zeros":
        return data + bytes(size * draw(st.integers(1, 2)))
    if not slots:
        return data
    k = draw(st.integers(0, len(slots) - 1))
    field = draw(st.sampled_from([0, size - 4])) if size == 12 else draw(st.sampled_from([0, 4]))
    width = 8 if (size == 12 and field == 0) else 4
    value = int.from_bytes(slots[k][field:field + width], "big", signed=True)
    if how == "shift":
        value += draw(st.sampled_from([-2, -1, 1, 2, 50]))
    elif how == "negative":
        value = -1
    elif how == "swap" and len(slots) > 1:
        slots[k], slots[k - 1] = slots[k - 1], slots[k]
        return b"".join(slots)
    slots[k][field:field + width] = value.to_bytes(width, "big", signed=True)
    return b"".join(slots)


@settings(max_examples=400, deadline=None)
@given(st.data(), _segment(), st.booleans())
def test_the_column_check_never_passes_what_the_loops_refuse(
        data: st.DataObject, segment: tuple[list[BatchHeader], bytes, bytes],
        is_active: bool) -> None:
    headers, index, time_index = segment
    # no .index or .timeindex file at all, now and then
    index = None if data.draw(st.integers(0, 9)) == 0 else _mutated(data.draw, index, 8)
    time_index = None if data.draw(st.integers(0, 9)) == 0 else _mutated(data.draw, time_index, 12)
    clean = verify._offset_and_time_indexes_clean(BASE, headers, is_active, index, time_index)
    event(f"clean: {clean}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verify, "_offset_and_time_indexes_clean", lambda *a: False)
        knock_on: list = []
        loops = verify.index_problems(f"/x/{BASE:020d}.log", BASE, headers,
                                      is_active=is_active, index=index, time_index=time_index,
                                      knock_on=knock_on)
    event(f"the loops find {'nothing' if not loops else 'a problem'}")
    if clean:
        assert loops == [] and knock_on == []
    assert ([str(e) for e in verify.index_problems(
        f"/x/{BASE:020d}.log", BASE, headers, is_active=is_active, index=index,
        time_index=time_index)] == [str(e) for e in loops])
