"""Issue 51: nothing fools the erasure proof or the recovery. Each test is one way an adversary
(or a careless operator) made ``erase verify`` say ``verified`` while the subject was still on
disk, or made recovery trust a file it should not; each failed on the code before its fix.

A request must end either with the subject on disk and the request not ``verified``, or with
the subject gone from everything a broker would serve. Records are read back with
kafka-python (an independent parser)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.cli import main as cli_main
from compactor.codec.segment import iter_batches
from compactor.errors import EXIT_CONFIG, EXIT_CORRUPT, EXIT_OK, EXIT_PARTIAL, EXIT_REQUESTS_FAILED
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import cli_json, segment_bytes, tree_digest

pytestmark = pytest.mark.spark

NOW = DEFAULT_START_MS + 3 * 86_400_000
GEN = GeneratorConfig(
    topics=("profiles", "__orders"), partitions=1, records_per_partition=1200,
    distinct_keys=40, segment_bytes=10 * 1024, transactional_producers=0, header_ratio=0.3,
    tombstone_ratio=0.1, zipf_exponent=0.0, seed=51, internal_topics=("__consumer_offsets",),
    topic_configs={"profiles": {"cleanup.policy": "compact"}})
SUBJECT = b"key-00000005"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("adversary") / "logs"
    generate(str(logs), GEN)
    return logs


@pytest.fixture()
def logs(template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    capsys.readouterr()
    dest = tmp_path / "logs"
    shutil.copytree(template, dest)
    return dest


def subject_records(data: bytes) -> int:
    """How many records of :data:`SUBJECT` a segment's bytes hold (kafka-python reads them)."""
    from kafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    n = 0
    while records.has_next():
        batch = records.next_batch()
        if not batch.is_control_batch:
            n += sum(1 for r in batch if r.key == SUBJECT)
    return n


def subject_bases(pdir: Path) -> list[int]:
    """The base offsets of the segments of ``pdir`` that hold the subject."""
    return [base for base, data in segment_bytes(pdir).items() if subject_records(data)]


def erase(capsys: pytest.CaptureFixture[str], action: str, logs: Path, state: Path,
          *args: str) -> tuple[int, dict]:
    return cli_json(capsys, "erase", action, "--assume-kafka-defaults", str(logs),
                    "--state-dir", str(state), "--now-ms", str(NOW), "--json", *args)


def request(capsys: pytest.CaptureFixture[str], state: Path, topic: str,
            *args: str) -> str:
    code, out = cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", topic,
                         "--key", SUBJECT.decode(), "--reason", "ticket 51", "--now-ms",
                         str(NOW), "--json", *args)
    assert code == EXIT_OK, out
    (rid,) = out["added"] + out["existing"]
    return rid


def statuses(state: Path) -> dict[str, str]:
    table = DeltaTable(str(state / "erasure_requests")).to_pyarrow_table(
        columns=["request_id", "status"])
    return dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))


def init(capsys: pytest.CaptureFixture[str], state: Path) -> None:
    assert cli_main(["erase", "init", "--state-dir", str(state)]) == EXIT_OK
    capsys.readouterr()


def refused_apply(capsys: pytest.CaptureFixture[str], logs: Path, state: Path,
                  code: str) -> tuple[str, dict]:
    """A request for the subject on ``profiles``, and an apply that refuses ``profiles-0``
    with the error ``code`` (exit 6, the request still pending): its id and the line."""
    init(capsys, state)
    rid = request(capsys, state, "profiles")
    exit_code, report = erase(capsys, "apply", logs, state)
    assert exit_code == EXIT_PARTIAL, report
    (line,) = [p for p in report["partitions"] if p["dir"] == "profiles-0"]
    assert line["status"] == "corrupt" and line["error"]["code"] == code, line
    assert statuses(state) == {rid: "pending"}
    return rid, line


# -- 1. links --------------------------------------------------------------------------------


def test_a_symlinked_segment_is_refused_by_apply_verify_compact_and_retain(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix the swap replaced the link and never touched the file it pointed to:
    apply and verify exited 0 with the request verified while the target kept the subject."""
    pdir = logs / "profiles-0"
    base = subject_bases(pdir)[0]
    name = f"{base:020d}.log"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (pdir / name).rename(outside / name)
    (pdir / name).symlink_to(outside / name)
    target_before = (outside / name).read_bytes()
    state = tmp_path / "state"
    rid, line = refused_apply(capsys, logs, state, "LINKED_FILE")
    assert line["error"]["path"].endswith(name) and line["error"]["base_offset"] == base
    assert (pdir / name).is_symlink() and (outside / name).read_bytes() == target_before
    code, report = erase(capsys, "verify", logs, state)
    assert statuses(state) == {rid: "pending"}
    # compaction and retention refuse the partition the same way, and change nothing in it
    before = tree_digest(pdir)
    code, report = cli_json(capsys, "compact", "--assume-kafka-defaults", str(logs), "--now-ms",
                            str(NOW), "--json")
    assert code == EXIT_PARTIAL
    (line,) = [p for p in report["partitions"] if p["topic"] == "profiles"]
    assert line["status"] == "corrupt" and line["reason"] == "LINKED_FILE"
    code, report = cli_json(capsys, "retain", str(logs), "--assume-kafka-defaults",
                            "--config", "retention.ms=3600000", "--now-ms", str(NOW), "--json")
    (line,) = [p for p in report["partitions"] if p["topic"] == "profiles"]
    assert line["status"] == "corrupt"
    assert tree_digest(pdir) == before and (pdir / name).is_symlink()


def test_a_hard_linked_segment_is_refused_by_erasure_only(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second hard link keeps the subject under the other name after the swap."""
    pdir = logs / "profiles-0"
    base = subject_bases(pdir)[0]
    other = tmp_path / "backup.log"
    os.link(pdir / f"{base:020d}.log", other)
    state = tmp_path / "state"
    rid, line = refused_apply(capsys, logs, tmp_path / "state", "LINKED_FILE")
    assert "2 hard links" in line["error"]["message"] and subject_records(other.read_bytes())
    # with the other name gone, the same request is applied and verified
    other.unlink()
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    assert erase(capsys, "verify", logs, state)[0] == EXIT_OK
    assert statuses(state) == {rid: "verified"} and not subject_bases(pdir)


# -- 2. '*' covers every application topic, whatever its name --------------------------------


def test_every_topic_request_erases_a_user_topic_named_with_two_underscores(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix ``*`` skipped every topic whose name starts with ``__``: ``__orders``
    kept the subject and the request ended verified."""
    orders = logs / "__orders-0"
    assert subject_bases(orders)
    offsets = segment_bytes(logs / "__consumer_offsets-0")
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "*")
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    assert erase(capsys, "verify", logs, state)[0] == EXIT_OK
    assert statuses(state) == {rid: "verified"}
    assert not subject_bases(orders) and not subject_bases(logs / "profiles-0")
    assert segment_bytes(logs / "__consumer_offsets-0") == offsets  # Kafka's own: not covered


# -- 3. leftovers of an interrupted swap ------------------------------------------------------


def test_verify_settles_an_interrupted_swap_before_it_scans(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``.log.swap`` that a broker's loader would promote on start-up holds the subject:
    before the fix verify scanned only the ``.log`` files and said verified."""
    pdir = logs / "profiles-0"
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "profiles")
    base = subject_bases(pdir)[-1]
    original = (pdir / f"{base:020d}.log").read_bytes()
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    assert not subject_bases(pdir)
    # the segment as it was, left as an interrupted swap's new segment
    (pdir / f"{base:020d}.log.swap").write_bytes(original)
    code, report = erase(capsys, "verify", logs, state)
    # settled as a broker's loader settles it: the swap is the segment now, its records found
    assert not (pdir / f"{base:020d}.log.swap").exists() and subject_bases(pdir) == [base]
    (line,) = [p for p in report["partitions"] if p["dir"] == "profiles-0"]
    assert line["status"] == "residual" and line["residual_matches"] > 0
    assert code == EXIT_REQUESTS_FAILED and statuses(state)[rid] == "failed"


# -- 8. a swap that is not one ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["empty", "earlier_segment"])
def test_a_swap_that_cannot_be_a_cleaned_copy_is_refused_and_nothing_changes(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """Before the fix an empty ``.log.swap`` replaced its segment (3,005 records gone, exit
    0) and a copy of another segment renamed as a swap deleted the segments in its range."""
    pdir = logs / "profiles-0"
    bases = sorted(segment_bytes(pdir))
    target = bases[1]
    swap = pdir / f"{target:020d}.log.swap"
    swap.write_bytes(b"" if kind == "empty" else (pdir / f"{bases[0]:020d}.log").read_bytes())
    before = tree_digest(logs)
    code, report = cli_json(capsys, "recover", str(logs), "--json")
    assert code in (EXIT_CORRUPT, EXIT_PARTIAL), report
    assert tree_digest(logs) == before
    _, line = refused_apply(capsys, logs, tmp_path / "state", "SWAP_RECOVERY")
    assert line["error"]["base_offset"] == target
    assert {k: v for k, v in tree_digest(logs).items() if k.startswith("profiles-0/")} == {
        k: v for k, v in before.items() if k.startswith("profiles-0/")}
    assert [b for b in iter_batches(segment_bytes(pdir)[target])]


def test_a_state_dir_without_a_ledger_takes_no_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix ``erase request --state-dir WRONG`` created a new ledger there and
    exited 0: nothing that reads the real ledger would ever apply it."""
    code, out = cli_json(capsys, "erase", "request", "--state-dir", str(tmp_path / "wrong"),
                         "--topic", "profiles", "--key", "k", "--reason", "r", "--json")
    assert code == EXIT_CONFIG and "erase init" in out["remedy"]
    assert not (tmp_path / "wrong").exists()


def test_a_request_for_a_topic_the_cluster_lacks_is_refused_whenever_it_can_be_known(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """From the broker's properties, or from the topics of the runs the state dir recorded:
    a typo must not wait for ever with its deadline never alerted."""
    state = tmp_path / "state"
    init(capsys, state)
    props = tmp_path / "server.properties"
    props.write_text(f"node.id=1\nlog.dirs={logs}\n")

    def refused(*args: str) -> dict:
        code, out = cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic",
                             "profils", "--key", "k", "--reason", "r", "--json", *args)
        assert code == EXIT_CONFIG, out
        return out

    assert "did you mean 'profiles'" in refused("--server-properties", str(props))["message"]
    # no run recorded yet: nothing to check against, the request is taken
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", "profils",
                     "--key", "k", "--reason", "r", "--request-id", "typo"]) == EXIT_OK
    assert cli_main(["compact", "--assume-kafka-defaults", str(logs), "--now-ms", str(NOW),
                     "--state-dir", str(state)]) == EXIT_OK
    capsys.readouterr()
    assert "did you mean 'profiles'" in refused()["message"]
    assert request(capsys, state, "profiles")  # a topic a run saw is taken


# -- 4. a tampered or rotted ledger row --------------------------------------------------------


def _tamper(state: Path, rid: str, **columns: str) -> None:
    DeltaTable(str(state / "erasure_requests")).update(
        predicate=f"request_id = '{rid}'", updates=columns)


@pytest.mark.parametrize(("how", "action"), [("digest", "apply"), ("digest", "verify"),
                                             ("digest_without_integrity", "apply")])
def test_a_tampered_ledger_row_is_a_ledger_error_and_nothing_is_erased(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str,
        action: str) -> None:
    """Before the fix one changed character of ``subject_sha256`` passed every ledger check:
    apply erased nothing and verify said verified (here the row is changed before the apply,
    or after it and before the verify)."""
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "profiles")
    if action == "verify":
        assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    (row,) = DeltaTable(str(state / "erasure_requests")).to_pyarrow_table().to_pylist()
    digest = row["subject_sha256"]
    changed = ("0" if digest[0] != "0" else "1") + digest[1:]
    # a row of a ledger written before the integrity digest existed is checked by its id
    _tamper(state, rid, subject_sha256=f"'{changed}'",
            **({"integrity": "NULL"} if how == "digest_without_integrity" else {}))
    before, ledger_before = tree_digest(logs), tree_digest(state)
    code, out = erase(capsys, action, logs, state)
    assert code == 1 and out["code"] == "LEDGER_ERROR", out
    assert rid in out["message"] and "erasure_requests" in out["path"]
    code, out = cli_json(capsys, "erase", "status", "--state-dir", str(state), "--json")
    assert code == 1 and out["code"] == "LEDGER_ERROR" and rid in out["message"]
    assert tree_digest(logs) == before
    assert {k: v for k, v in tree_digest(state).items() if "_writers.lock" not in k} == {
        k: v for k, v in ledger_before.items() if "_writers.lock" not in k}
    assert statuses(state)[rid] == ("pending" if action == "apply" else "applied")


def test_a_value_that_is_not_utf8_in_a_ledger_file_is_a_ledger_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix ``erase status`` and ``list`` ended with INTERNAL_ERROR
    UnicodeDecodeError. The rotted value is a request's ``reason`` (no integrity field:
    the row's digest still matches): ``list`` and ``report``, which show it, refuse the
    ledger; ``status``, which reads only the columns it reports, answers."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from compactor.erasure.rules import request_integrity

    state = tmp_path / "state"
    init(capsys, state)
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", "t", "--key", "k",
                     "--reason", "r"]) == EXIT_OK
    table = DeltaTable(str(state / "erasure_requests"))
    rows = table.to_pyarrow_table()
    raw = pa.Array.from_buffers(pa.string(), 1, [None, pa.array([0, 2], pa.int32()).buffers()[1],
                                                 pa.py_buffer(b"\xff\xfe")])
    bad = rows.set_column(rows.schema.get_field_index("reason"), "reason", raw)
    bad = bad.set_column(0, "request_id", pa.array(["rotted"]))
    row = {k: bad.column(k)[0].as_py() for k in bad.schema.names if k != "reason"}
    bad = bad.set_column(bad.schema.get_field_index("integrity"), "integrity",
                         pa.array([request_integrity(row)]))
    write_deltalake(table, bad, mode="append")
    capsys.readouterr()
    for command in (["list"], ["report", "--request-id", "rotted"]):
        code, out = cli_json(capsys, "erase", *command, "--state-dir", str(state), "--json")
        assert code == 1 and out["code"] == "LEDGER_ERROR", out
        assert "UnicodeDecodeError" in out["message"] and "restore" in out["remedy"]
    code, out = cli_json(capsys, "erase", "status", "--state-dir", str(state), "--json")
    assert code == EXIT_OK and out["by_status"]["pending"] == 2, out


# -- 5. a cancel while a run runs --------------------------------------------------------------


@pytest.mark.parametrize("action", ["apply", "verify"])
def test_a_cancel_committed_during_a_run_is_reported_and_recorded_as_such(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    """Before the fix the MERGE rightly left the cancelled row alone, but the report said
    ``applied`` and the records erased for it appeared nowhere in the audit trail."""
    from compactor.erasure import ledger
    from compactor.maintenance import erase as erase_module

    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "profiles")
    other = request(capsys, state, "__orders")
    if action == "verify":
        assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    real = erase_module._record

    def cancel_first(state_dir: str, *args: object, **kwargs: object) -> object:
        # the operator's `erase cancel`, committed after the run read the requests and before
        # it records them (the run holds no lock while it scans and rewrites)
        ledger.change_status(state_dir, [rid], action="cancel",
                             allowed=frozenset({"pending", "applied"}), status="cancelled",
                             reason="withdrawn by the subject", now_ms=NOW)
        return real(state_dir, *args, **kwargs)

    monkeypatch.setattr(erase_module, "_record", cancel_first)
    code, report = erase(capsys, action, logs, state)
    entry = {r["request_id"]: r for r in report["requests"]}
    assert entry[rid]["status"] == "cancelled" and "changed_during_run" in entry[rid]
    assert entry[other]["status"] == ("applied" if action == "apply" else "verified")
    assert report["requests_by_outcome"] == {
        "changed_during_run": 1, ("applied" if action == "apply" else "verified"): 1}
    moved = report["changed_during_run"]
    assert moved["count"] == 1 and moved["requests"][0]["request_id"] == rid
    assert statuses(state) == {rid: "cancelled", other: entry[other]["status"]}
    assert not subject_bases(logs / "profiles-0")  # erased anyway: the ledger must say so
    runs = DeltaTable(str(state / "runs")).to_pyarrow_table().to_pylist()
    mine = [r for r in runs if r["run_id"] == report["run_id"]]
    assert mine and all(rid in (r["requests_changed"] or "") for r in mine)
    code, proof = cli_json(capsys, "erase", "report", "--state-dir", str(state), "--request-id",
                           rid, "--json")
    (run,) = proof["changed_during_runs"]
    assert run["run_id"] == report["run_id"] and run["status"] == "cancelled"
    if action == "apply":
        assert run["records_erased"] > 0 and "erased anyway" in entry[rid]["changed_during_run"]


# -- 7. two log dirs of one broker with one directory.id ---------------------------------------


def test_two_log_dirs_with_one_directory_id_are_refused_before_anything_changes(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix the second dir's apply was skipped with "ok": the request counted as
    applied at that place already."""
    second = tmp_path / "logs2"
    generate(str(second), GeneratorConfig(topics=("accounts",), partitions=1,
                                          records_per_partition=300, seed=52,
                                          metadata_log=False))
    shutil.copyfile(logs / "meta.properties", second / "meta.properties")
    props = tmp_path / "server.properties"
    props.write_text(f"node.id=1\nlog.dirs={logs},{second}\n")
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "*")
    before = {**tree_digest(logs), **{f"2/{k}": v for k, v in tree_digest(second).items()}}
    for args in (["--server-properties", str(props)],
                 ["--server-properties", str(props), str(second)]):
        code, out = cli_json(capsys, "erase", "apply", "--assume-kafka-defaults",
                             "--state-dir", str(state), "--now-ms", str(NOW), "--json", *args)
        assert code == EXIT_CONFIG and "directory.id" in out["message"], out
    assert {**tree_digest(logs), **{f"2/{k}": v for k, v in tree_digest(second).items()}} == \
        before
    assert statuses(state) == {rid: "pending"}
