"""Crash injection on the object-store swap: the driver is killed (SIGKILL, a real process
death) before each of its object operations (the manifest PUT, each copy, each delete) while
swapping a partition of several groups in a real S3 server. ``recover`` must then leave the
partition exactly old or exactly new, with no ``.cleaned`` object and no manifest left."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.errors import LogDirError
from compactor.log import storage, swap
from compactor.log.manifest import MANIFEST_NAME
from compactor.log.recovery import recover_partition
from compactor.tools.fixtures.s3_server import S3Server, copy_prefix
from tests.objectstore.conftest import download, fresh_url, settings_of, tree

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
OBJECT_OPERATIONS = ("write_new", "copy", "remove")

# Swaps the pickled commit messages into a partition on S3, SIGKILLed before object operation
# N (never when N is 0; then it prints how many there were).
CRASHER = r"""
import json, pickle, sys
from compactor.errors import LogDirError
from compactor.log import storage, swap
from tests.crash import kill_before
partition_dir, messages_file, options, crash_at = sys.argv[1:5]
storage.configure(storage.StorageSettings(options=json.loads(options)))
messages = pickle.load(open(messages_file, "rb"))
scanned = storage.identities(partition_dir)
ops = kill_before(int(crash_at), ("write_new", "copy", "remove"))
swap.commit_partition(partition_dir, messages, scanned)
print(ops())
"""


def _crash(server: S3Server, partition_dir: str, staged: dict,
           crash_at: int) -> subprocess.CompletedProcess:
    import json

    return subprocess.run(
        [sys.executable, "-c", CRASHER, partition_dir, str(staged["messages_file"]),
         json.dumps(settings_of(server).options), str(crash_at)],
        capture_output=True, text=True, cwd=REPO)


def test_a_kill_before_any_object_operation_of_the_swap_recovers_to_old_or_new(
        s3_server: S3Server, staged: dict) -> None:
    trial = fresh_url("count")
    copy_prefix(s3_server.client(), staged["url"], trial)
    counted = _crash(s3_server, f"{trial}/{staged['tp_dir']}", staged, 0)
    assert counted.returncode == 0, counted.stderr[-2000:]
    total = int(counted.stdout.strip())
    print(f"{total} object operations")
    assert total > 10  # the manifest, a copy per new file, the deletes, the cleanup
    outcomes = []
    for crash_at in range(1, total + 1):
        trial = fresh_url(f"crash{crash_at}")
        copy_prefix(s3_server.client(), staged["url"], trial)
        pdir = f"{trial}/{staged['tp_dir']}"
        crashed = _crash(s3_server, pdir, staged, crash_at)
        assert crashed.returncode == -signal.SIGKILL, (crash_at, crashed.stderr[-2000:])
        before = storage.settings()
        storage.configure(settings_of(s3_server))
        try:
            recover_partition(pdir)
            left = storage.list_dir(pdir)
        finally:
            storage.configure(before)
        assert not [n for n in left if n.endswith(".cleaned") or n == MANIFEST_NAME], crash_at
        out = staged["root"] / f"after-{crash_at}"
        download(s3_server, pdir, out)
        after = tree(out)
        assert after in (staged["old"], staged["new"]), f"a mix after a kill at step {crash_at}"
        outcomes.append("old" if after == staged["old"] else "new")
    # the manifest PUT is the first operation and the commit point: a kill before it leaves
    # the old partition, a kill at any later step the new one
    assert outcomes == ["old"] + ["new"] * (total - 1)


def test_a_failure_after_the_commit_point_rolls_forward_and_never_aborts(
        s3_server: S3Server, staged: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """An S3 error in the middle of the roll-forward (a copy refused once): the partition's
    ``.cleaned`` objects are the sources the manifest needs, so the failed commit must not
    abort them; the immediate recovery finishes the swap."""
    trial = fresh_url("failing-copy")
    copy_prefix(s3_server.client(), staged["url"], trial)
    pdir = f"{trial}/{staged['tp_dir']}"
    real_copy = storage.copy
    calls = []

    def copy_failing_once(src: str, dst: str, **kwargs: object) -> None:
        calls.append(src)
        if len(calls) == 3:
            raise LogDirError("cannot copy object: SlowDown (HTTP 503)", path=src)
        real_copy(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(storage, "copy", copy_failing_once)
    before = storage.settings()
    storage.configure(settings_of(s3_server))
    try:
        failure = swap.commit_isolated(pdir, pickle.loads(staged["messages_file"].read_bytes()),
                                       storage.identities(pdir))
        assert failure is not None and "SlowDown" in str(failure)
        left = storage.list_dir(pdir)
    finally:
        storage.configure(before)
    assert not [n for n in left if n.endswith(".cleaned") or n == MANIFEST_NAME]
    out = staged["root"] / "after-failing-copy"
    download(s3_server, pdir, out)
    assert tree(out) == staged["new"]
