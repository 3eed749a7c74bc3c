"""Kafka log directories on storage, as Kafka's ``LogManager`` names and loads them:
partitions, segments, checkpoints and properties. Reading never modifies anything; the
recovery of interrupted swaps (Kafka's ``LogLoader.load``) is :mod:`compactor.log.recovery`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

import javaproperties

from compactor.codec.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
)
from compactor.codec.indexes import (
    AbortedTxn,
    decode_txn_index,
    last_offset_entry,
    last_time_entry,
)
from compactor.codec.kraft import uuid_bytes
from compactor.codec.records import RecordBatch
from compactor.codec.segment import iter_batches
from compactor.codec.snapshot import decode_snapshot
from compactor.errors import (
    CompactorError,
    ConfigError,
    CorruptCheckpointError,
    CorruptIndexError,
    LinkedFileError,
    LogDirError,
)
from compactor.log import storage
from compactor.log.manifest import MANIFEST_NAME
from compactor.log.names import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    METADATA_DIR_NAME,
    SNAPSHOT_SUFFIX,
    TEMP_SUFFIXES,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
)
from compactor.model import EpochEntry, SegmentInfo, TopicPartition, segment_file_prefix

PARTITION_METADATA = "partition.metadata"
IGNORED_DIR_SUFFIXES = ("-delete", "-future", "-stray")

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>[0-9]+)$")
# LocalLog.parseTopicPartitionName: <topic>-<partition>.<uuid without dashes>-<suffix>
_COPY_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>[0-9]+)\.(?P<uuid>[^.\s]+)"
                       r"-(?P<kind>delete|future|stray)$")
LIVE, FUTURE, DELETE, STRAY = "live", "future", "delete", "stray"
_OFFSET_FILE = re.compile(r"^(?P<offset>[0-9]+)\.")


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """The partition of a directory named ``<topic>-<partition>``; ``None`` for directories
    that are not live partitions (``-delete``, ``-future``, ``-stray`` or other names).

    The partition number is the text after the **last** dash: topic names may contain dashes.
    """
    if name.endswith(IGNORED_DIR_SUFFIXES):
        return None
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return TopicPartition(match["topic"], int(match["partition"]))


@dataclass(frozen=True, slots=True, order=True)
class PartitionCopy:
    """A directory holding a replica of a partition's log: the live one (``<topic>-<n>``), or a
    ``-future`` (a replica being moved between log dirs, which Kafka's
    ``LogManager.replaceCurrentWithFutureLog`` makes the current log once it caught up),
    ``-delete`` (a deleted partition awaiting asynchronous removal) or ``-stray`` copy (a replica
    the controller no longer assigns here)."""

    tp: TopicPartition
    kind: str
    name: str


def parse_copy_dir_name(name: str) -> PartitionCopy | None:
    """The partition and kind of a live, ``-future``, ``-delete`` or ``-stray`` directory
    name, as Kafka's ``LocalLog.parseTopicPartitionName`` reads it; ``None`` otherwise."""
    match = _COPY_DIR.match(name)
    if match is not None:
        return PartitionCopy(TopicPartition(match["topic"], int(match["partition"])),
                             match["kind"], name)
    tp = parse_partition_dir_name(name)
    return PartitionCopy(tp, LIVE, name) if tp is not None else None


def is_partition_dir(path: str) -> bool:
    """True for a directory named ``<topic>-<partition>`` that holds no sub-directories (a log
    dir holds partition directories; a partition directory holds only files)."""
    if not storage.is_dir(path) or parse_copy_dir_name(storage.basename(path)) is None:
        return False
    return not any(storage.is_dir(storage.join(path, n)) for n in storage.list_dir(path))


def file_offset(name: str) -> int | None:
    """The offset in a segment-related file name (digits before the first dot)."""
    match = _OFFSET_FILE.match(name)
    return int(match["offset"]) if match else None


def segment_logs(names: list[str]) -> list[tuple[int, str]]:
    """``(base offset, name)`` of every ``.log`` segment among a directory's file names, in
    offset order. Names only: nothing is read."""
    return sorted(
        (off, n) for n in names
        if n.endswith(LOG_SUFFIX) and (off := file_offset(n)) is not None
    )


def leftover_names(names: list[str]) -> tuple[str, ...]:
    """Names with a ``.cleaned``, ``.swap`` or ``.deleted`` suffix, and an object store's swap
    manifest (an interrupted swap or deletion)."""
    return tuple(n for n in names if n.endswith(TEMP_SUFFIXES) or n == MANIFEST_NAME)


def segment_path(partition_dir: str, base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return storage.join(partition_dir, segment_file_prefix(base_offset) + suffix)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionLog:
    """A partition directory as found on storage.

    Attributes:
        segments: in base-offset order; the last one is the active segment.
        leftovers: names of files with a ``.cleaned``, ``.swap`` or ``.deleted`` suffix (an
            interrupted swap or deletion that
            :func:`compactor.log.recovery.recover_partition` resolves).
        snapshots: base offsets of producer ``.snapshot`` files.
    """

    tp: TopicPartition
    path: str
    segments: tuple[SegmentInfo, ...]
    leftovers: tuple[str, ...] = ()
    snapshots: tuple[int, ...] = ()
    identities: Mapping[str, str] = field(default_factory=dict)
    strays: tuple[ForeignEntry, ...] = ()  # entries Kafka does not keep in a partition dir
    #: segment files with more than one hard link, by name (what :func:`storage.links` says):
    #: harmless to compaction and retention, refused by erasure (:func:`check_unlinked`)
    hard_linked: Mapping[str, str] = field(default_factory=dict)

    @property
    def active_segment(self) -> SegmentInfo | None:
        return self.segments[-1] if self.segments else None

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)


@dataclass(frozen=True, slots=True)
class RefusedDir:
    """A directory that names a partition but that no command may touch: its name is not
    the one Kafka writes (``t-01`` for partition 1), or another directory holds the same
    partition (``LogManager.loadLog`` refuses to start with "Duplicate log directories")."""

    name: str
    tp: TopicPartition
    error: LogDirError


@dataclass(frozen=True, slots=True)
class ForeignEntry:
    """Something in a log dir that is not part of Kafka's layout (reported, never touched)."""

    name: str
    kind: str  # directory | file | dangling symlink
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "kind": self.kind, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.name}: left alone, {self.kind} not part of Kafka's layout ({self.reason})"


# Files Kafka keeps at a log dir's root (LogManager, CleanShutdownFileHandler,
# BrokerMetadataCheckpoint/MetaPropertiesEnsemble, LogCleanerManager).
KNOWN_ROOT_FILES = frozenset({
    ".lock", "meta.properties", ".kafka_cleanshutdown", "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint", "replication-offset-checkpoint", "cleaner-offset-checkpoint",
    "bootstrap.checkpoint", storage.LEASE_NAME,
})
# Directories Kafka keeps at a log dir's root that are not logs (RemoteIndexCache.DIR_NAME).
KNOWN_ROOT_DIRS = frozenset({"remote-log-index-cache"})


@dataclass(frozen=True, slots=True, kw_only=True)
class LogDir:
    """A Kafka ``log.dirs`` entry.

    Attributes:
        partitions: live partition directories, sorted. Never the KRaft metadata log, never
            a refused directory.
        metadata_log: the path of ``__cluster_metadata-0`` when the log dir holds it. Kafka's
            ``LogManager.loadLogs`` never loads it as a log and no command here lists it
            among the partitions, so nothing can modify it.
        refused: partition directories no command touches (non-canonical names, duplicates).
        foreign: entries that are not part of Kafka's layout.
    """

    path: str
    partitions: tuple[TopicPartition, ...]
    metadata_log: str | None = None
    copies: tuple[PartitionCopy, ...] = ()  # -future, -delete and -stray dirs
    refused: tuple[RefusedDir, ...] = ()
    foreign: tuple[ForeignEntry, ...] = ()

    def refused_of(self, topics: Callable[[str], bool]) -> list[RefusedDir]:
        return [r for r in self.refused if topics(r.tp.topic)]

    def copies_of(self, topics: Callable[[str], bool]) -> list[PartitionCopy]:
        """Every directory holding data of the topics ``topics`` accepts: live partitions
        and their ``-future``, ``-delete`` and ``-stray`` copies, in name order."""
        live = [PartitionCopy(tp, LIVE, tp.dir_name) for tp in self.partitions]
        return sorted((c for c in (*live, *self.copies) if topics(c.tp.topic)),
                      key=lambda c: (c.tp, c.kind != LIVE, c.name))

    def partition_path(self, tp: TopicPartition) -> str:
        return storage.join(self.path, tp.dir_name)


def open_log_dir(path: str) -> LogDir:
    """List the partitions of a log dir.

    Raises:
        LogDirError: the path is missing, unreadable, not a directory, or a partition
            directory (which would otherwise look like a log dir with no partitions).
    """
    if not storage.exists(path):
        raise LogDirError("log dir does not exist", path=path)
    if not storage.is_dir(path):
        raise LogDirError("log dir is not a directory", path=path)
    names = storage.list_dir(path)
    own = parse_copy_dir_name(storage.basename(path))
    if own is not None and segment_logs(names):
        raise LogDirError(
            f"this is the partition directory of {own.tp}, not a log dir", path=path,
            remedy=f"point the command at the log dir that holds it ({storage.dirname(path)}) "
                   f"and select the topic with --topics {own.tp.topic}; nothing was changed")
    live: dict[TopicPartition, list[str]] = {}
    copies = []
    foreign = []
    metadata_log = None
    for name in names:
        full = storage.join(path, name)
        if not storage.is_dir(full):
            if storage.is_link(full) and not storage.exists(full):
                foreign.append(ForeignEntry(name, "dangling symlink",
                                            "a symbolic link to nothing"))
            elif name not in KNOWN_ROOT_FILES:
                foreign.append(ForeignEntry(name, "file", "not a file Kafka keeps in a log dir"))
            continue
        copy = parse_copy_dir_name(name)
        if name == METADATA_DIR_NAME:
            metadata_log = full
        elif copy is None:
            if name not in KNOWN_ROOT_DIRS:
                foreign.append(ForeignEntry(
                    name, "directory", "neither a partition nor a replica copy: a Kafka broker "
                    "cannot parse its name and takes the whole log dir offline "
                    "(LogManager.loadLogs)"))
        elif copy.kind == LIVE:
            live.setdefault(copy.tp, []).append(name)
        else:
            copies.append(copy)
    partitions = []
    refused = []
    for tp, names in live.items():
        if names == [tp.dir_name]:
            partitions.append(tp)
            continue
        for name in names:
            others = [n for n in names if n != name]
            if others:
                message = (f"duplicate log directories for {tp}: {name} and "
                           f"{', '.join(others)} hold the same partition (a Kafka broker "
                           "refuses to start: LogManager.loadLog)")
                remedy = ("nothing was changed; keep the directory the broker should use, "
                          "move the other out of the log dir, then run again")
            else:
                message = (f"directory name is not the one Kafka writes for {tp} "
                           f"({tp.dir_name}): the partition number has leading zeros")
                remedy = (f"nothing was changed; with the broker stopped, rename it to "
                          f"{tp.dir_name} or move it out of the log dir")
            refused.append(RefusedDir(name, tp, LogDirError(
                message, path=storage.join(path, name), remedy=remedy)))
    return LogDir(path=path, partitions=tuple(sorted(partitions)), metadata_log=metadata_log,
                  copies=tuple(sorted(copies)),
                  refused=tuple(sorted(refused, key=lambda r: (r.tp, r.name))),
                  foreign=tuple(foreign))


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file (``meta.properties``, ``server.properties``), parsed with Java's
    rules (comments, ``=``/``:``/space separators, continuation lines, escapes).

    Raises:
        ConfigError: the file is missing, unreadable or not a properties file.
    """
    if not storage.exists(path) or storage.is_dir(path):
        raise ConfigError("properties file does not exist or is not a file", path=path)
    try:
        return dict(javaproperties.loads(storage.read_text(path)))
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"not a Java properties file: {err}", path=path) from None


def server_log_dirs(server_properties: str) -> list[str]:
    """The log dirs a broker loads: ``log.dirs``, else ``log.dir``, comma-separated
    (``KafkaConfig.logDirs``); empty when it names none."""
    props = read_properties(server_properties)
    return [d.strip() for d in (props.get("log.dirs") or props.get("log.dir") or "").split(",")
            if d.strip()]


def read_meta_properties(log_dir: str) -> dict[str, str]:
    """The log dir's ``meta.properties`` (``node.id``, ``cluster.id``, ``directory.id``);
    empty without one."""
    path = storage.join(log_dir, "meta.properties")
    return read_properties(path) if storage.exists(path) else {}


def check_meta_properties(log_dir: str) -> None:
    """A log dir's ``meta.properties`` as Kafka's ``MetaProperties`` reads it: a properties
    file (text the commands can read), ``version`` 0 (``broker.id``) or 1 (KRaft: ``node.id``
    and ``cluster.id``), ids that are integers, and a ``directory.id`` that is a Kafka
    ``Uuid`` (KIP-858). Absent is fine (a dir no broker formatted).

    Raises:
        CompactorError: the file cannot be read, or a field is not what Kafka writes.
    """
    path = storage.join(log_dir, "meta.properties")
    if not storage.exists(path):
        return
    meta = read_meta_properties(log_dir)
    version = meta.get("version")

    def bad(message: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"meta.properties: {message}", path=path,
            remedy="nothing was changed; with the broker stopped, restore the file (every "
                   "log dir of a broker has one: node.id, cluster.id, its own directory.id) "
                   "or let `kafka-storage.sh format` write it")

    if version not in ("0", "1"):
        raise bad(f"version is {version!r}, not 0 or 1")
    ids = ("broker.id",) if version == "0" else ("node.id", "cluster.id")
    missing = [k for k in ids if not meta.get(k)]
    if missing:
        raise bad(f"version {version} needs {', '.join(missing)}")
    for key in ("broker.id", "node.id"):
        if key in meta and not meta[key].lstrip("-").isdigit():
            raise bad(f"{key} is {meta[key]!r}, not an integer")
    if meta.get("directory.id"):
        try:
            uuid_bytes(meta["directory.id"])
        except ValueError as err:
            raise bad(f"directory.id: {err}") from None
    # Kafka ignores keys it does not know, but none it writes holds a control character:
    # such a "key" is bytes appended to the file
    garbage = sorted(k for k, v in meta.items() if not (k + v).isprintable())
    if garbage:
        raise bad(f"holds bytes that are no property Kafka writes ({garbage[0]!r}): bytes "
                  f"appended to the file?")


def check_directory_ids(log_dirs: Iterable[str]) -> None:
    """The log dirs of one broker must each have their own ``directory.id`` (KIP-858): Kafka
    refuses to start a broker two of whose log dirs share one (``MetaPropertiesEnsemble.verify``,
    a copied ``meta.properties``), and a run here would take the second for the first (an
    erasure applied "here" already, skipped).

    Raises:
        ConfigError: two of them share a directory id.
    """
    seen: dict[str, str] = {}
    for path in log_dirs:
        directory_id = read_meta_properties(path).get("directory.id")
        if not directory_id:
            continue
        if directory_id in seen and storage.real_path(seen[directory_id]) != storage.real_path(
                path):
            raise ConfigError(
                f"log dirs {seen[directory_id]} and {path} have the same directory.id "
                f"{directory_id} (a copied meta.properties): Kafka refuses to start a broker "
                f"with duplicate directory ids (MetaPropertiesEnsemble.verify)",
                path=storage.join(path, "meta.properties"),
                remedy="nothing was changed; give the copy its own identity (with the broker "
                       "stopped, move its meta.properties aside and let `kafka-storage.sh "
                       "format` write one) or take it out of log.dirs, then run again")
        seen[directory_id] = path


def read_node_id(log_dir: str) -> str | None:
    """``node.id`` from the log dir's ``meta.properties`` (KRaft); ``None`` without one."""
    return read_meta_properties(log_dir).get("node.id")


def read_topic_id(partition_dir: str) -> str | None:
    """The ``topic_id`` of a partition's ``partition.metadata`` (``PartitionMetadataFile``);
    ``None`` when the file is absent.

    Raises:
        CorruptCheckpointError: the file is not ``version: 0`` / ``topic_id: <id>``.
    """
    path = storage.join(partition_dir, PARTITION_METADATA)
    if not storage.exists(path):
        return None
    lines = storage.read_text(path).splitlines()
    if len(lines) != 2 or lines[0].strip() != "version: 0" or not lines[1].startswith(
            "topic_id: "):
        raise CorruptCheckpointError("partition.metadata is not 'version: 0' then "
                                     "'topic_id: <id>'", path=path)
    return lines[1][len("topic_id: "):].strip()


def read_offset_checkpoint(log_dir: str, name: str) -> dict[TopicPartition, int]:
    """An offset checkpoint of the log dir root; empty when the file does not exist."""
    path = storage.join(log_dir, name)
    if not storage.exists(path):
        return {}
    return parse_offset_checkpoint(storage.read_text(path), path=path)


def read_leader_epochs(partition_dir: str) -> list[EpochEntry]:
    path = storage.join(partition_dir, LEADER_EPOCH_CHECKPOINT)
    if not storage.exists(path):
        return []
    return parse_leader_epoch_checkpoint(storage.read_text(path), path=path)


def load_partition(partition_dir: str) -> PartitionLog:
    """List a partition's segments with sizes, mtimes and largest timestamps.

    The largest timestamp of a segment is the last ``.timeindex`` entry combined with a scan of
    the batches after the last ``.index`` entry (Kafka's ``LogSegment.largestTimestamp``
    before falling back to the mtime); -1 when the segment has no timestamps.
    """
    name = storage.basename(partition_dir)
    copy = parse_copy_dir_name(name)
    if copy is None:
        raise LogDirError(
            "directory name is not <topic>-<partition> (or a -future, -delete or -stray copy)",
            path=partition_dir,
            remedy="point the command at a log dir or at one partition directory in it",
        )
    tp = copy.tp
    # every file's identity first, before anything is read: what a commit compares with
    identities = storage.identities(partition_dir)
    names = storage.list_dir(partition_dir)
    linked = {n: link for n, link in storage.links(partition_dir).items()
              if _SEGMENT_FILE.match(n)}
    symlinks = sorted(n for n, link in linked.items() if link.symlink)
    if symlinks:
        # Kafka opens the file through the link (FileRecords.open), but a swap renames over
        # the link and a deletion removes it (LocalLog.replaceSegments, LogSegment.deleteIfExists
        # act on the name): the file it points to would keep every record, cleaned, expired or
        # erased. No command changes such a partition.
        first = symlinks[0]
        raise LinkedFileError(
            f"{first} is a {linked[first].what}"
            + (f" (and {len(symlinks) - 1} more linked file(s))" if len(symlinks) > 1 else "")
            + ": Kafka reads through the link, but a swap or deletion would replace only the "
              "link and leave the file it points to, with every record in it",
            path=storage.join(partition_dir, first),
            base_offset=file_offset(first),
            remedy="nothing was changed; with the broker stopped, move each linked file into "
                   "the partition directory in place of its link (mv TARGET LINK), then run "
                   "again")
    name_set = set(names)
    leftovers = leftover_names(names)
    snapshots = tuple(
        sorted(
            off
            for n in names
            if n.endswith(SNAPSHOT_SUFFIX) and (off := file_offset(n)) is not None
        )
    )
    log_names = segment_logs(names)
    segments = []
    for i, (base, log_name) in enumerate(log_names):
        prefix = log_name[: -len(LOG_SUFFIX)]
        log_path = storage.join(partition_dir, log_name)
        st = storage.stat(log_path)
        is_active = i == len(log_names) - 1
        segments.append(
            SegmentInfo(
                base_offset=base,
                log_path=log_path,
                size_bytes=st.size,
                mtime_ms=st.mtime_ms,
                largest_timestamp_ms=_largest_timestamp(partition_dir, prefix, base, st.size,
                                                        is_active),
                has_index=prefix + INDEX_SUFFIX in name_set,
                has_time_index=prefix + TIME_INDEX_SUFFIX in name_set,
                has_txn_index=prefix + TXN_INDEX_SUFFIX in name_set,
                index_bytes=_size_if_exists(partition_dir, prefix + INDEX_SUFFIX, name_set),
                time_index_bytes=_size_if_exists(partition_dir, prefix + TIME_INDEX_SUFFIX,
                                                 name_set),
            )
        )
    strays = tuple(ForeignEntry(f"{name}/{n}", "file" if n in identities else "entry",
                                "not a file Kafka keeps in a partition directory (Kafka's "
                                "loader ignores it too)")
                   for n in names if not is_partition_file(n))
    return PartitionLog(
        tp=tp, path=partition_dir, segments=tuple(segments), leftovers=leftovers,
        snapshots=snapshots, identities=identities, strays=strays,
        hard_linked={n: link.what for n, link in linked.items() if not link.symlink},
    )


def check_unlinked(part: PartitionLog) -> None:
    """An erasure must reach every name of the data it rewrites: a segment file with another
    hard link keeps the subject's records under that name after the swap.

    Raises:
        LinkedFileError: a segment file of the partition has several hard links.
    """
    if not part.hard_linked:
        return
    name, what = sorted(part.hard_linked.items())[0]
    raise LinkedFileError(
        f"{name} is a {what}: an erasure replaces this name, and the subject's records would "
        f"stay in the file's other name(s)"
        + (f" ({len(part.hard_linked) - 1} more file(s) of the partition are hard-linked)"
           if len(part.hard_linked) > 1 else ""),
        path=storage.join(part.path, name), base_offset=file_offset(name),
        remedy="nothing was changed; find the other names (find / -samefile FILE), remove "
               "them or give this name its own copy (cp FILE FILE.tmp && mv FILE.tmp FILE, "
               "with the broker stopped), then run again")


_SEGMENT_FILE = re.compile(r"^[0-9]{20}(\.log|\.index|\.timeindex|\.txnindex|\.snapshot)"
                           r"(\.cleaned|\.swap|\.deleted)?$")


def is_partition_file(name: str) -> bool:
    """Whether Kafka (or a kafka-compactor swap) keeps a file of this name in a partition
    directory: a segment's files and producer snapshots (with a swap's suffixes), the
    partition's checkpoints (and their temporaries) and an object-store swap manifest."""
    return bool(_SEGMENT_FILE.match(name)) or name in _PARTITION_FILES


def _size_if_exists(partition_dir: str, name: str, names: set[str]) -> int:
    return storage.stat(storage.join(partition_dir, name)).size if name in names else 0


def _largest_timestamp(
    partition_dir: str, prefix: str, base: int, size: int, is_active: bool
) -> int:
    largest = -1
    time_path = storage.join(partition_dir, prefix + TIME_INDEX_SUFFIX)
    if storage.exists(time_path):
        last = last_time_entry(
            storage.read_bytes(time_path), base, path=time_path, allow_preallocated=is_active
        )
        if last is not None:
            largest = last.timestamp
    log_path = storage.join(partition_dir, prefix + LOG_SUFFIX)
    for batch in _tail_batches(log_path, base, size, allow_preallocated=is_active):
        largest = max(largest, batch.max_timestamp)
    return largest


def _tail_batches(log_path: str, base: int, size: int, *,
                  allow_preallocated: bool) -> list[RecordBatch]:
    """The batches of a segment from its last ``.index`` entry on (the whole segment without
    one; CRCs unchecked: only headers are read), reading only that tail. An error's position
    is from the start of the file; when the tail cannot be framed but the whole segment can,
    the index is what is wrong.

    Raises:
        CompactorError: the tail cannot be framed (``CorruptIndexError`` when the index
            pointed at a place where no batch starts).
    """
    start = slot = 0
    index_path = log_path[: -len(LOG_SUFFIX)] + INDEX_SUFFIX
    if storage.exists(index_path):
        last = last_offset_entry(storage.read_bytes(index_path), base, path=index_path,
                                 allow_preallocated=allow_preallocated)
        if last is not None and last[1].position < size:
            slot, start = last[0], last[1].position
    try:
        return list(iter_batches(storage.read_bytes(log_path, start), path=log_path,
                                 verify_crc=False))
    except CompactorError as err:
        if err.position is not None:
            err.position += start
        if start:  # the index pointed there: is it the index that is wrong, or the segment?
            list(iter_batches(storage.read_bytes(log_path), path=log_path, verify_crc=False))
            raise CorruptIndexError(
                f"the last entry points at byte position {start} of the segment, which is "
                f"not where a batch starts ({err.message})", path=index_path,
                position=slot * 8, base_offset=base) from None
        raise


def check_partition_files(part: PartitionLog) -> None:
    """Validate what a command reads of a partition besides its segments and indexes before
    it changes anything: the leader epoch file and every producer snapshot.

    Raises:
        CompactorError: the first file that fails (its path, position where known).
    """
    read_leader_epochs(part.path)
    for base in part.snapshots:
        path = segment_path(part.path, base, SNAPSHOT_SUFFIX)
        decode_snapshot(storage.read_bytes(path), path=path)


def check_log_start(part: PartitionLog, log_start: int | None, log_end: int,
                    log_dir: str) -> None:
    """A ``log-start-offset-checkpoint`` entry must lie in ``[0, log end offset]``: a command
    must never delete or clean on a value the log cannot have.

    Raises:
        CorruptCheckpointError: it does not.
    """
    if log_start is not None and not 0 <= log_start <= log_end:
        raise CorruptCheckpointError(
            f"log-start-offset-checkpoint says {part.tp} starts at {log_start}, outside the "
            f"log's offsets [0, {log_end}] (its log end offset)",
            path=storage.join(log_dir, LOG_START_OFFSET_CHECKPOINT),
            remedy="the partition was left untouched; correct or remove its entry (a broker "
                   "rewrites the file) and run again")


def read_aborted_txns(part: PartitionLog) -> list[AbortedTxn]:
    """Every ``.txnindex`` entry of a partition, in segment order.

    Raises:
        CorruptIndexError: a transaction index cannot be decoded.
    """
    out: list[AbortedTxn] = []
    for seg in part.segments:
        if seg.has_txn_index:
            path = segment_path(part.path, seg.base_offset, TXN_INDEX_SUFFIX)
            out += decode_txn_index(storage.read_bytes(path), seg.base_offset, path=path)
    return out


class IndexFiles(TypedDict):
    """A segment's index files' bytes (``None``: missing), by the argument names of
    :func:`compactor.cleaner.verify.index_problems`."""

    index: bytes | None
    time_index: bytes | None
    txn_index: bytes | None


def index_files(log_path: str) -> IndexFiles:
    """The bytes of a segment's ``.index``, ``.timeindex`` and ``.txnindex``."""
    prefix = log_path[: -len(LOG_SUFFIX)]

    def read(suffix: str) -> bytes | None:
        return storage.read_bytes(prefix + suffix) if storage.exists(prefix + suffix) else None

    return IndexFiles(index=read(INDEX_SUFFIX), time_index=read(TIME_INDEX_SUFFIX),
                      txn_index=read(TXN_INDEX_SUFFIX))


def log_end_offset(part: PartitionLog) -> int:
    """The offset after the last batch of the partition: read from the last non-empty
    segment's tail (after its last ``.index`` entry); the last segment's base when every
    segment is empty.

    Raises:
        CorruptSegmentError: the tail cannot be framed.
    """
    for seg in reversed(part.segments):
        if seg.size_bytes == 0:
            continue
        batches = _tail_batches(seg.log_path, seg.base_offset, seg.size_bytes,
                                allow_preallocated=True)
        if batches:
            return batches[-1].next_offset
    return part.segments[-1].base_offset if part.segments else 0


def segment_extent(log_path: str) -> tuple[int, int] | None:
    """``[first batch's base offset, offset after the last batch)`` of a segment file (every
    batch framed and its CRC checked), or ``None`` when it holds no batch."""
    first = last = None
    for batch in iter_batches(storage.read_bytes(log_path), path=log_path):
        if first is None:
            first = batch.base_offset
        last = batch
    return None if first is None or last is None else (first, last.next_offset)


# The partition files written as ``<name>.tmp`` then renamed (Kafka's CheckpointFile, and
# storage.write_atomic here): a kill between the two leaves the ``.tmp`` behind.
PARTITION_CHECKPOINTS = (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA)

_PARTITION_FILES = frozenset({*PARTITION_CHECKPOINTS, *(c + ".tmp" for c in PARTITION_CHECKPOINTS),
                              MANIFEST_NAME})


# The files a group's rewrite may leave as ``<base><suffix>.cleaned`` (Kafka's
# ``LocalLog.CleanedFileSuffix``) until the driver swaps them in.
CLEANED_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def cleaned_path(partition_dir: str, base_offset: int, suffix: str) -> str:
    return segment_path(partition_dir, base_offset, suffix + CLEANED_SUFFIX)


def remove_cleaned(partition_dir: str, base_offset: int) -> None:
    """Remove whatever ``.cleaned`` files of the group at ``base_offset`` exist (a rewrite
    that failed, or a group that will not be committed)."""
    for suffix in CLEANED_FILE_SUFFIXES:
        storage.remove(cleaned_path(partition_dir, base_offset, suffix), missing_ok=True)
