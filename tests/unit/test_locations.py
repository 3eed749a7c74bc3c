"""Locations: plain paths, file:// and s3:// URLs, and --storage-option validation (no I/O)."""

from __future__ import annotations

import pytest

from compactor.errors import ConfigError
from compactor.log.storage.locations import (
    basename,
    check_location,
    dirname,
    is_url,
    join,
    parse_storage_options,
    split,
    url_contains,
)


def test_the_url_forms_every_command_accepts() -> None:
    assert check_location("/var/lib/kafka") == "/var/lib/kafka"
    assert check_location("file:///var/lib/kafka") == "/var/lib/kafka"
    assert check_location("s3://bucket/prefix/") == "s3://bucket/prefix"
    assert check_location("s3://bucket") == "s3://bucket"
    assert is_url("s3://b/p") and not is_url("/tmp/s3://x") and not is_url("relative/dir")


@pytest.mark.parametrize("url, words", [
    ("gs://bucket/logs", "Google Cloud Storage"),
    ("abfs://c@account.dfs.core.windows.net/logs", "Azure"),
    ("hdfs://namenode/logs", "HDFS"),
    ("s3a://bucket/logs", "s3a"),
    ("ftp://host/logs", "unknown storage scheme"),
    ("s3:///no-bucket", "needs a bucket"),
])
def test_schemes_this_release_cannot_write_are_errors_that_say_so(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_location(url)
    assert words in str(err.value) and err.value.path == url


def test_joining_and_splitting_urls() -> None:
    assert split("s3://b/a/b/c") == ("b", "a/b/c") and split("s3://b") == ("b", "")
    assert join("s3://b/logs", "t-0", "0.log") == "s3://b/logs/t-0/0.log"
    assert join("s3://b", "x") == "s3://b/x" and join("/a", "b") == "/a/b"
    assert basename("s3://b/logs/t-0") == "t-0" and basename("/a/b/") == "b"
    assert dirname("s3://b/logs/t-0") == "s3://b/logs" and dirname("s3://b/logs") == "s3://b"
    assert dirname("s3://b") == "s3://b"  # the root is its own parent, as "/" is
    assert url_contains("s3://b/logs", "s3://b/logs/t-0")
    assert not url_contains("s3://b/logs", "s3://b/logs2")


def test_storage_options_are_checked_by_name_and_value() -> None:
    assert parse_storage_options({"endpoint_url": "http://127.0.0.1:8333",
                                  "part_size_mb": "16"}) == {
        "endpoint_url": "http://127.0.0.1:8333", "part_size_mb": "16"}
    for bad, words in [({"endpont_url": "http://x"}, "unknown --storage-option 'endpont_url'"),
                       ({"part_size_mb": "4"}, "from 5 to 5120"),
                       ({"read_ahead_mb": "-1"}, "from 0.001 to 1024"),
                       ({"read_ahead_mb": "inf"}, "from 0.001 to 1024"),
                       ({"part_size_mb": "nan"}, "from 5 to 5120"),
                       ({"lease_seconds": "0.001"}, "from 1 to 3600"),
                       ({"lease_seconds": "1e400"}, "from 1 to 3600"),
                       ({"addressing_style": "sideways"}, "path, virtual or auto"),
                       ({"endpoint_url": "127.0.0.1:8333"}, "http:// or https://")]:
        with pytest.raises(ConfigError) as err:
            parse_storage_options(bad)
        assert words in str(err.value)
