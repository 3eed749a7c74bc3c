"""Driver side of a round: swap cleaned segments in with Kafka's protocol, then move the
cleaner checkpoint (Kafka's
``LocalLog.replaceSegments``, ``LogCleanerManager.doneCleaning``); and retention's segment
deletion (``UnifiedLog.deleteSegments``).

For one group (one new segment replacing source segments ``S1 < S2 < ... < Sn``, the new one
with base offset ``S1``), in this order, each step durable before the next:

1. rename the new files ``.cleaned`` -> ``.swap`` (``.log`` first, then the indexes);
2. rename every file of each old segment (``.log`` and indexes) to ``.deleted``, ascending;
3. rename the new files ``.swap`` -> final name, fsync the directory;
4. delete the producer snapshots of ``S2..Sn``, then the ``.deleted`` files.

What recovery (:func:`compactor.log.recovery.recover_partition`, Kafka's ``LogLoader``) does after a
crash at each point:

* during 1 (some files still ``.cleaned``): every ``.swap`` at or above the smallest
  ``.cleaned`` offset and every ``.cleaned`` file is deleted -> the old segments stay;
* after 1, during 2 or 3: the ``.swap`` set is complete -> files of the old segments in
  ``[S1, next offset of the new segment)`` are deleted and the ``.swap`` files renamed -> the new
  segment wins;
* during 4: only ``.deleted`` files remain -> deleted, with the snapshot of each deleted
  segment that is not the base of a live one -> the new segment wins.

So every crash leaves exactly the old or exactly the new segments. The checkpoint moves only
after every group of the partition is swapped; a crash before that makes the next round
re-clean from the previous checkpoint, which is harmless.

On an object store, where nothing can be renamed, a partition's groups are swapped together
under one swap manifest instead (:mod:`compactor.log.manifest`), with the same guarantee.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from compactor.codec.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
    truncate_epochs_from_start,
)
from compactor.errors import CommitConflictError, CompactorError, ConditionFailedError
from compactor.log import manifest, storage
from compactor.log.layout import (
    cleaned_path,
    remove_cleaned,
    segment_path,
)
from compactor.log.manifest import Copy, SwapManifest, new_manifest
from compactor.log.names import (
    DELETED_SUFFIX,
    INDEX_FILE_SUFFIXES,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
)
from compactor.log.recovery import recover_partition
from compactor.model import CommitMessage, TopicPartition
from compactor.retention import RetentionPlan
from compactor.threads import check_each


def abort_group(partition_dir: str, message: CommitMessage) -> None:
    """Remove the ``.cleaned`` files of a group that will not be committed."""
    remove_cleaned(partition_dir, message.group_base)


def _check_cleaned(partition_dir: str, message: CommitMessage) -> None:
    """Raises: CommitConflictError: the cleaned log is missing or not what the executor
    wrote."""
    base = message.group_base
    log = cleaned_path(partition_dir, base, LOG_SUFFIX)
    if not storage.exists(log) or storage.crc32c(log) != message.log_checksum:
        raise CommitConflictError(
            "cleaned segment is missing or differs from what the executor reported",
            path=log, base_offset=base,
            remedy="another run may be working on this log dir; rerun when it is done",
        )


def _check_all_cleaned(partition_dir: str, messages: Sequence[CommitMessage]) -> None:
    """:func:`_check_cleaned` of every group, on a thread a core
    (:func:`compactor.threads.check_each`: the file's read and its CRC-32C release the GIL;
    an erasure's 1.1 GB of cleaned logs in 0.08 s, not 0.17; measured 30 Nov), before any
    group is swapped: a group whose cleaned log is not what its executor wrote leaves the
    whole partition unchanged. The first such group in ``messages``' order is the one named.

    Raises:
        CommitConflictError: a cleaned log is missing or not what its executor wrote.
    """
    check_each(lambda message: _check_cleaned(partition_dir, message), messages)


def swap_group(partition_dir: str, message: CommitMessage) -> None:
    """Replace the group's source segments by its cleaned segment (module docstring), its
    cleaned log checked first (:func:`_check_all_cleaned`).
    """
    base = message.group_base
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
    # the merged segments' producer snapshots before their .deleted files: while those are
    # there, recovery knows which snapshots belonged to a deleted segment and removes them
    for old in message.source_bases:
        if old != base:
            storage.remove(segment_path(partition_dir, old, SNAPSHOT_SUFFIX), missing_ok=True)
    for old in message.source_bases:
        for suffix in (LOG_SUFFIX, *INDEX_FILE_SUFFIXES):
            storage.remove(segment_path(partition_dir, old, suffix + DELETED_SUFFIX),
                           missing_ok=True)
    storage.fsync_dir(partition_dir)


def commit_partition(partition_dir: str, messages: Sequence[CommitMessage],
                     scanned: Mapping[str, str]) -> None:
    """Swap every group of one partition, in offset order (on an object store, all of them
    under one swap manifest), once every file the swap replaces or deletes is proven to be
    as the scan saw it: ``scanned`` is the partition's :func:`storage.identities` from before
    the scan.

    Raises:
        CommitConflictError: a file changed since the scan (nothing was changed), or the
            cleaned files are not what the executors wrote.
    """
    ordered = sorted(messages, key=lambda m: m.group_base)
    if not storage.supports_rename(partition_dir):
        manifest.commit(partition_dir, swap_manifest(partition_dir, ordered, scanned))
        return
    check_unchanged(partition_dir, source_names(partition_dir, ordered), scanned)
    _check_all_cleaned(partition_dir, ordered)
    for message in ordered:
        swap_group(partition_dir, message)


def source_names(partition_dir: str, messages: Sequence[CommitMessage]) -> list[str]:
    """The names of every file of the groups' source segments (whether present or not)."""
    return [storage.basename(segment_path(partition_dir, old, suffix))
            for m in messages for old in m.source_bases
            for suffix in (LOG_SUFFIX, *INDEX_FILE_SUFFIXES, SNAPSHOT_SUFFIX)]


def check_unchanged(partition_dir: str, names: Sequence[str], scanned: Mapping[str, str]) -> None:
    """Raises: CommitConflictError: one of ``names`` is not as the scan saw it (written
    again, touched, gone, or there now and not then)."""
    current = storage.identities(partition_dir)

    def what(name: str) -> str:
        return ("appeared" if name not in scanned else "is gone" if name not in current
                else "changed")

    changed = [f"{n} {what(n)}" for n in names if current.get(n) != scanned.get(n)]
    if changed:
        raise CommitConflictError(
            "files changed since the scan: " + "; ".join(changed), path=partition_dir,
            remedy="something other than this run writes to the partition (size, time or "
                   "inode differ): stop it, then run again; nothing was changed")


def swap_manifest(partition_dir: str, messages: Sequence[CommitMessage],
                  scanned: Mapping[str, str]) -> SwapManifest:
    """The manifest of an object-store swap (:mod:`compactor.log.manifest`): each group's
    ``.cleaned`` objects copied over their final names, then every other file of its source
    segments the scan saw deleted, with the producer snapshots of all but the first.

    Raises:
        CommitConflictError: a cleaned log is missing or not what its executor wrote.
    """
    current = storage.identities(partition_dir)
    copies: list[Copy] = []
    deletes: list[str] = []
    _check_all_cleaned(partition_dir, messages)
    for message in messages:
        base = message.group_base
        targets = set()
        for suffix in message.cleaned_suffixes:
            source = storage.basename(cleaned_path(partition_dir, base, suffix))
            target = storage.basename(segment_path(partition_dir, base, suffix))
            if source not in current:
                raise CommitConflictError("a cleaned file is missing", path=storage.join(
                    partition_dir, source), base_offset=base,
                    remedy="another run may be working on this log dir; rerun when it is done")
            copies.append(Copy(source, target, current[source]))
            targets.add(target)
        for old in message.source_bases:
            suffixes = (LOG_SUFFIX, *INDEX_FILE_SUFFIXES) + ((SNAPSHOT_SUFFIX,) if old != base
                                                             else ())
            for suffix in suffixes:
                name = storage.basename(segment_path(partition_dir, old, suffix))
                if (name in scanned or name in current) and name not in targets:
                    deletes.append(name)
    return new_manifest(tuple(copies), tuple(deletes), scanned)


def commit_isolated(partition_dir: str, messages: Sequence[CommitMessage],
                    scanned: Mapping[str, str]) -> CompactorError | None:
    """:func:`commit_partition`, with a failure kept to this partition: the groups not yet
    swapped are aborted and an interrupted swap is settled at once as Kafka's loader would
    (:func:`compactor.log.recovery.recover_partition`), so that every group is old or new when the
    caller goes on to the next partition. Returns the failure, ``None`` on success."""
    try:
        commit_partition(partition_dir, messages, scanned)
    except CompactorError as err:
        if not _past_commit_point(partition_dir):
            for message in messages:
                try:
                    abort_group(partition_dir, message)
                except CompactorError:
                    pass  # what stays is a .cleaned file, which the next run's recovery removes
        try:
            recover_partition(partition_dir)
        except CompactorError:
            pass  # left for the next run (or a broker's start) to recover
        return err
    return None


def _past_commit_point(partition_dir: str) -> bool:
    """Whether an object-store swap wrote its manifest: its ``.cleaned`` objects are then the
    sources of the roll-forward and must not be aborted. (When that cannot be told, they are
    kept: an orphan costs a delete in the next recovery, a lost source the partition.)"""
    if storage.supports_rename(partition_dir):
        return False
    try:
        return storage.exists(manifest.manifest_path(partition_dir))
    except CompactorError:
        return True


def update_cleaner_checkpoint(log_dir: str, offsets: Mapping[TopicPartition, int]) -> None:
    """Set ``cleaner-offset-checkpoint`` entries (others kept), atomically."""
    if not offsets:
        return
    path = storage.join(log_dir, CLEANER_OFFSET_CHECKPOINT)
    current = (parse_offset_checkpoint(storage.read_text(path), path=path)
               if storage.exists(path) else {})
    current.update(offsets)
    storage.write_atomic(path, format_offset_checkpoint(current).encode())


# ---------------------------------------------------------------------------------------------
# Retention (Kafka's UnifiedLog.deleteSegments)


def delete_segments(partition_dir: str, plan: RetentionPlan, scanned: Mapping[str, str]) -> None:
    """Apply a retention plan to one partition, crash-safe at every step:

    1. on a roll, create the empty segment at the log end offset, indexes first (without its
       ``.log`` they are orphans recovery removes), then the ``.log``: a valid log with or
       without the segments before it;
    2. per deleted segment, oldest first, rename to ``.deleted`` its producer snapshot (a
       segment without one is still whole), its ``.log`` (from then on the segment no longer
       exists for any loader), then its indexes; fsync the directory;
    3. delete the ``.deleted`` files.

    A crash in 2 leaves a shorter deleted prefix plus ``.deleted`` files and orphan indexes
    that recovery removes; a ``.deleted`` file is never renamed back, so nothing deleted comes
    back. The caller then truncates ``leader-epoch-checkpoint`` (:func:`truncate_leader_epochs`)
    and rewrites the log dir's ``log-start-offset-checkpoint``; both are idempotent, and stale
    ones are harmless meanwhile (the log start offset is at least the first segment's base).

    Nothing is deleted unless every file of the deleted segments is as the scan saw it
    (``scanned``, :func:`storage.identities`); on an object store each delete is also
    conditional on that ETag and the lease is proven first.

    Raises:
        CommitConflictError: a file changed since the scan (nothing was deleted) or while
            deleting (an older prefix was deleted, the rest kept).
    """
    if not plan.deleted:
        return
    names = [storage.basename(segment_path(partition_dir, seg.base_offset, suffix))
             for seg, _ in plan.deleted
             for suffix in (SNAPSHOT_SUFFIX, LOG_SUFFIX, *INDEX_FILE_SUFFIXES)]
    check_unchanged(partition_dir, names, scanned)
    storage.fence(partition_dir)
    if plan.roll:
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):  # the .log makes it exist
            storage.write_durable(segment_path(partition_dir, plan.log_end_offset, suffix), b"")
        storage.fsync_dir(partition_dir)
    if not storage.supports_rename(partition_dir):
        # an object store: each DELETE is atomic, so delete in the order the renames follow
        # (snapshot, .log, indexes): a crash leaves a shorter deleted prefix and orphan indexes
        for name in names:
            if name not in scanned:
                continue
            try:
                storage.remove(storage.join(partition_dir, name), missing_ok=True,
                               if_match=scanned[name])
            except ConditionFailedError as err:
                raise CommitConflictError(
                    f"{name} was written again while retention deleted the segments before "
                    f"it; it and the segments after it were kept", path=partition_dir,
                    remedy="something other than this run writes to the partition: stop it, "
                           "then run again") from err
        return
    renamed = []
    for seg, _ in plan.deleted:
        for suffix in (SNAPSHOT_SUFFIX, LOG_SUFFIX, *INDEX_FILE_SUFFIXES):
            path = segment_path(partition_dir, seg.base_offset, suffix)
            if storage.exists(path):
                storage.rename(path, path + DELETED_SUFFIX)
                renamed.append(path + DELETED_SUFFIX)
    storage.fsync_dir(partition_dir)
    for path in renamed:
        storage.remove(path, missing_ok=True)
    storage.fsync_dir(partition_dir)


def truncate_leader_epochs(partition_dir: str, log_start_offset: int) -> None:
    """Truncate ``leader-epoch-checkpoint`` from the log start offset
    (``LeaderEpochFileCache.truncateFromStartAsyncFlush``); idempotent, so
    a run after a crash finishes what the crashed one left."""
    epochs_path = storage.join(partition_dir, LEADER_EPOCH_CHECKPOINT)
    if storage.exists(epochs_path):
        entries = parse_leader_epoch_checkpoint(storage.read_text(epochs_path), path=epochs_path)
        truncated = truncate_epochs_from_start(entries, log_start_offset)
        if truncated != entries:
            storage.write_atomic(epochs_path, format_leader_epoch_checkpoint(truncated).encode())


def raise_recovery_points(log_dir: str, starts: Mapping[TopicPartition, int]) -> None:
    """``recovery-point-offset-checkpoint`` entries below a partition's new log start offset
    raised to it, atomically (others kept): Kafka's ``UnifiedLog.updateLogStartOffset`` moves
    the recovery point (and the high watermark) up with the log start, since nothing below it
    is left to recover."""
    path = storage.join(log_dir, RECOVERY_POINT_CHECKPOINT)
    if not starts or not storage.exists(path):
        return
    current = parse_offset_checkpoint(storage.read_text(path), path=path)
    updated = {tp: max(point, starts.get(tp, point)) for tp, point in current.items()}
    if updated != current:
        storage.write_atomic(path, format_offset_checkpoint(updated).encode())


def update_log_start_checkpoint(log_dir: str, starts: Mapping[TopicPartition, int | None]) -> None:
    """Set or remove ``log-start-offset-checkpoint`` entries (others kept), atomically. An
    entry is kept only when the start lies above the partition's first segment (``None``
    removes it), as Kafka writes the file."""
    if not starts:
        return
    path = storage.join(log_dir, LOG_START_OFFSET_CHECKPOINT)
    current = (parse_offset_checkpoint(storage.read_text(path), path=path)
               if storage.exists(path) else {})
    updated = dict(current)
    for tp, start in starts.items():
        if start is None:
            updated.pop(tp, None)
        else:
            updated[tp] = start
    if updated != current or not storage.exists(path):
        storage.write_atomic(path, format_offset_checkpoint(updated).encode())
