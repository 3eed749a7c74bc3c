"""One error tree for the whole product.

Every error carries a stable ``code`` (tests and the CLI's JSON output assert on it), the
location it concerns (``path``, byte ``position``, batch ``base_offset`` where they apply) and a
``remedy`` telling the operator what to do. ``str(err)`` renders all of them in one line, in the
spirit of Kafka's own messages: consequence, location, remedy.

Exit codes of the ``compactor`` command are declared here, once, next to the errors that map to
them.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1  # unexpected failure, or a check (``inspect --verify``) that found problems
EXIT_USAGE = 2  # argparse's own code for bad command-line syntax
EXIT_CONFIG = 3
EXIT_LOCKED = 4
EXIT_CORRUPT = 5
EXIT_PARTIAL = 6  # some partitions done, some skipped as corrupt
# erasure: the run did its work, and some requests failed on their own (each named, with its
# reason, in the report); the others were applied or verified
EXIT_REQUESTS_FAILED = 7
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it: Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (`| head`)


def format_location(path: str | None, position: int | None, base_offset: int | None) -> str:
    """``"at file F, byte position P, base offset O"`` with the known parts, or ``""``."""
    where = []
    if path is not None:
        where.append(f"file {path}")
    if position is not None:
        where.append(f"byte position {position}")
    if base_offset is not None:
        where.append(f"base offset {base_offset}")
    return "at " + ", ".join(where) if where else ""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (native libraries such as delta-rs append
    backtraces that do not belong in a one-line error)."""
    return (str(exc).strip().splitlines() or [""])[0]


class CompactorError(Exception):
    """Base of every error raised on purpose by kafka-compactor.

    Attributes:
        code: stable identifier, e.g. ``"CORRUPT_SEGMENT"``.
        path: file or directory concerned, when there is one.
        position: byte position in ``path`` (start of the entry or index slot), when known.
        base_offset: base offset of the batch (or segment) concerned, when known.
        remedy: what the operator should do.
    """

    code = "COMPACTOR_ERROR"
    exit_code = EXIT_FAILURE
    default_remedy = ""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        position: int | None = None,
        base_offset: int | None = None,
        remedy: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.position = position
        self.base_offset = base_offset
        self.remedy = self.default_remedy if remedy is None else remedy

    def with_location(
        self,
        *,
        path: str | None = None,
        position: int | None = None,
        base_offset: int | None = None,
    ) -> CompactorError:
        """Fill in location fields that are still unknown (used when a pure codec error
        surfaces at a layer that knows the file and the entry's absolute position)."""
        if self.path is None:
            self.path = path
        if self.position is None:
            self.position = position
        if self.base_offset is None:
            self.base_offset = base_offset
        return self

    def with_remedy(self, remedy: str) -> CompactorError:
        """The same error with ``remedy`` in place of the one its raiser knew (a layer that
        knows what was already changed says what to do now)."""
        self.remedy = remedy
        return self

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form for ``--json`` reports."""
        return {
            "code": self.code,
            "message": self.message,
            "path": self.path,
            "position": self.position,
            "base_offset": self.base_offset,
            "remedy": self.remedy,
        }

    def __str__(self) -> str:
        parts = [f"[{self.code}] {self.message}"]
        where = format_location(self.path, self.position, self.base_offset)
        if where:
            parts.append(where)
        if self.remedy:
            parts.append(f"remedy: {self.remedy}")
        return "; ".join(parts)


_SEGMENT_REMEDY = (
    "the data was left untouched; restore the segment from a replica or backup, or let a "
    "Kafka broker recover it (it truncates the log at the first invalid batch) before "
    "running kafka-compactor on this partition again"
)


class CorruptSegmentError(CompactorError):
    """A ``.log`` segment holds bytes that do not form valid record batches (bad CRC, bad
    lengths, truncated entry, trailing garbage, records that do not match their batch)."""

    code = "CORRUPT_SEGMENT"
    exit_code = EXIT_CORRUPT
    default_remedy = _SEGMENT_REMEDY


class TruncatedSegmentError(CorruptSegmentError):
    """An entry's declared size runs past the end of the file (a partial write)."""

    code = "TRUNCATED_SEGMENT"


class CrcMismatchError(CorruptSegmentError):
    """A batch's stored CRC does not match its content."""

    code = "CRC_MISMATCH"


class BadOffsetsError(CorruptSegmentError):
    """Batch offsets that Kafka could not have written: going backwards, below the segment's
    base, into the next segment, or more than 2^31-1 above the segment's base."""

    code = "BAD_OFFSETS"


class UnsupportedFormatError(CompactorError):
    """Well-framed bytes in a format we do not handle: unknown magic or compression codec."""

    code = "UNSUPPORTED_FORMAT"
    exit_code = EXIT_CORRUPT
    default_remedy = (
        "the data was left untouched; check that the directory is a Kafka log directory "
        "written by Kafka 0.8 or later and that the segment is not damaged"
    )


class CorruptIndexError(CompactorError):
    """An ``.index``, ``.timeindex`` or ``.txnindex`` file is inconsistent with its segment."""

    code = "CORRUPT_INDEX"
    exit_code = EXIT_CORRUPT
    default_remedy = (
        "the data was left untouched; delete the segment's .index file so that a Kafka "
        "broker rebuilds both indexes on its next start, or restore it from a replica"
    )


class CorruptCheckpointError(CompactorError):
    """A checkpoint file (``*-checkpoint``, ``leader-epoch-checkpoint``) or producer
    ``.snapshot`` cannot be parsed."""

    code = "CORRUPT_CHECKPOINT"
    exit_code = EXIT_CORRUPT
    default_remedy = (
        "the data was left untouched; restore the file from a backup or remove it so that "
        "Kafka (and kafka-compactor) fall back to their defaults"
    )


class CorruptMetadataError(CompactorError):
    """The cluster's KRaft metadata log (``__cluster_metadata-0``: snapshots and segments)
    cannot be decoded, so the topic configs it holds are unknown."""

    code = "CORRUPT_METADATA"
    exit_code = EXIT_CORRUPT
    default_remedy = (
        "nothing was changed; check the metadata log with 'compactor inspect' (a controller "
        "or broker restores it from the quorum), or give the topic configs with "
        "--config/--topic-configs and without --metadata-log-dir"
    )


class ConfigError(CompactorError):
    """An invalid topic config or command-line option value."""

    code = "CONFIG_ERROR"
    exit_code = EXIT_CONFIG
    default_remedy = "fix the value and run the command again; nothing was changed"


class LogDirError(CompactorError):
    """A log dir or partition dir is missing, unreadable or not a Kafka log dir."""

    code = "LOG_DIR_ERROR"
    exit_code = EXIT_CONFIG
    default_remedy = "check the path and its permissions; nothing was changed"


class LinkedFileError(LogDirError):
    """A segment, index or snapshot file whose data has another name (a symbolic link, or a
    file with several hard links): Kafka reads through the name, but a swap or deletion
    replaces or removes only the name, so the data would outlive the change."""

    code = "LINKED_FILE"


class StorageError(LogDirError):
    """An object store could not be reached or refused a request (network, credentials,
    permissions, throttling): the run could not do its work; the data may be fine."""

    code = "STORAGE_ERROR"
    exit_code = EXIT_FAILURE
    default_remedy = "check the endpoint, the credentials and the network, then run again"


class ConditionFailedError(LogDirError):
    """An object store refused a conditional write (``If-None-Match`` / ``If-Match``): the
    object is not in the state the write was made for."""

    code = "CONDITION_FAILED"


class LogDirLockedError(CompactorError):
    """Another process (a Kafka broker or another compactor) holds the log dir's ``.lock``."""

    code = "LOG_DIR_LOCKED"
    exit_code = EXIT_LOCKED
    default_remedy = (
        "stop the Kafka broker (or wait for the other kafka-compactor run) that uses this "
        "log dir, or run on an offline copy; nothing was changed"
    )


class CommitConflictError(CompactorError):
    """The files of a partition changed between planning and commit."""

    code = "COMMIT_CONFLICT"
    exit_code = EXIT_FAILURE
    default_remedy = "run again; the partition was left as it was before this run"


class SwapRecoveryError(CompactorError):
    """Leftovers of an interrupted swap cannot be resolved by Kafka's recovery rules."""

    code = "SWAP_RECOVERY"
    exit_code = EXIT_CORRUPT
    default_remedy = (
        "inspect the partition directory by hand; no file was deleted by this attempt"
    )


class SparkUnavailableError(CompactorError):
    """The Spark session cannot be started (no Java, a wrong ``JAVA_HOME``, an unreachable
    master)."""

    code = "SPARK_UNAVAILABLE"
    exit_code = EXIT_FAILURE
    default_remedy = (
        "make Java 17 reachable (JAVA_HOME or java on PATH) and check --master; nothing was "
        "changed"
    )


class ClusterNotReadyError(CompactorError):
    """The live cluster is not ready for a broker to stop (a partition not fully in sync, a
    broker not registered), or a restarted broker did not catch up in time; or its admin API
    cannot be reached."""

    code = "CLUSTER_NOT_READY"
    exit_code = EXIT_LOCKED
    default_remedy = (
        "wait until every partition is in sync again (kafka-topics.sh --describe "
        "--under-replicated-partitions shows none) and run it again"
    )


class RemoteTierError(CompactorError):
    """The broker's remote tier (KIP-405) could not be read: its remote log metadata, or a
    segment through its RemoteStorageManager. Nothing was changed; what the tier holds is
    unknown, so nothing is proven of it."""

    code = "REMOTE_TIER"
    exit_code = EXIT_FAILURE
    default_remedy = (
        "check the broker's remote.log.storage.manager.* and rsm.config.* settings in its "
        "server.properties and that its remote storage is reachable, then run again"
    )


class LedgerError(CompactorError):
    """The Delta tables under ``--state-dir`` could not be written or read (delta-rs refused a
    commit because another writer committed first, or the table is damaged)."""

    code = "LEDGER_ERROR"
    exit_code = EXIT_FAILURE
    default_remedy = (
        "run the command again (two commands wrote the ledger at the same time; delta-rs "
        "commits optimistically and the loser retries by being run again); if it keeps "
        "failing, check the state dir with 'compactor erase status'"
    )


class InternalError(CompactorError):
    """An exception kafka-compactor did not expect: a bug, or a failure of a component
    (Spark, the JVM) that has no error of its own here. Commands end with it instead of a
    traceback."""

    code = "INTERNAL_ERROR"
    exit_code = EXIT_FAILURE
    default_remedy = (
        "every partition is left old or new by the swap protocol (run 'compactor recover' to "
        "resolve leftovers); run again with COMPACTOR_DEBUG=1 to print the traceback, and "
        "report it if it persists"
    )


def is_data_problem(code: str) -> bool:
    """Whether an error code (``CompactorError.code``) says the partition's data is corrupt
    or unsupported (the partition is reported ``corrupt``), rather than that the run could not
    do its work (I/O, a full disk, a conflict: reported ``failed``)."""
    pending: list[type[CompactorError]] = [CompactorError]
    while pending:
        cls = pending.pop()
        if cls.code == code:
            return cls.exit_code == EXIT_CORRUPT
        pending.extend(cls.__subclasses__())
    return False
