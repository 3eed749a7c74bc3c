"""Topic configs under Kafka's names, with Kafka's defaults declared once (kafka-semantics §6).

:func:`resolve_topic_config` layers, lowest first: Kafka's defaults, values for every topic,
values for one topic. Every value is parsed and validated here, so that commands fail before
touching any file with a :class:`~compactor.errors.ConfigError` that names the key, the value and
the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from compactor.errors import ConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
POLICIES = frozenset({"compact", "delete"})


@dataclass(frozen=True, slots=True)
class _Spec:
    default: Any
    parse: Callable[[str], Any]
    check: Callable[[Any], bool]
    rule: str


def _int(text: str) -> int:
    return int(text.strip())


def _float(text: str) -> float:
    return float(text.strip())


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
    "segment.bytes": _Spec(1_073_741_824, _int, lambda v: 14 <= v <= INT_MAX,
                           ">= 14 and <= 2147483647"),
    "segment.ms": _Spec(604_800_000, _int, lambda v: 1 <= v <= LONG_MAX, ">= 1"),
    "segment.index.bytes": _Spec(10_485_760, _int, lambda v: 4 <= v <= INT_MAX, ">= 4"),
    "index.interval.bytes": _Spec(4096, _int, lambda v: 0 <= v <= INT_MAX, ">= 0"),
    "retention.ms": _Spec(604_800_000, _int, lambda v: v >= -1, ">= -1 (-1 = infinite)"),
    "retention.bytes": _Spec(-1, _int, lambda v: v >= -1, ">= -1 (-1 = infinite)"),
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
}


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

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    def to_kafka(self) -> dict[str, Any]:
        """``{kafka name: value}``, for reports."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name.replace("_", ".")] = ",".join(sorted(value)) if isinstance(
                value, frozenset) else value
        return out


def _attr(key: str) -> str:
    return key.replace(".", "_")


def parse_assignment(text: str) -> tuple[str, str]:
    """Split ``KEY=VALUE`` (as given to ``--config``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"config {text!r} is not KEY=VALUE")
    return key.strip(), value


def resolve_topic_config(
    topic: str,
    overrides_all: Mapping[str, str] | None = None,
    overrides_topic: Mapping[str, Mapping[str, str]] | None = None,
) -> TopicConfig:
    """Effective configs of ``topic``: Kafka defaults < ``overrides_all`` < the topic's own.

    Raises:
        ConfigError: unknown key, unparsable value, value outside Kafka's range, or
            ``min.compaction.lag.ms`` > ``max.compaction.lag.ms``.
    """
    values: dict[str, Any] = {}
    layers = [("every topic", overrides_all or {}),
              (f"topic {topic}", (overrides_topic or {}).get(topic, {}))]
    for scope, layer in layers:
        for key, raw in layer.items():
            spec = SPECS.get(key)
            if spec is None:
                raise ConfigError(
                    f"unknown topic config {key!r} (for {scope}); known: "
                    f"{', '.join(sorted(SPECS))}"
                )
            try:
                value = spec.parse(str(raw))
            except ValueError:
                raise ConfigError(
                    f"invalid value {raw!r} for {key} (for {scope}): must be {spec.rule}"
                ) from None
            if not spec.check(value):
                raise ConfigError(
                    f"invalid value {raw!r} for {key} (for {scope}): must be {spec.rule}")
            values[_attr(key)] = value
    cfg = TopicConfig(**values)
    if cfg.min_compaction_lag_ms > cfg.max_compaction_lag_ms:
        raise ConfigError(
            f"min.compaction.lag.ms ({cfg.min_compaction_lag_ms}) is greater than "
            f"max.compaction.lag.ms ({cfg.max_compaction_lag_ms}) for topic {topic}"
        )
    return cfg
