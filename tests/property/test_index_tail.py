"""The last entry of an index, read on whole columns (``last_offset_entry``,
``last_time_entry``), against the slot-by-slot decoders: the same entry, or the same located
error, on valid, corrupt, preallocated and ragged indexes."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.codec.indexes import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    decode_offset_index,
    decode_time_index,
    last_offset_entry,
    last_time_entry,
)
from compactor.errors import CorruptIndexError

BASE = 1_000


def _outcome(call):
    try:
        return call()
    except CorruptIndexError as err:
        return ("error", err.to_dict())


@st.composite
def _index(draw, entry: struct.Struct, small: int, large: int) -> bytes:
    """Mostly increasing slots (a valid index), sometimes a step back, a negative field,
    preallocated zeros at the end or a ragged tail."""
    count = draw(st.integers(min_value=0, max_value=30))
    a, b = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    slots = []
    for _ in range(count):
        a += draw(st.integers(min_value=-1 if draw(st.booleans()) else 0, max_value=large))
        b += draw(st.integers(min_value=-1 if draw(st.booleans()) else 0, max_value=small))
        slots.append((a, b) if entry is OFFSET_ENTRY else (b, a))
    if slots and draw(st.integers(0, 9)) == 0:
        i = draw(st.integers(0, len(slots) - 1))
        slots[i] = tuple(-v - 1 for v in slots[i])
    data = b"".join(entry.pack(*s) for s in slots)
    data += bytes(entry.size * draw(st.integers(0, 3)))  # preallocated
    if draw(st.integers(0, 9)) == 0:
        data += b"\x01" * draw(st.integers(1, entry.size - 1))  # ragged
    return data


@settings(max_examples=400, deadline=None)
@given(data=_index(OFFSET_ENTRY, 5000, 50), preallocated=st.booleans())
def test_the_last_offset_entry_is_the_decoders_last(data: bytes, preallocated: bool) -> None:
    def decoded():
        entries = decode_offset_index(data, BASE, path="x.index",
                                      allow_preallocated=preallocated)
        return (len(entries) - 1, entries[-1]) if entries else None

    assert _outcome(lambda: last_offset_entry(data, BASE, path="x.index",
                                              allow_preallocated=preallocated)) == \
        _outcome(decoded)


@settings(max_examples=400, deadline=None)
@given(data=_index(TIME_ENTRY, 50, 10**6), preallocated=st.booleans())
def test_the_last_time_entry_is_the_decoders_last(data: bytes, preallocated: bool) -> None:
    def decoded():
        entries = decode_time_index(data, BASE, path="x.timeindex",
                                    allow_preallocated=preallocated)
        return entries[-1] if entries else None

    assert _outcome(lambda: last_time_entry(data, BASE, path="x.timeindex",
                                            allow_preallocated=preallocated)) == \
        _outcome(decoded)
