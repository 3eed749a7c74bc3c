"""What kafka-compactor knows of the cluster whose log dir it maintains: every topic's
effective configs and where each value came from, and the partitions it must never touch.

Configs, lowest precedence first (later layers win, key by key):

1. Kafka's defaults (:data:`compactor.config.SPECS`);
2. the broker's static ``server.properties`` (``--server-properties``), through Kafka's
   synonyms, ``ms`` > ``minutes`` > ``hours``;
3. the cluster-wide dynamic broker default (BROKER ConfigRecord named ``""``) and
4. this broker's dynamic configs (named by ``node.id`` of ``meta.properties``), each only under
   the first synonym (``DynamicLogConfig``);
5. the topic's ConfigRecords;
6. ``--config`` (every topic), then 7. ``--topic-config`` / ``--topic-configs``.

Layers 3-5 come from the KRaft metadata log (``LOG_DIR/__cluster_metadata-0`` or
``--metadata-log-dir``). A topic is **configured** when the metadata knows it, when
``server.properties`` is given, when a flag sets one of its configs, or with
``--assume-kafka-defaults``; any other topic is neither compacted nor retained (``no_config``):
the tool never deletes or rewrites on a guess.

Never touched, with the reason reports give:

- ``metadata_log``: ``__cluster_metadata-0`` (not even listed among the partitions, see
  :class:`compactor.log.layout.LogDir`);
- ``stale_topic_id``: a partition dir whose topic the metadata removed, or whose
  ``partition.metadata`` topic id is not the metadata's id for that name (a leftover of a deleted
  and re-created topic);
- ``unknown_topic``: with metadata, a partition dir of a topic the metadata never had;
- ``invalid_config``: a topic whose configs from the cluster (metadata, ``server.properties``)
  break a rule here, e.g. ``segment.bytes`` below 1 MiB kept from a Kafka 3.x cluster; the
  error is in the report, the other topics go on (a bad flag stops the command instead);
- ``tiered_storage`` (retention only): ``remote.storage.enable=true``, since nothing here can
  prove a segment was uploaded before deleting it.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.log import storage
from compactor.config import (
    BROKER,
    CLUSTER_DEFAULT,
    SERVER_PROPERTIES,
    TOPIC,
    Layer,
    TopicConfig,
    broker_layer,
    resolve_topic_config,
)
from compactor.errors import CompactorError, ConfigError
from compactor.log.layout import (
    LogDir,
    load_cluster_metadata,
    read_node_id,
    read_properties,
    read_topic_id,
)
from compactor.cluster.metadata import METADATA_DIR_NAME, METADATA_TOPIC, ClusterMetadata, topic_layers_of
from compactor.model import TopicPartition

METADATA_LOG = "metadata_log"
STALE_TOPIC_ID = "stale_topic_id"
UNKNOWN_TOPIC = "unknown_topic"
NO_CONFIG = "no_config"
INVALID_CONFIG = "invalid_config"
TIERED_STORAGE = "tiered_storage"

HOW_TO_CONFIGURE = (
    "give the cluster's configs with --metadata-log-dir DIR (the directory holding "
    f"{METADATA_DIR_NAME}) and/or --server-properties FILE, or set them with --config "
    "KEY=VALUE, --topic-config TOPIC:KEY=VALUE or --topic-configs FILE "
    "(--assume-kafka-defaults takes Kafka's defaults as the real configs)")


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """Topic configs and untouchable partitions of one log dir.

    Attributes:
        configs: every topic with a partition dir in the log dir -> its effective configs.
        skips: partitions never touched (beyond ``no_config``), with the reason.
        metadata: the replayed metadata, when there was a metadata log.
        metadata_path: the metadata log directory replayed, if any.
        server_properties: the ``server.properties`` read, if any.
    """

    configs: Mapping[str, TopicConfig]
    skips: Mapping[TopicPartition, str] = field(default_factory=dict)
    metadata: ClusterMetadata | None = None
    metadata_path: str | None = None
    server_properties: str | None = None
    invalid: Mapping[str, dict[str, Any]] = field(default_factory=dict)

    def skip_reason(self, tp: TopicPartition, *, retention: bool = False) -> str | None:
        """Why ``tp`` must be left alone by this command, or ``None``."""
        if tp in self.skips:
            return self.skips[tp]
        if tp.topic in self.invalid:
            return INVALID_CONFIG
        cfg = self.configs[tp.topic]
        if not cfg.configured:
            return NO_CONFIG
        if retention and cfg.remote_storage_enable:
            return TIERED_STORAGE
        return None

    def unconfigured(self) -> list[str]:
        return sorted(t for t, c in self.configs.items() if not c.configured)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``cluster`` section."""
        ignored = {t: list(c.ignored) for t, c in sorted(self.configs.items()) if c.ignored}
        out: dict[str, Any] = {
            "metadata_log": self.metadata_path,
            "metadata": self.metadata.to_dict() if self.metadata else None,
            "server_properties": self.server_properties,
            "unconfigured_topics": self.unconfigured(),
            "ignored_configs": ignored,
            "invalid_configs": dict(self.invalid),
        }
        if out["unconfigured_topics"]:
            out["how_to_configure"] = HOW_TO_CONFIGURE
        return out

    def hints(self) -> list[str]:
        """Lines for the human summary."""
        lines = [f"{t}: left alone, its configs from the cluster are invalid: {e['message']}"
                 for t, e in sorted(self.invalid.items())]
        unconfigured = self.unconfigured()
        if unconfigured:
            internal = [t for t in unconfigured if t.startswith("__")]
            lines.append(f"left alone, no config known for: {', '.join(unconfigured)}; "
                         + HOW_TO_CONFIGURE)
            if internal:
                lines.append(f"Kafka creates {', '.join(internal)} with cleanup.policy=compact; "
                             "without the metadata log say so with --topic-config "
                             f"{internal[0]}:cleanup.policy=compact")
        for t, c in sorted(self.configs.items()):
            if c.ignored:
                lines.append(f"{t}: accepted but not used by kafka-compactor: "
                             + ", ".join(c.ignored))
        return lines


def build_catalog(log_dir: LogDir, *, config_all: Mapping[str, str],
                  config_topics: Mapping[str, Mapping[str, str]],
                  named_topics: Iterable[str] = (), metadata_log_dir: str | None = None,
                  server_properties: str | None = None,
                  assume_kafka_defaults: bool = False) -> Catalog:
    """Read the cluster's metadata and the flags into a :class:`Catalog` (reads only).

    Args:
        named_topics: topics the command line names (``--topics``, ``--topic-config``, a
            ``--topic-configs`` file): each must exist in the log dir or in the metadata.
        metadata_log_dir: the directory holding ``__cluster_metadata-0`` (default: the log
            dir, when it holds one).

    Raises:
        ConfigError: an invalid flag value or ``server.properties`` file, or a named topic
            that exists nowhere (with the closest existing name). An invalid value from the
            metadata log leaves only its topic alone (:data:`INVALID_CONFIG`).
        CorruptMetadataError: the metadata log cannot be replayed.
    """
    meta_path = log_dir.metadata_log
    if metadata_log_dir is not None:
        meta_path = storage.join(storage.absolute(metadata_log_dir), METADATA_DIR_NAME)
        if not storage.is_dir(meta_path):
            raise ConfigError(f"--metadata-log-dir holds no {METADATA_DIR_NAME} directory",
                              path=metadata_log_dir,
                              remedy="name the directory that holds it (Kafka's "
                                     "metadata.log.dir, by default the first of log.dirs)")
    meta = load_cluster_metadata(meta_path) if meta_path else None
    node_id = read_node_id(log_dir.path)
    if node_id is None and meta_path is not None:
        node_id = read_node_id(storage.dirname(meta_path))
    base: list[Layer] = []
    if server_properties is not None:
        base.append(broker_layer(SERVER_PROPERTIES, read_properties(server_properties),
                                 dynamic=False))
    if meta is not None:
        cluster, own = topic_layers_of(meta, node_id)
        base += [broker_layer(CLUSTER_DEFAULT, cluster, dynamic=True),
                 broker_layer(BROKER, own, dynamic=True)]
    topics = sorted({tp.topic for tp in log_dir.partitions})
    known = set(topics) | (set(meta.topic_ids) if meta else set())
    for name in sorted(set(named_topics) | set(config_topics)):
        if name == METADATA_TOPIC:
            raise ConfigError(f"{METADATA_TOPIC} is the KRaft metadata log: kafka-compactor "
                              "never compacts, retains, erases or configures it",
                              path=log_dir.path, remedy="leave it out of --topics and the "
                                                        "topic configs; nothing was changed")
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            raise ConfigError(
                f"topic {name!r} is neither in the log dir nor in the cluster metadata"
                + (f"; did you mean {close[0]!r}?" if close else ""), path=log_dir.path,
                remedy="fix the topic name; nothing was changed")
    configs = {}
    invalid: dict[str, dict[str, Any]] = {}
    for t in sorted(set(topics) | set(config_topics)):
        # the command line's own values first: a bad flag stops the command (exit 3)
        flags = resolve_topic_config(t, config_all, config_topics)
        layers = [*base]
        if meta is not None and t in meta.topic_configs:
            layers.append(Layer(TOPIC, meta.topic_configs[t]))
        real = (meta is not None and t in meta.topic_ids) or server_properties is not None \
            or assume_kafka_defaults
        try:
            configs[t] = resolve_topic_config(t, config_all, config_topics, lower=layers,
                                              configured=real)
        except ConfigError as err:  # the cluster's value: only this topic is left alone
            invalid[t] = err.to_dict()
            configs[t] = dataclasses.replace(flags, configured=False)
    skips: dict[TopicPartition, str] = {}
    if meta is not None:
        for tp in log_dir.partitions:
            reason = _stale(log_dir, tp, meta)
            if reason:
                skips[tp] = reason
    return Catalog(configs={t: configs[t] for t in topics}, skips=skips, metadata=meta,
                   metadata_path=meta_path, server_properties=server_properties,
                   invalid={t: e for t, e in invalid.items() if t in topics})


def _stale(log_dir: LogDir, tp: TopicPartition, meta: ClusterMetadata) -> str | None:
    if tp.topic == METADATA_TOPIC:  # a dir named like the metadata log, other partition
        return METADATA_LOG
    try:
        topic_id = read_topic_id(log_dir.partition_path(tp))
    except CompactorError:
        topic_id = None  # unreadable: judged by name alone; the command reports its files
    live = meta.topic_ids.get(tp.topic)
    if live is None:
        return STALE_TOPIC_ID if topic_id in meta.removed_ids else UNKNOWN_TOPIC
    if topic_id is not None and topic_id != live:
        return STALE_TOPIC_ID
    return None
