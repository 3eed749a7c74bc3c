"""The recovery of interrupted swaps, as Kafka's ``LogLoader.load`` recovers them when a broker
starts: the only writer of a partition's files outside the swap itself
(:mod:`compactor.log.swap`). A crash before every new file was renamed ``.swap`` leaves the old
segments, a crash after leaves the new ones; a ``.swap`` no cleaning can produce is refused
before anything changes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from compactor.codec.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from compactor.errors import CompactorError, LinkedFileError, SwapRecoveryError
from compactor.log import manifest, storage
from compactor.log.layout import PARTITION_CHECKPOINTS, file_offset, segment_extent
from compactor.log.manifest import MANIFEST_NAME
from compactor.log.names import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_FILE_SUFFIXES,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TEMP_SUFFIXES,
)

# The checkpoint files written as ``<name>.tmp`` then renamed (Kafka's CheckpointFile, and
# storage.write_atomic here): a kill between the two leaves the ``.tmp`` behind.
LOG_DIR_CHECKPOINTS = (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                       RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)


# ---------------------------------------------------------------------------------------------
# Recovery of interrupted swaps (Kafka's LogLoader.load)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryPlan:
    """What :func:`recover_partition` does, in order: delete ``deletes``, then rename each
    ``(src, dst)`` of ``renames``. Names are relative to the partition directory."""

    deletes: tuple[str, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.deletes and not self.renames

    def then(self, other: RecoveryPlan) -> RecoveryPlan:
        """This plan followed by ``other``."""
        if self.is_empty:
            return other
        return RecoveryPlan(deletes=self.deletes + other.deletes,
                            renames=self.renames + other.renames)


def plan_recovery(
    names: list[str], next_offset_of_swap: Callable[[str], int | None]
) -> RecoveryPlan:
    """Decide how to finish or roll back an interrupted swap, from file names alone plus the
    next offset of each valid ``.log.swap`` file.

    1. every ``*.deleted`` file goes;
    2. ``*.swap`` files at or above the smallest ``*.cleaned`` offset are an incomplete swap
       and go, as do all ``*.cleaned`` files;
    3. non-temporary files whose offset lies in ``[min swap base, max swap next offset)`` are
       the replaced segments (and their indexes and snapshots) and go -- except the producer
       snapshot at a swapped segment's own base, which the swap keeps;
    4. remaining ``*.swap`` files lose their suffix, each segment's ``.log`` first;
    5. index files whose ``.log`` is missing go (Kafka deletes orphan indexes on load), and so
       does the producer snapshot of a ``.deleted`` segment that is no live segment's base
       (what ``ProducerStateManager.removeStraySnapshots`` removes when Kafka loads the log).
    """
    deletes: list[str] = [n for n in names if n.endswith(DELETED_SUFFIX)]
    cleaned = [n for n in names if n.endswith(CLEANED_SUFFIX)]
    swaps = [n for n in names if n.endswith(SWAP_SUFFIX)]
    cleaned_offsets = [off for n in cleaned if (off := file_offset(n)) is not None]
    min_cleaned = min(cleaned_offsets, default=None)
    valid_swaps = []
    for n in swaps:
        off = file_offset(n)
        if min_cleaned is not None and off is not None and off >= min_cleaned:
            deletes.append(n)
        else:
            valid_swaps.append(n)
    deletes.extend(cleaned)

    swap_logs = [n for n in valid_swaps if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
    replaced: list[str] = []
    if swap_logs:
        bases = {b for n in swap_logs if (b := file_offset(n)) is not None}
        min_swap = min(bases)
        max_swap = max(
            next_offset_of_swap(n) or (file_offset(n) or 0) for n in swap_logs
        )
        for n in names:
            off = file_offset(n)
            if n.endswith(TEMP_SUFFIXES) or off is None:
                continue
            if n.endswith(SNAPSHOT_SUFFIX) and off in bases:
                continue  # the new segment starts where the old one did: its snapshot holds
            if min_swap <= off < max_swap:
                replaced.append(n)
    deletes.extend(replaced)

    renames = [(n, n[: -len(SWAP_SUFFIX)]) for n in valid_swaps]
    final_names = (set(names) - set(deletes) - set(valid_swaps)) | {dst for _, dst in renames}
    live_bases = {file_offset(n) for n in final_names if n.endswith(LOG_SUFFIX)}
    deleted_bases = {file_offset(n) for n in names if n.endswith(LOG_SUFFIX + DELETED_SUFFIX)}
    for n in sorted(final_names):
        off = file_offset(n)
        if off is None:
            continue
        if n.endswith(INDEX_FILE_SUFFIXES):
            stem = n.rsplit(".", 1)[0]
            if stem + LOG_SUFFIX not in final_names:
                deletes.append(n)
        elif n.endswith(SNAPSHOT_SUFFIX) and off in deleted_bases and off not in live_bases:
            deletes.append(n)
    # each new segment's .log.swap first: once it is renamed, no later recovery takes the
    # segment's range for replaced (which would delete its indexes already renamed); its
    # remaining index .swap files are then plain renames
    renames.sort(key=lambda r: (file_offset(r[0]) or 0,
                                not r[0].endswith(LOG_SUFFIX + SWAP_SUFFIX), r[0]))
    # deletes in ascending name (offset) order: the segment at a swap's base goes before any
    # later one it replaces, so while it is on disk they all are (check_swaps relies on it)
    return RecoveryPlan(deletes=tuple(sorted(set(deletes))), renames=tuple(renames))


def recover_partition(partition_dir: str, *, dry_run: bool = False) -> RecoveryPlan:
    """Resolve leftovers of an interrupted swap or deletion in one partition directory.

    The whole plan is computed before anything changes, so a defect found while planning (an
    unreadable ``.swap`` segment) changes nothing. Applying the plan is itself crash-safe:
    running it again after a crash reaches the same end state.

    On an object store, a swap manifest (:mod:`compactor.log.manifest`) is rolled forward
    first; the plan then shows its copies as renames and its deletes.

    Raises:
        SwapRecoveryError: a ``.log.swap`` file that must win cannot be read, or a swap
            manifest cannot be carried out.
    """
    names = storage.list_dir(partition_dir)
    pending = manifest.read(partition_dir) if MANIFEST_NAME in names else None
    rolled = RecoveryPlan()
    if pending is not None:
        rolled = RecoveryPlan(
            deletes=(*pending.deletes, MANIFEST_NAME),
            renames=tuple((c.source, c.target) for c in pending.copies))
        if dry_run:
            names = manifest.names_after(names, pending)
        else:
            manifest.roll_forward(partition_dir, pending)
            names = storage.list_dir(partition_dir)

    @functools.cache
    def swap_extent(name: str) -> tuple[int, int] | None:
        """A ``.log.swap``'s extent, read once for the plan and the checks."""
        path = storage.join(partition_dir, name)
        try:
            return segment_extent(path)
        except CompactorError as err:
            raise SwapRecoveryError(
                f"swap segment that should replace older segments is unreadable: {err.message}",
                path=path,
                position=err.position,
                base_offset=err.base_offset,
            ) from err

    plan = plan_recovery(names, lambda n: None if (e := swap_extent(n)) is None else e[1])
    if not plan.is_empty:
        check_swaps(partition_dir, names, plan, swap_extent)
        linked = storage.links(partition_dir)
        touched = sorted(n for n in (*plan.deletes, *(src for src, _ in plan.renames))
                         if n in linked and linked[n].symlink)
        if touched:  # the same rule as load_partition's: never act on a link's name alone
            raise LinkedFileError(
                f"{touched[0]} is a {linked[touched[0]].what}: recovering the interrupted swap "
                f"would rename or delete the link and leave the file it points to",
                path=storage.join(partition_dir, touched[0]),
                base_offset=file_offset(touched[0]),
                remedy="nothing was changed; with the broker stopped, move the linked file into "
                       "the partition directory in place of its link, then run again")
    if not dry_run and not storage.is_url(partition_dir):
        remove_stale_temporaries(partition_dir, PARTITION_CHECKPOINTS)
    if dry_run or plan.is_empty:
        return rolled.then(plan)
    for name in plan.deletes:
        storage.remove(storage.join(partition_dir, name), missing_ok=True)
    for src, dst in plan.renames:
        storage.rename(storage.join(partition_dir, src), storage.join(partition_dir, dst))
    storage.fsync_dir(partition_dir)
    return rolled.then(plan)


def check_swaps(partition_dir: str, names: list[str], plan: RecoveryPlan,
                swap_extent: Callable[[str], tuple[int, int] | None]) -> None:
    """Every ``.log.swap`` a recovery would make a segment must be what a swap leaves: a
    cleaned copy of the segments it replaces. Kafka's ``LocalLog.replaceSegments`` and ours
    (:mod:`compactor.log.swap`) name the new segment after the first segment it replaces and
    only ever drop records; Kafka's ``LogLoader.load`` trusts any ``.swap`` file, and a stale,
    empty or misplaced one would make it delete the segments in its range. Checked before
    anything changes, each rule being what no cleaning can produce:

    - its first batch starts at or after its file's base offset;
    - while the segment at its base offset is still on disk (as ``.log``, or ``.log.deleted``
      once the swap renamed it), its batches lie within those of the segments it replaces
      (``[first, next)`` inside theirs), and an empty swap replaces no segment that holds a
      batch.

    The second rule holds only while every replaced segment is on disk: a recovery deletes
    them in ascending name order (:func:`plan_recovery`), so the segment at the swap's base
    goes first, and once it is gone (a recovery that crashed between its deletes and its
    renames) nothing is left to compare with: the swap is trusted, as Kafka trusts it. A swap
    that is a plausible cleaning of its range cannot be told from a real one: these checks
    catch leftovers that are not a swap's, not a forgery of one.

    ``swap_extent``: a ``.log.swap``'s :func:`segment_extent` (the plan read it already).

    Raises:
        SwapRecoveryError: the first swap that fails, with what to do.
    """
    promoted = [src for src, _ in plan.renames if src.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
    olds = [n for n in names if n.endswith((LOG_SUFFIX, LOG_SUFFIX + DELETED_SUFFIX))]
    for swap_name in promoted:
        base = file_offset(swap_name)
        if base is None:
            continue
        path = storage.join(partition_dir, swap_name)
        extent = swap_extent(swap_name)
        end = max(extent[1], base + 1) if extent is not None else base + 1
        replaced = sorted((off, n) for n in olds
                          if (off := file_offset(n)) is not None and base <= off < end)
        problem = None
        if extent is not None and extent[0] < base:
            problem = (f"its first batch is at offset {extent[0]}, below its file's base offset "
                       f"{base}: no swap starts before the segment it is named after")
        elif replaced and replaced[0][0] == base:
            spans = [e for _, n in replaced
                     if (e := segment_extent(storage.join(partition_dir, n))) is not None]
            low = min((a for a, _ in spans), default=base)
            high = max((b for _, b in spans), default=base)
            if extent is None and spans:
                problem = (f"it holds no batch but would replace "
                           f"{', '.join(n for _, n in replaced)}, which hold offsets "
                           f"[{low}, {high})")
            elif extent is not None and not (low <= extent[0] and extent[1] <= high):
                problem = (f"its offsets [{extent[0]}, {extent[1]}) are not within those of "
                           f"the segments it would replace "
                           f"({', '.join(n for _, n in replaced)}: [{low}, {high}))")
        if problem is not None:
            swaps = sorted(n for n in names if n.endswith(SWAP_SUFFIX)
                           and file_offset(n) == base)
            raise SwapRecoveryError(
                f"{swap_name} is not a cleaned copy of the segments it would replace: {problem}",
                path=path, base_offset=base,
                remedy=f"nothing was changed; if the segments in its range are whole, delete "
                       f"{', '.join(swaps)} (the old segments stay; a cleaning or erasure runs "
                       f"again), else restore the partition from a replica")



def remove_stale_temporaries(directory: str, checkpoints: Iterable[str]) -> int:
    """Delete the ``<checkpoint>.tmp`` files a killed checkpoint write left in ``directory``
    (only regular files of those names: the checkpoint itself was never touched, and its
    next write would overwrite them); returns how many went."""
    names = set(storage.identities(directory))  # regular files only
    stale = [c + ".tmp" for c in checkpoints if c + ".tmp" in names]
    for name in stale:
        storage.remove(storage.join(directory, name), missing_ok=True)
    return len(stale)


def recover_partitions(log_dir: str, names: Iterable[str]) -> tuple[int, dict[str, CompactorError]]:
    """:func:`recover_partition` on each named directory of a log dir, each on its own: a
    directory whose leftovers cannot be resolved is returned with its error (and changed in
    no way), and the others are recovered.

    Returns:
        how many directories had leftovers, and the error of each that could not be recovered.
    """
    recovered = 0
    failed: dict[str, CompactorError] = {}
    if not storage.is_url(log_dir):  # an object store's PUT leaves no temporary
        remove_stale_temporaries(log_dir, LOG_DIR_CHECKPOINTS)
    for name in names:
        try:
            if not recover_partition(storage.join(log_dir, name)).is_empty:
                recovered += 1
        except CompactorError as err:
            failed[name] = err
    return recovered, failed


def planned_recovery_errors(log_dir: str, names: Iterable[str]) -> dict[str, CompactorError]:
    """What :func:`recover_partitions` would fail on, found by planning each directory's
    recovery without changing anything (a dry run, ``compactor plan``, refuses the same
    partitions the real run would)."""
    failed: dict[str, CompactorError] = {}
    for name in names:
        try:
            recover_partition(storage.join(log_dir, name), dry_run=True)
        except CompactorError as err:
            failed[name] = err
    return failed


