"""Driver side of a round: swap cleaned segments in with Kafka's protocol, then move the
cleaner checkpoint (kafka-semantics §4.16, §4.18).

For one group (one new segment replacing source segments ``S1 < S2 < ... < Sn``, the new one
with base offset ``S1``), in this order, each step durable before the next:

1. rename the new files ``.cleaned`` -> ``.swap`` (``.log`` first, then the indexes);
2. rename every file of each old segment (``.log`` and indexes) to ``.deleted``, ascending;
3. rename the new files ``.swap`` -> final name, fsync the directory;
4. delete the ``.deleted`` files and the producer snapshots of ``S2..Sn``.

What recovery (:func:`compactor.logdir.recover_partition`, Kafka's ``LogLoader``) does after a
crash at each point:

* during 1 (some files still ``.cleaned``): every ``.swap`` at or above the smallest
  ``.cleaned`` offset and every ``.cleaned`` file is deleted -> the old segments stay;
* after 1, during 2 or 3: the ``.swap`` set is complete -> files of the old segments in
  ``[S1, next offset of the new segment)`` are deleted and the ``.swap`` files renamed -> the new
  segment wins;
* during 4: only ``.deleted`` files remain -> deleted -> the new segment wins.

So every crash leaves exactly the old or exactly the new segments. The checkpoint moves only
after every group of the partition is swapped; a crash before that makes the next round
re-clean from the previous checkpoint, which is harmless.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from compactor import storage
from compactor.codec.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    format_offset_checkpoint,
    parse_offset_checkpoint,
)
from compactor.errors import CommitConflictError
from compactor.logdir import (
    DELETED_SUFFIX,
    INDEX_FILE_SUFFIXES,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    segment_path,
)
from compactor.model import TopicPartition
from compactor.writer import CLEANED_FILE_SUFFIXES, CommitMessage, cleaned_path


def abort_group(partition_dir: str, message: CommitMessage) -> None:
    """Remove the ``.cleaned`` files of a group that will not be committed."""
    for suffix in CLEANED_FILE_SUFFIXES:
        storage.remove(cleaned_path(partition_dir, message.group_base, suffix), missing_ok=True)


def swap_group(partition_dir: str, message: CommitMessage) -> None:
    """Replace the group's source segments by its cleaned segment (module docstring).

    Raises:
        CommitConflictError: the cleaned log is missing or not what the executor wrote.
    """
    base = message.group_base
    log = cleaned_path(partition_dir, base, LOG_SUFFIX)
    if not storage.exists(log) or zlib.crc32(storage.read_bytes(log)) != message.log_checksum:
        raise CommitConflictError(
            "cleaned segment is missing or differs from what the executor reported",
            path=log, base_offset=base,
            remedy="another run may be working on this log dir; rerun when it is done",
        )
    for suffix in message.cleaned_suffixes:  # .log first: a .log.swap marks a complete set
        storage.rename(cleaned_path(partition_dir, base, suffix),
                       segment_path(partition_dir, base, suffix + SWAP_SUFFIX))
    storage.fsync_dir(partition_dir)
    for old in message.source_bases:
        for suffix in (LOG_SUFFIX, *INDEX_FILE_SUFFIXES):
            path = segment_path(partition_dir, old, suffix)
            if storage.exists(path):
                storage.rename(path, path + DELETED_SUFFIX)
    for suffix in message.cleaned_suffixes:
        storage.rename(segment_path(partition_dir, base, suffix + SWAP_SUFFIX),
                       segment_path(partition_dir, base, suffix))
    storage.fsync_dir(partition_dir)
    for old in message.source_bases:
        for suffix in (LOG_SUFFIX, *INDEX_FILE_SUFFIXES):
            storage.remove(segment_path(partition_dir, old, suffix + DELETED_SUFFIX),
                           missing_ok=True)
        if old != base:
            storage.remove(segment_path(partition_dir, old, SNAPSHOT_SUFFIX), missing_ok=True)
    storage.fsync_dir(partition_dir)


def commit_partition(partition_dir: str, messages: Sequence[CommitMessage]) -> None:
    """Swap every group of one partition, in offset order."""
    for message in sorted(messages, key=lambda m: m.group_base):
        swap_group(partition_dir, message)


def update_cleaner_checkpoint(log_dir: str, offsets: Mapping[TopicPartition, int]) -> None:
    """Set ``cleaner-offset-checkpoint`` entries (others kept), atomically."""
    if not offsets:
        return
    path = storage.join(log_dir, CLEANER_OFFSET_CHECKPOINT)
    current = (parse_offset_checkpoint(storage.read_text(path), path=path)
               if storage.exists(path) else {})
    current.update(offsets)
    storage.write_atomic(path, format_offset_checkpoint(current).encode())
