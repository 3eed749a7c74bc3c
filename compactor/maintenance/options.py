"""What every maintenance command (``compact``, ``plan``, ``retain``, ``run``, ``erase``) is
told: log dir, clock, topic configs and where the cluster's own configs are. Parsed from a
command line by :mod:`compactor.cli.args`; no Spark here, so driver-only commands start fast."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from compactor.cleaner.planning import ONE_TASK_KEYS
from compactor.cleaner.rewrite import check_writer
from compactor.cluster.catalog import Catalog, build_catalog
from compactor.errors import ConfigError
from compactor.log import storage
from compactor.log.layout import LogDir, open_log_dir


@dataclass(frozen=True, kw_only=True)
class MaintenanceOptions:
    """The arguments of a maintenance command, validated."""

    log_dir: str
    now_ms: int
    config_all: Mapping[str, str] = field(default_factory=dict)
    config_topics: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    dry_run: bool = False  # plan and report, change nothing
    writer: str = "native"  # the record engine of a round (compactor.cleaner.rewrite.WRITERS)
    # a round of several groups is written in one task while its key table holds at most
    # this many keys (compactor.cleaner.planning.ONE_TASK_KEYS)
    task_keys: int = ONE_TASK_KEYS
    topics: frozenset[str] = frozenset()  # only these topics (empty: every topic)
    metadata_log_dir: str | None = None  # holds __cluster_metadata-0 (default: the log dir)
    server_properties: str | None = None
    assume_kafka_defaults: bool = False
    # a partition without a replication-offset-checkpoint entry counts as committed up to its
    # log end (an archive whose checkpoints were not copied), not as Kafka's 0
    assume_committed: bool = False
    allow_replica_divergence: bool = False  # compact partitions whose ISR lacks a replica
    # the Kafka release whose rules to follow, when the metadata does not say it exactly
    # (compactor.cluster.release.follow)
    kafka_version: str | None = None
    # a now given on the command line must not lie before the newest record
    # (retention.check_now_after_newest); the wall clock and --allow-past-now are not checked
    check_past_now: bool = False

    def selects(self, topic: str) -> bool:
        return not self.topics or topic in self.topics


def build_options(log_dir: str, *, now_ms: int,
                  config_all: Mapping[str, object] | None = None,
                  config_topics: Mapping[str, Mapping[str, object]] | None = None,
                  topics: Iterable[str] = (), dry_run: bool = False,
                  metadata_log_dir: str | None = None, server_properties: str | None = None,
                  assume_kafka_defaults: bool = False, allow_replica_divergence: bool = False,
                  writer: str = "native", check_past_now: bool = False,
                  task_keys: int = ONE_TASK_KEYS,
                  assume_committed: bool = False,
                  kafka_version: str | None = None) -> MaintenanceOptions:
    """The one way to make :class:`MaintenanceOptions` (the command line and the Python API
    both come here): paths made absolute, config values as the strings Kafka reads, the
    writer's name checked (a round builds its engine before any work; commands without one
    never import numba).

    Raises:
        ConfigError: an unknown writer, or a negative ``task_keys``.
    """
    check_writer(writer)
    if task_keys < 0:
        raise ConfigError(f"--task-keys must be 0 or more, not {task_keys}")
    return MaintenanceOptions(
        log_dir=storage.absolute(log_dir), now_ms=now_ms,
        config_all={str(k): str(v) for k, v in (config_all or {}).items()},
        config_topics={str(t): {str(k): str(v) for k, v in c.items()}
                       for t, c in (config_topics or {}).items()},
        dry_run=dry_run, topics=frozenset(topics),
        metadata_log_dir=metadata_log_dir and storage.absolute(metadata_log_dir),
        server_properties=server_properties and storage.absolute(server_properties),
        assume_kafka_defaults=assume_kafka_defaults,
        allow_replica_divergence=allow_replica_divergence, writer=writer,
        check_past_now=check_past_now, task_keys=task_keys, assume_committed=assume_committed,
        kafka_version=kafka_version)


def load_catalog(opts: MaintenanceOptions, log_dir: LogDir | None = None) -> Catalog:
    """The topic configs and untouchable partitions of the options' log dir (reads only).

    Raises:
        ConfigError: an invalid config, or a topic named on the command line that exists
            neither in the log dir nor in the cluster metadata.
        CorruptMetadataError: the metadata log cannot be replayed.
        LogDirError: the log dir is missing or unreadable.
    """
    return build_catalog(log_dir or open_log_dir(opts.log_dir), config_all=opts.config_all,
                         config_topics=opts.config_topics, named_topics=opts.topics,
                         metadata_log_dir=opts.metadata_log_dir,
                         server_properties=opts.server_properties,
                         assume_kafka_defaults=opts.assume_kafka_defaults,
                         allow_replica_divergence=opts.allow_replica_divergence,
                         kafka_version=opts.kafka_version)


def state_store(state_dir: str | None) -> dict[str, str] | None:
    """The object store options of a state dir on S3 (a Spark session started for the
    command reaches it too), ``None`` on a local disk or without one."""
    return storage.delta_options(state_dir) if state_dir else None
