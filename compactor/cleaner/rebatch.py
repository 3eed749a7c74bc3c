"""Re-batching of retained records and assembly of a cleaned segment (Kafka's
``MemoryRecords.filterTo``, ``Cleaner.cleanInto``, ``LogSegment.recover``). Pure: batches and
decisions in, bytes out.

Given a source batch, its :class:`~compactor.cleaner.policy.BatchDecision` and the offsets of its
records that go, :func:`filter_batch` returns the bytes Kafka 4.1 writes for it: nothing, the
original bytes verbatim, a rebuilt batch (same base offset and ``lastOffsetDelta``, producer
fields, leader epoch, codec; new CRC; delete horizon when newly needed) or the bare empty header.
v0/v1 entries are always rewritten as v2 batches (KAFKA-13093, Kafka 4.0+).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c

from compactor.cleaner.policy import (
    ABORTED,
    EMPTIED_HEADER,
    EMPTIED_VERBATIM,
    EXPIRED,
    FROM_MAP,
    KEPT,
    LOCAL,
    MARKER_EXPIRED,
    REASON_NAMES,
    BatchDecision,
    BatchRetention,
    copied_verbatim,
    delete_horizon_ms,
    emptied_batch,
    map_entry_offset,
    needs_delete_horizon,
    record_fate,
)
from compactor.codec.indexes import (
    AbortedTxn,
    BatchIndexInfo,
    build_indexes,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
)
from compactor.codec.records import (
    NO_TIMESTAMP,
    V2_HEADER,
    NewRecord,
    NewRecordBatch,
    Record,
    RecordBatch,
    TimestampType,
    empty_batch_like,
    encode_batch,
    rebuild_batch,
)

DROP_REASONS = ("superseded", "tombstone_expired", "null_key", "aborted", "marker_expired")


@dataclass(frozen=True, slots=True, kw_only=True)
class FilteredBatch:
    """Outcome of one source batch.

    Attributes:
        data: the bytes to append, ``None`` when the batch disappears.
        records_in: records of the source batch.
        records_out: records retained.
    """

    data: bytes | None
    records_in: int
    records_out: int


def filter_batch(batch: RecordBatch, decision: BatchDecision, dropped: Container[int], *,
                 now_ms: int, delete_retention_ms: int,
                 set_delete_horizon: bool = True,
                 tombstones: Collection[int] = ()) -> FilteredBatch:
    """Apply the batch and record decisions to one source batch (``MemoryRecords.filterTo``).

    Args:
        dropped: offsets of the batch's records that go (the record-level decision,
            ``Cleaner.shouldRetainRecord``).
        set_delete_horizon: a cleaning round sets the delete horizon of a rebuilt batch that
            keeps tombstones or is a marker to horizon (Kafka); an erasure rewrite is not a
            cleaning and keeps the batch's horizon as it was.
        tombstones: offsets of records kept as bare tombstones (same offset, key and
            timestamp; no value, no headers): an erasure with ``--leave-tombstone``.
    """
    if decision.retention == BatchRetention.DELETE:
        return FilteredBatch(data=None, records_in=_count(batch), records_out=0)
    records = batch.compiled_records()
    retained: list[Any] = [r for r in records if r.offset not in dropped] if dropped else records
    if tombstones:
        retained = [Record(offset=r.offset, timestamp=r.timestamp, key=r.key, value=None)
                    if r.offset in tombstones else r for r in retained]
    if batch.magic < 2:
        # Kafka 4.0+ converts the entry to v2 first, so a kept tombstone gets a delete horizon
        # like any v2 batch's (KAFKA-13093: filterTo no longer checks the source magic)
        horizon_ms = delete_horizon_ms(now_ms, delete_retention_ms) if set_delete_horizon and any(
            r.value is None for r in retained) else None
        return FilteredBatch(data=_legacy_as_v2(batch, retained, decision, horizon_ms),
                             records_in=len(records), records_out=len(retained))
    if not retained:
        emptied = emptied_batch(decision.retention, len(records))
        data = (batch.raw if emptied == EMPTIED_VERBATIM else
                empty_batch_like(batch) if emptied == EMPTIED_HEADER else None)
        return FilteredBatch(data=data, records_in=len(records), records_out=0)
    horizon = batch.delete_horizon_ms
    needs_horizon = set_delete_horizon and needs_delete_horizon(
        horizon is not None, decision.marker_horizon, batch.is_control,
        sum(r.value is None for r in retained))
    if copied_verbatim(len(retained), len(records), needs_horizon) and not tombstones:
        return FilteredBatch(data=batch.raw, records_in=len(records), records_out=len(records))
    if needs_horizon:
        horizon = delete_horizon_ms(now_ms, delete_retention_ms)
    rebuilt = rebuild_batch(batch, retained, delete_horizon_ms=horizon)
    return FilteredBatch(data=rebuilt, records_in=len(records), records_out=len(retained))


@dataclass(frozen=True, slots=True)
class BatchDrops:
    """The records of one batch that go (offsets ascending), how many go for each reason, how
    many of them the offset map's ``superseded`` set named, and how many a later record of
    their key in the group superseded."""

    offsets: tuple[int, ...]
    reasons: Counter[str]
    from_map: int = 0
    later: int = 0


def iter_drops(batches: Iterable[tuple[RecordBatch, BatchDecision]],
               superseded: Container[int], first_dirty: int,
               later: set[bytes] | None = None) -> Iterator[BatchDrops]:
    """Which records of a segment's batches go, and why (``Cleaner.shouldRetainRecord``), for
    ``(batch, decision)`` pairs given **newest first**, one :class:`BatchDrops` per pair.

    A record is superseded when the offset map says so across groups (``superseded``) or
    when a later record of the same key in the same group enters the map (keyed, batch not
    aborted, at or above ``first_dirty``): the map-side combine of the scan
    (:func:`compactor.cleaner.scan.locally_superseded`), decided here by key instead of by digest.
    The other reasons (null key, expired tombstone, aborted data, expired marker) are local to
    the batch. Walking backwards decides each record in one look, each batch decoded once.

    Args:
        later: keys with an offset-map record later in the group (segments after this one);
            updated with this segment's. A new set when omitted (a one-segment group).
    """
    if later is None:
        later = set()
    for batch, decision in batches:
        records = batch.compiled_records()
        reasons: Counter[str] = Counter()
        if decision.discard_records:
            reasons[REASON_NAMES[MARKER_EXPIRED if batch.is_control else ABORTED]] = len(records)
            yield BatchDrops(tuple(r.offset for r in records), reasons)
            continue
        if batch.is_control:
            yield BatchDrops((), reasons)
            continue
        entry = map_entry_offset(decision.aborted, first_dirty)
        expire_tombstones = not decision.retain_deletes
        add = later.add
        goes: list[int] = []
        counts = [0] * (EXPIRED + 1)  # by fate
        for r in reversed(records):
            key = r.key
            offset = r.offset
            keyed = key is not None
            fate = record_fate(keyed, keyed and offset in superseded, keyed and key in later,
                               r.value is None, expire_tombstones)
            if fate != KEPT:
                counts[fate] += 1
                goes.append(offset)
            if key is not None and offset >= entry:
                add(key)
        for fate, n in enumerate(counts):
            if n:
                reasons[REASON_NAMES[fate]] += n
        goes.reverse()
        yield BatchDrops(tuple(goes), reasons, counts[FROM_MAP], counts[LOCAL])


def _count(batch: RecordBatch) -> int:
    if batch.legacy_records is not None:
        return len(batch.legacy_records)
    return batch.records_count


def _legacy_as_v2(batch: RecordBatch, retained: Sequence[Any], decision: BatchDecision,
                  delete_horizon_ms: int | None) -> bytes | None:
    """A v0/v1 entry rewritten as a v2 batch: codec kept, CreateTime for v0, no producer,
    leader epoch -1, base offset = first retained offset. An entry that loses every record is
    dropped, except under RETAIN_EMPTY (the round-bound rule) where Kafka 4.1 throws and marks
    the partition uncleanable; we write an empty v2 header over the entry's offsets instead
    (a documented difference)."""
    timestamp_type = batch.timestamp_type if batch.magic == 1 else TimestampType.CREATE_TIME
    if not retained:
        if decision.retention != BatchRetention.RETAIN_EMPTY:
            return None
        return placeholder_batch(batch)
    base = retained[0].offset
    return encode_batch(NewRecordBatch(
        base_offset=base,
        records=[
            NewRecord(offset_delta=r.offset - base, timestamp=r.timestamp, key=r.key,
                      value=r.value, headers=r.headers)
            for r in retained
        ],
        compression=batch.compression,
        timestamp_type=timestamp_type,
        delete_horizon_ms=delete_horizon_ms,
    ))


def placeholder_batch(batch: RecordBatch) -> bytes:
    """An empty v2 header spanning ``batch``'s offsets with no producer and no codec: it keeps
    the offsets known without touching producer state.

    It carries no timestamp (base and max -1), whether it ends a group or is the emptied legacy
    entry that ends the round (where Kafka 4.1 throws instead): its records are gone, and a max
    timestamp would raise the segment's largest timestamp, so a lookup by time
    (``offsetsForTimes``, ``LogSegment.findOffsetByTimestamp``) would pick the segment, find no
    record and answer nothing."""
    return encode_batch(NewRecordBatch(
        base_offset=batch.base_offset,
        last_offset_delta=batch.last_offset - batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=NO_TIMESTAMP,
    ))


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentIndexes:
    """What a cleaned segment needs next to its ``.log``: its indexes, and a summary of the
    log (size, CRC-32C of its bytes, batch count)."""

    base_offset: int
    index: bytes
    time_index: bytes
    txn_index: bytes
    size: int
    checksum: int
    batches: int
    placeholder: bool = False  # the group's last source batch was kept as an empty header


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentFiles:
    """The bytes of one cleaned segment and its indexes."""

    base_offset: int
    log: bytes
    index: bytes
    time_index: bytes
    txn_index: bytes
    batches: int


class SegmentBuilder:
    """Assembles one cleaned segment batch by batch: each output batch goes to ``sink`` as
    soon as it is appended (so a segment never has to be held in memory whole), and what the
    indexes need is kept on the way. :meth:`finish` adds the placeholder of a multi-segment
    group when needed and builds the indexes the way Kafka's recovery path does
    (``LogSegment.recover``).

    Deliberate difference from Kafka: when a group of several source segments would produce a
    segment that ends before the group's last source offset (its trailing batches all went, or
    everything went), the group's last source batch is kept as a placeholder header (no
    records, no producer). Crash recovery (Kafka's ``LogLoader`` as well as ours) finds the
    offsets a ``.swap`` segment replaces from the segment's next offset; a shorter one would
    leave the group's later source segments behind next to the new one after a crash.
    """

    def __init__(self, base_offset: int, sink: Callable[[bytes], object]) -> None:
        self.base_offset = base_offset
        self._sink = sink
        self._infos: list[BatchIndexInfo] = []
        self._size = 0
        self._checksum = 0
        self._next_offset = -1

    def append(self, entry: bytes, copied_from: RecordBatch | None = None) -> None:
        """Append one batch: a v2 batch, or ``copied_from.raw`` (which may be a v0/v1
        entry, copied verbatim by an erasure)."""
        if copied_from is not None:
            last_offset, max_timestamp = copied_from.last_offset, copied_from.max_timestamp
        else:
            header = V2_HEADER.unpack_from(entry, 0)
            last_offset, max_timestamp = header[0] + header[6], header[8]
        self._infos.append(BatchIndexInfo(position=self._size, size_in_bytes=len(entry),
                                          last_offset=last_offset, max_timestamp=max_timestamp))
        self._size += len(entry)
        self._checksum = crc32c.crc32c(entry, self._checksum)
        self._next_offset = last_offset + 1
        self._sink(entry)

    def append_run(self, data: Any, sizes: Sequence[int], *,
                   write: Callable[[Any], object] | None = None) -> None:
        """Append v2 batches that lie end to end in ``data`` (bytes or a view of them;
        ``sizes``: each batch's) in one write, as :meth:`append` appends them one by one:
        ``write(data)`` where the caller gives one (which appends the same bytes from where
        they lie), else the sink's.

        Raises:
            ValueError: ``sizes`` do not add up to ``data``.
        """
        if sum(sizes) != len(data):
            raise ValueError(f"{len(sizes)} batches of {sum(sizes)} bytes in {len(data)} bytes")
        pos = 0
        for size in sizes:
            header = V2_HEADER.unpack_from(data, pos)
            self._infos.append(BatchIndexInfo(position=self._size + pos, size_in_bytes=size,
                                              last_offset=header[0] + header[6],
                                              max_timestamp=header[8]))
            pos += size
        if not sizes:
            return
        self._size += pos
        self._checksum = crc32c.crc32c(data, self._checksum)
        self._next_offset = self._infos[-1].last_offset + 1
        (write or self._sink)(data)

    def finish(self, txn_entries: Sequence[AbortedTxn], *,
               last_source_batch: RecordBatch | None, source_segments: int,
               index_interval_bytes: int, segment_index_bytes: int) -> SegmentIndexes:
        """Close the segment: placeholder if needed, then the indexes.

        Raises:
            ValueError: the indexes cannot hold the segment (offsets beyond 32 bits relative
                to the base, or more entries than ``segment_index_bytes``).
        """
        placeholder = False
        if source_segments > 1 and last_source_batch is not None and (
                self._next_offset < last_source_batch.next_offset):
            self.append(placeholder_batch(last_source_batch))
            placeholder = True
        offsets, times = build_indexes(self._infos, self.base_offset,
                                       index_interval_bytes=index_interval_bytes,
                                       segment_index_bytes=segment_index_bytes)
        return SegmentIndexes(
            base_offset=self.base_offset,
            index=encode_offset_index(offsets, self.base_offset),
            time_index=encode_time_index(times, self.base_offset),
            txn_index=encode_txn_index(txn_entries),
            size=self._size, checksum=self._checksum, batches=len(self._infos),
            placeholder=placeholder,
        )


def assemble_segment(
    base_offset: int,
    outputs: Sequence[bytes],
    txn_entries: Sequence[AbortedTxn],
    *,
    last_source_batch: RecordBatch | None,
    source_segments: int,
    index_interval_bytes: int,
    segment_index_bytes: int,
) -> SegmentFiles:
    """A whole cleaned segment in memory (:class:`SegmentBuilder` over a list)."""
    chunks: list[bytes] = []
    builder = SegmentBuilder(base_offset, chunks.append)
    for entry in outputs:
        builder.append(entry)
    indexes = builder.finish(txn_entries, last_source_batch=last_source_batch,
                             source_segments=source_segments,
                             index_interval_bytes=index_interval_bytes,
                             segment_index_bytes=segment_index_bytes)
    return SegmentFiles(base_offset=base_offset, log=b"".join(chunks), index=indexes.index,
                        time_index=indexes.time_index, txn_index=indexes.txn_index,
                        batches=indexes.batches)
