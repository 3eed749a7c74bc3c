"""Helpers for the tests against the real S3 server (``s3_server`` in ``tests/conftest.py``)."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor.config import resolve_topic_config
from compactor.log import storage, swap
from compactor.log.layout import (
    open_log_dir,
    read_offset_checkpoint,
)
from compactor.log.manifest import MANIFEST_NAME
from compactor.log.recovery import recover_partition
from compactor.maintenance.compact import load_partition_input
from compactor.maintenance.options import MaintenanceOptions
from compactor.spark.stages import write_cleaned_segments
from compactor.tools.fixtures.s3_server import S3Server, copy_prefix, download_dir, upload_dir
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import reference_round

_prefixes = itertools.count()


def recover_on(server: S3Server, partition_dir: str) -> None:
    """``recover_partition`` on an S3 partition as a new run would, leaving no manifest."""
    before = storage.settings()
    storage.configure(settings_of(server))
    try:
        recover_partition(partition_dir)
        assert MANIFEST_NAME not in storage.list_dir(partition_dir)
    finally:
        storage.configure(before)


def storage_args(server: S3Server) -> list[str]:
    """The ``--storage-option`` arguments that reach the test server (credentials included, so
    nothing depends on the test process's AWS environment)."""
    return [arg for key, value in settings_of(server).options.items()
            for arg in ("--storage-option", f"{key}={value}")]


def settings_of(server: S3Server) -> storage.StorageSettings:
    return storage.StorageSettings(options={
        "endpoint_url": server.endpoint_url, "access_key_id": server.access_key,
        "secret_access_key": server.secret_key, "region": server.region})


def fresh_url(name: str) -> str:
    """A prefix of the ``logs`` bucket no other test uses."""
    return f"s3://logs/{name}-{next(_prefixes)}"


def upload(server: S3Server, local_dir: Path, name: str) -> str:
    url = fresh_url(name)
    upload_dir(server.client(), str(local_dir), url)
    return url


def download(server: S3Server, url: str, dest: Path) -> dict[str, int]:
    """The objects under ``url`` as files under ``dest``; ``{relative path: mtime_ms}``."""
    return download_dir(server.client(), url, str(dest))


def tree(root: Path) -> dict[str, bytes]:
    """Every file's bytes (names relative), without the local broker lock file."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != storage.LOCK_FILE}


def mtimes(root: Path, suffix: str = ".log") -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns // 1_000_000
            for p in sorted(root.rglob(f"*{suffix}")) if p.is_file()}


@pytest.fixture()
def s3_storage(s3_server: S3Server) -> Iterator[S3Server]:
    """This process's storage configured for the test server for the duration of a test."""
    before = storage.settings()
    storage.configure(settings_of(s3_server))
    yield s3_server
    storage.configure(before)


# --- a partition on S3 with cleaned objects written and not swapped -------------------------

NOW_MS = DEFAULT_START_MS + 3 * 86_400_000
CONFIGS = {"cleanup.policy": "compact", "segment.index.bytes": "48"}
GEN = GeneratorConfig(topics=("accounts",), partitions=1, records_per_partition=500,
                      distinct_keys=80, segment_bytes=4 * 1024, tombstone_ratio=0.2,
                      transactional_ratio=0.5, abort_ratio=0.4, seed=21, metadata_log=False)


@pytest.fixture(scope="module")
def staged(spark, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A partition on S3 with its cleaned objects written by Spark executors, not swapped."""
    root = tmp_path_factory.mktemp("s3crash")
    local = root / "logs"
    generate(str(local), GEN)
    (tp_dir, (_, _, ref)), = reference_round(local, CONFIGS, NOW_MS).items()
    assert len(ref.plan.groups) >= 3 and any(len(g) > 1 for g in ref.plan.groups)
    url = upload(s3_server, local, "staged")
    before = storage.settings()
    storage.configure(settings_of(s3_server))
    try:
        tp = open_log_dir(url).partitions[0]
        opts = MaintenanceOptions(log_dir=url, now_ms=NOW_MS, assume_kafka_defaults=True,
                                  config_all=CONFIGS)
        checkpoints = {name: read_offset_checkpoint(url, name) for name in (
            "cleaner-offset-checkpoint", "log-start-offset-checkpoint",
            "replication-offset-checkpoint")}
        inp = load_partition_input(url, tp, resolve_topic_config(tp.topic, CONFIGS), opts,
                                   checkpoints)
        messages = write_cleaned_segments(spark, {0: inp}, {0: ref.plan})
        assert not any(m.error for m in messages)
        committed = fresh_url("committed")
        copy_prefix(s3_server.client(), url, committed)
        swap.commit_partition(f"{committed}/{tp_dir}", messages,
                              storage.identities(f"{committed}/{tp_dir}"))
    finally:
        storage.configure(before)
    messages_file = root / "messages.pickle"
    messages_file.write_bytes(pickle.dumps(messages))
    download(s3_server, committed, root / "new")
    return {"url": url, "tp_dir": tp_dir, "messages_file": messages_file,
            "old": tree(local / tp_dir), "new": tree(root / "new" / tp_dir), "root": root}
