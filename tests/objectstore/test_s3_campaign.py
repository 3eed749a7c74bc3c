"""The fault campaign on S3 (issue 28, "done when"), bounded and seeded: ``recover`` itself is
SIGKILLed before each of its object operations, while it finishes a swap and while it undoes
one another writer interfered with, and ``retain`` is SIGKILLed before each of its deletes.
After any kill, ``recover`` (and a rerun) must reach exactly old or exactly the uninterrupted
run's bytes, and nothing deleted or erased comes back. (The swap's own kill points are in
``test_s3_crash.py``, the lease and proxy faults in ``test_s3_fencing.py``.)

A command's operations are counted first; the suite kills it before the first three, the last
two and a seeded sample of the others, :data:`KILL_POINTS` in all (every kill point is two
fresh processes and a download: killing before all of them took 7.5 minutes of the suite);
``S3_CAMPAIGN_KILL_POINTS=all`` kills before every one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.log import storage
from compactor.log.manifest import MANIFEST_NAME
from compactor.tools.fixtures.s3_server import S3Server, copy_prefix
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.objectstore.conftest import (
    download,
    fresh_url,
    recover_on,
    settings_of,
    tree,
    upload,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = ("write_new", "copy", "remove", "write_atomic", "write_durable")

# argv: options, kill before operation N (0: never; then print how many), then either
# "swap PARTITION MESSAGES" or "recover PARTITION" or a compactor command line.
KILLER = r"""
import json, pickle, sys
from compactor.log import storage, swap
from compactor.log.recovery import recover_partition
from tests.crash import kill_before
options, crash_at, what = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
storage.configure(storage.StorageSettings(options=options))
if what == "swap":
    scanned = storage.identities(sys.argv[4])
    messages = pickle.load(open(sys.argv[5], "rb"))
    ops = kill_before(crash_at, ("write_new", "copy", "remove", "write_atomic", "write_durable"))
    swap.commit_partition(sys.argv[4], messages, scanned)
elif what == "recover":
    ops = kill_before(crash_at, ("write_new", "copy", "remove", "write_atomic", "write_durable"))
    recover_partition(sys.argv[4])
else:
    from compactor.cli import main
    ops = kill_before(crash_at, ("write_new", "copy", "remove", "write_atomic", "write_durable"))
    code = main(sys.argv[3:])
    if code:
        sys.exit(code)
print(ops())
"""


KILL_POINTS = os.environ.get("S3_CAMPAIGN_KILL_POINTS", "12")


def kill_points(total: int, rng: random.Random) -> list[int]:
    """Of the operations ``1..total``, those a run is killed before (:data:`KILL_POINTS`)."""
    every = list(range(1, total + 1))
    if KILL_POINTS == "all" or total <= int(KILL_POINTS):
        return every
    ends = every[:3] + every[-2:]
    middle = every[3:-2]
    return sorted(ends + rng.sample(middle, min(len(middle), int(KILL_POINTS) - len(ends))))


def _kill(server: S3Server, crash_at: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KILLER, json.dumps(settings_of(server).options),
                           str(crash_at), *args], capture_output=True, text=True, cwd=REPO)


def _tree(server: S3Server, url: str, dest: Path) -> dict[str, bytes]:
    """Every object's bytes, without a killed run's lease object."""
    download(server, url, dest)
    return {n: d for n, d in tree(dest).items() if not n.endswith(storage.LEASE_NAME)}


def _swap_killed_at(server: S3Server, staged: dict, name: str, crash_at: int) -> str:
    url = fresh_url(name)
    copy_prefix(server.client(), staged["url"], url)
    pdir = f"{url}/{staged['tp_dir']}"
    proc = _kill(server, crash_at, "swap", pdir, str(staged["messages_file"]))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    return pdir


def test_recover_killed_at_any_step_of_a_roll_forward_still_ends_new(
        s3_server: S3Server, staged: dict, tmp_path: Path) -> None:
    rng = random.Random(28)
    # a swap killed after its manifest and some copies (a few seeded kill points)
    for swap_kill in rng.sample(range(3, 20), 1):  # one seeded kill point: the cost is quadratic
        probe = _swap_killed_at(s3_server, staged, "rf-probe", swap_kill)
        counted = _kill(s3_server, 0, "recover", probe)
        assert counted.returncode == 0, counted.stderr[-2000:]
        total = int(counted.stdout.strip())
        assert total > 3
        for crash_at in kill_points(total, rng):
            pdir = _swap_killed_at(s3_server, staged, "rf", swap_kill)
            proc = _kill(s3_server, crash_at, "recover", pdir)
            assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
            recover_on(s3_server, pdir)
            after = _tree(s3_server, pdir, tmp_path / f"rf-{swap_kill}-{crash_at}")
            assert after == staged["new"], (swap_kill, crash_at)


def test_recover_killed_at_any_step_of_an_undo_still_ends_old(
        s3_server: S3Server, staged: dict, tmp_path: Path) -> None:
    """Another writer changes an old segment after a swap began copying: recovery must undo
    the swap (the old segment it would delete is no longer what was scanned), and a kill at
    any step of the undo must not change that outcome."""
    swap_kill = 6  # the manifest and some backups/copies are done, no delete yet
    victims: list[str] = []

    def interfered() -> str:
        pdir = _swap_killed_at(s3_server, staged, "undo", swap_kill)
        before = storage.settings()
        storage.configure(settings_of(s3_server))
        try:
            if not victims:  # an old segment the swap is to delete
                manifest = json.loads(storage.read_bytes(f"{pdir}/{MANIFEST_NAME}"))
                victims.append(next(n for n in manifest["deletes"] if n.endswith(".log")))
            storage.write_durable(f"{pdir}/{victims[0]}", b"another writer's bytes")
        finally:
            storage.configure(before)
        return pdir

    counted = _kill(s3_server, 0, "recover", interfered())
    assert counted.returncode == 0, counted.stderr[-2000:]
    total = int(counted.stdout.strip())
    expected = {**staged["old"], victims[0]: b"another writer's bytes"}
    for crash_at in kill_points(total, random.Random(29)):
        pdir = interfered()
        proc = _kill(s3_server, crash_at, "recover", pdir)
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        recover_on(s3_server, pdir)
        after = _tree(s3_server, pdir, tmp_path / f"undo-{crash_at}")
        assert {n: d for n, d in after.items() if not n.endswith(".cleaned")} == expected, \
            crash_at


DAY = 86_400_000
RETAIN_GEN = GeneratorConfig(topics=("events",), partitions=1, records_per_partition=600,
                             distinct_keys=100, segment_bytes=4 * 1024,
                             record_interval_ms=1000, seed=28, metadata_log=False)


def test_retain_killed_at_any_step_never_resurrects_and_a_rerun_converges(
        s3_server: S3Server, tmp_path: Path) -> None:
    local = tmp_path / "logs"
    generate(str(local), RETAIN_GEN)
    template = upload(s3_server, local, "retain")
    now = DEFAULT_START_MS + 30 * DAY
    args = ["retain", "--assume-kafka-defaults", "--now-ms", str(now), "--json", "--config",
            f"retention.ms={DAY}", *[a for k, v in settings_of(s3_server).options.items()
                                     for a in ("--storage-option", f"{k}={v}")]]
    finished = fresh_url("retain-done")
    copy_prefix(s3_server.client(), template, finished)
    done = _kill(s3_server, 0, *args[:1], finished, *args[1:])
    assert done.returncode == 0, done.stderr[-2000:]
    total = int(done.stdout.strip().splitlines()[-1])
    expected = _tree(s3_server, finished, tmp_path / "finished")
    old = _tree(s3_server, template, tmp_path / "old")
    assert total > 5
    for crash_at in kill_points(total, random.Random(30)):
        url = fresh_url("retain-kill")
        copy_prefix(s3_server.client(), template, url)
        proc = _kill(s3_server, crash_at, *args[:1], url, *args[1:])
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        now_tree = _tree(s3_server, url, tmp_path / f"killed-{crash_at}")
        # nothing comes back: every segment file left is one of the old ones, unchanged
        for name, data in now_tree.items():
            if name.endswith(".log") and name in old:
                assert data == old[name], (crash_at, name)
        # the killed run's lease is still live: the operator's rerun breaks it
        rerun = _kill(s3_server, 0, *args[:1], url, *args[1:], "--break-lease")
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        assert _tree(s3_server, url, tmp_path / f"rerun-{crash_at}") == expected, crash_at
