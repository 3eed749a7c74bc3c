from __future__ import annotations

import pytest

from compactor.config import SPECS, TopicConfig, parse_assignment, resolve_topic_config
from compactor.errors import ConfigError


def test_kafka_defaults() -> None:
    cfg = resolve_topic_config("t")
    assert cfg == TopicConfig()
    assert cfg.cleanup_policy == frozenset({"delete"}) and not cfg.compact and cfg.delete
    assert cfg.delete_retention_ms == 86_400_000
    assert cfg.min_cleanable_dirty_ratio == 0.5
    assert cfg.max_compaction_lag_ms == 2**63 - 1
    assert cfg.segment_bytes == 1_073_741_824 and cfg.index_interval_bytes == 4096
    assert cfg.retention_ms == 604_800_000 and cfg.retention_bytes == -1
    assert set(cfg.to_kafka()) == set(SPECS)


def test_layers_topic_over_all() -> None:
    cfg = resolve_topic_config(
        "orders-v2",
        {"cleanup.policy": "compact", "delete.retention.ms": "100"},
        {"orders-v2": {"cleanup.policy": "Compact, Delete"}, "other": {"retention.ms": "5"}},
    )
    assert cfg.cleanup_policy == frozenset({"compact", "delete"})
    assert cfg.delete_retention_ms == 100 and cfg.retention_ms == 604_800_000


@pytest.mark.parametrize(("key", "value", "match"), [
    ("cleanup.policy", "compact,shred", "compact and delete"),
    ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
    ("min.cleanable.dirty.ratio", "half", "between 0 and 1"),
    ("retention.ms", "-2", ">= -1"),
    ("max.compaction.lag.ms", "0", ">= 1"),
    ("segment.bytes", "1048575", ">= 1048576"),
    ("message.timestamp.type", "WallClock", "CreateTime or LogAppendTime"),
    ("no.such.config", "1", "unknown topic config 'no.such.config'"),
])
def test_invalid_values_name_key_value_and_rule(key: str, value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        resolve_topic_config("t", {key: value})
    assert info.value.exit_code == 3


def test_min_lag_above_max_lag() -> None:
    with pytest.raises(ConfigError, match="greater than max.compaction.lag.ms"):
        resolve_topic_config("t", {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_parse_assignment() -> None:
    assert parse_assignment("retention.ms=5") == ("retention.ms", "5")
    assert parse_assignment("a=b=c") == ("a", "b=c")
    with pytest.raises(ConfigError):
        parse_assignment("retention.ms")


def test_an_empty_cleanup_policy_means_neither_delete_nor_compact() -> None:
    """LogConfig: compact and delete are each 'the list contains it'; Kafka 4.2+ lets a topic
    say neither (the log start offset still moves by DeleteRecords)."""
    cfg = resolve_topic_config("t", {"cleanup.policy": ""})
    assert cfg.cleanup_policy == frozenset() and not cfg.compact and not cfg.delete


def test_flags_keep_the_stricter_rules_cluster_values_keep_kafkas() -> None:
    from compactor.config import TOPIC, Layer

    held = resolve_topic_config("t", lower=[Layer(TOPIC, {"retention.bytes": "-2",
                                                          "segment.bytes": "100000"})])
    assert (held.retention_bytes, held.segment_bytes, held.invalid) == (-2, 100_000, {})
    with pytest.raises(ConfigError, match=">= -1"):
        resolve_topic_config("t", {"retention.bytes": "-2"})
    bad = resolve_topic_config("t", lower=[Layer(TOPIC, {"segment.bytes": "10"})])
    assert set(bad.invalid) == {"segment.bytes"} and bad.sources["segment.bytes"] == TOPIC
