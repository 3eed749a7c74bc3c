"""The package's face: its version, what tab completion offers, the dist tool's arguments."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import compactor


def test_version_and_completion() -> None:
    assert compactor.__version__ == version("kafka-compactor")
    assert set(compactor.__all__) <= set(dir(compactor))


def test_dist_help_writes_nothing(tmp_path: Path) -> None:
    """Issue 30.8: ``--help`` was taken for the archive's name and a zip named ``--help``
    written."""
    for argv, code in ((["--help"], 0), (["not-a-zip"], 2)):
        proc = subprocess.run([sys.executable, "-m", "compactor.tools.build.dist", *argv],
                              cwd=tmp_path, capture_output=True, text=True, check=False)
        assert proc.returncode == code, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_duration_config_in_the_wrong_unit_gets_a_hint() -> None:
    """Issue 30.8: Kafka's durations are milliseconds; "7d" is refused with the unit's hint."""
    import pytest

    from compactor.config import resolve_topic_config
    from compactor.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        resolve_topic_config("t", {"retention.ms": "7d"})
    assert "(milliseconds: 1 h = 3600000, 7 d = 604800000)" in str(info.value)
    with pytest.raises(ConfigError) as info:
        resolve_topic_config("t", {"retention.bytes": "1GB"})
    assert "milliseconds" not in str(info.value)


def test_the_pinned_jar_versions_are_the_ones_the_code_names() -> None:
    """The pom pins what the code names: delta-spark's release, S3A's Hadoop and the Kafka
    release the remote tier's helper is built against."""
    import xml.etree.ElementTree as ET

    from compactor.remote import tier
    from compactor.spark import delta

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = ET.parse(delta.POM).getroot().find("m:properties", ns)
    assert props is not None
    pinned = {p.tag.split("}")[1]: p.text for p in props}
    assert (pinned["delta.version"], pinned["hadoop.version"], pinned["kafka.version"]) == (
        delta.DELTA_VERSION, delta.HADOOP_VERSION, tier.KAFKA_VERSION)
    assert delta.PROFILES["tier"] == f"kafka-tier-{tier.KAFKA_VERSION}"
