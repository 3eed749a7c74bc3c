"""The state dir on S3 (the SeaweedFS server) under racing writers: delta-spark through
Hadoop's S3A and delta-rs through object_store, in separate processes. delta-spark's own S3
log store excludes writers of one JVM only; the state dir's writer lease makes every commit of
the tool's processes one at a time (``compactor.log.storage.state_dir_lock``), so none is lost
or doubled (the same checks as on a local disk: ``tests/e2e/test_delta_writers.py``)."""

from __future__ import annotations

import pytest

from compactor.log import storage
from compactor.tools.fixtures.s3_server import S3Server
from tests.e2e.test_delta_writers import race
from tests.objectstore.conftest import fresh_url, settings_of

pytestmark = [pytest.mark.slow]


def test_racing_delta_spark_and_delta_rs_writers_lose_nothing_on_s3(
        s3_server: S3Server) -> None:
    state = fresh_url("race-state")
    settings = settings_of(s3_server)
    before = storage.settings()
    storage.configure(settings)
    try:
        race(state, dict(settings.options))
        # the lease is gone once the writers are: nothing is left holding the state dir
        assert not storage.exists(storage.join(state, storage.STATE_LOCK_NAME))
    finally:
        storage.configure(before)
