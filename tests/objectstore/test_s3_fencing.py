"""Fencing on S3 (issue 28.1 and 28.2), against the real S3 server and a fault-injecting proxy
in front of it: a run that lost its lease never commits, and nothing changed after the scan
is overwritten, deleted or brought back.

Run A is a subprocess that takes the log dir's lease, lists the partition (its scan) and
commits pre-written ``.cleaned`` objects when told to; run B is this test process. Each test
was run against the code before the fix and failed there: A committed (exit 0) over B's
change, or the commit deleted a foreign write, or left a half-swapped partition."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compactor.errors import CommitConflictError
from compactor.log import storage, swap
from compactor.log.manifest import MANIFEST_NAME
from compactor.log.storage import LEASE_NAME
from compactor.tools.fixtures.s3_server import S3Server, copy_prefix
from tests.objectstore.conftest import download, fresh_url, recover_on, settings_of, tree
from tests.objectstore.proxy import HOLD, PASS, THROTTLE, Request, proxy_to

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

# Run A: hold the lease of argv[1], list partition argv[2] (the scan), say READY, wait for a
# line on stdin, commit the pickled messages argv[3]; print what happened.
RUN_A = r"""
import json, pickle, sys
from compactor.errors import CompactorError
from compactor.log import storage, swap
log_dir, partition_dir, messages_file, options = sys.argv[1:5]
storage.configure(storage.StorageSettings(options=json.loads(options)))
messages = pickle.load(open(messages_file, "rb"))
with storage.log_dir_lock(log_dir):
    scanned = storage.identities(partition_dir)
    print("READY", flush=True)
    sys.stdin.readline()
    try:
        swap.commit_partition(partition_dir, messages, scanned)
        print("COMMITTED", flush=True)
    except CompactorError as err:
        print(type(err).__name__, err.message.replace("\n", " "), flush=True)
"""


def _work(server: S3Server, staged: dict) -> tuple[str, str]:
    log_dir = fresh_url("fence")
    copy_prefix(server.client(), staged["url"], log_dir)
    return log_dir, f"{log_dir}/{staged['tp_dir']}"


def _start_a(log_dir: str, pdir: str, staged: dict, options: dict) -> subprocess.Popen:
    a = subprocess.Popen([sys.executable, "-c", RUN_A, log_dir, pdir,
                          str(staged["messages_file"]), json.dumps(options)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=REPO)
    assert a.stdout is not None and a.stdout.readline().strip() == "READY", a.stderr
    return a


def _go(a: subprocess.Popen) -> str:
    assert a.stdin is not None and a.stdout is not None
    a.stdin.write("go\n")
    a.stdin.flush()
    out = a.stdout.readline().strip()
    a.wait(timeout=120)
    return out


def _as_b(server: S3Server, log_dir: str, path: str, data: bytes, *,
          break_lease: bool = False) -> None:
    """Run B: take the log dir's lease (breaking it when told) and write ``data`` there."""
    before = storage.settings()
    storage.configure(storage.StorageSettings(settings_of(server).options,
                                              break_lease=break_lease))
    try:
        with storage.log_dir_lock(log_dir):
            storage.write_durable(path, data)
    finally:
        storage.configure(before)


def _tree_of(server: S3Server, url: str, dest: Path) -> dict[str, bytes]:
    """The partition's files, without ``.cleaned`` orphans (a refused run leaves its
    executors' output for the next recovery to delete, as Kafka's loader does)."""
    download(server, url, dest)
    return {n: d for n, d in tree(dest).items() if not n.endswith(".cleaned")}


def _first_log(staged: dict) -> str:
    return min(n for n in staged["old"] if n.endswith(".log"))


def test_a_run_whose_renewals_fail_until_its_lease_expires_never_commits(
        s3_server: S3Server, staged: dict, tmp_path: Path) -> None:
    log_dir, pdir = _work(s3_server, staged)

    def throttle_renewals(r: Request) -> str:
        return THROTTLE if (r.method == "PUT" and r.path.split("?")[0].endswith(LEASE_NAME)
                            and "If-Match" in r.headers) else PASS

    with proxy_to(s3_server.endpoint_url) as proxy:
        proxy.rule = throttle_renewals
        a = _start_a(log_dir, pdir, staged, {**settings_of(s3_server).options,
                                             "endpoint_url": proxy.endpoint_url,
                                             "lease_seconds": "2"})
        try:
            time.sleep(2.5)  # A's lease has expired: its renewals got 503
            assert proxy.throttled
            # taken over without --break-lease
            _as_b(s3_server, log_dir, f"{log_dir}/b-was-here", b"B")
            outcome = _go(a)
        finally:
            a.kill()
    assert outcome.startswith("LogDirLockedError"), outcome
    assert _tree_of(s3_server, pdir, tmp_path / "after") == staged["old"]


def test_a_run_whose_lease_was_broken_never_commits(s3_server: S3Server, staged: dict,
                                                     tmp_path: Path) -> None:
    log_dir, pdir = _work(s3_server, staged)
    a = _start_a(log_dir, pdir, staged, {**settings_of(s3_server).options,
                                         "lease_seconds": "30"})
    try:
        _as_b(s3_server, log_dir, f"{log_dir}/b-was-here", b"B", break_lease=True)
        outcome = _go(a)
    finally:
        a.kill()
    assert outcome.startswith("LogDirLockedError"), outcome
    assert _tree_of(s3_server, pdir, tmp_path / "after") == staged["old"]


def test_a_held_manifest_that_lands_after_another_run_changed_the_partition_is_undone(
        s3_server: S3Server, staged: dict, tmp_path: Path) -> None:
    """A proves its lease and sends the manifest PUT; the network holds it while B breaks the
    lease and rewrites a source (an erasure). When the PUT lands, A must not roll forward
    over B's bytes, and recovery must undo A's swap."""
    log_dir, pdir = _work(s3_server, staged)
    first = _first_log(staged)
    with proxy_to(s3_server.endpoint_url) as proxy:
        proxy.rule = lambda r: (HOLD if r.method == "PUT"
                                and r.path.split("?")[0].endswith(MANIFEST_NAME) else PASS)
        a = _start_a(log_dir, pdir, staged, {**settings_of(s3_server).options,
                                             "endpoint_url": proxy.endpoint_url,
                                             "lease_seconds": "30"})
        try:
            assert a.stdin is not None
            a.stdin.write("go\n")
            a.stdin.flush()
            deadline = time.monotonic() + 60
            while not proxy.held and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.held, "A never sent its manifest"
            _as_b(s3_server, log_dir, f"{pdir}/{first}", b"B's erased segment",
                  break_lease=True)
            proxy.release.set()
            assert a.stdout is not None
            outcome = a.stdout.readline().strip()
            a.wait(timeout=120)
        finally:
            a.kill()
    assert outcome.split()[0] in ("LogDirLockedError", "CommitConflictError"), outcome
    recover_on(s3_server, pdir)
    assert _tree_of(s3_server, pdir, tmp_path / "after") == {
        **staged["old"], first: b"B's erased segment"}


# --- objects changed after the scan, in process -------------------------------------------


def _commit(server: S3Server, staged: dict, pdir: str, change) -> Exception | None:
    before = storage.settings()
    storage.configure(settings_of(server))
    try:
        scanned = storage.identities(pdir)
        change()
        return swap.commit_isolated(pdir, pickle.loads(staged["messages_file"].read_bytes()),
                                    scanned)
    finally:
        storage.configure(before)


def test_a_source_written_again_after_the_scan_is_kept_and_nothing_is_swapped(
        s3_server: S3Server, staged: dict, tmp_path: Path) -> None:
    _, pdir = _work(s3_server, staged)
    first = _first_log(staged)
    failure = _commit(s3_server, staged, pdir,
                      lambda: storage.write_durable(f"{pdir}/{first}", b"a foreign write"))
    assert isinstance(failure, CommitConflictError) and first in failure.message
    assert _tree_of(s3_server, pdir, tmp_path / "after") == {**staged["old"],
                                                             first: b"a foreign write"}


def test_a_source_deleted_after_the_scan_does_not_come_back(
        s3_server: S3Server, staged: dict, tmp_path: Path) -> None:
    _, pdir = _work(s3_server, staged)
    first = _first_log(staged)
    failure = _commit(s3_server, staged, pdir,
                      lambda: storage.remove(f"{pdir}/{first}"))
    assert isinstance(failure, CommitConflictError) and "gone" in failure.message
    after = _tree_of(s3_server, pdir, tmp_path / "after")
    stem = first.removesuffix(".log")
    # its index files went too, as orphans (Kafka's loader deletes an index without a log)
    assert after == {n: d for n, d in staged["old"].items()
                     if not (n.startswith(stem + ".") and not n.endswith(".snapshot"))}


def test_a_cleaned_object_replaced_during_the_roll_forward_undoes_the_swap(
        s3_server: S3Server, staged: dict, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After the commit point and some copies, another writer replaces a ``.cleaned``
    object: the copy is refused, and the swap is undone from its backups (old, exactly)."""
    _, pdir = _work(s3_server, staged)
    real_copy = storage.copy
    copies: list[str] = []

    def copy_and_meddle(src: str, dst: str, **kwargs: object) -> None:
        copies.append(src)
        if len(copies) == 5:  # some backups and copies done: replace the next source
            victim = next(f"{pdir}/{n}" for n in storage.list_dir(pdir)
                          if n.endswith(".cleaned") and f"{pdir}/{n}" not in copies)
            storage.write_durable(victim, b"someone else's bytes")
        real_copy(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(storage, "copy", copy_and_meddle)
    failure = _commit(s3_server, staged, pdir, lambda: None)
    assert isinstance(failure, CommitConflictError) and "undone" in failure.message
    assert _tree_of(s3_server, pdir, tmp_path / "after") == staged["old"]



# Run B of the next test: take the log dir's lease by breaking it (argv[1]), delete one object
# (argv[2]) and go.
BREAK_AND_DELETE = r"""
import json, sys
from compactor.log import storage
log_dir, victim, options = sys.argv[1:4]
storage.configure(storage.StorageSettings(options=json.loads(options), break_lease=True))
with storage.log_dir_lock(log_dir):
    storage.remove(victim)
"""


def test_a_run_that_lost_its_lease_reports_what_it_did_not_commit_locked_and_exits_4(
        s3_server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Run A (the command, in this process) lists its partitions; run B breaks the lease and
    deletes a segment of the second, healthy partition; A scans and commits. Before the fix
    the partition B changed was reported ``corrupt`` (exit 6, which the DAGs do not retry) and
    the other ``failed``; now both are ``locked`` and the run exits 4 (issue 51.10)."""
    from compactor.errors import EXIT_LOCKED
    from compactor.spark import stages
    from compactor.tools.ops.generator import GeneratorConfig, generate
    from tests.helpers import cli_json
    from tests.objectstore.conftest import NOW_MS, storage_args, upload

    local = tmp_path / "logs"
    generate(str(local), GeneratorConfig(
        topics=("accounts",), partitions=2, records_per_partition=400, distinct_keys=40,
        segment_bytes=4 * 1024, seed=22, metadata_log=False))
    url = upload(s3_server, local, "lost-lease")
    victim = f"{url}/accounts-1/{min(p.name for p in (local / 'accounts-1').glob('*.log'))}"
    real = stages.clean_in_one_pass
    broken = []

    def other_run_first(*args: object, **kwargs: object) -> object:
        if not broken:  # between A's listing and its scan
            b = subprocess.run([sys.executable, "-c", BREAK_AND_DELETE, url, victim,
                                json.dumps(settings_of(s3_server).options)],
                               capture_output=True, text=True, cwd=REPO, timeout=120)
            assert b.returncode == 0, b.stderr
            broken.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(stages, "clean_in_one_pass", other_run_first)
    code, report = cli_json(capsys, "compact", url, *storage_args(s3_server),
                            "--assume-kafka-defaults", "--config", "cleanup.policy=compact",
                            "--now-ms", str(NOW_MS), "--json")
    assert broken and code == EXIT_LOCKED, report
    assert report["status"] == "locked"
    lines = {p["partition"]: p for p in report["partitions"]}
    assert {p["status"] for p in lines.values()} == {"locked"}
    assert {p["reason"] for p in lines.values()} == {"LOG_DIR_LOCKED"}
    assert "another run took the log dir's lease" in lines[1]["error"]["remedy"]
