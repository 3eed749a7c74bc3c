"""The checks a segment and its indexes must pass, one definition for every command.

``inspect --verify`` reports them; ``plan``, ``compact`` and ``erase apply`` refuse a partition
that fails any of them (a rewrite would otherwise turn corrupt input into valid-looking output
and erase the evidence). Pure: batch headers and index bytes in, errors out; callers read the
files.

* batch offsets increase within a segment and stay in ``[segment base, next segment base)``,
  and no offset lies more than ``Integer.MAX_VALUE`` above the segment base (Kafka's
  ``LogSegment`` keeps offsets relative to the base in 4 bytes: ``LogSegment.append`` refuses
  such a batch, ``LogCleaner.groupSegmentsBySize`` never groups past it);
* every ``.index`` entry points at a batch start, the batch there starts at or before the
  entry's offset and the batch before it ends below it;
* every ``.timeindex`` entry names an offset of the segment and a timestamp the segment holds;
* every ``.txnindex`` entry names an ABORT marker of the same producer at its last offset, and
  every ABORT marker whose transaction has data in the partition has an entry starting at or
  before that data.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from compactor.cleaner.policy import BatchHeader
from compactor.codec.indexes import (
    AbortedTxn,
    decode_offset_index,
    decode_time_index,
    decode_txn_index,
    offset_index_columns,
    time_index_columns,
)
from compactor.codec.records import ControlType
from compactor.errors import BadOffsetsError, CompactorError, CorruptIndexError
from compactor.model import segment_file_prefix

MAX_RELATIVE_OFFSET = 2**31 - 1  # Integer.MAX_VALUE


def offset_problems(path: str, base: int, next_base: int | None,
                    headers: Sequence[BatchHeader]) -> list[CompactorError]:
    """Offsets of a segment's batches (in file order) against each other, the segment's base
    and the next segment's base (``None`` for the last segment)."""
    out: list[CompactorError] = []

    def problem(h: BatchHeader, message: str) -> None:
        out.append(BadOffsetsError(message, path=path, position=h.position,
                                   base_offset=h.base_offset))

    previous: BatchHeader | None = None
    for h in headers:
        if previous is None and h.base_offset < base:
            problem(h, f"first batch starts below the segment base offset {base} (a misnamed "
                       "segment file)")
        if previous is not None and h.base_offset <= previous.last_offset:
            problem(h, f"batch does not follow the previous batch's last offset "
                       f"{previous.last_offset} (offsets go backwards)")
        if next_base is not None and h.last_offset >= next_base:
            problem(h, f"batch runs into the next segment, which starts at {next_base} "
                       "(overlapping segments)")
        if h.last_offset - base > MAX_RELATIVE_OFFSET:
            problem(h, f"last offset {h.last_offset} is more than 2^31-1 above the segment "
                       f"base {base}: Kafka cannot index it (LogSegment keeps 4-byte "
                       "relative offsets)")
        previous = h
    return out


def index_problems(log_path: str, base: int, headers: Sequence[BatchHeader], *,
                   is_active: bool, index: bytes | None = None, time_index: bytes | None = None,
                   txn_index: bytes | None = None, readable_end: int | None = None,
                   knock_on: list[CompactorError] | None = None) -> list[CompactorError]:
    """A segment's ``.index``, ``.timeindex`` and ``.txnindex`` (``None``: the file does not
    exist) against its batches. The active segment's indexes may keep preallocated zero
    slots; a rolled segment's may not (``LogSegment.onBecomeInactiveSegment`` trims them).

    ``readable_end``: the byte position where the ``.log`` stopped decoding (a corruption;
    ``headers`` end there). Entries that point past it cannot be checked against batches that
    were never read; their problems follow from the corruption and go to ``knock_on`` instead
    of the result (one corruption, not hundreds of index errors)."""
    prefix = log_path[: -len(".log")]
    out: list[CompactorError] = []
    beyond: list[CompactorError] = knock_on if knock_on is not None else out
    starts = {h.position: i for i, h in enumerate(headers)}
    last_offset = headers[-1].last_offset if headers else base - 1
    max_timestamp = max((h.max_timestamp for h in headers), default=-1)

    def problem(path: str, message: str, position: int | None = None, *,
                past_end: bool = False) -> None:
        error = CorruptIndexError(message, path=path, position=position, base_offset=base)
        (beyond if past_end and readable_end is not None else out).append(error)

    def decoded(path: str, data: bytes | None, decode: Any, **kwargs: Any) -> list[Any]:
        if data is None:
            return []
        try:
            return list(decode(data, base, path=path, **kwargs))
        except CompactorError as err:
            out.append(err)
            return []

    if _offset_and_time_indexes_clean(base, headers, is_active, index, time_index):
        index = time_index = None  # nothing either loop below would find
    index_path = prefix + ".index"
    for slot, entry in enumerate(decoded(index_path, index, decode_offset_index,
                                         allow_preallocated=is_active)):
        at = slot * 8
        i = starts.get(entry.position)
        if i is None:
            problem(index_path, f"entry ({entry.offset}, position {entry.position}) does not "
                    "point at a batch start", at,
                    past_end=readable_end is not None and entry.position >= readable_end)
        elif headers[i].base_offset > entry.offset:
            problem(index_path, f"entry offset {entry.offset} is below the base offset "
                    f"{headers[i].base_offset} of the batch it points at", at)
        elif i > 0 and headers[i - 1].last_offset >= entry.offset:
            problem(index_path, f"entry offset {entry.offset} is not above the previous "
                    f"batch's last offset {headers[i - 1].last_offset}", at)
        elif entry.offset > last_offset:
            problem(index_path, f"entry offset {entry.offset} is past the segment's last "
                    f"offset {last_offset}", at, past_end=True)

    time_path = prefix + ".timeindex"
    # the largest timestamp of the batches up to each one: what Kafka's LogSegment.append
    # indexes (maxTimestampSoFar, at the offset where it was found)
    so_far: list[int] = []
    for h in headers:
        so_far.append(max(h.max_timestamp, so_far[-1] if so_far else -1))
    last_offsets = [h.last_offset for h in headers]
    entries = decoded(time_path, time_index, decode_time_index, allow_preallocated=is_active)
    for slot, t in enumerate(entries):
        j = bisect.bisect_left(last_offsets, t.offset)
        if not base <= t.offset <= max(last_offset, base):
            problem(time_path, f"entry offset {t.offset} is outside the segment "
                    f"[{base}, {last_offset}]", slot * 12, past_end=t.offset > last_offset)
        elif t.timestamp > max_timestamp:
            problem(time_path, f"entry timestamp {t.timestamp} exceeds the segment's max "
                    f"timestamp {max_timestamp}", slot * 12, past_end=True)
        elif j < len(headers) and headers[j].base_offset <= t.offset and t.timestamp < so_far[j]:
            problem(time_path, f"entry timestamp {t.timestamp} at offset {t.offset} is below "
                    f"the largest timestamp {so_far[j]} of the batches up to that offset "
                    f"(Kafka indexes the largest so far: LogSegment.append)", slot * 12)
    if (not is_active and entries and max_timestamp >= 0 and readable_end is None
            and entries[-1].timestamp < max_timestamp):  # (the same as the clean check's)
        # LogSegment.onBecomeInactiveSegment indexes the segment's largest timestamp last, and
        # a broker takes the last entry as that (LogSegment.largestTimestamp) for retention.ms
        problem(time_path, f"the last entry's timestamp {entries[-1].timestamp} is below the "
                f"segment's largest timestamp {max_timestamp}: a broker takes the last entry "
                f"as the segment's largest timestamp, so retention.ms would delete the segment "
                f"before its records expire", (len(entries) - 1) * 12)

    txn_path = prefix + ".txnindex"
    aborts = {h.base_offset: h.producer_id for h in headers if _is_abort(h)}
    for slot, entry in enumerate(decoded(txn_path, txn_index, decode_txn_index)):
        if aborts.get(entry.last_offset) != entry.producer_id:
            problem(txn_path, f"entry for producer {entry.producer_id} names offset "
                    f"{entry.last_offset}, which is not an ABORT marker of that producer",
                    slot * 34, past_end=entry.last_offset > last_offset)
    return out


def _offset_and_time_indexes_clean(base: int, headers: Sequence[BatchHeader], is_active: bool,
                                   index: bytes | None, time_index: bytes | None) -> bool:
    """Whether :func:`index_problems` finds nothing in the ``.index`` and ``.timeindex``:
    each of its checks made on whole columns (a segment's indexes hold tens of thousands of
    entries, and the loops took 0.4-0.5 s of every scan of the 1.1 GB benchmark log, 30 Nov).
    ``False`` says only that the loops must look (they find and place each problem); it is
    never ``True`` where they would find one (property-tested against them)."""
    count = len(headers)
    positions = np.fromiter((h.position for h in headers), np.int64, count)
    firsts = np.fromiter((h.base_offset for h in headers), np.int64, count)
    lasts = np.fromiter((h.last_offset for h in headers), np.int64, count)
    if count and ((np.diff(positions) <= 0).any() or (np.diff(lasts) <= 0).any()):
        return False  # out of order (offset_problems reports it): the loops decide
    last_offset = int(lasts[-1]) if count else base - 1
    if index is not None:
        columns = offset_index_columns(index, allow_preallocated=is_active)
        if columns is None:
            return False
        offsets, at = base + columns[0], columns[1]
        i = np.searchsorted(positions, at)
        found = i < count
        if not found.all() or (positions[i[found]] != at).any():
            return False  # an entry that does not point at a batch start
        if (firsts[i] > offsets).any() or (offsets > last_offset).any():
            return False
        if ((i > 0) & (lasts[np.maximum(i - 1, 0)] >= offsets)).any():
            return False
    if time_index is not None:
        columns = time_index_columns(time_index, allow_preallocated=is_active)
        if columns is None:
            return False
        stamps, offsets = columns[0], base + columns[1]
        maxima = np.fromiter((h.max_timestamp for h in headers), np.int64, count)
        largest = int(maxima.max()) if count else -1
        so_far = np.maximum.accumulate(np.maximum(maxima, -1))
        j = np.searchsorted(lasts, offsets, side="left")
        inside = j < count
        if ((offsets < base) | (offsets > max(last_offset, base)) | (stamps > largest)).any():
            return False
        jj = j[inside]
        if ((firsts[jj] <= offsets[inside]) & (stamps[inside] < so_far[jj])).any():
            return False
        if (not is_active and len(stamps) and largest >= 0
                and int(stamps[-1]) < largest):
            return False
    return True


def txn_problems(partition_dir: str, headers: Iterable[BatchHeader],
                 entries: Iterable[AbortedTxn]) -> list[CompactorError]:
    """Every ABORT marker whose transaction has data in the partition needs a ``.txnindex``
    entry (in the marker's segment) starting at or before that data: without it a reader
    (and a cleaner) would take the aborted data for committed (``LogCleaner`` learns aborted
    transactions only from the index). ``headers`` in offset order; ``entries`` by segment
    base."""
    out: list[CompactorError] = []
    first_data: dict[int, int] = {}
    by_marker = {e.last_offset: e for e in entries}
    for h in headers:
        if not h.is_transactional:
            continue
        if not h.is_control:
            first_data.setdefault(h.producer_id, h.base_offset)
            continue
        if h.control_type < 0:  # an emptied marker carries no type
            continue
        first = first_data.pop(h.producer_id, None)
        if first is None or not _is_abort(h):
            continue
        path = f"{partition_dir}/{segment_file_prefix(h.segment_base)}.txnindex"
        entry = by_marker.get(h.base_offset)
        if entry is None:
            out.append(CorruptIndexError(
                f"ABORT marker at offset {h.base_offset} (producer {h.producer_id}) has "
                f"aborted data from offset {first} but no transaction index entry",
                path=path, base_offset=h.segment_base))
        elif entry.first_offset > first:
            out.append(CorruptIndexError(
                f"entry for the ABORT marker at {h.base_offset} starts at "
                f"{entry.first_offset}, after the transaction's first data offset {first}",
                path=path, base_offset=h.segment_base))
    return out


def _is_abort(h: BatchHeader) -> bool:
    return h.is_control and h.control_type == int(ControlType.ABORT)
