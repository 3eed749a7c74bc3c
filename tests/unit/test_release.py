"""The Kafka release whose rules a log dir follows (compactor.cluster.release), read from the
metadata log the generator writes as each release's cluster does: the finalized
metadata.version and the broker's registration. The feature levels themselves are checked
against Kafka's own jars in ``tests/kafka/test_releases.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactor.cluster.catalog import build_catalog
from compactor.cluster.release import follow
from compactor.errors import ConfigError
from compactor.log.layout import open_log_dir
from compactor.model import TopicPartition
from compactor.tools.ops.generator import GeneratorConfig, generate


def _catalog(tmp_path: Path, release: str = "4.1", **kw: object):
    cordoned = bool(kw.pop("cordoned", False))
    out = tmp_path / f"logs-{release}{'-cordoned' if cordoned else ''}"
    if not out.exists():
        generate(str(out), GeneratorConfig(
            topics=("kv",), partitions=1, records_per_partition=20, seed=7,
            kafka_release=release, cordoned=cordoned,
            topic_configs={"kv": {"cleanup.policy": "compact"}}))
    return build_catalog(open_log_dir(str(out)), config_all={}, config_topics={}, **kw)


@pytest.mark.parametrize("release", ["4.1", "4.2", "4.3", "4.4"])
def test_the_release_is_the_brokers_own_registration(tmp_path: Path, release: str) -> None:
    found = _catalog(tmp_path, release).kafka_release
    assert found.to_dict()["release"] == release and found.exact
    assert "registration" in found.source


def test_a_lower_bound_takes_its_own_release_which_deletes_the_least() -> None:
    found = follow(finalized_level=30, registered_level=None, node_id="1", flag=None)
    assert (found.version, found.exact) == ((4, 3), False)
    assert "4.3 or newer" in found.source


def test_without_a_metadata_log_the_target_release_is_followed_and_said() -> None:
    found = follow(finalized_level=None, registered_level=None, node_id=None, flag=None)
    assert (found.version, found.exact) == ((4, 1), False)
    assert "--kafka-version" in found.source


def test_a_release_newer_than_the_tool_knows_follows_the_newest_known_and_says_so() -> None:
    found = follow(finalized_level=33, registered_level=34, node_id="1", flag=None)
    assert found.version == (4, 4) and found.newer == (4, 5) and not found.exact


def test_the_flag_names_the_release_but_never_one_the_cluster_has_outgrown(
        tmp_path: Path) -> None:
    assert _catalog(tmp_path, "4.2", kafka_version="4.4.0").kafka_release.version == (4, 4)
    with pytest.raises(ConfigError, match="older than the cluster's metadata.version"):
        _catalog(tmp_path, "4.3", kafka_version="4.2")
    with pytest.raises(ConfigError, match="not a release kafka-compactor knows"):
        _catalog(tmp_path, "4.1", kafka_version="5.0")


def test_a_cordoned_log_dir_is_reported_and_still_maintained(tmp_path: Path) -> None:
    """KIP-1066 (Kafka 4.3): a cordoned log dir takes no new partition; the broker still
    serves and cleans those it holds. The registration (RegisterBrokerRecord v4) names it."""
    cat = _catalog(tmp_path, "4.3", cordoned=True, assume_kafka_defaults=True)
    assert cat.cordoned is not None and "registration" in cat.cordoned
    assert cat.skip_reason(TopicPartition("kv", 0)) is None
    assert any("cordoned" in h for h in cat.hints())
    assert _catalog(tmp_path, "4.4").cordoned is None


def test_the_decompression_limit_is_read_only_by_the_release_that_reads_it(
        tmp_path: Path) -> None:
    """max.decompressed.message.bytes (Kafka 4.4, LogConfig): below its no-limit default a
    record above it makes Kafka's cleaner leave the partition uncleanable; the tool does not
    check record bodies against it, so such a topic is not compacted on 4.4. Earlier releases
    read nothing of it."""
    props = tmp_path / "server.properties"
    props.write_text("node.id=1\nmax.decompressed.message.bytes=1048576\n")
    on_44 = _catalog(tmp_path, "4.4", server_properties=str(props))
    assert on_44.configs["kv"].max_decompressed_message_bytes == 1_048_576
    assert on_44.skip_reason(TopicPartition("kv", 0)) == "decompression_limit"
    assert on_44.skip_reason(TopicPartition("kv", 0), retention=True) is None
    on_43 = _catalog(tmp_path, "4.3", server_properties=str(props))
    assert on_43.skip_reason(TopicPartition("kv", 0)) is None
    props.write_text("node.id=1\nmax.decompressed.message.bytes=2147483639\n")  # the default
    assert _catalog(tmp_path, "4.4", server_properties=str(props)).skip_reason(
        TopicPartition("kv", 0)) is None
