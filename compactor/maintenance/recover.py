"""``compactor recover`` and ``jobs/recover.py``: resolve the leftovers of interrupted swaps and
deletions in a log dir (or one partition directory) as a broker's loader does on start
(Kafka's ``LogLoader``), one directory at a time, each failure kept to its directory."""

from __future__ import annotations

from dataclasses import dataclass

from compactor.errors import CompactorError, LogDirError
from compactor.log import storage
from compactor.log.layout import (
    is_partition_dir,
    open_log_dir,
)
from compactor.log.names import METADATA_DIR_NAME
from compactor.log.recovery import (
    LOG_DIR_CHECKPOINTS,
    RecoveryPlan,
    recover_partition,
    remove_stale_temporaries,
)


@dataclass(frozen=True)
class Recovered:
    """One partition directory: what recovery did (or would do), or why it could not."""

    partition_dir: str
    plan: RecoveryPlan | None = None
    error: CompactorError | None = None


def recover(path: str, *, dry_run: bool) -> list[Recovered]:
    """Recover every partition directory of a log dir, replica copies included (an erasure
    swaps segments in ``-future``, ``-delete`` and ``-stray`` dirs), or the one directory
    ``path`` names, under the log dir lock.

    Raises:
        LogDirError: ``path`` is missing, or is the KRaft metadata log.
        LogDirLockedError: a broker or another run holds the log dir.
    """
    if not storage.is_dir(path):
        raise LogDirError("log dir does not exist or is not a directory", path=path)
    if storage.basename(storage.absolute(path)) == METADATA_DIR_NAME:
        raise LogDirError(
            "this is the KRaft metadata log, which kafka-compactor never modifies", path=path,
            remedy="a Kafka controller or broker recovers it on start; point recover at a log "
                   "dir or at a topic's partition directory")
    if is_partition_dir(path):
        lock_dir, partition_dirs = storage.dirname(path), [path]
    else:
        log_dir = open_log_dir(path)
        lock_dir = path
        partition_dirs = [storage.join(path, c.name) for c in log_dir.copies_of(lambda _: True)]
    out = []
    with storage.log_dir_lock(lock_dir):
        if not dry_run and not storage.is_url(lock_dir):
            remove_stale_temporaries(lock_dir, LOG_DIR_CHECKPOINTS)
        for pdir in partition_dirs:
            try:
                out.append(Recovered(pdir, plan=recover_partition(pdir, dry_run=dry_run)))
            except CompactorError as err:  # that directory is left as it was; the others go on
                out.append(Recovered(pdir, error=err))
    return out
