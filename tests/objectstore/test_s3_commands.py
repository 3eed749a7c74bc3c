"""Every command on an ``s3://`` log dir against a real S3 server gives, downloaded, the same
bytes in every file (and the same segment mtimes) as the same command on a local copy with the
same ``--now-ms``; a leased log dir is refused with exit 4."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.errors import EXIT_LOCKED, EXIT_OK
from compactor.log import storage
from compactor.log.manifest import MANIFEST_NAME
from compactor.tools.fixtures.s3_server import S3Server
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import cli_json, topic_lines
from tests.objectstore.conftest import (
    download,
    fresh_url,
    mtimes,
    settings_of,
    storage_args,
    tree,
    upload,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# `compactor` (argv[1:]) that dies with its whole process group (driver, JVM, Python workers)
# by SIGKILL right after the first swap manifest is written: the commit point, nothing copied
KILLED_AT_COMMIT_POINT = r"""
import os, signal, sys
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
from compactor.log import manifest
def die(partition_dir, pending):
    os.killpg(0, signal.SIGKILL)
manifest.roll_forward = die
from compactor.cli import main
sys.exit(main(sys.argv[1:]))
"""

DAY = 86_400_000
NOW = DEFAULT_START_MS + 3 * DAY
GEN = GeneratorConfig(
    topics=("accounts", "events", "profiles"), partitions=2, records_per_partition=1200,
    distinct_keys=60, segment_bytes=12 * 1024, tombstone_ratio=0.2, transactional_ratio=0.3,
    abort_ratio=0.3, legacy_records=20, seed=16,
    topic_configs={"accounts": {"cleanup.policy": "compact"},
                   "events": {"cleanup.policy": "delete", "retention.ms": str(DAY)},
                   "profiles": {"cleanup.policy": "compact,delete",
                                "retention.ms": str(2 * DAY)}})


def _same(server: S3Server, url: str, local: Path, tmp: Path, step: str) -> None:
    down = tmp / f"down-{step}"
    download(server, url, down)
    want, got = tree(local), tree(down)
    assert sorted(got) == sorted(want), f"{step}: different files"
    assert [n for n in want if want[n] != got[n]] == [], f"{step}: different bytes"
    # segments keep their times; the empty segment a retention roll creates is stamped with
    # the wall clock of the write on either storage
    rolled = {n for n in want if n.endswith(".log") and not want[n]}
    got_times, want_times = mtimes(down), mtimes(local)
    assert {n: t for n, t in got_times.items() if n not in rolled} == \
           {n: t for n, t in want_times.items() if n not in rolled}, f"{step}: segment mtimes"
    assert all(abs(got_times[n] - want_times[n]) < 120_000 for n in rolled)


def test_every_command_on_s3_matches_the_same_command_on_a_local_copy(
        spark, s3_server: S3Server, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    local = tmp_path / "local"
    generate(str(local), GEN)
    url = upload(s3_server, local, "commands")
    s3 = storage_args(s3_server)
    ledger_local, ledger_s3 = str(tmp_path / "ledger"), fresh_url("ledger")

    def both(command: str, *args: str, state: bool = False) -> tuple[dict, dict]:
        """``command`` (its words) on the local copy, then on the S3 one."""
        extra_local = ["--state-dir", ledger_local] if state else []
        extra_s3 = ["--state-dir", ledger_s3] if state else []
        words = command.split()  # a broker on Kafka's defaults
        words += [] if command == "recover" else ["--assume-kafka-defaults"]
        code_local, local_report = cli_json(capsys, *words, str(local), *args, *extra_local)
        code_s3, s3_report = cli_json(capsys, *words, url, *args, *extra_s3, *s3)
        assert code_local == code_s3 == EXIT_OK, (local_report, s3_report)
        return local_report, s3_report

    def compare_reports(a: dict, b: dict, key: str = "partitions") -> None:
        def strip(lines: list[dict]) -> list[dict]:
            return [{k: v for k, v in p.items() if k not in ("seconds", "stages_s", "path")}
                    for p in lines]
        assert strip(a[key]) == strip(b[key])

    # compaction, at NOW
    a, b = both("compact", "--now-ms", str(NOW), "--json")
    compare_reports(a, b)
    assert any(p["status"] == "cleaned" for p in topic_lines(b["partitions"]))
    _same(s3_server, url, local, tmp_path, "compact")

    # retention, a day later
    a, b = both("retain", "--now-ms", str(NOW + DAY), "--json")
    compare_reports(a, b)
    assert b["segments_deleted"] > 0
    _same(s3_server, url, local, tmp_path, "retain")

    # both by cleanup.policy, with a runs table in the ledger
    a, b = both("run", "--now-ms", str(NOW + 2 * DAY), "--json", state=True)
    compare_reports(a["compaction"], b["compaction"])
    compare_reports(a["retention"], b["retention"])
    _same(s3_server, url, local, tmp_path, "run")

    # erasure of one key: request in each ledger, apply, verify
    for ledger in (ledger_local, ledger_s3):
        extra = s3 if storage.is_url(ledger) else []
        assert cli_json(capsys, "erase", "init", "--state-dir", ledger, *extra)[0] == EXIT_OK
        code, _ = cli_json(capsys, "erase", "request", "--state-dir", ledger, "--topic",
                           "accounts", "--key", "key-00000003", "--now-ms", str(NOW), "--json",
                           *extra, "--reason", "art. 17")
        assert code == EXIT_OK
    a, b = both("erase apply", "--now-ms", str(NOW + 2 * DAY), "--json", state=True)
    compare_reports(a, b, "requests")
    assert b["requests"][0]["records_erased"] > 0
    compare_reports(a, b)
    _same(s3_server, url, local, tmp_path, "erase-apply")
    a, b = both("erase verify", "--now-ms", str(NOW + 2 * DAY), "--json", state=True)
    compare_reports(a, b, "requests")
    assert [r["status"] for r in b["requests"]] == ["verified"]

    # nothing left to recover on either, and every segment, index and checkpoint checks out
    a, b = both("recover", "--json")
    assert a["partitions_recovered"] == b["partitions_recovered"] == 0
    _same(s3_server, url, local, tmp_path, "recover")
    assert not storage.exists(f"{url}/{storage.LEASE_NAME}")
    code, _ = cli_json(capsys, "inspect", url, "--verify", "--json", *s3)
    assert code == EXIT_OK


def test_recover_finishes_a_swap_whose_manifest_was_written(
        spark, s3_server: S3Server, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A run killed right after its first commit point: that partition's manifest and every
    partition's ``.cleaned`` objects are there, nothing copied yet. The dead run's lease keeps
    others out until ``--break-lease``; ``recover --dry-run`` changes nothing; ``recover``
    rolls the committed partition forward and drops the other partitions' orphans."""
    local = tmp_path / "local"
    generate(str(local), GEN)
    url = upload(s3_server, local, "rollforward")
    s3 = storage_args(s3_server)
    finished = tmp_path / "finished"
    shutil.copytree(local, finished)
    assert cli_json(capsys, "compact", "--assume-kafka-defaults", str(finished), "--now-ms",
                    str(NOW), "--json")[0] == 0

    crashed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_COMMIT_POINT, "compact", "--assume-kafka-defaults", url,
         "--now-ms", str(NOW),
         "--json", *s3], capture_output=True, text=True, cwd=REPO, start_new_session=True)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    before = storage.settings()
    storage.configure(settings_of(s3_server))
    try:
        pending = [p for p in storage.list_dir(url)
                   if storage.exists(f"{url}/{p}/{MANIFEST_NAME}")]
        assert len(pending) == 1
        with_leftovers = [p for p in storage.list_dir(url) if any(
            n == MANIFEST_NAME or n.endswith(".cleaned")
            for n in (storage.list_dir(f"{url}/{p}") if storage.is_dir(f"{url}/{p}") else ()))]
        # the interrupted run's lease is still live: only --break-lease gets in
        code, report = cli_json(capsys, "recover", url, "--json", *s3)
        assert code == EXIT_LOCKED and report["code"] == "LOG_DIR_LOCKED"
    finally:
        storage.configure(before)
    code, report = cli_json(capsys, "recover", url, "--dry-run", "--json", "--break-lease", *s3)
    assert code == EXIT_OK
    snapshot = tmp_path / "dry"
    download(s3_server, url, snapshot)
    assert (snapshot / pending[0] / MANIFEST_NAME).exists()  # the dry run changed nothing
    code, report = cli_json(capsys, "recover", url, "--json", "--break-lease", *s3)
    assert code == EXIT_OK and report["partitions_recovered"] == len(with_leftovers) > 1
    # old or new: the partition whose manifest was written is exactly what the uninterrupted
    # run made of it; every other partition and the checkpoints are exactly as uploaded
    after = tmp_path / "after"
    download(s3_server, url, after)
    got, old, new = tree(after), tree(local), tree(finished)
    swapped = pending[0] + "/"
    assert {n: d for n, d in got.items() if n.startswith(swapped)} == \
           {n: d for n, d in new.items() if n.startswith(swapped)}
    assert {n: d for n, d in got.items() if not n.startswith(swapped)} == \
           {n: d for n, d in old.items() if not n.startswith(swapped)}


def test_an_unreachable_or_refusing_store_is_a_storage_error_not_corrupt_data(
        spark, s3_server: S3Server, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = [a.replace(s3_server.secret_key, "wrong") for a in storage_args(s3_server)]
    code, report = cli_json(capsys, "compact", "--assume-kafka-defaults", "s3://logs/anything",
                            "--json", *wrong)
    assert code == 1 and report["code"] == "STORAGE_ERROR"
    assert report["path"].startswith("s3://logs/anything")
    assert "AWS_SECRET_ACCESS_KEY" in report["remedy"]
