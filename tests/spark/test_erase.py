"""GDPR erasure end to end on generated logs (real Spark, real Delta tables): a subject's
records spread over clean, dirty and last segments, in compressed and transactional batches,
are all erased; everything else stays as it was; the ledger proves it; crashes leave requests
pending and the log old or new."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.cleaner.policy import replay_producers
from compactor.cleaner.scan import batch_header
from compactor.cli import main as cli_main
from compactor.codec.checkpoints import CLEANER_OFFSET_CHECKPOINT, parse_offset_checkpoint
from compactor.codec.compression import Codec
from compactor.codec.segment import iter_batches
from compactor.errors import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, EXIT_REQUESTS_FAILED
from compactor.model import TopicPartition
from compactor.schemas.delta import ERASURE_REQUESTS, RUNS
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.crash import ERASE_APPLY_CRASHER
from tests.helpers import (
    cli_json,
    init_ledger,
    inspect_problems,
    read_with_independent_parsers,
    records_of,
    segment_bytes,
    topic_lines,
    tree_digest,
)

pytestmark = pytest.mark.spark

NOW = DEFAULT_START_MS + 3 * 86_400_000
GEN = GeneratorConfig(topics=("profiles", "clicks"), partitions=2, records_per_partition=1500,
                      distinct_keys=60, segment_bytes=12 * 1024, transactional_ratio=0.4,
                      abort_ratio=0.3, codecs=(Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD),
                      header_ratio=0.3, zipf_exponent=0.0, seed=5)
SUBJECT = b"key-00000003"


@pytest.fixture(scope="module")
def compacted(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log dir whose first part was compacted (a clean section with a cleaner checkpoint)
    and that received more data after (generated with a later start: a dirty section)."""
    root = tmp_path_factory.mktemp("erase")
    logs = root / "logs"
    generate(str(logs), GEN)
    # the clock sits in the middle of the data: only segments entirely before it are cleaned
    assert cli_main(["compact", "--assume-kafka-defaults", str(logs), "--now-ms",
                     str(DEFAULT_START_MS + 40_000), "--json",
                     "--config", "cleanup.policy=compact"]) == EXIT_OK
    return logs


@pytest.fixture()
def logs(compacted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    capsys.readouterr()
    dest = tmp_path / "logs"
    shutil.copytree(compacted, dest)
    return dest




def _partitions(logs: Path) -> dict[str, dict[int, bytes]]:
    return {p.name: segment_bytes(p) for p in sorted(logs.glob("*-[0-9]"))
            if p.name != "__cluster_metadata-0"}


def _producers(logs: dict[int, bytes]) -> dict[int, tuple]:
    headers = [batch_header(b, base) for base, data in sorted(logs.items())
               for b in iter_batches(data)]
    replay = replay_producers(headers, max(h.next_offset for h in headers))
    return {pid: (e.epoch, e.last_data_offset, e.txn_first_offset)
            for pid, e in replay.producers.items()}


def _markers(logs: dict[int, bytes]) -> list[tuple]:
    return [(b.base_offset, b.control_record().type) for data in logs.values()
            for b in iter_batches(data) if b.is_control]


def test_erasing_a_key_removes_every_record_of_it_and_nothing_else(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    before = _partitions(logs)
    subject_offsets = {name: {o for o, r in records_of(segs).items() if r.key == SUBJECT}
                       for name, segs in before.items()}
    total = sum(len(v) for v in subject_offsets.values())
    # the subject is everywhere: clean and dirty sections, last segments, txn and codec batches
    cleaner = parse_offset_checkpoint((logs / CLEANER_OFFSET_CHECKPOINT).read_text())
    places = set()
    for name, segs in before.items():
        bases = sorted(segs)
        first_dirty = cleaner[TopicPartition(name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1]))]
        for o in subject_offsets[name]:
            places.add("clean" if o < first_dirty else "dirty")
            if o >= bases[-1]:
                places.add("last segment")
    assert places == {"clean", "dirty", "last segment"}
    assert any(b.is_transactional and b.compression != Codec.NONE
               and any(r.key == SUBJECT for r in b.records())
               for segs in before.values() for d in segs.values() for b in iter_batches(d))

    init_ledger(str(state))
    code, out = cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", "*",
                     "--key", SUBJECT.decode(), "--reason", "art. 17", "--now-ms", str(NOW),
                     "--json", "--log-dir", str(logs))
    assert code == EXIT_OK
    (rid,) = out["added"]
    code, report = cli_json(capsys, "erase", "apply", "--assume-kafka-defaults", str(logs),
                            "--state-dir", str(state),
                        "--now-ms", str(NOW), "--json")
    assert code == EXIT_OK and report["status"] == "ok"
    assert report["requests"][0]["records_erased"] == total

    after = _partitions(logs)
    for name in before:
        old, new = before[name], after[name]
        assert sorted(new) == sorted(old)  # same segments, same base offsets
        old_records, new_records = records_of(old), records_of(new)
        assert not any(r.key == SUBJECT for r in new_records.values())
        assert new_records == {o: r for o, r in old_records.items()
                               if o not in subject_offsets[name]}
        # untouched segments are byte for byte the same; every batch keeps its offsets
        for base in old:
            end = min([b for b in old if b > base], default=1 << 62)
            hit = any(base <= o < end for o in subject_offsets[name])
            if not hit:
                assert new[base] == old[base]
        assert _markers(new) == _markers(old)
        assert _producers(new) == _producers(old)
        last_old = max(b.next_offset for d in old.values() for b in iter_batches(d))
        last_new = max(b.next_offset for d in new.values() for b in iter_batches(d))
        assert last_new == last_old  # the log end offset stays
        for data in new.values():
            read_with_independent_parsers(data)
    assert inspect_problems(logs) == []

    # the ledger: Delta tables readable with deltalake, the request applied, no raw key
    requests = DeltaTable(str(state / "erasure_requests")).to_pyarrow_table()
    assert requests.schema.equals(ERASURE_REQUESTS, check_metadata=False)
    (row,) = requests.to_pylist()
    assert row["request_id"] == rid and row["status"] == "applied"
    assert row["records_erased"] == total and row["partitions_rewritten"] == 4
    runs = DeltaTable(str(state / "runs")).to_pyarrow_table()
    assert runs.schema.equals(RUNS, check_metadata=False)
    assert sum(r["records_erased"] for r in runs.to_pylist()) == total
    for path in state.rglob("*"):
        if path.is_file():
            assert SUBJECT not in path.read_bytes(), path

    # verify by rescan, then the proof
    code, verified = cli_json(capsys, "erase", "verify", "--assume-kafka-defaults", str(logs),
                              "--state-dir", str(state),
                          "--now-ms", str(NOW + 1000), "--json")
    assert code == EXIT_OK
    assert verified["requests"][0]["status"] == "verified"
    assert verified["requests"][0]["verified_records_scanned"] == sum(  # markers aside
        len(b.records()) for s in after.values() for d in s.values() for b in iter_batches(d)
        if not b.is_control)
    code, proof = cli_json(capsys, "erase", "report", "--state-dir", str(state), "--request-id",
                       rid, "--json")
    assert code == EXIT_OK
    assert proof["proof"]["verified_by_rescan"] and proof["proof"]["residual_matches"] == 0
    assert proof["proof"]["records_erased"] == total and proof["proof"]["met_deadline"]
    assert [c["action"] for c in proof["ledger_commits"]] == ["request", "apply", "verify"]
    assert len(proof["apply_runs"]) == 4 and len(proof["verify_runs"]) == 4
    code, status = cli_json(capsys, "erase", "status", "--state-dir", str(state), "--now-ms",
                        str(NOW), "--json")
    assert code == EXIT_OK and status["by_status"]["verified"] == 1 and status["overdue"] == []


def test_erasing_by_header_value_in_one_topic(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    before = _partitions(logs)

    def tagged(r) -> bool:  # type: ignore[no-untyped-def]
        return ("source", b"svc-a") in r.headers

    assert any(tagged(r) for s in before.values() for r in records_of(s).values())
    init_ledger(str(state))
    code, _ = cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", "clicks",
                   "--header", "source=svc-a", "--request-id", "ticket-42", "--now-ms",
                   str(NOW), "--json", "--reason", "art. 17")
    assert code == EXIT_OK
    code, report = cli_json(capsys, "erase", "apply", "--assume-kafka-defaults", str(logs),
                            "--state-dir", str(state),
                        "--now-ms", str(NOW), "--json")
    assert code == EXIT_OK
    after = _partitions(logs)
    for name in before:
        old, new = records_of(before[name]), records_of(after[name])
        if name.startswith("clicks"):
            assert new == {o: r for o, r in old.items() if not tagged(r)}
        else:  # another topic: untouched
            assert after[name] == before[name]
    assert report["requests"][0]["records_erased"] == sum(
        1 for n, s in before.items() if n.startswith("clicks")
        for r in records_of(s).values() if tagged(r))
    assert inspect_problems(logs) == []
    code, _ = cli_json(capsys, "erase", "verify", "--assume-kafka-defaults", str(logs),
                       "--state-dir", str(state), "--json")
    assert code == EXIT_OK


def test_applying_again_erases_nothing_more_and_rewrites_nothing(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    init_ledger(state)
    request = ["erase", "request", "--state-dir", str(state), "--topic", "profiles", "--key",
               SUBJECT.decode(), "--now-ms", str(NOW), "--json", "--reason", "art. 17"]
    assert cli_json(capsys, *request)[0] == EXIT_OK
    _, again = cli_json(capsys, *request)  # the same subject again: the same request
    assert again["added"] == [] and len(again["existing"]) == 1
    apply = ["erase", "apply", "--assume-kafka-defaults", str(logs), "--state-dir", str(state),
             "--now-ms", str(NOW),
             "--json"]
    assert cli_json(capsys, *apply)[0] == EXIT_OK
    digest = tree_digest(logs)
    code, second = cli_json(capsys, *apply)  # nothing pending
    assert code == EXIT_OK and second["requests"] == []
    # a new request for the same, already erased subject rewrites nothing
    assert cli_json(capsys, *request, "--request-id", "again")[0] == EXIT_OK
    code, third = cli_json(capsys, *apply)
    assert code == EXIT_OK, json.dumps(third)
    assert third["requests"] == [{"request_id": "again", "status": "applied",
                                  "records_erased": 0, "superseded_by_erased": 0,
                                  "partitions_rewritten": 0, "segments_rewritten": 0}]
    assert all(p["status"] == "unchanged" for p in topic_lines(third["partitions"]))
    assert tree_digest(logs) == digest


def test_verify_fails_on_a_residual_record_and_status_alerts_when_overdue(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    pdir = logs / "profiles-0"
    backup = {p.name: p.read_bytes() for p in pdir.glob("*.log")}
    init_ledger(str(state))
    assert cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", "profiles",
                "--key", SUBJECT.decode(), "--request-id", "r1", "--now-ms", str(NOW),
                "--deadline-days", "30", "--json", "--reason", "art. 17")[0] == EXIT_OK
    assert cli_json(capsys, "erase", "apply", "--assume-kafka-defaults", str(logs), "--state-dir",
                    str(state), "--now-ms",
                str(NOW), "--json")[0] == EXIT_OK
    first = sorted(backup)[0]  # an old copy of a segment comes back (say, from a backup)
    (pdir / first).write_bytes(backup[first])
    (pdir / first.replace(".log", ".index")).unlink()  # let the loader accept the old bytes
    (pdir / first.replace(".log", ".timeindex")).unlink()
    code, verified = cli_json(capsys, "erase", "verify", "--assume-kafka-defaults", str(logs),
                              "--state-dir", str(state),
                          "--now-ms", str(NOW), "--json")
    assert code == EXIT_REQUESTS_FAILED and verified["status"] == "failed"
    (req,) = verified["requests"]
    assert req["status"] == "failed"
    assert {r["segment_base"] for r in req["residual"]} == {int(first.split(".")[0])}
    code, status = cli_json(capsys, "erase", "status", "--state-dir", str(state), "--now-ms",
                        str(NOW + 31 * 86_400_000), "--json")
    assert code == EXIT_FAILURE
    assert status["overdue"][0]["request_id"] == "r1" and status["by_status"]["failed"] == 1


def test_state_dir_inside_the_log_dir_is_refused(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_digest(logs)
    code, err = cli_json(capsys, "erase", "apply", "--assume-kafka-defaults", str(logs),
                         "--state-dir", str(logs / "ledger"),
                     "--json")
    assert code == EXIT_CONFIG and "overlaps the log dir" in err["message"]
    assert tree_digest(logs) == before


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", [1, 4, 9])
def test_a_crash_mid_apply_leaves_the_request_pending_and_the_next_apply_completes_it(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], crash_at: int) -> None:
    state = tmp_path / "state"
    before = _partitions(logs)
    init_ledger(str(state))
    assert cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", "profiles",
                "--key", SUBJECT.decode(), "--request-id", "r1", "--now-ms", str(NOW),
                "--json", "--reason", "art. 17")[0] == EXIT_OK
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-c", ERASE_APPLY_CRASHER, str(crash_at), "",
                           "erase", "apply", "--assume-kafka-defaults",
                           str(logs), "--state-dir", str(state), "--now-ms", str(NOW), "--json",
                           "--master", "local[1]"], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    code, status = cli_json(capsys, "erase", "status", "--state-dir", str(state), "--now-ms",
                        str(NOW), "--json")
    assert status["by_status"]["pending"] == 1  # the crashed run marked nothing
    assert cli_main(["recover", str(logs)]) == EXIT_OK
    capsys.readouterr()
    for name, segs in _partitions(logs).items():  # each segment exactly old or exactly new
        old = before[name]
        assert sorted(segs) == sorted(old)
        subject = {o for o, r in records_of(old).items() if r.key == SUBJECT}
        for base, data in segs.items():
            kept = {o: r for o, r in records_of({base: data}).items()}
            original = records_of({base: old[base]})
            assert kept in (original, {o: r for o, r in original.items() if o not in subject})
    code, report = cli_json(capsys, "erase", "apply", "--assume-kafka-defaults", str(logs),
                            "--state-dir", str(state),
                        "--now-ms", str(NOW), "--json")
    assert code == EXIT_OK and report["requests"][0]["request_id"] == "r1"
    after = _partitions(logs)
    for name in before:
        assert records_of(after[name]) == {o: r for o, r in records_of(before[name]).items()
                                           if r.key != SUBJECT or not name.startswith("profiles")}
    assert inspect_problems(logs) == []


def _without_run(report: dict, keys: frozenset[str] = frozenset(
        {"run_id", "seconds", "started_at_ms", "finished_at_ms", "applied_at_ms",
         "verified_at_ms", "applied_run_id", "verify_run_id", "log_dir", "state_dir"})) -> object:
    """A report or ledger row without what differs between two runs of the same work (its
    run's id and clock, the copy's path)."""
    if isinstance(report, dict):
        return {k: _without_run(v) for k, v in report.items() if k not in keys}
    if isinstance(report, list):
        return [_without_run(v) for v in report]
    if isinstance(report, str) and report.startswith(("{", "[")):
        try:
            return _without_run(json.loads(report))
        except ValueError:
            return report
    return report


def test_a_run_of_few_requests_matches_and_ends_on_the_driver_as_spark_does(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of few requests holds their rows from the ledger's summary and matches the
    scan's candidates and computes the outcomes on the driver
    (``compactor.erasure.ledger.PendingSummary.rows``); a run of many reads the requests of the
    candidates again and computes by kind or in Spark. The
    same requests (a key in one topic and in every topic, a header in one topic, the same
    value under a header name no record has, a header value equal to a key, a topic no log
    dir holds) erase the same bytes and leave the same reports and ledger either way, apply
    and verify; and the same again when a run of many holds its outcomes by kind and MERGEs
    them by delta-rs (``compactor.spark.stages.KindOutcomes``)."""
    from compactor.erasure import ledger
    from compactor.spark import stages
    from compactor.state import tables as state_tables

    state = tmp_path / "state"
    init_ledger(str(state))
    for args in (("--topic", "profiles", "--key", SUBJECT.decode()),
                 ("--topic", "*", "--key", "key-00000007"),
                 ("--topic", "clicks", "--header", "source=svc-a"),
                 ("--topic", "clicks", "--header", "origin=svc-a"),
                 ("--topic", "profiles", "--header", f"source={SUBJECT.decode()}"),
                 ("--topic", "gone", "--key", SUBJECT.decode())):
        assert cli_json(capsys, "erase", "request", "--state-dir", str(state), *args,
                        "--now-ms", str(NOW), "--json", "--reason", "art. 17")[0] == EXIT_OK
    copies = {}
    for way, limit, by_kind in (("driver", ledger.ROWS_ON_DRIVER, stages.HELD_BY_KIND),
                                ("kinds", 0, stages.HELD_BY_KIND), ("spark", 0, -1)):
        work, ledger_dir = tmp_path / way / "logs", tmp_path / way / "state"
        shutil.copytree(logs, work)
        shutil.copytree(state, ledger_dir)
        monkeypatch.setattr(ledger, "ROWS_ON_DRIVER", limit)
        monkeypatch.setattr(stages, "HELD_BY_KIND", by_kind)
        reports = [cli_json(capsys, "erase", action, "--assume-kafka-defaults", str(work),
                            "--state-dir", str(ledger_dir), "--now-ms", str(NOW), "--json")
                   for action in ("apply", "verify")]
        rows = sorted(DeltaTable(str(ledger_dir / "erasure_requests")).to_pyarrow_table()
                      .to_pylist(), key=lambda r: r["request_id"])
        # the audit trail: the same commits, each with its run's action: the run's a MERGE
        # by delta-rs on the driver's way, by delta-spark on Spark's; the kinds' way rewrites
        # the table's files, a WRITE that replaces them (state.tables.rewrite_rows)
        history = state_tables.history(str(ledger_dir), "erasure_requests")
        commits = [(c["operation"], c.get("action")) for c in history]
        assert [op for op, _ in commits[-2:]] == 2 * ["WRITE" if way == "kinds" else "MERGE"]
        commits = commits[:-2] + [("run", action) for _, action in commits[-2:]]
        engines = {DeltaTable(str(ledger_dir / "erasure_requests")).history(1)[0][
            "engineInfo"].split(":")[0].split("/")[0]}
        assert engines == {"Apache-Spark" if way == "spark" else "delta-rs"}
        copies[way] = (tree_digest(work), [(c, _without_run(r)) for c, r in reports],
                       [_without_run(r) for r in rows], commits)
    driver, kinds, spark = copies["driver"], copies["kinds"], copies["spark"]
    assert driver[0] != tree_digest(logs)  # something was erased
    assert driver[1][0][1]["requests_by_outcome"] == {"applied": 5, "failed": 1}
    assert driver[3][-2:] == [("run", "apply"), ("run", "verify")]
    assert driver == kinds == spark
