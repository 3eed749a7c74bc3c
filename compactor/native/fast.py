"""The writer's native path: the same decisions and the same bytes as
:func:`compactor.cleaner.rebatch.iter_drops` and :func:`compactor.cleaner.rebatch.filter_batch`,
with the per-record work in numba kernels (:mod:`compactor.native.kernels`) instead of a Python
object per record.

Two grains. A 16 MB chunk of v2 batches (data and control, any codec) goes through each pass
in one native call: :meth:`NativeRewrite.decide_chunk` frames it, checks its headers (and,
through ``crc32c``, its CRCs), decompresses its compressed batches once (:class:`Expanded`),
parses and decides every record newest first; :func:`filter_chunk_batches` writes every output
batch of it (verbatim copies, rebuilt batches with their new headers, compressed again with
their codec, empty headers). Anything else (a legacy entry, a header the checks refuse) is
walked batch by batch: :meth:`NativeRewrite.decide_batch` and :func:`filter_fast`.

Whatever the kernels cannot vouch for goes to the pure path, which stays the reference
(``tests/property/test_fast_path.py`` compares the two byte for byte): a group holding a v0/v1
entry, a record the kernel finds malformed, offset deltas that do not strictly increase, or
two different keys with the same 64-bit hash make the whole group
:class:`compactor.cleaner.rewrite.Fallback` (raised
before anything is written); a batch whose records the pure encoder would write differently
(:data:`compactor.native.kernels.NOT_CANONICAL`) is filtered by the pure path, and so is a
control batch outside a plain chunk.

Keys are compared byte for byte: the group's key table (open addressing) holds a 64-bit hash
of each key (FNV-1a, murmur3's finalizer) with the key's bytes, in its slot when the key is
short, else in an arena the slot points at, and a hash hit is confirmed by comparing them, so
a record is dropped as superseded only when a later record has exactly its key
(``Cleaner.shouldRetainRecord``; within a group no digest is trusted).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np

from compactor.cleaner import policy
from compactor.cleaner.policy import (
    FROM_MAP,
    LOCAL,
    REASON_NAMES,
    BatchDecision,
    BatchHeader,
    BatchRetention,
)
from compactor.cleaner.rebatch import FilteredBatch, filter_batch
from compactor.cleaner.rewrite import (
    DigestProbe,
    Fallback,
    Filtered,
    GroupRewrite,
    KeyColumns,
    SubjectDigests,
    Window,
)
from compactor.codec.compression import CODEC_MASK, Codec, DecompressionError, compress, decompress
from compactor.codec.indexes import AbortedTxn
from compactor.codec.records import (
    ATTR_CONTROL,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    CRC_START,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    RecordBatch,
    TimestampType,
    empty_batch_like,
    frame_rebuilt,
)
from compactor.native import kernels
from compactor.native.chunks import (
    _DELETE,
    _TS_SAFE,
    ABORTED_BATCH,
    DISCARD,
    F_ATTRS,
    F_BASE,
    F_COLUMNS,
    F_COUNT,
    F_CRC,
    F_POS,
    F_SIZE,
    O_POS,
    O_SIZE,
    O_SOURCE,
    RETAIN_DELETES,
    STATS,
    _keyed_rows,
    _retained_figures,
    decide_chunk,
    filter_chunk,
    frame_chunk,
    frame_headers,
    scan_chunk_keys,
    segment_headers,
    segment_keys,
)
from compactor.native.keytable import _SLOT, _grown_table, decide_records, rehash, spare_table
from compactor.native.offsetmap import combine_keys


@dataclass(slots=True)
class BatchFate:
    """What the backward pass decided for one batch: ``reasons`` per record (``None`` when
    every record stays), and whether the pure path must filter it."""

    reasons: np.ndarray | None
    dropped: int
    pure: bool = False
    tombstones: int = -1  # retained tombstones; -1: not counted


class _Section:
    """The records section of a v2 batch (decompressed) and its parsed layout."""

    __slots__ = ("data", "buf", "layout", "status")

    def __init__(self, batch: RecordBatch) -> None:
        raw = batch.raw
        count = batch.records_count
        if batch.compression != Codec.NONE and count:
            try:
                body = decompress(batch.compression, raw[RECORDS_OFFSET:])
            except DecompressionError:
                raise Fallback from None
            self.data = body
            start = 0
        else:
            self.data = raw
            start = RECORDS_OFFSET
        self.buf = np.frombuffer(self.data, np.uint8)
        self.layout = np.empty((count, kernels.COLUMNS), np.int64)
        self.status = kernels.parse_layout(self.buf, start, self.buf.shape[0], count,
                                           batch.last_offset_delta, self.layout)


# the decompressed chunks a group's backward pass keeps for its forward pass, in bytes: beyond
# it a chunk is decompressed again (the group's memory stays bounded whatever its size)
KEEP_EXPANDED_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Expanded:
    """A framed chunk with its compressed batches' records decompressed: each batch's 61-byte
    header, then its records as the kernels parse them (a batch without records as it is).
    ``frames`` are the chunk's frames (:func:`frame_chunk`) with positions and sizes in
    ``buf``; the kernels read headers and records there as in an uncompressed chunk."""

    buf: np.ndarray
    frames: np.ndarray

    @classmethod
    def of(cls, chunk: bytes, frames: np.ndarray) -> Expanded:
        """Raises:
            Fallback: a batch cannot be decompressed (the pure path reports where).
        """
        view = memoryview(chunk)
        parts: list[bytes | memoryview] = []
        expanded = frames.copy()
        at = 0
        for i, (pos, size, attrs, count) in enumerate(
                frames[:, [F_POS, F_SIZE, F_ATTRS, F_COUNT]].tolist()):
            codec = attrs & CODEC_MASK
            if codec and count:
                try:
                    body = decompress(codec, view[pos + RECORDS_OFFSET:pos + size])
                except DecompressionError:
                    raise Fallback from None
                parts += (view[pos:pos + RECORDS_OFFSET], body)
                size = RECORDS_OFFSET + len(body)
            else:
                parts.append(view[pos:pos + size])
            expanded[i, F_POS] = at
            expanded[i, F_SIZE] = size
            at += size
        return cls(np.frombuffer(b"".join(parts), np.uint8), expanded)


def _sorted_offsets(offsets: Collection[int]) -> np.ndarray:
    """Offsets as a sorted int64 array. The offset map's rows arrive as an array of sorted
    runs, one a bucket, in no order: a stable sort (timsort) merges the runs (0.7 ms for
    375 K offsets in 17 runs, against 16 ms for quicksort). Other callers give a set."""
    if isinstance(offsets, np.ndarray):
        return np.sort(offsets.astype(np.int64), kind="stable")
    return np.sort(np.fromiter(offsets, np.int64, len(offsets)))


class NativeRewrite:
    """A group's record work with the kernels (:class:`compactor.cleaner.rewrite.GroupRewrite`):
    the backward pass (``iter_drops`` natively) keeps the group's key table, or, given the
    offsets superseded within the group, no table at all; the forward pass filters by its
    fates (:class:`BatchFate`)."""

    path = "native"

    def __init__(self, superseded: Collection[int], first_dirty: int,
                 within: np.ndarray | None = None) -> None:
        self.superseded = _sorted_offsets(superseded)
        self.first_dirty = first_dirty
        # with ``within`` (the offset map's scan found the records superseded within the
        # group) no key is read and the table stays empty: memory flat in the group's keys
        self.tabled = within is None
        self.within = _sorted_offsets(() if within is None else within)
        self.table = np.zeros(_SLOT << (12 if self.tabled else 0), np.int64)
        self.arena = np.empty(1 << 16, np.uint8)
        self.used = np.zeros(2, np.int64)
        self.tally = np.zeros(8, np.int64)
        self.seen = 0  # records decided: with the keys held, the rate new keys come at
        self.released = False  # decided() gave the table back
        self.scratch = np.empty((1024, kernels.COLUMNS), np.int64)
        # decompressed chunks for filter_chunk, by segment and chunk start
        self._kept: dict[tuple[int, int], Expanded] = {}
        self._kept_bytes = 0

    def decide(self, newest_first: Sequence[tuple[RecordBatch, BatchDecision]]
               ) -> list[BatchFate]:
        """The fates of batches given newest first, in that order.

        Raises:
            Fallback: the group must take the pure path.
        """
        return [self.decide_batch(batch, decision) for batch, decision in newest_first]

    def decide_batch(self, batch: RecordBatch, decision: BatchDecision) -> BatchFate:
        """The fate of ``batch``'s records.

        Raises:
            Fallback: the group must take the pure path.
        """
        if batch.magic < 2:
            raise Fallback
        raw = batch.raw
        if batch.compression != Codec.NONE and batch.records_count:
            # the header, then the decompressed records: the layout decide_chunk reads
            try:
                raw = raw[:RECORDS_OFFSET] + decompress(
                    batch.compression, raw[RECORDS_OFFSET:])
            except DecompressionError:
                raise Fallback from None
        frames = np.array([[0, len(raw), batch.base_offset, batch.attributes,
                            batch.last_offset_delta, batch.records_count, batch.crc]], np.int64)
        return self._decide_frames(np.frombuffer(raw, np.uint8), frames, [decision])[0]

    def decide_chunk(self, chunk: bytes, start: int, segment_base: int,
                     decisions: Mapping[tuple[int, int], BatchDecision]
                     ) -> tuple[list[int], list[int], list[BatchFate]] | None:
        """:meth:`decide` for every batch of a chunk of a segment (``chunk`` holds the
        segment's bytes from ``start``) in one native call: ``(positions, base offsets,
        fates)`` of its batches in file order, or ``None``, before anything is decided, when
        the chunk needs the general walk (a legacy batch, a header or CRC the checks refuse, a
        batch without a decision). A chunk with compressed batches is decided on its
        :class:`Expanded` form, which is kept for :meth:`filter_chunk` while the group's
        :data:`KEEP_EXPANDED_BYTES` allow.

        Raises:
            Fallback: the group must take the pure path.
        """
        buf = np.frombuffer(chunk, np.uint8)
        frames = frame_chunk(buf, True)
        if not frames.shape[0]:
            return None
        view = memoryview(chunk)
        positions = (frames[:, F_POS] + start).tolist()
        chosen: list[BatchDecision] = []
        for i, (at, size, crc) in enumerate(zip(frames[:, F_POS].tolist(),
                                                frames[:, F_SIZE].tolist(),
                                                frames[:, F_CRC].tolist())):
            if crc32c.crc32c(view[at + CRC_START:at + size]) != crc:
                return None
            decision = decisions.get((segment_base, positions[i]))
            if decision is None:
                return None
            chosen.append(decision)
        if (frames[:, F_ATTRS] & CODEC_MASK).any():
            expanded = Expanded.of(chunk, frames)
            fates = self._decide_frames(expanded.buf, expanded.frames, chosen)
            if self._kept_bytes + expanded.buf.shape[0] <= KEEP_EXPANDED_BYTES:
                self._kept[(segment_base, start)] = expanded
                self._kept_bytes += expanded.buf.shape[0]
            STATS["chunks_expanded"] += 1
        else:
            fates = self._decide_frames(buf, frames, chosen)
        STATS["chunks_native"] += 1
        return positions, frames[:, F_BASE].tolist(), fates

    def _decide_frames(self, buf: np.ndarray, frames: np.ndarray,
                       decisions: Sequence[BatchDecision]) -> list[BatchFate]:
        """The fates of the framed batches of ``buf`` (:func:`decide_chunk`), in file order.

        Raises:
            Fallback: the group must take the pure path.
        """
        flags = np.array([(DISCARD if d.discard_records else 0)
                          | (ABORTED_BATCH if d.aborted else 0)
                          | (RETAIN_DELETES if d.retain_deletes else 0) for d in decisions],
                         np.int8)
        if self.released:
            raise RuntimeError("the group's records were decided: its key table is gone")
        records = int(frames[:, F_COUNT].sum())
        if self.tabled:
            self.table = _grown_table(self.table, int(self.used[1]), self.seen, records)
        self.seen += records
        reasons = np.zeros(records, np.int8)
        out = np.empty((frames.shape[0], 4), np.int64)
        status, self.table, self.arena, self.scratch = decide_chunk(
            buf, frames, flags, self.first_dirty, self.superseded, self.within, self.tabled,
            self.table, self.arena, self.used, self.tally, reasons, out, self.scratch)
        if status != kernels.OK:
            raise Fallback
        fates = []
        for (first, dropped, tombstones, parsed), count, attrs, flag in zip(
                out.tolist(), frames[:, F_COUNT].tolist(), frames[:, F_ATTRS].tolist(),
                flags.tolist()):
            noncanonical = bool(parsed & kernels.NOT_CANONICAL)
            if flag & DISCARD:
                fates.append(BatchFate(reasons[first:first + count] if count else None,
                                       count, noncanonical))
            elif attrs & ATTR_CONTROL:  # control (filter_fast hands it to the pure path)
                fates.append(BatchFate(None, 0, noncanonical))
            else:
                fates.append(BatchFate(reasons[first:first + count] if dropped else None,
                                       dropped, noncanonical, tombstones))
        return fates

    def decided(self) -> None:
        """The key table goes back to the worker's spares (:func:`spare_table`)."""
        if self.tabled and not self.released:
            spare_table(self.table)
        self.released = True
        self.table = np.zeros(0, np.int64)

    def filter_chunk(self, chunk: bytes, start: int, segment_base: int,
                     positions: Sequence[int], base_offsets: Sequence[int], fates: Sequence[Any],
                     decisions: Sequence[BatchDecision], *, now_ms: int,
                     delete_retention_ms: int) -> Filtered | None:
        kept = self._kept.pop((segment_base, start), None)
        if kept is not None:
            self._kept_bytes -= kept.buf.shape[0]
        return filter_chunk_batches(chunk, start, positions, base_offsets, fates, decisions,
                                    now_ms=now_ms, delete_retention_ms=delete_retention_ms,
                                    expanded=kept)

    def filter(self, batch: RecordBatch, decision: BatchDecision, fate: object, *, now_ms: int,
               delete_retention_ms: int) -> tuple[FilteredBatch, int]:
        assert isinstance(fate, BatchFate)
        return filter_fast(batch, decision, fate, now_ms=now_ms,
                           delete_retention_ms=delete_retention_ms), fate.dropped

    def from_map(self) -> int:
        return int(self.tally[FROM_MAP])

    def later(self) -> int:
        return int(self.tally[LOCAL])

    def keys(self) -> int:
        return int(self.used[1])

    def records(self) -> int:
        return self.seen

    def reasons(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for code, name in REASON_NAMES.items():
            if self.tally[code]:
                counts[name] += int(self.tally[code])
        return counts


def batch_keys(batch: RecordBatch) -> tuple[np.ndarray, list[bytes]] | None:
    """The offsets and keys of a v2 batch's keyed records, in offset order, read by the
    kernels (the key scan of :func:`compactor.cleaner.scan.keyed_records`); ``None`` when the
    pure decoder must read the batch (legacy, or anything the kernel flags)."""
    if batch.magic < 2:
        return None
    count = batch.records_count
    try:
        section = _Section(batch)
    except Fallback:
        return None
    if section.status != kernels.OK:
        return None
    offsets, positions, lengths = _keyed_rows(section.layout, count, batch.base_offset)
    STATS["batches_scanned"] += 1
    data = section.data
    keys = [data[p:p + n] for p, n in zip(positions.tolist(), lengths.tolist())]
    return offsets, keys


def filter_fast(batch: RecordBatch, decision: BatchDecision, fate: BatchFate, *, now_ms: int,
                delete_retention_ms: int) -> FilteredBatch:
    """:func:`compactor.cleaner.rebatch.filter_batch` for a batch the backward pass decided
    (a cleaning round: the delete horizon is set where Kafka sets it)."""
    count = batch.records_count
    if decision.retention == BatchRetention.DELETE:
        return FilteredBatch(data=None, records_in=count, records_out=0)
    if fate.pure or batch.is_control:
        STATS["batches_pure"] += 1
        return filter_batch(batch, decision, _dropped_offsets(batch, fate),
                            now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    retained = count - fate.dropped
    horizon = batch.delete_horizon_ms
    if retained == 0:
        emptied = policy.emptied_batch(decision.retention, count)
        data = (batch.raw if emptied == policy.EMPTIED_VERBATIM else
                empty_batch_like(batch) if emptied == policy.EMPTIED_HEADER else None)
        return FilteredBatch(data=data, records_in=count, records_out=0)
    if fate.reasons is None and fate.tombstones >= 0 and policy.copied_verbatim(
            retained, count, policy.needs_delete_horizon(
                horizon is not None, decision.marker_horizon, False, fate.tombstones)):
        # every record stays and no horizon is due: the batch as it is (data batches only
        # reach here: a control batch took the pure path above)
        return FilteredBatch(data=batch.raw, records_in=count, records_out=count)
    section = _Section(batch)
    if section.status != kernels.OK:  # the backward pass parsed it: only NOT_CANONICAL
        STATS["batches_pure"] += 1
        return filter_batch(batch, decision, _dropped_offsets(batch, fate),
                            now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    fixed = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    if abs(batch.base_timestamp) >= _TS_SAFE or abs(batch.max_timestamp) >= _TS_SAFE:
        STATS["batches_pure"] += 1
        return filter_batch(batch, decision, _dropped_offsets(batch, fate),
                            now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    reasons = fate.reasons if fate.reasons is not None else np.zeros(count, np.int8)
    tombstones, first_ts, max_ts = _retained_figures(
        section.layout, count, reasons, batch.base_timestamp, fixed, batch.max_timestamp)
    needs_horizon = policy.needs_delete_horizon(horizon is not None, decision.marker_horizon,
                                                False, tombstones)
    if policy.copied_verbatim(retained, count, needs_horizon):
        return FilteredBatch(data=batch.raw, records_in=count, records_out=count)
    if needs_horizon:
        horizon = policy.delete_horizon_ms(now_ms, delete_retention_ms)
    new_base_ts = horizon if horizon is not None else first_ts
    if abs(new_base_ts) >= _TS_SAFE:
        STATS["batches_pure"] += 1
        return filter_batch(batch, decision, _dropped_offsets(batch, fate),
                            now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    STATS["batches_rebuilt"] += 1
    size = section.buf.shape[0] + 15 * count
    out = np.empty(size, np.uint8)
    written = kernels.rebuild_records(section.buf, section.layout, count, reasons,
                                      batch.base_timestamp, fixed, batch.max_timestamp,
                                      new_base_ts, out)
    data = frame_rebuilt(batch, out[:written].tobytes(), retained, delete_horizon_ms=horizon,
                         base_timestamp=new_base_ts,
                         max_timestamp=batch.max_timestamp if fixed else max_ts)
    return FilteredBatch(data=data, records_in=count, records_out=retained)


_CRC_BYTES = struct.Struct(">I")


def filter_chunk_batches(chunk: bytes, start: int, positions: Sequence[int],
                         base_offsets: Sequence[int], fates: Sequence[BatchFate],
                         decisions: Sequence[BatchDecision], *, now_ms: int,
                         delete_retention_ms: int, expanded: Expanded | None = None
                         ) -> Filtered | None:
    """:func:`filter_fast` for the batches of a chunk of a segment (``chunk`` holds the
    segment's bytes from ``start``; ``positions``, ``base_offsets``, ``fates`` and
    ``decisions`` are its batches', as the backward pass saw them) in one native call. A chunk
    with compressed batches is filtered on its :class:`Expanded` form (``expanded``, as the
    backward pass kept it, or decompressed here): a batch that stays whole is copied from
    ``chunk`` as it is, a rebuilt one is compressed again with its codec
    (:func:`compactor.codec.records.frame_rebuilt`).

    Returns:
        ``(the output batches in runs that lie end to end, each run with its batches'
        sizes; their transaction index entries; records in; records out)``: a run is written
        in one call, and those of ``out`` are views of it, not copies (a fresh buffer a chunk
        would cost a page fault every 4 KiB). ``None`` when the chunk needs the
        batch-by-batch walk (anything but v2 data
        batches the kernels parsed cleanly, or a chunk that is not what the backward pass
        saw: the walk then raises the located error).
    """
    buf = np.frombuffer(chunk, np.uint8)
    frames = frame_chunk(buf, True)
    n = frames.shape[0]
    if (n != len(positions) or (frames[:, F_POS] + start).tolist() != list(positions)
            or frames[:, F_BASE].tolist() != list(base_offsets)):
        return None
    codecs = (frames[:, F_ATTRS] & CODEC_MASK).tolist()
    source_frames = frames
    if any(codecs):
        if expanded is None:
            try:
                expanded = Expanded.of(chunk, frames)
            except Fallback:
                return None  # the walk raises the located error
            STATS["chunks_expanded_again"] += 1
        elif expanded.frames[:, F_CRC].tolist() != frames[:, F_CRC].tolist():
            return None  # not the bytes the backward pass decided
        buf, frames = expanded.buf, expanded.frames
    counts = frames[:, F_COUNT].tolist()
    dec = np.empty((n, 5), np.int64)
    parts = []
    first = records_in = records_out = 0
    for i, (fate, decision, count) in enumerate(zip(fates, decisions, counts)):
        if fate.pure:
            return None
        retention = int(decision.retention)
        if retention == _DELETE and fate.dropped != count:
            return None  # the walk reports the imbalance
        parts.append(fate.reasons if fate.reasons is not None else np.zeros(count, np.int8))
        dec[i] = (first, fate.dropped, fate.tombstones, retention, decision.marker_horizon)
        first += count
        records_in += count
        if retention != _DELETE:
            records_out += count - fate.dropped
    reasons = np.concatenate(parts) if parts else np.zeros(0, np.int8)
    out = np.empty(buf.shape[0] + 15 * first + RECORDS_OFFSET, np.uint8)
    outs = np.empty((n, 3), np.int64)
    status, n_out, _ = filter_chunk(buf, frames, reasons, dec,
                                    policy.delete_horizon_ms(now_ms, delete_retention_ms),
                                    out, outs, np.empty((256, kernels.COLUMNS), np.int64))
    if status != kernels.OK:
        return None
    view = out.data
    runs: list[tuple[Any, list[int]]] = []  # (bytes, each batch's size), in output order
    txn_entries: list[AbortedTxn] = []
    run_start = run_end = 0  # the run of output batches next to each other in ``out``
    run_sizes: list[int] = []
    for at, size, source in outs[:n_out, [O_POS, O_SIZE, O_SOURCE]].tolist():
        entry = None  # the batch's bytes when they are not ``out``'s
        if source < 0:  # the batch as it is: its CRC stands
            source = -1 - source
            if codecs[source]:
                pos = source_frames[source, F_POS]
                entry = bytes(chunk[pos:pos + source_frames[source, F_SIZE]])
        else:
            STATS["batches_rebuilt"] += 1
            if codecs[source] and size > RECORDS_OFFSET:  # records: compressed again
                entry = _compressed(view[at:at + size], codecs[source])
            else:  # uncompressed, or no records left (written uncompressed, as Kafka does)
                _CRC_BYTES.pack_into(view, at + CRC_OFFSET,
                                     crc32c.crc32c(view[at + CRC_START:at + size]))
        if entry is None and at == run_end and run_sizes:
            run_end += size
            run_sizes.append(size)
        else:
            if run_sizes:
                runs.append((view[run_start:run_end], run_sizes))
            if entry is None:
                run_start, run_end, run_sizes = at, at + size, [size]
            else:
                runs.append((entry, [len(entry)]))
                run_sizes = []
        if (txn_entry := decisions[source].txn_entry) is not None:
            txn_entries.append(txn_entry)
    if run_sizes:
        runs.append((view[run_start:run_end], run_sizes))
    STATS["chunks_filtered"] += 1
    return runs, txn_entries, records_in, records_out


_LENGTH_BYTES = struct.Struct(">i")
_ATTRIBUTES_BYTES = struct.Struct(">h")


def _compressed(rebuilt: memoryview, codec: int) -> bytes:
    """A batch the kernels rebuilt uncompressed, its records compressed with ``codec``: the
    header's length, attributes and CRC as :func:`compactor.codec.records.frame_rebuilt`
    writes them."""
    body = compress(codec, bytes(rebuilt[RECORDS_OFFSET:]))
    header = bytearray(rebuilt[:RECORDS_OFFSET])
    _LENGTH_BYTES.pack_into(header, LENGTH_OFFSET, RECORDS_OFFSET - LOG_OVERHEAD + len(body))
    (attributes,) = _ATTRIBUTES_BYTES.unpack_from(header, ATTRIBUTES_OFFSET)
    _ATTRIBUTES_BYTES.pack_into(header, ATTRIBUTES_OFFSET, attributes | codec)
    crc = crc32c.crc32c(header[CRC_START:])
    crc = crc32c.crc32c(body, crc)
    _CRC_BYTES.pack_into(header, CRC_OFFSET, crc)
    return bytes(header) + body


class NativeEngine:
    """The kernels as a :class:`compactor.cleaner.rewrite.Engine`."""

    name = "native"

    def group(self, superseded: Collection[int], first_dirty: int,
              within: np.ndarray | None = None) -> GroupRewrite:
        return NativeRewrite(superseded, first_dirty, within)

    def segment_keys(self, data: bytes, positions: Sequence[int], chunk_bytes: int,
                     window: Window) -> tuple[KeyColumns, Sequence[int]] | None:
        return segment_keys(data, positions, chunk_bytes, window)

    def batch_keys(self, batch: RecordBatch) -> tuple[np.ndarray, list[bytes]] | None:
        return batch_keys(batch)

    def segment_digests(self, data: Any, path: str, segment_base: int, names: Sequence[str],
                        keep: DigestProbe | None) -> SubjectDigests | None:
        from compactor.native.erasure import segment_digests

        return segment_digests(data, path, segment_base, names, keep)

    def combine_keys(self, key_hi: np.ndarray, key_lo: np.ndarray, offset: np.ndarray,
                     in_map: np.ndarray, buckets: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        return combine_keys(key_hi, key_lo, offset, in_map, buckets)

    def segment_headers(self, data: Any, path: str, segment_base: int
                        ) -> list[BatchHeader] | None:
        return segment_headers(data, path, segment_base)


def compile_kernels() -> None:
    """Compile every kernel (or load it from numba's on-disk cache, next to the modules or in
    ``NUMBA_CACHE_DIR``) by calling it once on empty input: about 30 s the first time, under
    a second after. ``make demo``/``make test`` call it, so Spark's Python workers find the
    kernels compiled instead of compiling them side by side; the workers' daemon
    (:mod:`compactor.spark.daemon`) calls it before it forks them.

    The kernels that read a segment's bytes are called with both kinds of buffer they meet: a
    read-only one (``np.frombuffer`` over ``bytes`` or a read-only map) and a writable one.
    numba compiles a signature per kind, and each missing one would cost a worker tens of
    milliseconds of LLVM at its first use (py-spy, a cold demo round)."""
    small = np.zeros(64, np.uint8)
    layout = np.zeros((1, kernels.COLUMNS), np.int64)
    reasons = np.zeros(0, np.int8)
    table = np.zeros(_SLOT << 2, np.int64)  # four empty slots
    used = np.zeros(2, np.int64)
    tally = np.zeros(8, np.int64)
    no_offsets = np.zeros(0, np.int64)
    for none in (np.zeros(0, np.uint8), np.frombuffer(b"", np.uint8)):
        kernels.parse_layout(none, 0, 0, 0, 0, layout)
        kernels.rebuild_records(none, layout, 0, reasons, 0, False, 0, 0, small)
        decide_records(none, layout, 0, 0, 0, False, no_offsets, no_offsets, True, table,
                       small.copy(), used, reasons, tally)
        scan_chunk_keys(none, no_offsets, layout)
        frames = frame_chunk(none, False)
        frame_headers(none, 0, np.zeros((1, F_COLUMNS), np.int64), np.zeros((1, 4), np.int64))
        decide_chunk(none, frames, reasons, 0, no_offsets, no_offsets, True, table,
                     small.copy(), used, tally, reasons, np.zeros((0, 4), np.int64), layout)
        filter_chunk(none, frames, reasons, np.zeros((0, 5), np.int64), 0, small,
                     np.zeros((0, 3), np.int64), layout)
    rehash(table, table.copy())
    _retained_figures(layout, 0, reasons, 0, False, 0)
    _keyed_rows(layout, 0, 0)


def _dropped_offsets(batch: RecordBatch, fate: BatchFate) -> frozenset[int]:
    if fate.reasons is None:
        return frozenset()
    records = batch.compiled_records()
    return frozenset(r.offset for r, code in zip(records, fate.reasons.tolist()) if code)
