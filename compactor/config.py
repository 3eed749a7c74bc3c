"""Topic configs under Kafka's names, with Kafka's defaults declared once (Kafka's ``LogConfig``,
``ServerLogConfigs``).

:func:`resolve_topic_config` layers, lowest first: Kafka's defaults, then any lower layers the
caller found (the broker's ``server.properties``, the cluster's dynamic defaults, this broker's
dynamic configs, the topic's own ConfigRecords, see :mod:`compactor.cluster.metadata`), then values
for every topic (``--config``) and values for one topic (``--topic-config``). Broker config names
reach topic configs through Kafka's synonyms (``ServerTopicConfigSynonyms``). Every value is
parsed and validated here, so that commands fail before touching any file with a
:class:`~compactor.errors.ConfigError` that names the key, the value, where it came from and the
rule. The resolved :class:`TopicConfig` remembers where each value came from.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from compactor.errors import ConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
# max.decompressed.message.bytes' default and largest value (Kafka 4.4: Integer.MAX_VALUE - 8,
# the largest array a JVM allocates)
MAX_DECOMPRESSED_DEFAULT = INT_MAX - 8
POLICIES = frozenset({"compact", "delete"})


@dataclass(frozen=True, slots=True)
class _Spec:
    """One topic config: Kafka's default, its parser, the values Kafka's own ``ConfigDef``
    accepts (``check``, ``rule``), and, where kafka-compactor refuses more on its own command
    line than Kafka keeps in a cluster, the stricter rule for flags (``flag_check``)."""

    default: Any
    parse: Callable[[str], Any]
    check: Callable[[Any], bool]
    rule: str
    flag_check: Callable[[Any], bool] | None = None
    flag_rule: str = ""


def _int(text: str) -> int:
    return int(text.strip())


def _float(text: str) -> float:
    return float(text.strip())


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(text)
    return value == "true"


def _policy(text: str) -> frozenset[str]:
    return frozenset(p.strip().lower() for p in text.split(",") if p.strip())


# Kafka topic config name -> (default, parser, check, rule). The one place defaults live.
SPECS: dict[str, _Spec] = {
    "cleanup.policy": _Spec(frozenset({"delete"}), _policy, lambda v: v <= POLICIES,
                            "a comma-separated list of compact and delete"),
    "min.compaction.lag.ms": _Spec(0, _int, lambda v: 0 <= v <= LONG_MAX, ">= 0"),
    "max.compaction.lag.ms": _Spec(LONG_MAX, _int, lambda v: 1 <= v <= LONG_MAX, ">= 1"),
    "delete.retention.ms": _Spec(86_400_000, _int, lambda v: 0 <= v <= LONG_MAX, ">= 0"),
    "min.cleanable.dirty.ratio": _Spec(0.5, _float, lambda v: 0.0 <= v <= 1.0,
                                       "between 0 and 1"),
    # >= 1 MiB for new values since Kafka 4.0 (KIP-1030, LogConfig.SEGMENT_BYTES_CONFIG's
    # validator); a smaller value kept from a 3.x cluster still loads (the 3.x validator was
    # atLeast(LegacyRecord.RECORD_OVERHEAD_V0) = 14), so only our flags get the 1 MiB rule
    "segment.bytes": _Spec(1_073_741_824, _int, lambda v: 14 <= v <= INT_MAX,
                           ">= 14 and <= 2147483647",
                           lambda v: 1_048_576 <= v <= INT_MAX,
                           ">= 1048576 (1 MiB, Kafka 4.0+) and <= 2147483647"),
    "segment.ms": _Spec(604_800_000, _int, lambda v: 1 <= v <= LONG_MAX, ">= 1"),
    "segment.index.bytes": _Spec(10_485_760, _int, lambda v: 4 <= v <= INT_MAX, ">= 4"),
    "index.interval.bytes": _Spec(4096, _int, lambda v: 0 <= v <= INT_MAX, ">= 0"),
    # LogConfig: retention.ms atLeast(-1); retention.bytes has no validator, and any negative
    # value means no size limit (UnifiedLog.deleteRetentionSizeBreachedSegments: size < 0)
    "retention.ms": _Spec(604_800_000, _int, lambda v: -1 <= v <= LONG_MAX,
                          ">= -1 (-1 = infinite)"),
    "retention.bytes": _Spec(-1, _int, lambda v: -LONG_MAX - 1 <= v <= LONG_MAX,
                             "a 64-bit integer (negative = no limit)",
                             lambda v: -1 <= v <= LONG_MAX, ">= -1 (-1 = no limit)"),
    "file.delete.delay.ms": _Spec(60_000, _int, lambda v: v >= 0, ">= 0"),
    "max.message.bytes": _Spec(1_048_588, _int, lambda v: 0 <= v <= INT_MAX, ">= 0"),
    "message.timestamp.type": _Spec("CreateTime", lambda t: t.strip(),
                                    lambda v: v in ("CreateTime", "LogAppendTime"),
                                    "CreateTime or LogAppendTime"),
    "compression.gzip.level": _Spec(6, _int, lambda v: v == -1 or 1 <= v <= 9,
                                    "-1 or between 1 and 9"),
    "compression.lz4.level": _Spec(9, _int, lambda v: 1 <= v <= 17, "between 1 and 17"),
    "compression.zstd.level": _Spec(3, _int, lambda v: -131072 <= v <= 22,
                                    "between -131072 and 22"),
    "producer.id.expiration.ms": _Spec(86_400_000, _int, lambda v: v >= 1, ">= 1"),
    # Kafka 4.4 (LogConfig, broker synonym of the same name): the largest decompressed record
    # the broker accepts; Cleaner.cleanInto fails on a larger one (InvalidRecordException) and
    # the partition is marked uncleanable. Its default, MAX_DECOMPRESSED_DEFAULT, is no limit.
    # Releases before 4.4 read nothing of it (compactor.cluster.release.DECOMPRESSED_LIMIT)
    "max.decompressed.message.bytes": _Spec(
        MAX_DECOMPRESSED_DEFAULT, _int, lambda v: 1 <= v <= MAX_DECOMPRESSED_DEFAULT,
        f"between 1 and {MAX_DECOMPRESSED_DEFAULT}"),
    # tiered storage (KIP-405): -2 = "use retention.ms / retention.bytes"
    "remote.storage.enable": _Spec(False, _bool, lambda v: True, "true or false"),
    "local.retention.ms": _Spec(-2, _int, lambda v: v >= -2, ">= -2"),
    "local.retention.bytes": _Spec(-2, _int, lambda v: v >= -2, ">= -2"),
}

# Configs that are validated and accepted but that no kafka-compactor decision reads: reports
# list them as ignored when a layer above Kafka's defaults sets them.
UNUSED = frozenset({
    "segment.ms", "file.delete.delay.ms", "max.message.bytes", "message.timestamp.type",
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "local.retention.ms", "local.retention.bytes",
})
# Kafka 4.1 topic configs (TopicConfig, LogConfig) that nothing here parses or uses: accepted
# under their names with any value, and reported as ignored.
OTHER_KAFKA_TOPIC_CONFIGS = frozenset({
    "segment.jitter.ms", "flush.messages", "flush.ms", "unclean.leader.election.enable",
    "min.insync.replicas", "compression.type", "preallocate", "message.format.version",
    "message.timestamp.difference.max.ms", "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms", "message.downconversion.enable",
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
    "remote.log.copy.disable", "remote.log.delete.on.disable",
    # topic configs of Kafka 4.2-4.4: a cluster of a newer Kafka may hold them
    "remote.copy.lag.ms", "remote.copy.lag.bytes", "errors.deadletterqueue.group.enable",
})

# Topic config -> its broker configs in priority order, with the factor to milliseconds
# (ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS). A static server.properties uses the
# first synonym it sets; a dynamic broker config counts only under the first synonym
# (DynamicLogConfig.ReconfigurableConfigs = ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS).
BROKER_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                     ("log.retention.hours", 3_600_000)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
    "max.decompressed.message.bytes": (("max.decompressed.message.bytes", 1),),
    # a broker config, not a topic config (ProducerStateManagerConfig); dynamic since 3.x
    "producer.id.expiration.ms": (("producer.id.expiration.ms", 1),),
}

# Broker configs in another unit than their topic config, or that Kafka reads with a meaning
# of its own (a negative log.retention.ms is -1): checked as integers, then converted.
_UNIT_SYNONYMS = frozenset({"log.roll.hours", "log.retention.minutes", "log.retention.hours",
                            "log.retention.ms"})

# Where a value came from, lowest precedence first (Kafka: static < cluster dynamic <
# per-broker dynamic < topic; LogManager.currentDefaultConfig, LogConfig.fromProps).
# ``--config`` is a broker-level default of ours: it sits below every topic's own configs, as
# Kafka's broker configs do; ``--topic-config`` is the explicit override above them all.
# ``internal_topic`` holds the configs Kafka creates its internal topics with, used in place of
# the topic's ConfigRecords only under ``--assume-kafka-defaults``.
DEFAULT = "default"
SERVER_PROPERTIES = "server.properties"
CLUSTER_DEFAULT = "cluster_default"
BROKER = "broker"
FLAG = "flag"
INTERNAL_TOPIC = "internal_topic"
TOPIC = "topic"
TOPIC_FLAG = "topic_flag"
SOURCES = (DEFAULT, SERVER_PROPERTIES, CLUSTER_DEFAULT, BROKER, FLAG, INTERNAL_TOPIC, TOPIC,
           TOPIC_FLAG)
_FLAGS = frozenset({FLAG, TOPIC_FLAG})
_SCOPES = {FLAG: "--config", CLUSTER_DEFAULT: "the metadata log's cluster-wide broker default",
           BROKER: "the metadata log's configs of this broker",
           SERVER_PROPERTIES: "--server-properties",
           INTERNAL_TOPIC: "the configs Kafka creates its internal topics with"}

# The configs Kafka creates its internal topics with (GroupCoordinatorService /
# TransactionLog / ShareCoordinatorService creation configs; TopicBasedRemoteLogMetadataManager):
# the two coordinator logs are compacted, the share-group state and the remote log metadata
# are delete-policy topics that are never time-deleted (retention.ms=-1) and pruned through
# their log start offset. Segment sizes are the brokers' *.topic.segment.bytes defaults.
INTERNAL_TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    "__consumer_offsets": {"cleanup.policy": "compact", "compression.type": "producer",
                           "segment.bytes": "104857600"},
    "__transaction_state": {"cleanup.policy": "compact", "compression.type": "uncompressed",
                            "min.insync.replicas": "2", "segment.bytes": "104857600",
                            "unclean.leader.election.enable": "false"},
    "__share_group_state": {"cleanup.policy": "delete", "retention.ms": "-1",
                            "segment.bytes": "104857600"},
    "__remote_log_metadata": {"cleanup.policy": "delete", "retention.ms": "-1"},
}


@dataclass(frozen=True, slots=True)
class Layer:
    """Topic configs (Kafka topic config names -> raw text) from one source; ``dropped``: the
    broker configs of a dynamic layer left out because Kafka would refuse them
    (``DynamicBrokerConfig.removeInvalidConfigs`` drops each invalid config alone)."""

    source: str
    values: Mapping[str, str]
    dropped: Mapping[str, str] = field(default_factory=dict)


def broker_layer(source: str, broker: Mapping[str, str], *, dynamic: bool) -> Layer:
    """The topic configs that broker configs ``broker`` imply, through Kafka's synonyms.

    A static ``server.properties`` uses, per topic config, the first synonym it sets
    (``log.retention.ms`` > ``.minutes`` > ``.hours``); a dynamic config (``dynamic=True``)
    counts only under the first synonym, as Kafka's ``DynamicLogConfig`` ignores the others.
    A negative retention time from any synonym means "infinite", -1
    (``KafkaConfig.logRetentionTimeMillis``). Broker configs that are no topic config's
    synonym are not looked at.

    A dynamic value Kafka would refuse is dropped alone and named in ``Layer.dropped``
    (``DynamicBrokerConfig.removeInvalidConfigs``); a static one stops the command, since a
    broker does not start with it.

    Raises:
        ConfigError: an invalid static value.
    """
    out: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for topic_key, synonyms in BROKER_SYNONYMS.items():
        for name, factor in synonyms[:1] if dynamic else synonyms:
            if name not in broker or broker[name] is None:
                continue
            raw = broker[name]
            problem = _check(topic_key, raw, _SCOPES.get(source, source), name=name,
                             flag=False)
            if problem is None and (factor != 1 or topic_key == "retention.ms"):
                millis = int(raw.strip()) * factor
                raw = str(-1 if topic_key == "retention.ms" and millis < 0 else millis)
            elif problem is not None and dynamic:
                dropped[name] = problem
                break
            elif problem is not None:
                raise ConfigError(problem)
            out[topic_key] = raw
            break
    return Layer(source, out, dropped)


def dynamic_set_problem(*layers: Layer) -> str | None:
    """Why Kafka would reject a set of broker-level configs as a whole, or ``None``: a broker
    applies its dynamic configs together with its static ones and rejects the whole update
    when a check across keys fails (``DynamicBrokerConfig.processReconfiguration``, whose
    ``DynamicLogConfig.validateReconfiguration`` requires ``log.local.retention.ms`` and
    ``.bytes`` to be -2, or not -1 and at most ``log.retention.ms`` / ``.bytes`` when those are
    bounded). ``layers``: the static layer, then the dynamic ones, the later winning; a config
    none sets has Kafka's default."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer.values)

    def value(key: str) -> int:
        return int(merged.get(key, SPECS[key].default))

    for total_key, local_key, broker_name in (
            ("retention.ms", "local.retention.ms", "log.local.retention.ms"),
            ("retention.bytes", "local.retention.bytes", "log.local.retention.bytes")):
        total, local = value(total_key), value(local_key)
        if total > -1 and local != -2:
            if local == -1:
                return (f"{broker_name}=-1 while the broker's {total_key} is {total} (Kafka "
                        f"rejects the whole dynamic update: DynamicLogConfig."
                        f"validateReconfiguration)")
            if local > total:
                return (f"{broker_name}={local} is more than the broker's {total_key} {total} "
                        f"(Kafka rejects the whole dynamic update: DynamicLogConfig."
                        f"validateReconfiguration)")
    return None


def _check(key: str, raw: str, where: str, *, name: str | None = None,
           flag: bool) -> str | None:
    """Why ``raw`` (from ``where``, for the message) is no valid value of topic config
    ``key`` (``None`` when it is). A ``flag`` value must also meet kafka-compactor's stricter
    rule where there is one. A unit synonym (``log.retention.hours``) is checked as the
    integer Kafka reads."""
    spec = SPECS[key]
    name = name or key
    problem = _check_value(spec, key, raw, where, name=name, flag=flag)
    if problem is not None and name.endswith(".ms"):
        # Kafka's durations are integers in milliseconds: "7d" or "1h" are not
        problem += " (milliseconds: 1 h = 3600000, 7 d = 604800000)"
    return problem


def _check_value(spec: _Spec, key: str, raw: str, where: str, *, name: str,
                 flag: bool) -> str | None:
    if name != key and name in _UNIT_SYNONYMS:
        try:
            int(raw.strip())
        except ValueError:
            return f"invalid value {raw!r} for {name} (from {where}): must be an integer"
        return None
    try:
        value = spec.parse(str(raw))
    except ValueError:
        return f"invalid value {raw!r} for {name} (from {where}): must be {spec.rule}"
    if not spec.check(value):
        return f"invalid value {raw!r} for {name} (from {where}): must be {spec.rule}"
    if flag and spec.flag_check is not None and not spec.flag_check(value):
        return f"invalid value {raw!r} for {name} (from {where}): must be {spec.flag_rule}"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfig:
    """The effective configs of one topic, typed; attribute names are the Kafka names with dots
    as underscores. Build it with :func:`resolve_topic_config`."""

    cleanup_policy: frozenset[str] = field(default=SPECS["cleanup.policy"].default)
    min_compaction_lag_ms: int = SPECS["min.compaction.lag.ms"].default
    max_compaction_lag_ms: int = SPECS["max.compaction.lag.ms"].default
    delete_retention_ms: int = SPECS["delete.retention.ms"].default
    min_cleanable_dirty_ratio: float = SPECS["min.cleanable.dirty.ratio"].default
    segment_bytes: int = SPECS["segment.bytes"].default
    segment_ms: int = SPECS["segment.ms"].default
    segment_index_bytes: int = SPECS["segment.index.bytes"].default
    index_interval_bytes: int = SPECS["index.interval.bytes"].default
    retention_ms: int = SPECS["retention.ms"].default
    retention_bytes: int = SPECS["retention.bytes"].default
    file_delete_delay_ms: int = SPECS["file.delete.delay.ms"].default
    max_message_bytes: int = SPECS["max.message.bytes"].default
    message_timestamp_type: str = SPECS["message.timestamp.type"].default
    compression_gzip_level: int = SPECS["compression.gzip.level"].default
    compression_lz4_level: int = SPECS["compression.lz4.level"].default
    compression_zstd_level: int = SPECS["compression.zstd.level"].default
    producer_id_expiration_ms: int = SPECS["producer.id.expiration.ms"].default
    max_decompressed_message_bytes: int = SPECS["max.decompressed.message.bytes"].default
    remote_storage_enable: bool = SPECS["remote.storage.enable"].default
    local_retention_ms: int = SPECS["local.retention.ms"].default
    local_retention_bytes: int = SPECS["local.retention.bytes"].default
    # provenance, not configs: where each value came from (Kafka name -> one of SOURCES; absent
    # = Kafka's default); whether every config a decision reads is known, not guessed (set by
    # the catalog, which knows which layers it read); the configs set above the defaults that
    # no decision of kafka-compactor reads; the topic's own values Kafka accepted but that
    # break a rule here (Kafka name -> message: their value is unknown)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    configured: bool = field(default=True, compare=False)
    ignored: tuple[str, ...] = field(default=(), compare=False)
    invalid: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def decompressed_limit(self) -> bool:
        """``max.decompressed.message.bytes`` limits records (below its no-limit default)."""
        return self.max_decompressed_message_bytes < MAX_DECOMPRESSED_DEFAULT

    def to_kafka(self) -> dict[str, Any]:
        """``{kafka name: value}``, for reports."""
        out = {}
        for f in fields(self):
            if f.name in _PROVENANCE:
                continue
            value = getattr(self, f.name)
            out[f.name.replace("_", ".")] = ",".join(sorted(value)) if isinstance(
                value, frozenset) else value
        return out


    def describe(self, keys: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
        """``{kafka name: {"value": v, "source": s}}`` for reports (default: every config)."""
        values = self.to_kafka()
        return {k: {"value": values[k], "source": self.sources.get(k, DEFAULT)}
                for k in (keys or values)}


_PROVENANCE = frozenset({"sources", "configured", "ignored", "invalid"})
# The configs some decision of kafka-compactor reads: a topic is maintained only when each of
# them is known (a layer the tool read sets it, or Kafka's default with the static layer known).
DECIDING = tuple(k for k in SPECS if k not in UNUSED)
# What an erasure needs to know: whether older values of a key go with it (compact), and
# whether remote segments exist that no scan here reaches.
ERASURE_DECIDING = ("cleanup.policy", "remote.storage.enable")
# What reports show of each partition's configs.
REPORTED = ("cleanup.policy", "retention.ms", "retention.bytes", "delete.retention.ms",
            "min.compaction.lag.ms", "max.compaction.lag.ms", "min.cleanable.dirty.ratio",
            "segment.bytes", "remote.storage.enable")


def _attr(key: str) -> str:
    return key.replace(".", "_")


def parse_assignment(text: str) -> tuple[str, str]:
    """Split ``KEY=VALUE`` (as given to ``--config``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"config {text!r} is not KEY=VALUE")
    return key.strip(), value


def parse_topic_assignment(text: str) -> tuple[str, str, str]:
    """Split ``TOPIC:KEY=VALUE`` (as given to ``--topic-config``)."""
    topic, sep, assignment = text.partition(":")
    if not sep or not topic:
        raise ConfigError(f"--topic-config {text!r} is not TOPIC:KEY=VALUE")
    return (topic, *parse_assignment(assignment))


def resolve_topic_config(
    topic: str,
    overrides_all: Mapping[str, str] | None = None,
    overrides_topic: Mapping[str, Mapping[str, str]] | None = None,
    *,
    lower: Sequence[Layer] = (),
    configured: bool = True,
) -> TopicConfig:
    """Effective configs of ``topic``: Kafka defaults < the ``lower`` layers and
    ``overrides_all`` (``--config``) in :data:`SOURCES` order < the topic's own
    (``--topic-config``).

    Values are held to what Kafka itself accepts for their source: a flag (``--config``,
    ``--topic-config``) must be a known config with a valid value (kafka-compactor's rule
    where it is stricter) or the command stops; a dynamic broker layer's invalid value was
    already dropped (:func:`broker_layer`); a config of the topic's own that this Kafka
    version does not know (a newer broker's) is accepted and listed as ignored, and a value
    of the topic's own that breaks a rule lands in ``TopicConfig.invalid`` with its key's
    value unknown, so the topic is left alone.

    Args:
        configured: what :attr:`TopicConfig.configured` says (the catalog decides it).

    Raises:
        ConfigError: unknown key or invalid value from a flag or ``server.properties``, or
            ``min.compaction.lag.ms`` > ``max.compaction.lag.ms`` where a flag set either.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    ignored: set[str] = set()
    invalid: dict[str, str] = {}
    layers = sorted([*lower, Layer(FLAG, overrides_all or {}),
                     Layer(TOPIC_FLAG, (overrides_topic or {}).get(topic, {}))],
                    key=lambda layer: SOURCES.index(layer.source))
    for layer in layers:
        scope = {TOPIC_FLAG: f"--topic-config for {topic}",
                 TOPIC: f"the metadata log's ConfigRecords of topic {topic}"}.get(
                     layer.source, _SCOPES.get(layer.source, layer.source))
        for key, raw in layer.values.items():
            if key in OTHER_KAFKA_TOPIC_CONFIGS or (key not in SPECS
                                                    and layer.source not in _FLAGS):
                ignored.add(key)  # not read here; a newer Kafka's config is accepted too
                sources[key] = layer.source
                continue
            if key not in SPECS:
                known = sorted(SPECS | dict.fromkeys(OTHER_KAFKA_TOPIC_CONFIGS))
                close = difflib.get_close_matches(key, known, n=1)
                raise ConfigError(
                    f"unknown topic config {key!r} (from {scope})"
                    + (f"; did you mean {close[0]!r}?" if close else "")
                    + f"; known: {', '.join(known)}")
            problem = _check(key, raw, scope, flag=layer.source in _FLAGS)
            if problem is not None:
                if layer.source != TOPIC:
                    raise ConfigError(problem)
                invalid[key] = problem  # Kafka holds it; what it means here is unknown
                values.pop(_attr(key), None)
                sources[key] = layer.source
                continue
            invalid.pop(key, None)
            values[_attr(key)] = SPECS[key].parse(str(raw))
            sources[key] = layer.source
            if key in UNUSED:
                ignored.add(key)
    cfg = TopicConfig(**values, sources=sources, configured=configured,
                      ignored=tuple(sorted(ignored)), invalid=invalid)
    if cfg.min_compaction_lag_ms > cfg.max_compaction_lag_ms:
        message = (f"min.compaction.lag.ms ({cfg.min_compaction_lag_ms}) is greater than "
                   f"max.compaction.lag.ms ({cfg.max_compaction_lag_ms}) for topic {topic}")
        if {sources.get("min.compaction.lag.ms"), sources.get("max.compaction.lag.ms")} & _FLAGS:
            raise ConfigError(message)
        cfg = dataclasses.replace(cfg, invalid={**invalid, "min.compaction.lag.ms": message})
    return cfg
