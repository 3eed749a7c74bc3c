"""What every maintenance report shares: the outcome of one partition (its line's ``status``:
:class:`Outcome` for compaction and retention, :class:`ErasureOutcome` for erasure) and the
codes of its ``reason``, the run's status and its exit code (:class:`RunStatus`, one rule for
every command), and the human line for a partition left alone because of a problem."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from compactor.cluster.catalog import Catalog
from compactor.errors import (
    EXIT_CONFIG,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_REQUESTS_FAILED,
    CompactorError,
    StorageError,
    is_data_problem,
)
from compactor.log import storage
from compactor.log.layout import ForeignEntry
from compactor.model import TopicPartition


class Outcome(StrEnum):
    """What a command did with one partition (the ``status`` of its report line; the values
    are the strings of the JSON report)."""

    CLEANED = "cleaned"  # compact: swapped in
    WOULD_CLEAN = "would_clean"  # plan / dry run
    DELETED = "deleted"  # retain: a prefix of segments deleted
    WOULD_DELETE = "would_delete"
    KEPT = "kept"  # retain: nothing to delete
    SKIPPED = "skipped"  # not this command's business (policy, selection, metadata log, ...)
    CORRUPT = "corrupt"  # a check refused the partition's data: left untouched
    REFUSED = "refused"  # a duplicate or non-canonical directory: left untouched
    FAILED = "failed"  # the work could not be done (I/O, a full disk, a failed swap)
    # the run lost the log dir's lease (S3) before committing it: another run may have
    # changed it since this one read it, so nothing read of it is trusted (exit 4)
    LOCKED = "locked"

    @property
    def is_problem(self) -> bool:
        return self in (Outcome.CORRUPT, Outcome.REFUSED, Outcome.FAILED, Outcome.LOCKED)

    @staticmethod
    def of_read_error(code: str) -> Outcome:
        """A partition whose files could not be read or checked: ``corrupt``, unless the
        object store could not be reached (``failed``: the data may be fine)."""
        return Outcome.FAILED if code == StorageError.code else Outcome.CORRUPT

    @staticmethod
    def of_write_error(code: str) -> Outcome:
        """A partition whose rewrite or swap failed: ``corrupt`` when a check refused its data,
        else ``failed`` (storage, a full disk, a conflict)."""
        return Outcome.CORRUPT if is_data_problem(code) else Outcome.FAILED


class ErasureOutcome(StrEnum):
    """What ``erase apply`` or ``erase verify`` did with one directory (its line's
    ``status``)."""

    REWRITTEN = "rewritten"  # apply: its segments holding matches were rewritten
    WOULD_REWRITE = "would_rewrite"  # apply --dry-run
    UNCHANGED = "unchanged"  # apply: no match in it
    RESIDUAL_COPY = "residual_copy"  # apply --exclude-pending-deletes: a match kept, reported
    CLEAN = "clean"  # verify: no record of a verified subject in it
    RESIDUAL = "residual"  # verify: a record of a subject remains
    CORRUPT = Outcome.CORRUPT.value
    FAILED = Outcome.FAILED.value
    SKIPPED = Outcome.SKIPPED.value
    REFUSED = Outcome.REFUSED.value
    LOCKED = Outcome.LOCKED.value
    BLOCKED = "blocked"  # its topic's configs are not known: neither erased nor counted clean

    @property
    def is_problem(self) -> bool:
        return self in (ErasureOutcome.CORRUPT, ErasureOutcome.FAILED, ErasureOutcome.BLOCKED,
                        ErasureOutcome.LOCKED)


class RunStatus(StrEnum):
    """A whole run's ``status``, the same in every report, and its exit code: ``ok`` (0),
    ``partial`` (a partition or request needs attention, the others were done: 6),
    ``failed`` (erasure requests failed on their own, each named with its reason; the run did
    its work for the others: 7, so that a scheduler runs the next step for them),
    ``unconfigured``
    (the run decided nothing: every topic it would maintain has configs that would be
    guesses, :func:`configs_unknown`; 3, as a configuration error: a scheduled job that lost
    its ``--server-properties`` must not look like success)."""

    OK = "ok"
    PARTIAL = "partial"
    FAILED = "failed"
    UNCONFIGURED = "unconfigured"
    LOCKED = "locked"  # the run lost the log dir's lease: what it did not commit is locked

    @staticmethod
    def of(*, failed: bool = False, partial: bool = False) -> RunStatus:
        return RunStatus.FAILED if failed else RunStatus.PARTIAL if partial else RunStatus.OK

    @property
    def exit_code(self) -> int:
        return {RunStatus.OK: EXIT_OK, RunStatus.PARTIAL: EXIT_PARTIAL,
                RunStatus.UNCONFIGURED: EXIT_CONFIG, RunStatus.LOCKED: EXIT_LOCKED,
                RunStatus.FAILED: EXIT_REQUESTS_FAILED}[self]


#: the lines of a report that are no topic a run could maintain: Kafka's metadata log, and
#: the topics ``--topics`` did not select
NOT_CANDIDATES = frozenset({"metadata_log", "not_selected"})


def configs_unknown(lines: Iterable[PartitionLine]) -> bool:
    """Whether a run decided nothing because the configs of every topic it would maintain
    would be guesses: at least one partition, and each left alone with ``no_config``."""
    candidates = [p for p in lines if p.reason not in NOT_CANDIDATES]
    return bool(candidates) and all(
        p.status == Outcome.SKIPPED and p.reason == "no_config" for p in candidates)


#: Every ``reason`` a partition line can carry that is not an error code (a ``corrupt``,
#: ``refused`` or ``failed`` line's reason is its error's ``code``, :mod:`compactor.errors`).
# : The reference's table (``docs/reference.md``) and ``schemas/report.schema.json`` list the same
# codes (a test checks).
REASONS: Mapping[str, str] = {
    # compact and plan (cleaner.policy.SkipReason)
    "clean": "the round cleans the partition (its dirty ratio passed the threshold, or a dirty "
             "segment is past max.compaction.lag.ms)",
    "below_dirty_ratio": "dirty ratio at or below min.cleanable.dirty.ratio, and no dirty "
                         "segment past max.compaction.lag.ms",
    "nothing_cleanable": "no dirty segment may be cleaned yet (min.compaction.lag.ms, an open "
                         "transaction, the high watermark or the active segment holds it)",
    "empty": "the partition holds no records",
    "not_compacted": "cleanup.policy has no compact",
    "not_selected": "--topics does not name the topic",
    # retain (compactor.retention.RetentionReason: deleted_by_reason holds the split)
    "expired": "segments past retention.ms or retention.bytes, or below the log start offset",
    "nothing_expired": "no segment past retention.ms or retention.bytes or below the log start "
                       "offset",
    # the cluster catalog (compactor.cluster.catalog): left alone by every command
    "metadata_log": "the KRaft metadata log __cluster_metadata-0, never changed",
    "stale_topic_id": "the directory's topic id is not the cluster's (a deleted and re-created "
                      "topic's leftover)",
    "unknown_topic": "the cluster's metadata has no such topic",
    "stray": "not a live replica of this broker (no partition.metadata, a partition the topic "
             "lacks, or replicas without this node: Kafka's LogManager.isStrayKraftReplica)",
    "no_config": "a config a decision reads would be a guess (cluster.guessed_configs; "
                 "cluster.missing says what to give)",
    "invalid_config": "a config of the topic holds a value that breaks a rule here",
    "tiered_storage": "remote.storage.enable=true: retention is the broker's (tiered copies)",
    "decompression_limit": "max.decompressed.message.bytes limits records (Kafka 4.4): "
                           "Kafka's cleaner fails on a larger record, which kafka-compactor "
                           "does not check yet, so the topic is not compacted",
    "replicas_out_of_sync": "another replica of the partition is neither in its ISR nor an "
                            "eligible leader (KIP-966): not compacted, so no tombstone or "
                            "marker goes that the missing replica still needs "
                            "(--allow-replica-divergence overrides)",
}


#: a line's status that says the run changed its files (and committed them)
CHANGED = frozenset({Outcome.CLEANED, Outcome.DELETED, ErasureOutcome.REWRITTEN})


def lease_loss(log_dir: str) -> dict[str, Any] | None:
    """The error every partition a run did not commit carries once the run is known to have
    lost the log dir's lease (:func:`storage.lease_lost`: another run took it), else ``None``:
    the other run may have changed them since they were read, so what this run found there
    (a segment gone, corrupt) is not trusted or reported as such."""
    lost = storage.lease_lost(log_dir)
    return None if lost is None else lost.with_remedy(
        "another run took the log dir's lease while this one ran: this partition was not "
        "committed and what this run read of it is not trusted; run again when the other run "
        "is done").to_dict()


def exit_code(statuses: Iterable[str]) -> int:
    """Exit 6 (partial) when any partition is corrupt, refused or failed, else 0."""
    return EXIT_PARTIAL if any(Outcome(s).is_problem for s in statuses) else EXIT_OK


def problem_line(tp: object, status: str, error: Mapping[str, Any], *, left: str) -> str:
    """The summary line of a partition a problem stopped: what was left, the error, where."""
    where = ", ".join(f"{k.replace('_', ' ')} {error[k]}" for k in ("position", "base_offset")
                      if error.get(k) is not None)
    return (f"{tp}: {str(status).upper()}, {left}: {error.get('message')} "
            f"({error.get('path')}{', ' + where if where else ''})"
            + (f"; remedy: {error['remedy']}" if error.get("remedy") else ""))


class PartitionLine(Protocol):
    """One partition's line of a report."""

    tp: TopicPartition
    status: Outcome
    reason: str
    error: dict[str, Any] | None
    high_watermark_unknown: bool  # no replication-offset-checkpoint entry

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(kw_only=True)
class LogDirReport:
    """What every maintenance report of a log dir holds: where and when, the partitions'
    lines, how many partitions recovery touched, the cluster as the run saw it, and what in
    the log dir is not Kafka's. Subclasses add their own totals to :meth:`envelope`."""

    log_dir: str
    now_ms: int
    recovered: int = 0
    catalog: Catalog | None = None
    foreign: tuple[ForeignEntry, ...] = ()
    # log-dir steps that failed after partitions were changed (a checkpoint write): the
    # report still goes out, with what changed, and the exit code is partial
    log_dir_errors: list[dict[str, Any]] = field(default_factory=list)
    assume_committed: bool = False  # --assume-committed: a missing high watermark is the log end

    def lines(self) -> Sequence[PartitionLine]:
        raise NotImplementedError

    def settle_lease(self) -> None:
        """Once the run is known to have lost the log dir's lease, every partition it did not
        commit is ``locked`` (:func:`lease_loss`). The run then exits 4, which a scheduler
        retries."""
        error = lease_loss(self.log_dir)
        if error is None:
            return
        for p in self.lines():
            if p.status not in CHANGED and p.reason not in NOT_CANDIDATES:
                p.status, p.reason, p.error = Outcome.LOCKED, error["code"], error

    def failed_after_changes(self, step: str, err: CompactorError,
                             changed: Sequence[str]) -> None:
        """Record that ``step`` failed after the partitions ``changed`` were changed."""
        self.log_dir_errors.append({**err.to_dict(), "step": step, "changed": list(changed)})

    @property
    def unconfigured(self) -> bool:
        """The run decided nothing: every topic's configs would be guesses
        (:func:`configs_unknown`)."""
        return not self.log_dir_errors and configs_unknown(self.lines())

    @property
    def status(self) -> RunStatus:
        if any(p.status == Outcome.LOCKED for p in self.lines()):
            return RunStatus.LOCKED
        if self.unconfigured:
            return RunStatus.UNCONFIGURED
        return RunStatus.of(partial=bool(self.log_dir_errors)
                            or exit_code(p.status for p in self.lines()) != EXIT_OK)

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def hw_unknown(self) -> list[str]:
        """The partitions with no ``replication-offset-checkpoint`` entry (their high
        watermark is Kafka's 0, or the log end with ``--assume-committed``)."""
        return [str(p.tp) for p in self.lines() if p.high_watermark_unknown]

    def unconfigured_because(self) -> str:
        """What the run needed to know (the catalog's ``missing``), for the report and the
        scheduler's failure message."""
        missing = list(self.catalog.missing) if self.catalog else []
        return "; ".join(missing) or "every topic's configs are unknown"

    def envelope(self, command: str, **totals: Any) -> dict[str, Any]:
        """The JSON report: the common head, ``totals``, the common tail."""
        return {
            "type": "report", "command": command, "log_dir": self.log_dir,
            "now_ms": self.now_ms, **totals,
            "status": self.status,
            **({"unconfigured": self.unconfigured_because()} if self.unconfigured else {}),
            "high_watermark_unknown": self.hw_unknown(),
            "assume_committed": self.assume_committed,
            "recovered_partitions": self.recovered,
            "cluster": self.catalog.to_dict() if self.catalog else None,
            "foreign": [f.to_dict() for f in self.foreign],
            "log_dir_errors": self.log_dir_errors,
            "partitions": [p.to_dict() for p in self.lines()],
        }

    def _hw_lines(self) -> list[str]:
        unknown = self.hw_unknown()
        if not unknown:
            return []
        shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        if self.assume_committed:
            return [f"HIGH WATERMARK UNKNOWN for {len(unknown)} partition(s) ({shown}): taken as "
                    f"the log end, as --assume-committed says"]
        return [f"HIGH WATERMARK UNKNOWN for {len(unknown)} partition(s) ({shown}): no "
                f"replication-offset-checkpoint entry, so it is 0 as a broker loads it "
                f"(Partition.createLog): nothing above it is deleted or cleaned; for an archive "
                f"whose checkpoints were not copied, --assume-committed takes the log end"]

    def footer(self, *, hints: bool = True) -> list[str]:
        """The summary's last lines: foreign entries, then the catalog's hints."""
        return [str(f) for f in self.foreign] + [
            f"LOG DIR: {e['step']} FAILED after {len(e['changed'])} partition(s) were changed "
            f"({', '.join(e['changed'][:5])}{', ...' if len(e['changed']) > 5 else ''}): "
            f"{e.get('message')} ({e.get('path')})"
            + (f"; remedy: {e['remedy']}" if e.get("remedy") else "")
            for e in self.log_dir_errors] + (
            self.catalog.hints() if self.catalog and hints else []) + self._hw_lines() + (
            [f"UNCONFIGURED (exit 3): nothing was decided, no topic's configs are known: "
             f"{self.unconfigured_because()}"] if self.unconfigured else [])
