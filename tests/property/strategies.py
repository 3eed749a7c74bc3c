"""Hypothesis strategies over the real domain of Kafka records: millisecond timestamps,
null keys and values, empty values, headers with null values, offset gaps, large offsets,
empty batches, every codec."""

from __future__ import annotations

from hypothesis import strategies as st

from compactor.codec.compression import Codec
from compactor.codec.records import NewRecord, NewRecordBatch, TimestampType

timestamps = st.one_of(
    st.integers(min_value=1_500_000_000_000, max_value=1_900_000_000_000),  # real epoch ms
    st.integers(min_value=0, max_value=2**45),
)
nullable_bytes = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(
    st.tuples(st.text(max_size=8), nullable_bytes), max_size=3
).map(tuple)
codecs = st.sampled_from(list(Codec))


@st.composite
def new_records(draw: st.DrawFn, max_records: int = 12) -> list[NewRecord]:
    count = draw(st.integers(min_value=0, max_value=max_records))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=1000), min_size=count,
                         max_size=count))
    delta = -1
    out = []
    for gap in gaps:
        # The first record may sit above the base offset: compaction keeps base offsets.
        delta = delta + gap if out else gap % 3
        out.append(NewRecord(offset_delta=delta, timestamp=draw(timestamps),
                             key=draw(nullable_bytes), value=draw(nullable_bytes),
                             headers=draw(headers)))
    return out


@st.composite
def new_batches(draw: st.DrawFn, *, allow_flags: bool = True) -> NewRecordBatch:
    records = draw(new_records())
    has_producer = draw(st.booleans())
    transactional = allow_flags and has_producer and draw(st.booleans())
    horizon = draw(st.one_of(st.none(), timestamps)) if allow_flags else None
    last_delta = records[-1].offset_delta if records else 0
    return NewRecordBatch(
        base_offset=draw(st.integers(min_value=0, max_value=2**62)),
        records=records,
        compression=draw(codecs),
        is_transactional=transactional,
        delete_horizon_ms=horizon,
        partition_leader_epoch=draw(st.integers(min_value=-1, max_value=2**31 - 1)),
        producer_id=draw(st.integers(min_value=0, max_value=2**62)) if has_producer else -1,
        producer_epoch=draw(st.integers(min_value=0, max_value=2**15 - 1)) if has_producer
        else -1,
        base_sequence=draw(st.integers(min_value=0, max_value=2**31 - 1)) if has_producer
        else -1,
        last_offset_delta=last_delta + draw(st.integers(min_value=0, max_value=5)),
        timestamp_type=TimestampType.CREATE_TIME,
    )
