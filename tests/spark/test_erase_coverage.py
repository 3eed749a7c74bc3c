"""Issue 13: erasure reaches every copy on disk and never resurrects data. Replica copies
(``-future``, ``-delete``, ``-stray``), the compacted-topic rule, ``--leave-tombstone``, tiered
topics, proofs that cannot be false by mistake, and a crash while a ``-future`` copy is
swapped. Records that remain are read back with kafka-python (an independent parser)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

from compactor.cli import main as cli_main
from compactor.codec.checkpoints import CLEANER_OFFSET_CHECKPOINT, parse_offset_checkpoint
from compactor.errors import EXIT_CONFIG, EXIT_OK, EXIT_REQUESTS_FAILED
from compactor.model import TopicPartition
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.crash import ERASE_APPLY_CRASHER
from tests.helpers import (
    cli_json,
    init_ledger,
    inspect_problems,
    records_of,
    segment_bytes,
    tree_digest,
)

pytestmark = pytest.mark.spark

NOW = DEFAULT_START_MS + 3 * 86_400_000
GEN = GeneratorConfig(
    topics=("profiles", "clicks", "vault"), partitions=1, records_per_partition=1500,
    distinct_keys=60, segment_bytes=12 * 1024, transactional_producers=0, header_ratio=0.5,
    tombstone_ratio=0.2, zipf_exponent=0.0, seed=9,
    topic_configs={"profiles": {"cleanup.policy": "compact"},
                   "vault": {"remote.storage.enable": "true", "retention.ms": "-1"}})
SUBJECT = b"key-00000003"
FUTURE = "profiles-0.0f1e2d3c4b5a69788796a5b4c3d2e1f0-future"
STRAY = "profiles-0.1f1e2d3c4b5a69788796a5b4c3d2e1f0-stray"
DELETE = "clicks-0.2f1e2d3c4b5a69788796a5b4c3d2e1f0-delete"


@pytest.fixture(scope="module")
def compacted(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The profiles topic compacted once (a clean section below the cleaner checkpoint, a
    dirty one above), with its configs from the generated metadata log."""
    logs = tmp_path_factory.mktemp("coverage") / "logs"
    generate(str(logs), GEN)
    assert cli_main(["compact", "--assume-kafka-defaults", str(logs), "--now-ms",
                     str(DEFAULT_START_MS + 40_000),
                     "--json"]) == EXIT_OK
    return logs


@pytest.fixture()
def logs(compacted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    capsys.readouterr()
    dest = tmp_path / "logs"
    shutil.copytree(compacted, dest)
    return dest




def kp_records(pdir: Path) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """``(offset, timestamp, key, value, headers)`` of every data record, read by kafka-python."""
    out = []
    for data in segment_bytes(pdir).values():
        records = KpMemoryRecords(data)
        while records.has_next():
            batch = records.next_batch()
            if batch.is_control_batch:
                continue
            out += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return out


def request(capsys: pytest.CaptureFixture[str], state: Path, *args: str) -> int:
    init_ledger(str(state))
    return cli_json(capsys, "erase", "request", "--state-dir", str(state), "--now-ms", str(NOW),
               "--json", "--reason", "art. 17", *args)[0]


def erase(capsys: pytest.CaptureFixture[str], action: str, logs: Path, state: Path,
          *args: str) -> tuple[int, dict]:
    return cli_json(capsys, "erase", action, "--assume-kafka-defaults", str(logs),
                    "--state-dir", str(state), "--now-ms", str(NOW), "--json", *args)


def test_every_copy_on_disk_is_erased_and_the_proof_lists_each_directory(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for src, dst in (("profiles-0", FUTURE), ("profiles-0", STRAY), ("clicks-0", DELETE)):
        shutil.copytree(logs / src, logs / dst)
    copies = ("profiles-0", FUTURE, STRAY, "clicks-0", DELETE)
    assert all(any(k == SUBJECT for _, _, k, _, _ in kp_records(logs / d)) for d in copies)
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "*", "--key", SUBJECT.decode(),
                   "--request-id", "r1") == EXIT_OK
    code, applied = erase(capsys, "apply", logs, state)
    assert code == EXIT_OK
    assert {p["dir"]: p["copy"] for p in applied["partitions"]}[FUTURE] == "future"
    for d in copies:
        remaining = kp_records(logs / d)
        assert remaining and not any(k == SUBJECT for _, _, k, _, _ in remaining), d
    code, verified = erase(capsys, "verify", logs, state)
    # every topic: the tiered one's remote segments could not be scanned
    assert code == EXIT_OK and verified["requests"][0]["status"] == "verified_local_only"
    code, audit = cli_json(capsys, "erase", "report", "--state-dir", str(state), "--request-id",
                      "r1", "--json")
    coverage = {c["dir"]: c for c in audit["proof"]["coverage"]}
    assert set(coverage) == {*copies, "vault-0"}
    assert coverage[DELETE]["copy"] == "delete" and coverage[STRAY]["copy"] == "stray"
    assert all(c["segments"] > 0 and c["records"] > 0 for c in coverage.values())
    assert inspect_problems(logs) == []


def test_pending_deletes_can_be_excluded_but_never_silently(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(logs / "clicks-0", logs / DELETE)
    kept = tree_digest(logs / DELETE)
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "clicks", "--key", SUBJECT.decode()) == EXIT_OK
    code, applied = erase(capsys, "apply", logs, state, "--exclude-pending-deletes")
    assert code == EXIT_OK
    line = {p["dir"]: p for p in applied["partitions"]}[DELETE]
    assert line["status"] == "residual_copy" and line["residual_offsets"]
    assert tree_digest(logs / DELETE) == kept
    code, verified = erase(capsys, "verify", logs, state)
    assert code == EXIT_REQUESTS_FAILED and verified["requests"][0]["status"] == "failed"
    assert {r["dir"] for r in verified["requests"][0]["residual"]} == {DELETE}


def test_verify_fails_when_a_copy_still_holds_the_subject(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = tmp_path / "original"
    shutil.copytree(logs / "profiles-0", original)
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "profiles", "--key", SUBJECT.decode()) == EXIT_OK
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    shutil.copytree(original, logs / FUTURE)  # a move between log dirs began from old data
    code, verified = erase(capsys, "verify", logs, state)
    assert code == EXIT_REQUESTS_FAILED
    residual = verified["requests"][0]["residual"]
    subject_offsets = {o for o, _, k, _, _ in kp_records(original) if k == SUBJECT}
    assert {r["dir"] for r in residual} == {FUTURE}
    assert {r["offset"] for r in residual} <= subject_offsets


def _header(record: tuple) -> bytes | None:
    return next((v for k, v in record[4] if k == "trace-id"), None)


def test_header_erasure_on_a_compacted_topic_never_resurrects_an_older_value(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pdir = logs / "profiles-0"
    first_dirty = parse_offset_checkpoint((logs / CLEANER_OFFSET_CHECKPOINT).read_text())[
        TopicPartition("profiles", 0)]
    records = kp_records(pdir)
    by_key: dict[bytes, list[tuple]] = {}
    for r in records:
        if r[2] is not None:
            by_key.setdefault(r[2], []).append(r)
    bases = sorted(segment_bytes(pdir))

    def segment_of(offset: int) -> int:
        return max(b for b in bases if b <= offset)

    def latest_with_header(tombstone: bool) -> bytes:
        return next(k for k, rs in sorted(by_key.items())
                    if _header(rs[-1]) is not None and (rs[-1][3] is None) == tombstone
                    and rs[-1][0] >= first_dirty
                    and any(segment_of(r[0]) < segment_of(rs[-1][0]) for r in rs[:-1]))

    value_key, tombstone_key = latest_with_header(False), latest_with_header(True)
    # a clean-section record that is not its key's latest: only that record goes
    clean_key, clean = next((k, r) for k, rs in sorted(by_key.items())
                            for r in rs[:-1] if r[0] < first_dirty and _header(r) is not None
                            and k not in (value_key, tombstone_key))
    state = tmp_path / "state"
    for key in (value_key, tombstone_key):
        trace = _header(by_key[key][-1])
        assert request(capsys, state, "--topic", "profiles", "--header",
                       f"trace-id={trace.decode()}") == EXIT_OK
    assert request(capsys, state, "--topic", "profiles", "--header",
                   f"trace-id={_header(clean).decode()}") == EXIT_OK
    code, applied = erase(capsys, "apply", logs, state)
    assert code == EXIT_OK
    older = len(by_key[value_key]) - 1 + len(by_key[tombstone_key]) - 1
    line = {p["dir"]: p for p in applied["partitions"]}["profiles-0"]
    assert line["superseded_by_erased"] == older
    after = kp_records(pdir)
    assert not any(r[2] in (value_key, tombstone_key) for r in after)
    expected = [r for r in records if r[2] not in (value_key, tombstone_key)
                and r[0] != clean[0]]
    assert after == expected
    # a later compaction never brings an erased value back
    assert cli_main(["compact", "--assume-kafka-defaults", str(logs), "--now-ms",
                     str(NOW + 10 * 86_400_000),
                     "--json"]) == EXIT_OK
    capsys.readouterr()
    assert not any(r[2] in (value_key, tombstone_key) for r in kp_records(pdir))
    assert erase(capsys, "verify", logs, state)[0] == EXIT_OK


def test_on_a_delete_topic_exactly_the_matches_go(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pdir = logs / "clicks-0"
    records = kp_records(pdir)
    latest: dict[bytes, tuple] = {}
    for r in records:
        if r[2] is not None:
            latest[r[2]] = r
    key, last = next((k, r) for k, r in sorted(latest.items()) if _header(r) is not None
                     and sum(x[2] == k for x in records) > 1)
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "clicks", "--header",
                   f"trace-id={_header(last).decode()}") == EXIT_OK
    code, applied = erase(capsys, "apply", logs, state)
    assert code == EXIT_OK
    assert {p["dir"]: p for p in applied["partitions"]}["clicks-0"]["superseded_by_erased"] == 0
    assert kp_records(pdir) == [r for r in records if r[0] != last[0]]


def test_leave_tombstone_replaces_the_last_record_and_verify_accepts_only_it(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pdir = logs / "profiles-0"
    original = tmp_path / "original"
    shutil.copytree(pdir, original)
    mine = [r for r in kp_records(pdir) if r[2] == SUBJECT]
    state = tmp_path / "state"
    init_ledger(str(state))
    assert cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", "clicks",
               "--header", "trace-id=x", "--leave-tombstone",
               "--reason", "art. 17")[0] == EXIT_CONFIG
    assert request(capsys, state, "--topic", "profiles", "--key", SUBJECT.decode(),
                   "--leave-tombstone", "--request-id", "t1") == EXIT_OK
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    left = [r for r in kp_records(pdir) if r[2] == SUBJECT]
    assert left == [(mine[-1][0], mine[-1][1], SUBJECT, None, [])]  # offset and time kept
    code, verified = erase(capsys, "verify", logs, state)
    assert code == EXIT_OK and verified["requests"][0]["status"] == "verified"
    code, audit = cli_json(capsys, "erase", "report", "--state-dir", str(state), "--request-id",
                      "t1", "--json")
    assert audit["proof"]["tombstones_left"] == [{"dir": "profiles-0", "offset": mine[-1][0]}]
    # the same key's value anywhere else is not accepted
    shutil.copytree(original, logs / FUTURE)
    assert cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", "profiles",
               "--key", SUBJECT.decode(), "--leave-tombstone", "--request-id", "t2",
               "--reason", "art. 17")[0] == 0
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    shutil.rmtree(logs / FUTURE)
    shutil.copytree(original, logs / FUTURE)
    code, verified = erase(capsys, "verify", logs, state)
    assert code == EXIT_REQUESTS_FAILED
    assert {r["dir"] for r in verified["requests"][0]["residual"]} == {FUTURE}


def test_a_tiered_topic_is_verified_locally_only(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "vault", "--key", SUBJECT.decode(),
                   "--request-id", "v1", "--deadline-days", "0") == EXIT_OK
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    code, verified = erase(capsys, "verify", logs, state)
    assert code == EXIT_OK
    assert verified["requests"][0]["status"] == "verified_local_only"
    assert verified["requests"][0]["remote_tier"] == "not_covered"
    code, audit = cli_json(capsys, "erase", "report", "--state-dir", str(state), "--request-id",
                      "v1", "--json")
    assert audit["proof"]["remote_tier"] == "not_covered"
    code, status = cli_json(capsys, "erase", "status", "--state-dir", str(state), "--now-ms",
                       str(NOW + 86_400_000), "--json")
    assert code == EXIT_OK and status["by_status"]["verified_local_only"] == 1
    assert status["overdue"] == []


def test_a_tiered_topic_whose_remote_metadata_is_elsewhere_is_verified_locally_only(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The broker's remote tier is on, but this log dir holds no ``__remote_log_metadata``
    partition: its remote segments are unknown here, so the proof says what it covers (the
    local copies), as without the settings, and the report says why."""
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={logs}\nremote.log.storage.system.enable=true\n"
                     "remote.log.storage.manager.class.name=org.example.Absent\n")
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "vault", "--key", SUBJECT.decode(),
                   "--request-id", "v1") == EXIT_OK
    assert erase(capsys, "apply", logs, state, "--server-properties", str(props))[0] == EXIT_OK
    code, verified = erase(capsys, "verify", logs, state, "--server-properties", str(props))
    assert code == EXIT_OK
    assert verified["requests"][0]["status"] == "verified_local_only"
    (line,) = [p for p in verified["partitions"] if p["dir"] == "vault-0"]
    assert "__remote_log_metadata-" in line["remote_not_covered"]
    assert not any(p["copy"] == "remote" for p in verified["partitions"])


def test_a_proof_cannot_be_false_by_mistake(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    # a typo in the topic: refused at request time against the log dir
    init_ledger(str(state))
    code = cli_main(["erase", "request", "--state-dir", str(state), "--topic", "profile",
                     "--key", "k", "--log-dir", str(logs), "--reason", "art. 17"])
    assert code == EXIT_CONFIG and "did you mean 'profiles'" in capsys.readouterr().err
    # a ledger inside a Kafka log dir, even without --log-dir
    assert cli_main(["erase", "request", "--state-dir", str(logs / "ledger"), "--topic",
                     "profiles", "--key", "k", "--reason", "art. 17"]) == EXIT_CONFIG
    assert "is inside a Kafka log dir" in capsys.readouterr().err
    assert not (logs / "ledger").exists()
    # alerting and listing need a ledger
    for args in (["status", "--now-ms", str(NOW)], ["list"]):
        assert cli_main(["erase", *args, "--state-dir", str(tmp_path / "typo")]) == EXIT_CONFIG
        assert "no erasure ledger" in capsys.readouterr().err
    assert cli_main(["erase", "init", "--state-dir", str(tmp_path / "fresh")]) == EXIT_OK
    assert cli_json(capsys, "erase", "status", "--state-dir", str(tmp_path / "fresh"), "--json")[
        1]["requests"] == 0
    # a foreign directory in the log dir is what inspect --verify reports
    (logs / "ledger").mkdir()
    problems = [p for p in inspect_problems(logs) if p.code == "FOREIGN_DIRECTORY"]
    assert [p.path for p in problems] == [str(logs / "ledger")]
    (logs / "ledger").rmdir()
    # without --log-dir the typo is accepted, then apply refuses it: never verified
    assert request(capsys, state, "--topic", "profile", "--key", "k", "--request-id",
                   "typo") == EXIT_OK
    assert request(capsys, state, "--topic", "profiles", "--key", SUBJECT.decode(),
                   "--request-id", "ok") == EXIT_OK
    code, listed = cli_json(capsys, "erase", "list", "--state-dir", str(state), "--json")
    assert [(r["request_id"], r["topic"], r["status"]) for r in listed["requests"]] == [
        ("ok", "profiles", "pending"), ("typo", "profile", "pending")]
    before = tree_digest(logs)
    code, dry = erase(capsys, "apply", logs, state, "--dry-run")
    # the dry run ends as the real run will (the typo fails it), in conditional words
    assert code == EXIT_REQUESTS_FAILED and dry["dry_run"] and dry["status"] == "failed"
    assert {r["request_id"]: r["status"] for r in dry["requests"]} == {
        "ok": "would_be_applied", "typo": "would_fail"}
    assert tree_digest(logs) == before
    assert {p["dir"]: p["status"] for p in dry["partitions"]}["profiles-0"] == "would_rewrite"
    code, listed = cli_json(capsys, "erase", "list", "--state-dir", str(state), "--json")
    assert {r["status"] for r in listed["requests"]} == {"pending"}
    code, applied = erase(capsys, "apply", logs, state)
    assert code == EXIT_REQUESTS_FAILED
    typo = next(r for r in applied["requests"] if r["request_id"] == "typo")
    assert typo["status"] == "failed"
    assert "did you mean 'profiles'" in typo["failure"]["unknown_topic"]
    assert erase(capsys, "verify", logs, state)[0] == EXIT_OK  # "ok" verifies; typo never


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", [1, 3, 6])
def test_a_crash_while_a_future_copy_is_swapped_recovers_like_a_live_partition(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], crash_at: int) -> None:
    shutil.copytree(logs / "profiles-0", logs / FUTURE)
    before = segment_bytes(logs / FUTURE)
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "profiles", "--key", SUBJECT.decode(),
                   "--request-id", "r1") == EXIT_OK
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-c", ERASE_APPLY_CRASHER, str(crash_at), "-future",
                           "erase", "apply",
                           str(logs), "--state-dir", str(state), "--now-ms", str(NOW), "--json",
                           "--master", "local[1]"], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert cli_main(["recover", str(logs)]) == EXIT_OK
    capsys.readouterr()
    after = segment_bytes(logs / FUTURE)
    assert sorted(after) == sorted(before)
    subject = {o for o, r in records_of(before).items() if r.key == SUBJECT}
    for base, data in after.items():  # each segment exactly old or exactly new
        old = records_of({base: before[base]})
        assert records_of({base: data}) in (old, {o: r for o, r in old.items()
                                                  if o not in subject})
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    assert not any(k == SUBJECT for _, _, k, _, _ in kp_records(logs / FUTURE))
    assert erase(capsys, "verify", logs, state)[0] == EXIT_OK
    assert inspect_problems(logs) == []


def test_erasure_uses_the_clusters_policy_whatever_else_fails_or_refuses_the_topic(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A compacted topic whose ConfigRecords also hold a value that breaks a rule here
    (segment.bytes below any Kafka's minimum) is still erased as a compacted topic: a header
    match takes its key's older values with it. A topic whose cleanup.policy would be a guess
    (no server.properties, none of its own) is blocked: neither rewritten nor verified."""
    logs = tmp_path / "logs"
    generate(str(logs), GeneratorConfig(
        topics=("profiles", "clicks"), partitions=1, records_per_partition=600,
        distinct_keys=20, segment_bytes=8 * 1024, transactional_producers=0, header_ratio=0.5,
        tombstone_ratio=0.0, zipf_exponent=0.0, seed=12,
        topic_configs={"profiles": {"cleanup.policy": "compact", "segment.bytes": "10"}}))
    by_key: dict[bytes, list[tuple]] = {}
    for r in kp_records(logs / "profiles-0"):
        if r[2] is not None:
            by_key.setdefault(r[2], []).append(r)
    key, rs = next((k, rs) for k, rs in sorted(by_key.items())
                   if _header(rs[-1]) is not None and len(rs) > 3)
    clicks_before = segment_bytes(logs / "clicks-0")
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "profiles", "--header",
                   f"trace-id={_header(rs[-1]).decode()}", "--request-id", "p") == EXIT_OK
    assert request(capsys, state, "--topic", "clicks", "--key", SUBJECT.decode(),
                   "--request-id", "c") == EXIT_OK
    code, applied = cli_json(capsys, "erase", "apply", str(logs), "--state-dir", str(state),
                             "--now-ms", str(NOW), "--json")
    assert code == 6 and applied["status"] == "partial"
    lines = {p["dir"]: p for p in applied["partitions"]}
    assert lines["profiles-0"]["status"] == "rewritten"
    assert lines["profiles-0"]["superseded_by_erased"] == len(rs) - 1
    assert not any(r[2] == key for r in kp_records(logs / "profiles-0"))
    assert lines["clicks-0"]["status"] == "blocked"
    assert "cleanup.policy" in lines["clicks-0"]["error"]["message"]
    assert segment_bytes(logs / "clicks-0") == clicks_before
    requests = {r["request_id"]: r for r in applied["requests"]}
    assert requests["p"]["status"] == "applied"
    assert requests["c"] == {"request_id": "c", "status": "pending", "blocked_by": ["clicks-0"]}
    code, verified = cli_json(capsys, "erase", "verify", str(logs), "--state-dir", str(state),
                              "--now-ms", str(NOW), "--json")
    assert {r["request_id"]: r["status"] for r in verified["requests"]} == {"p": "verified"}
    # the broker's static configs known: the request goes through
    props = tmp_path / "server.properties"
    props.write_text("node.id=1\nlog.cleanup.policy=delete\n")
    code, applied = cli_json(capsys, "erase", "apply", str(logs), "--state-dir", str(state),
                             "--now-ms", str(NOW), "--json", "--server-properties", str(props))
    assert code == EXIT_OK and applied["requests"][0]["status"] == "applied"
    assert not any(r[2] == SUBJECT for r in kp_records(logs / "clicks-0"))


def test_a_request_is_verified_only_when_every_replica_is_scanned_clean(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three brokers hold a replica of every partition (the metadata's PartitionRecords,
    each log dir its own directory.id). Apply and verify on the first broker's log dir prove
    that replica only: the request is partially_verified, naming the replicas still to scan,
    while the second broker still holds the subject; each broker's own apply and verify
    complete it."""
    cluster = {n: tmp_path / f"broker-{n}" for n in (1, 2, 3)}
    for n, path in cluster.items():
        generate(str(path), GeneratorConfig(
            topics=("profiles",), partitions=2, records_per_partition=400, distinct_keys=30,
            segment_bytes=8 * 1024, transactional_producers=0, seed=5, node_id=n,
            replicas=(1, 2, 3), topic_configs={"profiles": {"cleanup.policy": "compact"}}))
    state = tmp_path / "state"
    assert request(capsys, state, "--topic", "profiles", "--key", SUBJECT.decode(),
                   "--request-id", "r") == EXIT_OK

    def held(n: int) -> int:
        return sum(k == SUBJECT for p in (0, 1)
                   for _, _, k, _, _ in kp_records(cluster[n] / f"profiles-{p}"))

    assert all(held(n) for n in cluster)
    code, applied = erase(capsys, "apply", cluster[1], state)
    assert code == EXIT_OK and applied["requests"][0]["status"] == "applied"
    code, verified = erase(capsys, "verify", cluster[1], state)
    (r,) = verified["requests"]
    assert code == 6 and r["status"] == "partially_verified"
    assert {(m["node_id"], m["partition"]) for m in r["missing_replicas"]} == {
        (n, f"profiles-{p}") for n in (2, 3) for p in (0, 1)}
    assert held(1) == 0 and held(2) > 0  # what "verified" would have hidden
    code, status = cli_json(capsys, "erase", "status", "--state-dir", str(state), "--now-ms",
                            str(NOW), "--json")
    (partial,) = status["partially_verified"]
    assert status["by_status"]["partially_verified"] == 1 and len(partial["places_verified"]) == 1
    assert {m["node_id"] for m in partial["missing_replicas"]} == {2, 3}
    # applying again on broker 1 does nothing; broker 2, then 3, each complete their part
    code, again = erase(capsys, "apply", cluster[1], state)
    assert code == EXIT_OK and again["requests"] == []
    for n in (2, 3):
        assert erase(capsys, "apply", cluster[n], state)[0] == EXIT_OK
        code, verified = erase(capsys, "verify", cluster[n], state)
        assert verified["requests"][0]["status"] == ("verified" if n == 3
                                                     else "partially_verified")
    assert not any(held(n) for n in cluster)
    code, proof = cli_json(capsys, "erase", "report", "--state-dir", str(state),
                           "--request-id", "r", "--json")
    places = proof["proof"]["places"]
    assert sorted(p["node_id"] for p in places.values()) == [1, 2, 3]
    assert all(p["verify_status"] == "clean" for p in places.values())
    assert proof["proof"]["missing_replicas"] == []
    assert proof["proof"]["records_erased"] == sum(p["records_erased"] for p in places.values())
