"""Pure compaction decisions: cleanable range, dirty ratio, groups, producer state,
transaction bookkeeping and per-batch retention (Kafka's ``LogCleanerManager.cleanableOffsets``,
``Cleaner.doClean``).

Everything here is a function of file metadata, batch headers and ``now_ms``: no files, no
Spark, no clock. The Spark job and the reference compactor both call these functions for the
sequential, per-partition part of a round (one row per batch); the per-record part (the
offset map) is done by each of them independently.

Offset ranges are half-open ``[start, end)``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import NamedTuple

from compactor.cluster.release import KAFKA_20452, TARGET
from compactor.codec.indexes import AbortedTxn
from compactor.codec.records import ControlType
from compactor.config import TopicConfig
from compactor.model import SegmentInfo

INT_MAX = 2**31 - 1
NO_CONTROL_TYPE = -1  # data batch, or a control batch emptied by the cleaner


class BatchHeader(NamedTuple):
    """What the sequential part of a round needs of one batch (no records).

    A named tuple, not a dataclass: every scan makes one a batch (a 64 MiB segment of the
    benchmarks' logs holds about 6,000), and a frozen dataclass took 2.2 µs to make, a named
    tuple 1.1 µs with the same keywords and 0.5 by position (measured 30 Nov): the native
    scan's loop makes it by position (``compactor.native.chunks.segment_headers``), the rest
    by keyword.

    Attributes:
        segment_base: base offset of the segment holding the batch.
        position: byte position of the batch in its segment.
        base_offset, last_offset: the batch's first and last offsets (inclusive).
        control_type: :class:`ControlType` value of a control batch's record;
            ``NO_CONTROL_TYPE`` for data batches and emptied control batches.
        horizon_ms: the delete horizon, -1 when the batch has none.
    """

    segment_base: int
    position: int
    size_in_bytes: int
    base_offset: int
    last_offset: int
    magic: int
    is_control: bool
    is_transactional: bool
    control_type: int
    producer_id: int
    producer_epoch: int
    max_timestamp: int
    horizon_ms: int
    records_count: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


# ---------------------------------------------------------------------------------------------
# Producer state (Kafka's ProducerStateManager, replayed from the log)


@dataclass(slots=True)
class ProducerEntry:
    """Replayed state of one producer id.

    Attributes:
        last_data_offset: last offset of its latest data batch at the current epoch; ``None``
            after an epoch bump or when it only wrote markers.
        txn_first_offset: first offset of its open transaction, ``None`` when none is open.
    """

    epoch: int
    last_data_offset: int | None = None
    last_timestamp: int = -1
    txn_first_offset: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerReplay:
    """Producer state at the log end plus what the last stable offset needs.

    Attributes:
        producers: every producer id seen.
        unstable_txn_firsts: first offsets of transactions that are open at the log end or whose
            marker lies at or above the high watermark.
    """

    producers: Mapping[int, ProducerEntry]
    unstable_txn_firsts: tuple[int, ...]

    def active(self, now_ms: int, expiration_ms: int) -> dict[int, ProducerEntry]:
        """Producers Kafka still holds in memory: those with an open transaction or whose last
        timestamp is younger than ``producer.id.expiration.ms``."""
        return {
            pid: entry
            for pid, entry in self.producers.items()
            if entry.txn_first_offset is not None or now_ms - entry.last_timestamp < expiration_ms
        }


def high_watermark(checkpoint: int | None, log_start: int, log_end: int, *,
                   assume_committed: bool = False) -> int:
    """The high watermark a broker loads for a partition: its ``replication-offset-checkpoint``
    entry, or 0 when it has none (``Partition.createLog``: ``offsetCheckpoints.fetch(...)
    .orElse(0L)``), clamped to ``[log_start, log_end]`` (``UnifiedLog.updateHighWatermark``).
    Nothing above it is committed: retention deletes no segment past it
    (``UnifiedLog.deletableSegments``) and the cleaner cleans nothing past the last stable
    offset below it (``LogCleanerManager.cleanableOffsets``). ``assume_committed`` (an archive
    whose checkpoints were not copied, on the operator's word) takes the log end for a missing
    entry instead."""
    if checkpoint is None:
        checkpoint = log_end if assume_committed else 0
    return min(max(checkpoint, log_start), log_end)


def replay_producers(batches: Iterable[BatchHeader], high_watermark: int) -> ProducerReplay:
    """Replay every batch with a producer id, in offset order (``ProducerAppendInfo``).

    An epoch change clears the producer's last data offset; an emptied control batch is
    ignored (it carries no marker); an emptied data batch still updates the state.
    """
    producers: dict[int, ProducerEntry] = {}
    unstable: list[int] = []
    for b in batches:
        if b.producer_id < 0:
            continue
        if b.is_control and b.control_type == NO_CONTROL_TYPE:
            continue
        entry = producers.get(b.producer_id)
        if entry is None:
            entry = producers[b.producer_id] = ProducerEntry(epoch=b.producer_epoch)
        elif entry.epoch != b.producer_epoch:
            entry.epoch = b.producer_epoch
            entry.last_data_offset = None
        entry.last_timestamp = b.max_timestamp
        if b.is_control:
            if b.control_type in (ControlType.ABORT, ControlType.COMMIT):
                if entry.txn_first_offset is not None and b.base_offset >= high_watermark:
                    unstable.append(entry.txn_first_offset)
                entry.txn_first_offset = None
        else:
            entry.last_data_offset = b.last_offset
            if b.is_transactional and entry.txn_first_offset is None:
                entry.txn_first_offset = b.base_offset
    unstable.extend(e.txn_first_offset for e in producers.values()
                    if e.txn_first_offset is not None)
    return ProducerReplay(producers=producers, unstable_txn_firsts=tuple(sorted(unstable)))


# ---------------------------------------------------------------------------------------------
# Cleanable range, dirty ratio, urgency (LogCleanerManager.cleanableOffsets, LogToClean)


def first_dirty_offset(checkpoint: int | None, log_start_offset: int,
                       log_end_offset: int) -> tuple[int, bool]:
    """``(first dirty offset, reset)``: the cleaner checkpoint, or the log start offset when
    there is none or it lies outside ``[log start, log end]`` (then ``reset`` is true and the
    checkpoint must be rewritten even if nothing is cleaned;
    ``LogCleanerManager.cleanableOffsets``)."""
    if checkpoint is None:
        return log_start_offset, False
    if checkpoint < log_start_offset or checkpoint > log_end_offset:
        return log_start_offset, True
    return checkpoint, False


def segment_largest_timestamp(segment: SegmentInfo) -> int:
    """Largest record timestamp, or the ``.log`` mtime when the segment has none >= 0."""
    ts = segment.largest_timestamp_ms
    return ts if ts >= 0 else segment.mtime_ms


def _containing_index(segments: Sequence[SegmentInfo], offset: int) -> int:
    """Index of the segment holding ``offset`` (the first one when it precedes them all)."""
    idx = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= offset:
            idx = i
        else:
            break
    return idx


def first_uncleanable_offset(
    segments: Sequence[SegmentInfo],
    first_dirty: int,
    last_stable_offset: int,
    min_compaction_lag_ms: int,
    now_ms: int,
) -> int:
    """The segment-aligned first uncleanable offset F (``LogCleanerManager.cleanableOffsets``).

    ``min(LSO, active base, first young segment)`` bounded below by the first dirty offset,
    then moved down to the base offset of the non-active segment that contains it (or the
    active segment's base offset).
    """
    active = segments[-1]
    bound = min(last_stable_offset, active.base_offset)
    if min_compaction_lag_ms > 0:
        for seg in segments[_containing_index(segments, first_dirty):-1]:
            if segment_largest_timestamp(seg) > now_ms - min_compaction_lag_ms:
                bound = min(bound, seg.base_offset)
                break
    bound = max(first_dirty, bound)
    if bound >= active.base_offset:
        return active.base_offset
    return segments[_containing_index(segments, bound)].base_offset


def uncleanable_cause(segments: Sequence[SegmentInfo], first_dirty: int, last_stable_offset: int,
                      min_compaction_lag_ms: int, now_ms: int) -> str:
    """Which bound of :func:`first_uncleanable_offset` held the round back, in words with its
    numbers (for explanations; the same order of checks as ``cleanableOffsets``)."""
    active = segments[-1]
    if min_compaction_lag_ms > 0:
        for seg in segments[_containing_index(segments, first_dirty):-1]:
            newest = segment_largest_timestamp(seg)
            if (newest > now_ms - min_compaction_lag_ms
                    and seg.base_offset <= min(last_stable_offset, active.base_offset)):
                return (f"min.compaction.lag.ms={min_compaction_lag_ms} "
                        f"({_duration(min_compaction_lag_ms)}): segment {seg.base_offset}'s newest "
                        f"record is {_duration(max(now_ms - newest, 0))} old")
    if last_stable_offset < active.base_offset:
        return (f"the last stable offset {last_stable_offset} (an open transaction or the high "
                f"watermark)")
    return f"the active segment (base offset {active.base_offset}), which is never cleaned"


def _duration(ms: int) -> str:
    """``2592000000`` -> ``30d``; the largest unit that divides, else one decimal of it."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        if ms >= size:
            return f"{ms // size}{unit}" if ms % size == 0 else f"{ms / size:.1f}{unit}"
    return f"{ms}ms"


def segments_in_range(segments: Sequence[SegmentInfo], start: int,
                      end: int) -> list[SegmentInfo]:
    """Kafka's ``logSegments(start, end)``: from the segment containing ``start`` up to the last
    segment whose base offset is below ``end``; empty when ``start == end``."""
    if start >= end:
        return []
    first = _containing_index(segments, start)
    return [s for s in segments[first:] if s.base_offset < end]


class SkipReason(IntEnum):
    """Why a partition is not cleaned this round."""

    CLEAN = 0
    NOT_COMPACTED = 1
    EMPTY = 2
    NOTHING_CLEANABLE = 3
    BELOW_DIRTY_RATIO = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class CleaningPlan:
    """The plan of one round for one partition (all offsets; ranges ``[start, end)``).

    Attributes:
        first_dirty_offset: D, where the offset map starts.
        first_uncleanable_offset: F, segment aligned; the round rewrites segments below it and
            ends at it (unlimited offset map: end offset = F).
        checkpoint_reset: the cleaner checkpoint was invalid and is rewritten to D.
        groups: base offsets of the source segments of each output segment.
        reason: why it is (not) cleaned.
        held_by: what set the first uncleanable offset (:func:`uncleanable_cause`).
    """

    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    checkpoint_reset: bool
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int
    groups: tuple[tuple[int, ...], ...] = field(default=())
    reason: SkipReason = SkipReason.CLEAN
    held_by: str = ""

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def will_clean(self) -> bool:
        return self.reason == SkipReason.CLEAN


def compaction_delay_ms(segments: Sequence[SegmentInfo], first_batch_timestamps: Mapping[int, int],
                        first_dirty: int, max_compaction_lag_ms: int, now_ms: int) -> int:
    """How long the earliest dirty non-active segment is overdue under
    ``max.compaction.lag.ms`` (KIP-354; > 0 forces a round). Timestamps <= 0 are ignored."""
    stamps = [
        ts for seg in segments[_containing_index(segments, first_dirty):-1]
        if (ts := first_batch_timestamps.get(seg.base_offset, -1)) > 0
    ]
    if not stamps:
        return 0
    clean_until = now_ms - max(max_compaction_lag_ms, 0)
    earliest = min(stamps)
    return clean_until - earliest if earliest < clean_until else 0


def group_segments(segments: Sequence[SegmentInfo], first_uncleanable: int, segment_bytes: int,
                   segment_index_bytes: int) -> tuple[tuple[int, ...], ...]:
    """Greedy grouping of ``segments`` (in offset order) into output segments
    (``Cleaner.groupSegmentsBySize``)."""
    groups: list[tuple[int, ...]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [first]
        log_size, index_size = first.size_bytes, first.index_bytes
        time_size = first.time_index_bytes
        i += 1
        while i < len(segments):
            s = segments[i]
            estimated_last = (segments[i + 1].base_offset - 1 if i + 1 < len(segments)
                              else first_uncleanable - 1)
            fits = (log_size + s.size_bytes <= segment_bytes
                    and index_size + s.index_bytes <= segment_index_bytes
                    and time_size + s.time_index_bytes <= segment_index_bytes
                    and (s.size_bytes == 0 or estimated_last - first.base_offset <= INT_MAX))
            if not fits:
                break
            group.append(s)
            log_size += s.size_bytes
            index_size += s.index_bytes
            time_size += s.time_index_bytes
            i += 1
        groups.append(tuple(s.base_offset for s in group))
    return tuple(groups)


def fits_one_group(segments: Sequence[SegmentInfo], segment_bytes: int,
                   segment_index_bytes: int) -> bool:
    """Whether :func:`group_segments` can only make one group of any run of a partition's
    ``segments`` that a round can clean: all of them but the last (the active segment, which
    no round includes: :func:`first_uncleanable_offset` stops at its base) together stay
    within the group's size limits. (The limit on the offsets a group spans is not checked: a
    round that still needs two groups is planned again the general way, see
    :func:`compactor.spark.stages.clean_in_one_pass`.)"""
    inactive = segments[:-1]
    return (sum(s.size_bytes for s in inactive) <= segment_bytes
            and sum(s.index_bytes for s in inactive) <= segment_index_bytes
            and sum(s.time_index_bytes for s in inactive) <= segment_index_bytes)


def plan_partition(
    *,
    segments: Sequence[SegmentInfo],
    batches: Sequence[BatchHeader],
    config: TopicConfig,
    cleaner_checkpoint: int | None,
    log_start_checkpoint: int | None,
    replication_checkpoint: int | None,
    now_ms: int,
    assume_committed: bool = False,
) -> CleaningPlan:
    """Plan one round for one partition (``LogCleanerManager.grabFilthiestCompactedLog``,
``cleanableOffsets``, ``LogToClean``, ``Cleaner.groupSegmentsBySize``).

    Args:
        segments: the partition's segments in offset order (the last one is active).
        batches: headers of every batch of the partition, in offset order.
        replication_checkpoint: the high watermark on disk (:func:`high_watermark`: 0 when
            absent, the log end offset with ``assume_committed``).
    """
    if not segments:
        return CleaningPlan(log_start_offset=0, log_end_offset=0, high_watermark=0,
                            last_stable_offset=0, first_dirty_offset=0,
                            first_uncleanable_offset=0, checkpoint_reset=False, clean_bytes=0,
                            cleanable_bytes=0, compaction_delay_ms=0, reason=SkipReason.EMPTY)
    log_end = max((b.next_offset for b in batches), default=segments[-1].base_offset)
    log_end = max(log_end, segments[-1].base_offset)
    log_start = max(log_start_checkpoint or 0, segments[0].base_offset)
    hw = high_watermark(replication_checkpoint, log_start, log_end,
                        assume_committed=assume_committed)
    replay = replay_producers(batches, hw)
    lso = min([hw, *replay.unstable_txn_firsts])
    first_dirty, reset = first_dirty_offset(cleaner_checkpoint, log_start, log_end)
    first_uncleanable = first_uncleanable_offset(segments, first_dirty, lso,
                                                 config.min_compaction_lag_ms, now_ms)
    clean_bytes = sum(s.size_bytes for s in segments if s.base_offset < first_dirty)
    cleanable = segments_in_range(segments, min(first_dirty, first_uncleanable),
                                  first_uncleanable)
    cleanable_bytes = sum(s.size_bytes for s in cleanable)
    first_stamps: dict[int, int] = {}
    for b in batches:
        first_stamps.setdefault(b.segment_base, b.max_timestamp)
    delay = compaction_delay_ms(segments, first_stamps, first_dirty,
                                config.max_compaction_lag_ms, now_ms)
    plan = CleaningPlan(
        log_start_offset=log_start, log_end_offset=log_end, high_watermark=hw,
        last_stable_offset=lso, first_dirty_offset=first_dirty,
        first_uncleanable_offset=first_uncleanable, checkpoint_reset=reset,
        clean_bytes=clean_bytes, cleanable_bytes=cleanable_bytes, compaction_delay_ms=delay,
        held_by=uncleanable_cause(segments, first_dirty, lso, config.min_compaction_lag_ms,
                                  now_ms),
    )
    if not config.compact:
        reason = SkipReason.NOT_COMPACTED
    elif log_end <= log_start or not any(s.size_bytes for s in segments):
        reason = SkipReason.EMPTY
    elif cleanable_bytes == 0 or first_uncleanable <= first_dirty:
        reason = SkipReason.NOTHING_CLEANABLE
    elif not (delay > 0 or plan.dirty_ratio > config.min_cleanable_dirty_ratio):
        reason = SkipReason.BELOW_DIRTY_RATIO
    else:
        reason = SkipReason.CLEAN
    if reason != SkipReason.CLEAN:
        return replace(plan, reason=reason)
    in_round = [s for s in segments if s.base_offset < first_uncleanable]
    groups = group_segments(in_round, first_uncleanable, config.segment_bytes,
                            config.segment_index_bytes)
    return replace(plan, groups=groups)


def legacy_horizon_ms(segments: Sequence[SegmentInfo], first_dirty: int,
                      delete_retention_ms: int) -> int:
    """mtime of the last segment below the first dirty offset minus ``delete.retention.ms``;
    0 when there is none (v0/v1 tombstones, ``Cleaner.cleanSegments``' legacy horizon)."""
    below = [s for s in segments if s.base_offset < first_dirty]
    return below[-1].mtime_ms - delete_retention_ms if below else 0


# ---------------------------------------------------------------------------------------------
# Transaction bookkeeping and batch retention (CleanedTransactionMetadata, checkBatchRetention)


class BatchRetention(IntEnum):
    """``MemoryRecords.BatchRetention``."""

    DELETE = 0  # drop the whole batch without looking at records
    DELETE_EMPTY = 1  # filter records; drop the batch when none survive
    RETAIN_EMPTY = 2  # filter records; keep an empty header when none survive


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchDecision:
    """The decision for one batch of the round.

    Attributes:
        aborted: a data batch of an aborted transaction (its records are dropped and never
            enter the offset map).
        discard_records: every record of the batch goes (aborted data, or a discardable
            marker whose horizon passed).
        retain_deletes: tombstones of this batch are still within their delete horizon.
        marker_horizon: a discardable marker batch that has no horizon yet: it is rebuilt with
            horizon ``now + delete.retention.ms`` (KIP-534).
        txn_entry: the ``.txnindex`` entry this (ABORT marker) batch carries into the cleaned
            segment.
    """

    retention: BatchRetention
    aborted: bool
    discard_records: bool
    retain_deletes: bool
    marker_horizon: bool
    txn_entry: AbortedTxn | None = None


# Why a record goes, per record (0: it stays). The pure writer and the native kernels
# (``compactor/native/keytable.py`` compiles :func:`record_fate` as it is) decide by these.
KEPT, NULL_KEY, FROM_MAP, LOCAL, EXPIRED, ABORTED, MARKER_EXPIRED = range(7)
REASON_NAMES = {NULL_KEY: "null_key", FROM_MAP: "superseded", LOCAL: "superseded",
                EXPIRED: "tombstone_expired", ABORTED: "aborted",
                MARKER_EXPIRED: "marker_expired"}


def record_fate(keyed: bool, in_map: bool, later: bool, tombstone: bool,
                expire_tombstones: bool) -> int:
    """Why one record of a data batch that is not discarded goes, or :data:`KEPT`
    (``Cleaner.shouldRetainRecord``): a null key never stays (the cleaner cannot compact it);
    a record the offset map supersedes across groups (``in_map``) or that a later record of
    the same key in the group supersedes (``later``) goes; a tombstone goes once its batch's
    delete horizon has passed (``expire_tombstones``, KIP-534).

    Plain Python on scalars: numba compiles this very function into the native kernels.
    """
    if not keyed:
        return NULL_KEY
    if in_map:
        return FROM_MAP
    if later:
        return LOCAL
    if expire_tombstones and tombstone:
        return EXPIRED
    return KEPT


# The batch-rebuild rules (``MemoryRecords.filterTo``): what becomes of one source batch once
# its records' fates are known. Plain Python on scalars, as record_fate: the pure path
# (compactor/cleaner/rebatch.py) calls them and numba compiles them into the native kernels
# (compactor/native/chunks.py), whose disk cache is keyed on this file (compactor.native.cache).

#: what :func:`emptied_batch` says of a batch none of whose records stay
EMPTIED_DROPPED, EMPTIED_VERBATIM, EMPTIED_HEADER = 0, 1, 2
_RETAIN_EMPTY = int(BatchRetention.RETAIN_EMPTY)  # a plain int: numba compiles the rules


def delete_horizon_ms(now_ms: int, delete_retention_ms: int) -> int:
    """The delete horizon a round gives a batch that needs one (KIP-534:
    ``MemoryRecords.filterTo`` builds it with ``currentTime + deleteRetentionMs``, the
    round's ``now`` here): the time after which its tombstones and markers may go."""
    return now_ms + delete_retention_ms


def needs_delete_horizon(has_horizon: bool, marker_horizon: bool, is_control: bool,
                         tombstones: int) -> bool:
    """Whether a batch that keeps records is rebuilt with a delete horizon
    (``MemoryRecords.filterTo``'s ``needToSetDeleteHorizon``): it has none yet and it is a
    marker the round gives a horizon (``marker_horizon``, KIP-534's two-round marker
    removal) or a data batch that keeps ``tombstones`` (records without a value)."""
    return not has_horizon and (marker_horizon or (not is_control and tombstones > 0))


def emptied_batch(retention: int, records: int) -> int:
    """What becomes of a batch none of whose ``records`` stay
    (``MemoryRecords.filterTo``): under :attr:`BatchRetention.RETAIN_EMPTY` (the round-bound
    batch, the last of a producer's) an empty header over its offsets
    (:data:`EMPTIED_HEADER`; ``writeEmptyHeader``), or the batch as it is when it had no
    records at all (:data:`EMPTIED_VERBATIM`); otherwise it goes (:data:`EMPTIED_DROPPED`)."""
    if retention != _RETAIN_EMPTY:
        return EMPTIED_DROPPED
    return EMPTIED_VERBATIM if records == 0 else EMPTIED_HEADER


def copied_verbatim(retained: int, records: int, needs_horizon: bool) -> bool:
    """Whether a batch that keeps records is written as it is, CRC and all
    (``MemoryRecords.filterTo``'s ``writeOriginalBatch``): every record stays and no delete
    horizon is due."""
    return retained == records and not needs_horizon


#: an offset no record reaches: a batch whose keys never enter the offset map
NEVER = 2**63 - 1


def map_entry_offset(aborted: bool, first_dirty: int) -> int:
    """The lowest offset from which a data batch's keyed records enter the offset map (so
    that they supersede earlier records of their key): the first dirty offset, as
    ``Cleaner.buildOffsetMapForSegment`` maps the dirty section only, or :data:`NEVER` for
    a batch of an aborted transaction (its records go and supersede nothing,
    ``CleanedTransactionMetadata``). Per batch, so that the per-record test is one
    comparison on both paths."""
    return NEVER if aborted else first_dirty


class TransactionTracker:
    """``CleanedTransactionMetadata``: aborted transactions are popped from a heap by first
    offset as batches go by; markers learn whether any batch of their transaction was seen in
    this round (``CleanedTransactionMetadata``)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        unique = {(t.first_offset, t.producer_id, t.last_offset): t for t in aborted}
        self._heap = [(k[0], k[1], k[2], t) for k, t in unique.items()]
        heapq.heapify(self._heap)
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}
        self._ongoing_committed: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._heap and self._heap[0][0] <= offset:
            txn = heapq.heappop(self._heap)[3]
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))

    def on_data_batch(self, b: BatchHeader) -> bool:
        """True when ``b`` belongs to an aborted transaction (discard)."""
        self._consume_up_to(b.last_offset)
        if not b.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(b.producer_id)
        if ongoing is not None:
            self._ongoing_aborted[b.producer_id] = (ongoing[0], True)
            return True
        self._ongoing_committed.add(b.producer_id)
        return False

    def on_control_batch(self, b: BatchHeader) -> tuple[bool, AbortedTxn | None]:
        """``(discardable, txn index entry to keep)`` for a control batch."""
        self._consume_up_to(b.last_offset)
        if b.control_type == NO_CONTROL_TYPE:
            return True, None
        if b.control_type == ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(b.producer_id, None)
            if ongoing is not None and ongoing[1]:
                return False, ongoing[0]
            return True, None
        if b.control_type == ControlType.COMMIT:
            seen = b.producer_id in self._ongoing_committed
            self._ongoing_committed.discard(b.producer_id)
            return not seen, None
        return False, None


def decide_batches(
    batches: Iterable[BatchHeader],
    *,
    aborted_txns: Iterable[AbortedTxn],
    active_producers: Mapping[int, ProducerEntry],
    round_end_offset: int,
    legacy_retain_deletes: Mapping[int, bool],
    now_ms: int,
) -> list[BatchDecision]:
    """Decide every batch of the round, in offset order (``CleanedTransactionMetadata``,
``Cleaner.cleanInto``'s batch retention, KIP-534 delete horizons).

    Args:
        batches: headers of the batches of the round (all segments below the round's end
            offset), in offset order.
        round_end_offset: the batch whose next offset this is is kept (emptied if needed), so
            the log's last offset is not lost: :func:`last_batch_anchor`.
        legacy_retain_deletes: per segment base offset, whether v0/v1 tombstones of that
            segment are retained (segment mtime > legacy horizon).
    """
    tracker = TransactionTracker(aborted_txns)
    decisions = []
    for b in batches:
        txn_entry = None
        if b.is_control:
            can_discard, txn_entry = tracker.on_control_batch(b)
            discard = can_discard and b.horizon_ms >= 0 and b.horizon_ms <= now_ms
        else:
            can_discard = tracker.on_data_batch(b)
            discard = can_discard
        retention = _retention(b, discard, active_producers, round_end_offset)
        if b.magic >= 2:
            retain_deletes = b.horizon_ms < 0 or now_ms < b.horizon_ms
        else:
            retain_deletes = legacy_retain_deletes.get(b.segment_base, True)
        decisions.append(BatchDecision(
            retention=retention,
            aborted=can_discard and not b.is_control,
            discard_records=discard,
            retain_deletes=retain_deletes,
            marker_horizon=(can_discard and b.is_control and not discard and b.horizon_ms < 0
                            and b.control_type != NO_CONTROL_TYPE),
            txn_entry=txn_entry,
        ))
    return decisions


def last_batch_anchor(plan: CleaningPlan, kafka_release: tuple[int, int]) -> int:
    """The next offset of the one batch a round keeps even when emptied. Kafka 4.1-4.3 keep
    the round's last batch, the one ending at the first uncleanable offset (KAFKA-17076:
    ``Cleaner.cleanSegments`` passes ``upperBoundOffset``); 4.4 keeps it only when it ends at
    the high watermark, the only place where an empty batch is needed to keep the log end
    offset (KAFKA-20452: ``log.highWatermark()`` instead). The round ends at or below the
    high watermark, so 4.4 keeps the same batch or none."""
    if kafka_release >= KAFKA_20452:
        return plan.high_watermark
    return plan.first_uncleanable_offset


def _retention(b: BatchHeader, discard: bool, active: Mapping[int, ProducerEntry],
               round_end_offset: int) -> BatchRetention:
    entry = active.get(b.producer_id) if b.producer_id >= 0 else None
    if entry is not None:
        if entry.last_data_offset is not None:
            last_of_producer = b.last_offset == entry.last_data_offset
        else:
            last_of_producer = b.is_control and b.producer_epoch == entry.epoch
        if last_of_producer:
            return BatchRetention.RETAIN_EMPTY
    if b.next_offset == round_end_offset:
        return BatchRetention.RETAIN_EMPTY
    return BatchRetention.DELETE if discard else BatchRetention.DELETE_EMPTY


# ---------------------------------------------------------------------------------------------
# Inputs of one partition's round, shipped to executors


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionInput:
    """Everything the round of one partition needs besides the batches (small, picklable).

    Attributes:
        path: the partition directory.
        aborted_txns: every ``.txnindex`` entry of the partition.
    """

    path: str
    segments: tuple[SegmentInfo, ...]
    config: TopicConfig
    cleaner_checkpoint: int | None
    log_start_checkpoint: int | None
    replication_checkpoint: int | None
    aborted_txns: tuple[AbortedTxn, ...]
    now_ms: int
    assume_committed: bool = False  # a missing replication checkpoint entry: the log end
    kafka_release: tuple[int, int] = TARGET  # whose rules (compactor.cluster.release)
    # (name, identity) of every file of the partition when it was listed, before the scan:
    # what the commit proves unchanged (compactor.log.swap.check_unchanged)
    sources: tuple[tuple[str, str], ...] = ()

    def plan(self, batches: Sequence[BatchHeader]) -> CleaningPlan:
        return plan_partition(
            segments=self.segments, batches=batches, config=self.config,
            cleaner_checkpoint=self.cleaner_checkpoint,
            log_start_checkpoint=self.log_start_checkpoint,
            replication_checkpoint=self.replication_checkpoint, now_ms=self.now_ms,
            assume_committed=self.assume_committed,
        )

    def decide(self, plan: CleaningPlan,
               batches: Sequence[BatchHeader]) -> list[tuple[BatchHeader, BatchDecision]]:
        """Decisions for the batches of the round (segments below the first uncleanable
        offset), in offset order."""
        replay = replay_producers(batches, plan.high_watermark)
        active = replay.active(self.now_ms, self.config.producer_id_expiration_ms)
        horizon = legacy_horizon_ms(self.segments, plan.first_dirty_offset,
                                    self.config.delete_retention_ms)
        legacy_retain = {s.base_offset: s.mtime_ms > horizon for s in self.segments}
        in_round = [b for b in batches if b.segment_base < plan.first_uncleanable_offset]
        decisions = decide_batches(
            in_round, aborted_txns=self.aborted_txns, active_producers=active,
            round_end_offset=last_batch_anchor(plan, self.kafka_release),
            legacy_retain_deletes=legacy_retain, now_ms=self.now_ms,
        )
        return list(zip(in_round, decisions, strict=True))


def explain(plan: CleaningPlan, config: TopicConfig) -> str:
    """Why the plan cleans or skips the partition, with the numbers it compared (the report's
    ``explanation`` and the human summary)."""
    ratio = (f"dirty ratio {plan.dirty_ratio:.2f} ({plan.cleanable_bytes:,} cleanable of "
             f"{plan.total_bytes:,} bytes)")
    threshold = f"min.cleanable.dirty.ratio {config.min_cleanable_dirty_ratio:g}"
    span = f"offsets [{plan.first_dirty_offset}, {plan.first_uncleanable_offset})"
    if plan.reason == SkipReason.CLEAN:
        if plan.compaction_delay_ms > 0:
            why = (f"max.compaction.lag.ms={config.max_compaction_lag_ms} passed "
                   f"{plan.compaction_delay_ms:,} ms ago for the oldest dirty segment ({ratio})")
        else:
            why = f"{ratio} > {threshold}"
        return f"{why}: cleans {span} in {len(plan.groups)} output segment(s)"
    if plan.reason == SkipReason.BELOW_DIRTY_RATIO:
        return f"{ratio} <= {threshold}, and no dirty segment is past max.compaction.lag.ms"
    if plan.reason == SkipReason.NOTHING_CLEANABLE:
        dirty = plan.log_end_offset - plan.first_dirty_offset
        return (f"nothing cleanable: the {dirty:,} dirty offsets [{plan.first_dirty_offset}, "
                f"{plan.log_end_offset}) are held back by {plan.held_by}")
    if plan.reason == SkipReason.EMPTY:
        return (f"no records (log start offset {plan.log_start_offset}, log end offset "
                f"{plan.log_end_offset})")
    return f"cleanup.policy={','.join(sorted(config.cleanup_policy))} has no compact"
