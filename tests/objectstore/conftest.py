"""Helpers for the tests against the real S3 server (``s3_server`` in ``tests/conftest.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor.log import storage
from compactor.tools.s3_server import S3Server, download_dir, upload_dir

_prefixes = itertools.count()


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
