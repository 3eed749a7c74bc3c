"""Value types shared by every layer. Offsets ranges are half-open ``[start, end)``; times are
epoch milliseconds in ``int`` fields named ``*_ms``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SEGMENT_NAME_DIGITS = 20


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and partition number; its directory is ``<topic>-<partition>``."""

    topic: str
    partition: int

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return self.dir_name


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentInfo:
    """One segment of a partition as found on storage.

    Attributes:
        base_offset: the offset in the file name (<= the first offset stored in the segment).
        log_path: path of the ``.log`` file.
        size_bytes: size of the ``.log`` file.
        mtime_ms: modification time of the ``.log`` file.
        largest_timestamp_ms: the segment's max timestamp from the last ``.timeindex`` entry, or
            -1 when the time index is missing or empty (Kafka then uses ``mtime_ms`` for
            time-based retention).
        has_index, has_time_index, has_txn_index: which index files exist.
        index_bytes, time_index_bytes: sizes of the ``.index`` and ``.timeindex`` files (the
            active segment's may be preallocated); grouping bounds them by
            ``segment.index.bytes``.
    """

    base_offset: int
    log_path: str
    size_bytes: int
    mtime_ms: int
    largest_timestamp_ms: int
    has_index: bool
    has_time_index: bool
    has_txn_index: bool
    index_bytes: int = 0
    time_index_bytes: int = 0

    @property
    def name(self) -> str:
        return segment_file_prefix(self.base_offset)


def segment_file_prefix(base_offset: int) -> str:
    """The 20-digit zero-padded file-name prefix of a segment (Kafka's
    ``LogFileUtils.filenamePrefixFromOffset``)."""
    return f"{base_offset:0{SEGMENT_NAME_DIGITS}d}"


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEntry:
    """One line of ``leader-epoch-checkpoint``: a leader epoch and its first offset."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitMessage:
    """What an executor reports for one group (see ``compactor.schemas.spark.COMMIT_MESSAGE``).

    Attributes:
        source_bases: base offsets of the group's source segments, ascending.
        cleaned_suffixes: which files were written as ``<base><suffix>.cleaned``.
        log_checksum: CRC-32C of the cleaned ``.log`` bytes (checked again before the swap).
        dropped: records dropped, by reason.
        error: the failure, as ``CompactorError.to_dict()``; nothing was left behind.
        writer: which path wrote the group (``compactor.cleaner.rewrite.PATHS``), empty for
            an erasure's rewrite.
    """

    group_base: int
    source_bases: tuple[int, ...]
    tp_id: int = -1
    cleaned_suffixes: tuple[str, ...] = ()
    log_checksum: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    batches_in: int = 0
    batches_out: int = 0
    records_in: int = 0
    records_out: int = 0
    dropped: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: dict[str, Any] | None = None
    writer: str = ""
    # 1 when the cleaned segment ends with a placeholder header Kafka's cleaner would not keep
    # (compactor.cleaner.rebatch.SegmentBuilder): the report counts them
    placeholders: int = 0
