"""Replay of the KRaft metadata log and the config precedence built on it: the rules of
Kafka's MetadataDelta, ServerTopicConfigSynonyms and DynamicLogConfig, as expected values
written out by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compactor.cluster.catalog import (
    NO_CONFIG,
    STALE_TOPIC_ID,
    STRAY,
    TIERED_STORAGE,
    UNKNOWN_TOPIC,
    build_catalog,
)
from compactor.cluster.metadata import Replay, parse_snapshot_name
from compactor.cluster.metadata_log import load_cluster_metadata
from compactor.codec.kraft import MetadataRecord, encode_metadata_record, random_uuid_text
from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.codec.segment import iter_batches
from compactor.config import broker_layer
from compactor.errors import ConfigError, CorruptMetadataError
from compactor.log.layout import open_log_dir
from compactor.model import TopicPartition
from compactor.tools.ops.generator import GeneratorConfig, generate


def record(name: str, **fields: object) -> MetadataRecord:
    return MetadataRecord(name, 0, 0, fields)


def config(resource_type: int, resource: str, key: str, value: str | None) -> MetadataRecord:
    return record("ConfigRecord", ResourceType=resource_type, ResourceName=resource, Name=key,
                  Value=value)


def test_replay_topics_configs_removals_and_null_values() -> None:
    replay = Replay()
    for r in (record("TopicRecord", Name="a", TopicId="id-a"),
              record("TopicRecord", Name="b", TopicId="id-b"),
              config(2, "a", "cleanup.policy", "compact"),
              config(2, "a", "retention.ms", "1000"),
              config(2, "a", "retention.ms", None),  # a null value removes the config
              config(2, "b", "retention.ms", "5"),
              config(4, "", "log.retention.ms", "7"),
              config(4, "3", "log.retention.ms", "8"),
              config(8, "kafka.server", "DEBUG", "x"),  # BROKER_LOGGER: not a log config
              record("RemoveTopicRecord", TopicId="id-b")):
        replay.apply(r)
    state = replay.state
    assert state.topic_ids == {"a": "id-a"}
    assert state.removed_ids == {"id-b"}
    assert state.topic_configs == {"a": {"cleanup.policy": "compact"}}  # b's went with it
    assert state.broker_configs == {"": {"log.retention.ms": "7"}, "3": {"log.retention.ms": "8"}}


def test_snapshot_names() -> None:
    assert parse_snapshot_name("00000000000000000042-0000000003.checkpoint") == (42, 3)
    assert parse_snapshot_name("00000000000000000042-0000000003.checkpoint.part") is None
    assert parse_snapshot_name("00000000000000000042-0000000003.checkpoint.deleted") is None
    assert parse_snapshot_name("00000000000000000042.log") is None


def test_static_synonyms_prefer_ms_then_minutes_then_hours() -> None:
    layer = broker_layer("server.properties", {"log.retention.hours": "2",
                                               "log.retention.minutes": "3"}, dynamic=False)
    assert layer.values == {"retention.ms": str(3 * 60_000)}
    layer = broker_layer("server.properties", {"log.retention.hours": "2",
                                               "log.roll.hours": "1",
                                               "log.cleaner.min.cleanable.ratio": "0.2",
                                               "log.cleanup.policy": "compact"}, dynamic=False)
    assert layer.values == {"retention.ms": "7200000", "segment.ms": "3600000",
                            "min.cleanable.dirty.ratio": "0.2", "cleanup.policy": "compact"}


def test_dynamic_broker_configs_count_only_under_the_first_synonym() -> None:
    assert broker_layer("cluster_default", {"log.retention.hours": "2"}, dynamic=True).values == {}
    assert broker_layer("cluster_default", {"log.retention.ms": "9"}, dynamic=True).values == {
        "retention.ms": "9"}
    with pytest.raises(ConfigError, match="log.retention.hours"):
        broker_layer("server.properties", {"log.retention.hours": "two"}, dynamic=False)


@pytest.fixture()
def cluster(tmp_path: Path) -> Path:
    out = tmp_path / "logs"
    generate(str(out), GeneratorConfig(
        topics=("payments", "events", "gone", "reborn", "tiered"), partitions=1,
        records_per_partition=50, internal_topics=("__consumer_offsets",),
        topic_configs={"payments": {"cleanup.policy": "compact", "retention.ms": "100000000"},
                       "tiered": {"remote.storage.enable": "true",
                                  "local.retention.ms": "3600000"}},
        broker_configs={"": {"log.retention.ms": "86400000", "log.retention.hours": "1",
                             "log.cleaner.delete.retention.ms": "5000"},
                        "1": {"log.cleaner.delete.retention.ms": "6000"},
                        "2": {"log.cleaner.delete.retention.ms": "7000"}},
        removed_topics=("gone",), recreated_topics=("reborn",), seed=3))
    return out


def catalog_of(log_dir: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    args: dict = {"config_all": {}, "config_topics": {}, **kwargs}
    return build_catalog(open_log_dir(str(log_dir)), **args)


def test_precedence_and_sources_from_the_cluster(cluster: Path, tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("# broker\nlog.retention.hours=48\nlog.segment.bytes = 2097152\n"
                     "log.cleaner.min.cleanable.ratio:0.3\nlog.cleanup.policy=delete\n")
    cat = catalog_of(cluster, server_properties=str(props),
                     config_all={"min.cleanable.dirty.ratio": "0.4"},
                     config_topics={"events": {"min.cleanable.dirty.ratio": "0.6"}})
    payments, events = cat.configs["payments"], cat.configs["events"]
    # topic ConfigRecord > cluster default (log.retention.ms) > server.properties (hours)
    assert payments.retention_ms == 100_000_000 and payments.sources["retention.ms"] == "topic"
    assert events.retention_ms == 86_400_000 and events.sources["retention.ms"] == "cluster_default"
    # this broker (node.id 1) > cluster default; another broker's config is not ours
    assert events.delete_retention_ms == 6000 and events.sources["delete.retention.ms"] == "broker"
    assert events.segment_bytes == 2_097_152
    assert events.sources["segment.bytes"] == "server.properties"
    assert payments.min_cleanable_dirty_ratio == 0.4 and events.min_cleanable_dirty_ratio == 0.6
    assert payments.sources["min.cleanable.dirty.ratio"] == "flag"
    assert events.sources["min.cleanable.dirty.ratio"] == "topic_flag"
    assert payments.cleanup_policy == {"compact"} and events.cleanup_policy == {"delete"}
    assert events.describe(["max.compaction.lag.ms"]) == {
        "max.compaction.lag.ms": {"value": 2**63 - 1, "source": "default"}}
    # Kafka created the internal topic compacted; its unused configs are listed as ignored
    offsets = cat.configs["__consumer_offsets"]
    assert offsets.compact and offsets.sources["cleanup.policy"] == "topic"
    assert offsets.ignored == ("compression.type",)
    assert cat.to_dict()["ignored_configs"]["__consumer_offsets"] == ["compression.type"]


def test_partitions_the_metadata_disowns_are_left_alone(cluster: Path) -> None:
    cat = catalog_of(cluster, assume_kafka_defaults=True)
    assert cat.skip_reason(TopicPartition("gone", 0)) == STALE_TOPIC_ID
    assert cat.skip_reason(TopicPartition("reborn", 0)) == STALE_TOPIC_ID
    assert cat.skip_reason(TopicPartition("payments", 0)) is None
    assert cat.skip_reason(TopicPartition("tiered", 0)) is None
    assert cat.skip_reason(TopicPartition("tiered", 0), retention=True) == TIERED_STORAGE
    # a dir whose topic the metadata never had
    shutil.copytree(cluster / "events-0", cluster / "stranger-0")
    assert catalog_of(cluster).skip_reason(TopicPartition("stranger", 0)) == UNKNOWN_TOPIC
    # the metadata log is never among the partitions
    assert TopicPartition("__cluster_metadata", 0) not in open_log_dir(str(cluster)).partitions


def test_without_metadata_nothing_is_configured_on_a_guess(cluster: Path, tmp_path: Path) -> None:
    """A second JBOD dir holds no metadata log: every topic's own configs are unknown, so no
    topic is configured from the broker layers alone, not even with server.properties."""
    bare = tmp_path / "bare"
    shutil.copytree(cluster, bare)
    shutil.rmtree(bare / "__cluster_metadata-0")
    props = tmp_path / "server.properties"
    props.write_text("node.id=1\nlog.retention.hours=720\n")
    for kwargs in ({}, {"server_properties": str(props)},
                   {"config_topics": {"events": {"retention.ms": "-1"}}},
                   {"config_all": {"cleanup.policy": "compact"}, "server_properties": str(props)}):
        cat = catalog_of(bare, **kwargs)
        assert cat.skip_reason(TopicPartition("events", 0)) == NO_CONFIG, kwargs
        assert cat.skip_reason(TopicPartition("__consumer_offsets", 0)) == NO_CONFIG, kwargs
        assert "__consumer_offsets" in cat.to_dict()["unconfigured_topics"]
    assert any("--metadata-log-dir" in m for m in cat.missing)
    assert not any("server.properties" in m for m in cat.missing)  # it was given
    # the explicit assumption: no override anywhere, internal topics as Kafka creates them
    assumed = catalog_of(bare, assume_kafka_defaults=True)
    assert assumed.skip_reason(TopicPartition("events", 0)) is None
    offsets = assumed.configs["__consumer_offsets"]
    assert offsets.compact and not offsets.delete
    assert offsets.sources["cleanup.policy"] == "internal_topic"
    # the metadata found in another directory (Kafka's metadata.log.dir) and the static layer
    assert catalog_of(bare, metadata_log_dir=str(cluster)).skip_reason(
        TopicPartition("events", 0)) == NO_CONFIG
    found = catalog_of(bare, metadata_log_dir=str(cluster), server_properties=str(props))
    assert found.skip_reason(TopicPartition("events", 0)) is None
    assert found.configs["__consumer_offsets"].cleanup_policy == {"compact"}
    assert found.configs["payments"].cleanup_policy == {"compact"}


def test_the_metadata_log_is_found_where_server_properties_puts_it(cluster: Path,
                                                                   tmp_path: Path) -> None:
    """KafkaConfig.metadataLogDir: metadata.log.dir, else the first of log.dirs."""
    bare = tmp_path / "bare"
    shutil.copytree(cluster, bare)
    shutil.rmtree(bare / "__cluster_metadata-0")
    for text in (f"node.id=1\nlog.dirs={cluster},{bare}\n",
                 f"node.id=1\nlog.dirs={bare}\nmetadata.log.dir={cluster}\n"):
        props = tmp_path / "server.properties"
        props.write_text(text)
        cat = catalog_of(bare, server_properties=str(props))
        assert cat.metadata_path == str(cluster / "__cluster_metadata-0")
        assert cat.configs["__consumer_offsets"].compact
        assert not cat.configs["__consumer_offsets"].delete
        assert cat.skip_reason(TopicPartition("__consumer_offsets", 0)) is None
        assert cat.skip_reason(TopicPartition("gone", 0)) == STALE_TOPIC_ID
    # server.properties naming a place without metadata: nothing configured, and it says where
    props.write_text(f"node.id=1\nlog.dirs={bare}\n")
    cat = catalog_of(bare, server_properties=str(props))
    assert cat.metadata is None and cat.skip_reason(TopicPartition("events", 0)) == NO_CONFIG
    assert str(bare) in cat.missing[0]


def test_static_configs_must_be_known_before_anything_is_decided(cluster: Path,
                                                                 tmp_path: Path) -> None:
    """With the metadata log but no server.properties, a value that falls through to
    Kafka's default would be a guess: the broker may set log.retention.hours=720."""
    cat = catalog_of(cluster)
    assert cat.skip_reason(TopicPartition("events", 0)) == NO_CONFIG
    assert "retention.ms" not in cat.guessed["events"]  # the cluster default sets it
    assert "cleanup.policy" in cat.guessed["events"]  # log.cleanup.policy may be compact
    assert "cleanup.policy" not in cat.guessed["payments"]  # the topic's own
    assert any("--server-properties" in m for m in cat.missing)
    props = tmp_path / "server.properties"
    props.write_text("node.id=1\nlog.retention.hours=720\nlog.cleanup.policy=compact\n"
                     "log.cleaner.delete.retention.ms=3600000\n")
    cat = catalog_of(cluster, server_properties=str(props))
    events = cat.configs["events"]
    assert cat.skip_reason(TopicPartition("events", 0)) is None and events.configured
    assert events.cleanup_policy == {"compact"}  # no delete: never time-deleted
    assert events.sources["cleanup.policy"] == "server.properties"
    # the cluster's dynamic defaults sit above server.properties
    assert events.retention_ms == 86_400_000 and events.delete_retention_ms == 6000


def test_server_properties_of_another_node_is_refused(cluster: Path, tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("node.id=2\n")
    with pytest.raises(ConfigError, match="node 2's") as info:
        catalog_of(cluster, server_properties=str(props))
    assert info.value.exit_code == 3


@pytest.mark.parametrize(("static", "expected"), [
    ({"log.retention.hours": "-1"}, -1), ({"log.retention.ms": "-2"}, -1),
    ({"log.retention.minutes": "-5", "log.retention.hours": "1"}, -1),
    ({"log.retention.ms": "-1", "log.retention.hours": "3"}, -1),
    ({"log.retention.hours": "720"}, 720 * 3_600_000),
])
def test_negative_retention_synonyms_mean_infinite(static: dict, expected: int) -> None:
    """KafkaConfig.logRetentionTimeMillis: the first synonym set, and any negative -> -1."""
    layer = broker_layer("server.properties", static, dynamic=False)
    assert layer.values["retention.ms"] == str(expected)


def test_an_invalid_dynamic_broker_config_is_dropped_alone(tmp_path: Path) -> None:
    """DynamicBrokerConfig.removeInvalidConfigs: Kafka ignores the one bad value and keeps
    the other dynamic configs and every topic."""
    out = tmp_path / "logs"
    generate(str(out), GeneratorConfig(
        topics=("a",), partitions=1, records_per_partition=20, seed=2,
        broker_configs={"": {"log.retention.ms": "soon",
                             "log.cleaner.delete.retention.ms": "5000"},
                        "1": {"log.cleaner.min.cleanable.ratio": "2.5"}}))
    cat = catalog_of(out, assume_kafka_defaults=True)
    a = cat.configs["a"]
    assert cat.skip_reason(TopicPartition("a", 0)) is None
    assert a.retention_ms == 604_800_000 and a.sources.get("retention.ms", "default") == "default"
    assert a.delete_retention_ms == 5000 and a.min_cleanable_dirty_ratio == 0.5
    assert set(cat.to_dict()["dropped_broker_configs"]) == {
        "log.retention.ms", "log.cleaner.min.cleanable.ratio"}
    assert any("log.retention.ms ignored" in h for h in cat.hints())


def test_stray_replicas_are_left_alone_as_kafka_moves_them_aside(cluster: Path) -> None:
    """LogManager.isStrayKraftReplica: no partition.metadata, a partition number the topic
    does not have, or replicas without this broker."""
    (cluster / "events-0" / "partition.metadata").unlink()
    shutil.copytree(cluster / "payments-0", cluster / "payments-7")
    meta = load_cluster_metadata(str(cluster / "__cluster_metadata-0"))
    assert meta.partition(meta.topic_ids["payments"], 0).replicas == [1]
    assert meta.partition(meta.topic_ids["payments"], 7) is None
    cat = catalog_of(cluster, assume_kafka_defaults=True)
    assert cat.skip_reason(TopicPartition("events", 0)) == STRAY
    assert cat.skip_reason(TopicPartition("payments", 7)) == STRAY
    assert cat.skip_reason(TopicPartition("payments", 0)) is None
    # the same log dir seen as node 2's (which holds no replica of anything)
    (cluster / "meta.properties").write_text(
        (cluster / "meta.properties").read_text().replace("node.id=1", "node.id=2"))
    cat = catalog_of(cluster, assume_kafka_defaults=True)
    assert cat.skip_reason(TopicPartition("payments", 0)) == STRAY


def test_partition_changes_move_replicas() -> None:
    """PartitionChangeRecord: a null field keeps the value (PartitionRegistration.merge)."""
    replay = Replay()
    for r in (record("TopicRecord", Name="a", TopicId="id-a"),
              record("PartitionRecord", PartitionId=0, TopicId="id-a", Replicas=[1, 2],
                     Isr=[1, 2], Directories=["d1", "d2"]),
              record("PartitionChangeRecord", PartitionId=0, TopicId="id-a", Replicas=[2, 3],
                     Isr=None, Directories=None),
              record("PartitionChangeRecord", PartitionId=0, TopicId="id-a", Replicas=None,
                     Isr=[2], Directories=["d2", "d3"]),
              record("PartitionChangeRecord", PartitionId=5, TopicId="id-a", Isr=[9])):
        replay.apply(r)
    state = replay.state.partition("id-a", 0)
    assert (state.replicas, state.isr, state.directories) == ([2, 3], [2], ["d2", "d3"])
    assert replay.state.partition("id-a", 5) is None
    replay.apply(record("RemoveTopicRecord", TopicId="id-a"))
    assert replay.state.partition("id-a", 0) is None


@pytest.mark.parametrize("kwargs", [{"named_topics": ["paymnts"]},
                                    {"config_topics": {"paymnts": {"retention.ms": "-1"}}}])
def test_a_topic_named_nowhere_is_an_error_with_the_closest_name(cluster: Path,
                                                                 kwargs: dict) -> None:
    with pytest.raises(ConfigError, match="did you mean 'payments'") as info:
        catalog_of(cluster, **kwargs)
    assert info.value.exit_code == 3


def test_corrupt_metadata_names_file_position_and_offset(cluster: Path) -> None:
    log = cluster / "__cluster_metadata-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[200] ^= 0x40  # inside the second batch: its CRC no longer matches
    log.write_bytes(bytes(data))
    snapshot = next((cluster / "__cluster_metadata-0").glob("*.checkpoint"))
    snapshot.unlink()  # so the log is replayed from offset 0
    with pytest.raises(CorruptMetadataError) as info:
        load_cluster_metadata(str(cluster / "__cluster_metadata-0"))
    err = info.value
    assert err.path == str(log) and err.position is not None and err.base_offset == 1
    assert err.exit_code == 5


def test_a_log_that_starts_after_its_snapshot_is_refused(cluster: Path) -> None:
    meta = cluster / "__cluster_metadata-0"
    next(meta.glob("*.checkpoint")).unlink()
    (meta / "00000000000000000000.log").rename(meta / "00000000000000000005.log")
    for index in list(meta.glob("00000000000000000000.*")):
        index.unlink()
    with pytest.raises(CorruptMetadataError, match="no snapshot covers"):
        load_cluster_metadata(str(meta))


def test_incomplete_snapshot_is_refused(cluster: Path) -> None:
    snapshot = next((cluster / "__cluster_metadata-0").glob("*.checkpoint"))
    data = snapshot.read_bytes()
    # drop the last batch (the SnapshotFooter): frame sizes are bytes 8-11 of each entry
    pos, starts = 0, []
    while pos < len(data):
        starts.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    snapshot.write_bytes(data[:starts[-1]])
    with pytest.raises(CorruptMetadataError, match="SnapshotFooter"):
        load_cluster_metadata(str(cluster / "__cluster_metadata-0"))


def _log(values: list[bytes]) -> bytes:
    return encode_batch(NewRecordBatch(base_offset=0, records=[
        NewRecord(offset_delta=i, timestamp=1, key=None, value=v) for i, v in enumerate(values)]))


def test_metadata_transactions_count_only_when_they_end() -> None:
    """KIP-868: records between BeginTransactionRecord and EndTransactionRecord apply at the
    end; an aborted or still open transaction changes nothing."""
    def topic(name: str) -> bytes:
        return encode_metadata_record("TopicRecord", {"Name": name,
                                                      "TopicId": random_uuid_text(len(name))})

    begin = encode_metadata_record("BeginTransactionRecord", {"Name": "t"})
    end = encode_metadata_record("EndTransactionRecord", {})
    abort = encode_metadata_record("AbortTransactionRecord", {"Reason": "test"})
    data = _log([topic("plain"), begin, topic("committed"), end, begin, topic("aborted"), abort,
                 begin, topic("open")])
    replay = Replay()
    replay.feed(iter_batches(data), path="mem")
    assert set(replay.state.topic_ids) == {"plain", "committed"}
    assert replay.state.end_offset == 9


def test_an_unknown_record_type_is_skipped_by_its_frame_and_counted() -> None:
    """A newer Kafka's record type changes nothing the tool reads: framed, counted in the
    report, skipped; a record of a type the tool reads that does not decode still stops."""
    data = _log([encode_metadata_record("NoOpRecord", {}), b"\x01\x63\x00\x00",
                 b"\x01\x63\x07\x05\x05", encode_metadata_record(
                     "TopicRecord", {"Name": "t", "TopicId": random_uuid_text(1)})])
    replay = Replay()
    replay.feed(iter_batches(data), path="seg.log")
    assert replay.state.unknown_record_types == {99: 2}
    assert set(replay.state.topic_ids) == {"t"}
    assert replay.state.to_dict()["unknown_record_types"] == {"99": 2}
    data = _log([encode_metadata_record("NoOpRecord", {}), b"\x01\x02\x00\x00"])
    with pytest.raises(CorruptMetadataError, match="record at offset 1") as info:
        Replay().feed(iter_batches(data), path="seg.log")
    assert (info.value.path, info.value.position, info.value.base_offset) == ("seg.log", 0, 0)


def test_values_kafka_holds_are_accepted_and_mean_what_they_mean_in_kafka(
        tmp_path: Path) -> None:
    """segment.bytes below 1 MiB kept from a 3.x cluster (KIP-1030 only refuses new values),
    retention.bytes=-2 (no validator; negative = no limit), retention.ms below our safety
    floor, and a config of a newer Kafka: all load as Kafka loads them."""
    out = tmp_path / "logs"
    generate(str(out), GeneratorConfig(
        topics=("old", "nolimit", "fast", "newer"), partitions=1, records_per_partition=20,
        seed=1, topic_configs={"old": {"segment.bytes": "100000"},
                               "nolimit": {"retention.bytes": "-2"},
                               "fast": {"retention.ms": "60000"},
                               "newer": {"remote.copy.lag.ms": "5", "some.future.config": "x"}}))
    cat = catalog_of(out, assume_kafka_defaults=True)
    for topic in ("old", "nolimit", "fast", "newer"):
        assert cat.skip_reason(TopicPartition(topic, 0)) is None, topic
    assert cat.configs["old"].segment_bytes == 100_000
    assert cat.configs["nolimit"].retention_bytes == -2
    assert cat.configs["newer"].ignored == ("remote.copy.lag.ms", "some.future.config")
    # our own command line keeps the stricter rules, and a typo is a typo
    with pytest.raises(ConfigError, match="from --config"):
        catalog_of(out, config_all={"segment.bytes": "100000"})
    with pytest.raises(ConfigError, match="did you mean 'retention.ms'"):
        catalog_of(out, config_all={"retention.mss": "1"})


def test_an_invalid_config_from_the_cluster_leaves_only_its_topic_alone(tmp_path: Path) -> None:
    """A value no Kafka version accepts (segment.bytes below a v0 record's 14 bytes) in the
    metadata: that topic is skipped with the error, the others go on; an erasure still knows
    its cleanup.policy."""
    out = tmp_path / "logs"
    generate(str(out), GeneratorConfig(topics=("old", "new"), partitions=1,
                                       records_per_partition=20, seed=1,
                                       topic_configs={"old": {"segment.bytes": "10",
                                                              "cleanup.policy": "compact"}}))
    cat = catalog_of(out, assume_kafka_defaults=True)
    assert cat.skip_reason(TopicPartition("old", 0)) == "invalid_config"
    assert cat.skip_reason(TopicPartition("new", 0)) is None
    error = cat.to_dict()["invalid_configs"]["old"]
    assert "segment.bytes (from the metadata log's ConfigRecords of topic old)" in error["message"]
    assert any(h.startswith("old: left alone") for h in cat.hints())
    assert cat.erasure_refusal("old") is None and cat.configs["old"].compact
    # without the static layer the policy of a topic that sets none is unknown: refused
    bare = catalog_of(out)
    assert bare.erasure_refusal("old") is None
    assert "cleanup.policy" in (bare.erasure_refusal("new") or "")


def test_a_partition_with_a_replica_out_of_sync_is_not_compacted_unless_allowed(
        tmp_path: Path) -> None:
    """A follower out of the ISR would miss the tombstones a round drops (each replica cleans
    on its own): compaction leaves such partitions alone unless told otherwise; retention,
    which drops no tombstone on its own, goes on."""
    out = tmp_path / "logs"
    generate(str(out), GeneratorConfig(
        topics=("kv", "other"), partitions=2, records_per_partition=20, seed=4,
        topic_configs={"kv": {"cleanup.policy": "compact"},
                       "other": {"cleanup.policy": "compact"}}, out_of_sync_topics=("kv",)))
    cat = catalog_of(out, assume_kafka_defaults=True)
    assert cat.skip_reason(TopicPartition("kv", 1)) == "replicas_out_of_sync"
    assert cat.skip_reason(TopicPartition("kv", 1), retention=True) is None
    assert cat.skip_reason(TopicPartition("other", 1)) is None
    assert cat.to_dict()["replicas_out_of_sync"] == ["kv-0", "kv-1"]
    assert any("--allow-replica-divergence" in h for h in cat.hints())
    allowed = catalog_of(out, assume_kafka_defaults=True, allow_replica_divergence=True)
    assert allowed.skip_reason(TopicPartition("kv", 1)) is None


def test_a_replica_in_the_elr_or_this_broker_itself_is_not_lagging() -> None:
    """Found by a real Kafka 4.1 broker (issue 29): a cleanly stopped single-node cluster
    leaves every partition with an empty ISR and its replica in the ELR (KIP-966), and the
    round refused to compact anything as "replicas_out_of_sync"."""
    from compactor.cluster.catalog import lagging_replicas
    from compactor.cluster.metadata import PartitionState

    def state(replicas: list[int], isr: list[int], elr: list[int]) -> PartitionState:
        return PartitionState(replicas=replicas, isr=isr, directories=[], elr=elr)

    assert lagging_replicas(state([1], [], [1]), 1) == set()
    assert lagging_replicas(state([1], [], []), 1) == set()  # only this broker's own
    assert lagging_replicas(state([1, 2, 3], [1], [2]), 1) == {3}
    assert lagging_replicas(state([1, 2], [], [1, 2]), 1) == set()
    assert lagging_replicas(state([1, 2], [2], []), 1) == set()
