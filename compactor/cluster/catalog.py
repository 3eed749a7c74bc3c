"""What kafka-compactor knows of the cluster whose log dir it maintains: every topic's
effective configs, where each value came from and whether it is known or would be a guess,
and the partitions it must never touch.

Configs, lowest precedence first (later layers win, key by key; Kafka's
``LogManager.currentDefaultConfig`` and ``LogConfig.fromProps``):

1. Kafka's defaults (:data:`compactor.config.SPECS`);
2. the broker's static ``server.properties`` (``--server-properties``), through Kafka's
   synonyms, ``ms`` > ``minutes`` > ``hours``;
3. the cluster-wide dynamic broker default (BROKER ConfigRecord named ``""``) and
4. this broker's dynamic configs (named by its ``node.id``), each only under the first
   synonym (``DynamicLogConfig``), an invalid one dropped alone;
5. ``--config`` (a broker-level default of ours, below every topic's own configs);
6. the topic's ConfigRecords (or, under ``--assume-kafka-defaults`` without metadata, the
   configs Kafka creates its internal topics with);
7. ``--topic-config`` / ``--topic-configs``.

Layers 3, 4 and 6 come from the KRaft metadata log: ``--metadata-log-dir``, else the log dir's
own ``__cluster_metadata-0``, else the one ``server.properties`` places (``metadata.log.dir``,
else the first of ``log.dirs``). The tool never deletes or rewrites on a guess: a value is
**known** when a flag of the topic's own sets it, or when the topic's own layer is known (the
metadata names the topic, or ``--assume-kafka-defaults``) and the value comes from a layer the
tool read (Kafka's default counts only when the static layer is known: ``server.properties``
given, or ``--assume-kafka-defaults``). A topic is maintained only when every config a decision
reads (:data:`compactor.config.DECIDING`) is known; otherwise its partitions are skipped
``no_config`` and the report says what is missing.

Never touched, with the reason reports give:

- ``metadata_log``: ``__cluster_metadata-0`` (not even listed among the partitions, see
  :class:`compactor.log.layout.LogDir`);
- ``stale_topic_id``: a partition dir whose topic the metadata removed, or whose
  ``partition.metadata`` topic id is not the metadata's id for that name (a leftover of a deleted
  and re-created topic);
- ``unknown_topic``: with metadata, a partition dir of a topic the metadata never had;
- ``stray``: what Kafka's ``LogManager.isStrayKraftReplica`` moves aside as ``-stray``: a dir
  without ``partition.metadata``, a partition number the topic does not have, or a partition
  whose replicas do not include this broker;
- ``invalid_config``: a topic whose own configs hold a value Kafka accepted but that breaks a
  rule here; the error is in the report, the other topics go on (a bad flag stops the command);
- ``tiered_storage`` (retention only): ``remote.storage.enable=true``, since nothing here can
  prove a segment was uploaded before deleting it;
- ``decompression_limit`` (compaction only): ``max.decompressed.message.bytes`` is set (Kafka
  trunk): Kafka's cleaner leaves a partition uncleanable when a compressed record's body
  exceeds it, which kafka-compactor does not check yet, so it does not clean such topics;
- ``replicas_out_of_sync`` (compaction only, unless ``--allow-replica-divergence``): a
  partition another of whose replicas is neither in its ISR nor an eligible leader
  (:func:`lagging_replicas`). Each replica removes tombstones and markers on
  its own; one that is offline past ``delete.retention.ms`` would keep a deleted key's old
  value for ever (KAFKA-8522 and its kin), so the round leaves the partition as it is until the
  replicas are back in sync.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.cluster.metadata import ClusterMetadata, PartitionState, topic_layers_of
from compactor.cluster.metadata_log import load_cluster_metadata
from compactor.cluster.release import DECOMPRESSED_LIMIT, KafkaRelease, follow, text
from compactor.codec.kraft import uuid_bytes
from compactor.config import (
    BROKER,
    BROKER_SYNONYMS,
    CLUSTER_DEFAULT,
    DECIDING,
    DEFAULT,
    ERASURE_DECIDING,
    INTERNAL_TOPIC,
    INTERNAL_TOPIC_CONFIGS,
    SERVER_PROPERTIES,
    TOPIC,
    TOPIC_FLAG,
    Layer,
    TopicConfig,
    broker_layer,
    dynamic_set_problem,
    resolve_topic_config,
)
from compactor.errors import CompactorError, ConfigError
from compactor.log import storage
from compactor.log.layout import (
    FUTURE,
    LogDir,
    read_meta_properties,
    read_node_id,
    read_properties,
    read_topic_id,
)
from compactor.log.names import METADATA_DIR_NAME, METADATA_TOPIC
from compactor.model import TopicPartition

METADATA_LOG = "metadata_log"
STALE_TOPIC_ID = "stale_topic_id"
UNKNOWN_TOPIC = "unknown_topic"
STRAY = "stray"
NO_CONFIG = "no_config"
INVALID_CONFIG = "invalid_config"
TIERED_STORAGE = "tiered_storage"
REPLICAS_OUT_OF_SYNC = "replicas_out_of_sync"
DECOMPRESSION_LIMIT = "decompression_limit"

NEED_STATIC = ("the broker's static configs are unknown: give its server.properties with "
               "--server-properties FILE (or, for a broker that sets no log.* config, "
               "--assume-kafka-defaults)")
NEED_METADATA = (f"the topics' own configs are unknown: no metadata log was found; give "
                 f"--metadata-log-dir DIR (the directory holding {METADATA_DIR_NAME}, Kafka's "
                 "metadata.log.dir), or --assume-kafka-defaults if no topic overrides anything")
HOW_TO_CONFIGURE = (
    "give the cluster's configs with --server-properties FILE and, when the log dir does not "
    f"hold {METADATA_DIR_NAME}, --metadata-log-dir DIR; or set a topic's configs with "
    "--topic-config TOPIC:KEY=VALUE or --topic-configs FILE (--assume-kafka-defaults takes "
    "Kafka's defaults as the real configs)")


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """Topic configs and untouchable partitions of one log dir.

    Attributes:
        configs: every topic with a partition dir in the log dir -> its effective configs
            (``TopicConfig.configured``: every deciding config known).
        guessed: topic -> the deciding configs whose value would be a guess.
        skips: partitions never touched (beyond ``no_config``), with the reason.
        metadata: the replayed metadata, when there was a metadata log.
        metadata_path: the metadata log directory replayed, if any.
        server_properties: the ``server.properties`` read, if any.
        node_id: this broker's ``node.id`` (``meta.properties``, ``server.properties``).
        missing: what the tool would need to know to maintain the unconfigured topics.
        directory_id: the log dir's ``directory.id`` (``meta.properties``, KIP-858), if any.
        dropped: the dynamic broker configs Kafka ignores as invalid (name -> message).
        out_of_sync: partitions another of whose replicas may lack part of the log
            (:func:`lagging_replicas`, from the metadata).
        allow_replica_divergence: compact those too (``--allow-replica-divergence``).
    """

    configs: Mapping[str, TopicConfig]
    guessed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    skips: Mapping[TopicPartition, str] = field(default_factory=dict)
    metadata: ClusterMetadata | None = None
    metadata_path: str | None = None
    server_properties: str | None = None
    node_id: str | None = None
    directory_id: str | None = None
    missing: tuple[str, ...] = ()
    dropped: Mapping[str, str] = field(default_factory=dict)
    out_of_sync: frozenset[TopicPartition] = frozenset()
    allow_replica_divergence: bool = False
    #: the broker's own cleaner (``log.cleaner.enable``, a static config: default true) and
    #: where that came from; ``None`` when the broker's static configs are unknown
    broker_cleaner: tuple[bool, str] | None = None
    #: a ``__cluster_metadata-0`` found in the log dir that is not the broker's metadata log
    #: (its ``metadata.log.dir`` is elsewhere): a stale copy, never read
    stale_metadata_log: str | None = None
    #: the Kafka release whose rules this log dir follows (compactor.cluster.release)
    kafka_release: KafkaRelease = field(default_factory=lambda: follow(
        finalized_level=None, registered_level=None, node_id=None, flag=None))
    #: this log dir is cordoned (KIP-1066, Kafka 4.3: no new partition is placed on it; its
    #: partitions are served and cleaned as before), and what says so; ``None``: not cordoned
    cordoned: str | None = None

    @property
    def invalid(self) -> dict[str, dict[str, Any]]:
        """Topic -> the error of its first config Kafka holds that breaks a rule here."""
        return {t: {"code": "CONFIG_ERROR", "message": next(iter(c.invalid.values())),
                    "configs": dict(c.invalid)}
                for t, c in sorted(self.configs.items()) if c.invalid}

    def skip_reason(self, tp: TopicPartition, *, retention: bool = False) -> str | None:
        """Why ``tp`` must be left alone by this command, or ``None``."""
        if tp in self.skips:
            return self.skips[tp]
        cfg = self.configs[tp.topic]
        if cfg.invalid:
            return INVALID_CONFIG
        if not cfg.configured:
            return NO_CONFIG
        if retention and cfg.remote_storage_enable:
            return TIERED_STORAGE
        if not retention and cfg.compact and tp in self.out_of_sync \
                and not self.allow_replica_divergence:
            return REPLICAS_OUT_OF_SYNC
        if not retention and cfg.compact and cfg.decompressed_limit \
                and self.kafka_release.at_least(DECOMPRESSED_LIMIT):
            return DECOMPRESSION_LIMIT
        return None

    def erasure_refusal(self, topic: str) -> str | None:
        """Why an erasure must not rewrite ``topic``'s partitions (``None``: it may): its
        ``cleanup.policy`` or ``remote.storage.enable`` is unknown or invalid. Every other
        config may be missing; an erasure uses the cluster's policy whatever else fails."""
        cfg = self.configs.get(topic)
        if cfg is None:
            return (f"topic {topic} has no partition in this log dir and its configs were "
                    "not resolved")
        if self.metadata is not None and topic not in self.metadata.topic_ids:
            return None  # a removed or unknown topic's leftover: no broker serves or cleans it
                         # again, so erasing the exact matches is the whole erasure
        bad = [k for k in ERASURE_DECIDING if k in cfg.invalid]
        unknown = [k for k in ERASURE_DECIDING if k in self.guessed.get(topic, ())]
        if bad:
            return cfg.invalid[bad[0]]
        if unknown:
            return (f"topic {topic}: {', '.join(unknown)} unknown ("
                    + "; ".join(self.missing or (HOW_TO_CONFIGURE,)) + ")")
        return None

    def place(self, log_dir: str) -> dict[str, Any]:
        """Where this run's copies live, as the metadata names replica locations: this
        broker's ``node.id`` and the log dir's ``directory.id`` (the path too, for people)."""
        return {"node_id": int(self.node_id) if self.node_id is not None else None,
                "directory_id": self.directory_id, "log_dir": log_dir}

    def replicas_of(self, applies_to: Callable[[str], bool]) -> list[dict[str, Any]] | None:
        """Every replica of every partition of the live topics ``applies_to`` selects, from the
        metadata (``PartitionRecord``/``PartitionChangeRecord``): partition dir name, broker
        and directory id (``None`` when Kafka has not assigned one: ``DirectoryId.reserved``).
        ``None`` without a metadata log: then nothing says where the replicas are."""
        if self.metadata is None:
            return None
        out = []
        for topic, topic_id in sorted(self.metadata.topic_ids.items()):
            if not applies_to(topic):
                continue
            for p, state in sorted(self.metadata.partitions.get(topic_id, {}).items()):
                dirs = state.directories if len(state.directories) == len(state.replicas) \
                    else [None] * len(state.replicas)
                out += [{"partition": f"{topic}-{p}", "node_id": node,
                         "directory_id": None if directory is None or _reserved(directory)
                         else directory}
                        for node, directory in zip(state.replicas, dirs)]
        return out

    def unconfigured(self) -> list[str]:
        return sorted(t for t, c in self.configs.items() if not c.configured and not c.invalid)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``cluster`` section."""
        ignored = {t: list(c.ignored) for t, c in sorted(self.configs.items()) if c.ignored}
        out: dict[str, Any] = {
            "metadata_log": self.metadata_path,
            "metadata": self.metadata.to_dict() if self.metadata else None,
            "server_properties": self.server_properties,
            "node_id": self.node_id,
            "unconfigured_topics": self.unconfigured(),
            "guessed_configs": {t: list(g) for t, g in sorted(self.guessed.items()) if g},
            "ignored_configs": ignored,
            "invalid_configs": self.invalid,
            "dropped_broker_configs": dict(self.dropped),
            "replicas_out_of_sync": sorted(tp.dir_name for tp in self.out_of_sync),
            "broker_cleaner": None if self.broker_cleaner is None else {
                "enabled": self.broker_cleaner[0], "source": self.broker_cleaner[1]},
            "kafka_release": self.kafka_release.to_dict(),
            "cordoned": self.cordoned,
        }
        if self.stale_metadata_log:
            out["stale_metadata_log"] = self.stale_metadata_log
        if out["unconfigured_topics"]:
            out["missing"] = list(self.missing)
            out["how_to_configure"] = HOW_TO_CONFIGURE
        return out

    def hints(self) -> list[str]:
        """Lines for the human summary."""
        lines = [f"{t}: left alone, its configs from the cluster are invalid: {e['message']}"
                 for t, e in self.invalid.items()]
        lines += [f"dynamic broker config {k} ignored, as Kafka ignores it: {m}"
                  for k, m in sorted(self.dropped.items())]
        unconfigured = self.unconfigured()
        if unconfigured:
            lines.append(f"left alone, configs not known for: {', '.join(unconfigured)}")
            lines += [f"  {m}" for m in self.missing] or [f"  {HOW_TO_CONFIGURE}"]
        if self.broker_cleaner is not None and not self.broker_cleaner[0]:
            lines.append(f"the broker's own cleaner is off (log.cleaner.enable=false, "
                         f"{self.broker_cleaner[1]}): the broker compacts nothing, and it "
                         f"retains no compacted topic either, compact,delete included (its "
                         f"retention task takes only non-compacted logs without a cleaner: "
                         f"LogManager.cleanupLogs); these runs are all the compaction and "
                         f"retention those topics get")
        release = self.kafka_release
        if release.newer or not release.exact:
            lines.append(f"Kafka {text(release.version)}'s rules followed: "
                         f"{release.source}")
        if self.cordoned:
            lines.append(f"this log dir is cordoned ({self.cordoned}; KIP-1066): the broker "
                         "places no new partition on it and serves and cleans the ones it "
                         "holds, so it is maintained like any other")
        if self.stale_metadata_log:
            lines.append(f"{self.stale_metadata_log}: not the metadata log this run read "
                         f"({self.metadata_path or 'none'}; a broker reads only its "
                         f"metadata.log.dir, else the first of log.dirs: "
                         f"KafkaConfig.metadataLogDir), never read")
        if self.metadata is not None and self.metadata.unknown_record_types:
            types = ", ".join(f"{k} (x{n})" for k, n in
                              sorted(self.metadata.unknown_record_types.items()))
            lines.append(f"metadata log: record types newer than Kafka 4.1 skipped: {types}")
        if self.out_of_sync and not self.allow_replica_divergence:
            lines.append(
                f"{len(self.out_of_sync)} partitions have a replica out of sync "
                f"({', '.join(sorted(tp.dir_name for tp in self.out_of_sync)[:5])}"
                f"{', ...' if len(self.out_of_sync) > 5 else ''}): not compacted, so no "
                "tombstone or marker goes that the missing replica still needs; "
                "--allow-replica-divergence compacts them anyway")
        for t, c in sorted(self.configs.items()):
            if c.ignored:
                lines.append(f"{t}: accepted but not used by kafka-compactor: "
                             + ", ".join(c.ignored))
        return lines


def lagging_replicas(state: PartitionState, node_id: int) -> set[int]:
    """The other replicas of a partition that may lack part of its log: neither in the ISR
    nor eligible leaders (KIP-966's ELR, which hold the log up to the high watermark). This
    broker's own replica is not among them: the round rewrites that one, and no other replica
    depends on what it keeps (a whole cluster stopped cleanly leaves the ISR empty and every
    replica in the ELR)."""
    return set(state.replicas) - set(state.isr) - set(state.elr) - {node_id}


def build_catalog(log_dir: LogDir, *, config_all: Mapping[str, str],
                  config_topics: Mapping[str, Mapping[str, str]],
                  named_topics: Iterable[str] = (), metadata_log_dir: str | None = None,
                  server_properties: str | None = None,
                  assume_kafka_defaults: bool = False,
                  allow_replica_divergence: bool = False,
                  kafka_version: str | None = None) -> Catalog:
    """Read the cluster's metadata and the flags into a :class:`Catalog` (reads only).

    Args:
        named_topics: topics the command line names (``--topics``, ``--topic-config``, a
            ``--topic-configs`` file): each must exist in the log dir or in the metadata.
        metadata_log_dir: the directory holding ``__cluster_metadata-0`` (default: the log
            dir when it holds one, else where ``server_properties`` places it).

    Raises:
        ConfigError: an invalid flag value or ``server.properties`` file, a
            ``server.properties`` of another node than the log dir's ``meta.properties``, a
            named topic that exists nowhere (with the closest existing name), or a metadata
            log without a ``node.id`` to place this broker's replicas by, or a
            ``kafka_version`` (``--kafka-version``) the tool does not know or older than the
            cluster's ``metadata.version``.
        CorruptMetadataError: the metadata log cannot be replayed.
    """
    props = read_properties(server_properties) if server_properties is not None else None
    meta_path, looked = _metadata_location(log_dir, metadata_log_dir, props)
    stale = (log_dir.metadata_log if log_dir.metadata_log and (
        meta_path is None or storage.real_path(log_dir.metadata_log)
        != storage.real_path(meta_path)) else None)
    meta = load_cluster_metadata(meta_path) if meta_path else None
    meta_properties = read_meta_properties(log_dir.path)
    node_id = _node_id(meta_properties.get("node.id"), meta_path, props, server_properties)
    if meta is not None and node_id is None:
        raise ConfigError(
            "the log dir's meta.properties names no node.id, so which replicas this broker "
            "holds cannot be told from the metadata", path=log_dir.path,
            remedy="give the broker's --server-properties (its node.id); nothing was changed")
    static_known = props is not None or assume_kafka_defaults
    base: list[Layer] = []
    if props is not None:
        base.append(broker_layer(SERVER_PROPERTIES, props, dynamic=False))
    if meta is not None:
        cluster, own = topic_layers_of(meta, node_id)
        base += _applied(base, broker_layer(CLUSTER_DEFAULT, cluster, dynamic=True),
                         broker_layer(BROKER, own, dynamic=True), cluster, own)
    # the live partitions' topics, and those of replicas being moved here (-future copies:
    # Kafka retains them too)
    topics = sorted({tp.topic for tp in log_dir.partitions}
                    | {c.tp.topic for c in log_dir.copies if c.kind == FUTURE})
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
    configs: dict[str, TopicConfig] = {}
    guessed: dict[str, tuple[str, ...]] = {}
    for t in sorted(set(topics) | set(config_topics)):
        layers = [*base]
        if meta is not None:
            topic_known = t in meta.topic_ids
            layers.append(Layer(TOPIC, meta.topic_configs.get(t, {})))
        else:
            topic_known = assume_kafka_defaults  # "no topic overrides anything", said aloud
            if assume_kafka_defaults and t in INTERNAL_TOPIC_CONFIGS:
                layers.append(Layer(INTERNAL_TOPIC, INTERNAL_TOPIC_CONFIGS[t]))
        cfg = resolve_topic_config(t, config_all, config_topics, lower=layers)
        guessed[t] = _guessed(cfg, static_known=static_known, topic_known=topic_known)
        configs[t] = dataclasses.replace(cfg, configured=not guessed[t])
    missing = []
    if not static_known and any(guessed[t] for t in topics):
        missing.append(NEED_STATIC)
    if meta is None and not assume_kafka_defaults and any(guessed[t] for t in topics):
        missing.append(NEED_METADATA + (f" (looked in {', '.join(looked)})" if looked else ""))
    skips: dict[TopicPartition, str] = {}
    out_of_sync = set()
    if meta is not None:
        for tp in log_dir.partitions:
            reason = _placement(log_dir, tp, meta, int(node_id))  # type: ignore[arg-type]
            if reason:
                skips[tp] = reason
                continue
            state = meta.partition(meta.topic_ids[tp.topic], tp.partition)
            if state is not None and lagging_replicas(state, int(node_id)):  # type: ignore[arg-type]
                out_of_sync.add(tp)
    return Catalog(configs={t: configs[t] for t in topics},
                   guessed={t: guessed[t] for t in topics}, skips=skips, metadata=meta,
                   metadata_path=meta_path, server_properties=server_properties,
                   node_id=node_id, directory_id=meta_properties.get("directory.id"),
                   missing=tuple(missing), dropped={k: m for layer in base
                                                    for k, m in layer.dropped.items()},
                   out_of_sync=frozenset(out_of_sync),
                   allow_replica_divergence=allow_replica_divergence,
                   broker_cleaner=_broker_cleaner(props, assume_kafka_defaults),
                   stale_metadata_log=stale,
                   kafka_release=follow(
                       finalized_level=meta.metadata_version if meta else None,
                       registered_level=meta.broker_levels.get(int(node_id))
                       if meta and node_id is not None else None,
                       node_id=node_id, flag=kafka_version),
                   cordoned=_cordoned(meta, node_id, meta_properties.get("directory.id"),
                                      props, log_dir.path))


def _applied(static: list[Layer], cluster: Layer, own: Layer, cluster_raw: Mapping[str, str],
             own_raw: Mapping[str, str]) -> list[Layer]:
    """The dynamic broker layers a broker ends up applying: it applies them with its static
    configs as one set and keeps its previous config when a check across keys fails
    (:func:`compactor.config.dynamic_set_problem`); the cluster-wide defaults come first, so
    they may hold where this broker's own configs make the set fail. The layers left out
    carry every one of their configs in ``dropped``, with the reason."""
    synonyms = {name for names in BROKER_SYNONYMS.values() for name, _ in names}

    def rejected(layer: Layer, raw: Mapping[str, str], why: str) -> Layer:
        return Layer(layer.source, {}, {
            **layer.dropped, **{k: f"rejected with the whole dynamic update: {why}"
                                for k in sorted(raw) if k in synonyms and k not in layer.dropped}})

    problem = dynamic_set_problem(*static, cluster, own)
    if problem is None:
        return [cluster, own]
    if dynamic_set_problem(*static, cluster) is None:
        return [cluster, rejected(own, own_raw, problem)]
    return [rejected(cluster, cluster_raw, problem), rejected(own, own_raw, problem)]


def _broker_cleaner(props: Mapping[str, str] | None,
                    assume_kafka_defaults: bool) -> tuple[bool, str] | None:
    """``log.cleaner.enable`` (``CleanerConfig``: a static broker config, default true) and its
    source; ``None`` when the static configs are unknown."""
    if props is not None and "log.cleaner.enable" in props:
        return props["log.cleaner.enable"].strip().lower() == "true", SERVER_PROPERTIES
    if props is not None or assume_kafka_defaults:
        return True, DEFAULT
    return None


def _cordoned(meta: ClusterMetadata | None, node_id: str | None, directory_id: str | None,
              props: Mapping[str, str] | None, path: str) -> str | None:
    """What says this log dir is cordoned (KIP-1066): the broker's registration in the
    metadata (``CordonedLogDirs``, directory ids) or its static ``cordoned.log.dirs`` (paths,
    or ``*`` for all); ``None`` when nothing does."""
    if meta is not None and node_id is not None and directory_id is not None \
            and directory_id in meta.cordoned.get(int(node_id), []):
        return f"broker {node_id}'s registration in the metadata log"
    listed = [d.strip() for d in (props or {}).get("cordoned.log.dirs", "").split(",")
              if d.strip()]
    if "*" in listed or any(storage.real_path(d) == storage.real_path(path) for d in listed):
        return "cordoned.log.dirs in server.properties"
    return None


def _reserved(directory_id: str) -> bool:
    """Kafka's ``DirectoryId.reserved``: UNASSIGNED, LOST, MIGRATING and the other ids whose
    most significant 64 bits are 0 and least below 100 name no real directory."""
    raw = uuid_bytes(directory_id)
    return raw[:8] == bytes(8) and int.from_bytes(raw[8:], "big") < 100


def _guessed(cfg: TopicConfig, *, static_known: bool, topic_known: bool) -> tuple[str, ...]:
    """The deciding configs of ``cfg`` whose value the tool does not know: a value of the
    topic's own (its ConfigRecords, ``--topic-config``) is known; any other only when no
    topic override could hide it (``topic_known``), and Kafka's default only when the static
    layer is known too, or when no broker config can change it (``remote.storage.enable``
    has no broker synonym: ``ServerTopicConfigSynonyms``)."""
    out = []
    for key in DECIDING:
        source = cfg.sources.get(key, DEFAULT)
        if source in (TOPIC, TOPIC_FLAG) or key in cfg.invalid:
            continue
        if not topic_known or (source == DEFAULT and key in BROKER_SYNONYMS
                               and not static_known):
            out.append(key)
    return tuple(out)


def _metadata_location(log_dir: LogDir, metadata_log_dir: str | None,
                       props: Mapping[str, str] | None) -> tuple[str | None, list[str]]:
    """The ``__cluster_metadata-0`` directory to replay, and where else it was looked for:
    ``--metadata-log-dir``, else the log dir's own, else Kafka's ``metadata.log.dir`` of
    ``server.properties``, else the first of its ``log.dirs`` (``KafkaConfig.metadataLogDir``).

    Raises:
        ConfigError: ``--metadata-log-dir`` holds none.
    """
    if metadata_log_dir is not None:
        path = storage.join(storage.absolute(metadata_log_dir), METADATA_DIR_NAME)
        if not storage.is_dir(path):
            raise ConfigError(f"--metadata-log-dir holds no {METADATA_DIR_NAME} directory",
                              path=metadata_log_dir,
                              remedy="name the directory that holds it (Kafka's "
                                     "metadata.log.dir, by default the first of log.dirs)")
        return path, []
    if props is not None:
        # the broker reads only KafkaConfig.metadataLogDir: a copy elsewhere is stale
        dirs = props.get("log.dirs") or props.get("log.dir") or ""
        where = props.get("metadata.log.dir") or next(
            (d.strip() for d in dirs.split(",") if d.strip()), None)
        if where is not None and storage.is_dir(storage.absolute(where)):
            path = storage.join(storage.absolute(where), METADATA_DIR_NAME)
            return (path, []) if storage.is_dir(path) else (None, [where])
        # the properties name no directory of this machine (a copy of the broker's log dir
        # made elsewhere): the log dir's own metadata log, if it has one
    if log_dir.metadata_log:
        return log_dir.metadata_log, []
    return None, [log_dir.path]


def _node_id(node_id: str | None, meta_path: str | None, props: Mapping[str, str] | None,
             server_properties: str | None) -> str | None:
    """This broker's ``node.id``: the log dir's ``meta.properties`` one (``node_id``), else
    the metadata log dir's, checked against ``server.properties`` (``node.id``, else
    ``broker.id``).

    Raises:
        ConfigError: ``server.properties`` names another node than ``meta.properties``.
    """
    if node_id is None and meta_path is not None:
        node_id = read_node_id(storage.dirname(meta_path))
    stated = (props or {}).get("node.id") or (props or {}).get("broker.id")
    if stated is not None and node_id is not None and stated.strip() != node_id.strip():
        raise ConfigError(
            f"server.properties is node {stated.strip()}'s, the log dir's meta.properties "
            f"says node.id={node_id.strip()}", path=server_properties,
            remedy="give the server.properties of the broker that owns this log dir; nothing "
                   "was changed")
    return (node_id or stated or "").strip() or None


def _placement(log_dir: LogDir, tp: TopicPartition, meta: ClusterMetadata,
               node_id: int) -> str | None:
    """Why Kafka would not load ``tp``'s dir as a live replica of this broker, or ``None``."""
    if tp.topic == METADATA_TOPIC:  # a dir named like the metadata log, other partition
        return METADATA_LOG
    try:
        topic_id = read_topic_id(log_dir.partition_path(tp))
        readable = True
    except CompactorError:
        topic_id, readable = None, False  # the command reports its files
    live = meta.topic_ids.get(tp.topic)
    if live is None:
        return STALE_TOPIC_ID if topic_id in meta.removed_ids else UNKNOWN_TOPIC
    if not readable:
        return None
    if topic_id is None:  # LogManager.isStrayKraftReplica: no partition.metadata
        return STRAY
    if topic_id != live:
        return STALE_TOPIC_ID
    state = meta.partition(topic_id, tp.partition)
    if state is None or node_id not in state.replicas:  # isStrayKraftReplica's two others
        return STRAY
    return None
