"""Reading the KRaft metadata log's files (``__cluster_metadata-0``): its latest snapshot and
its segments, fed in offset order to the pure replay of :mod:`compactor.cluster.metadata`
(``MetadataLoader``). Reads only, through :mod:`compactor.log.storage`."""

from __future__ import annotations

from compactor.cluster.metadata import ClusterMetadata, Replay, parse_snapshot_name
from compactor.codec.segment import iter_batches
from compactor.errors import CorruptMetadataError, LogDirError
from compactor.log import storage
from compactor.log.layout import segment_logs
from compactor.log.names import METADATA_DIR_NAME


def load_cluster_metadata(metadata_dir: str) -> ClusterMetadata:
    """Replay the KRaft metadata log in ``metadata_dir`` (a ``__cluster_metadata-0``
    directory): its latest complete snapshot, then the segments' records from the snapshot's
    end offset on. Reads only.

    Raises:
        LogDirError: the directory does not exist.
        CorruptMetadataError: a batch or record cannot be decoded (file, byte position, base
            offset, record offset and type), a snapshot is incomplete, or the log starts
            after offset 0 with no snapshot covering the records before it.
    """
    if not storage.is_dir(metadata_dir):
        raise LogDirError("metadata log directory does not exist", path=metadata_dir,
                          remedy="point --metadata-log-dir at the directory that holds "
                                 f"{METADATA_DIR_NAME} (Kafka's metadata.log.dir)")
    names = storage.list_dir(metadata_dir)
    snapshots = sorted((sid, n) for n in names if (sid := parse_snapshot_name(n)) is not None)
    replay = Replay()
    start = 0
    if snapshots:
        (start, _), name = snapshots[-1]
        path = storage.join(metadata_dir, name)
        replay.feed(iter_batches(storage.read_bytes(path), path=path), path=path,
                    snapshot=True)
        replay.state.snapshot = name
        replay.state.end_offset = start
    logs = segment_logs(names)
    if logs and logs[0][0] > start:
        raise CorruptMetadataError(
            f"the metadata log starts at offset {logs[0][0]} but no snapshot covers the "
            f"records before it (latest snapshot ends at {start})",
            path=storage.join(metadata_dir, logs[0][1]))
    for _, name in logs:
        path = storage.join(metadata_dir, name)
        # read, not mapped: a controller may append to a metadata log outside this log dir
        replay.feed(iter_batches(storage.read_bytes(path), path=path), path=path,
                    from_offset=start)
    return replay.state
