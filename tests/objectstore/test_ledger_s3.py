"""The erasure ledger's Delta tables on S3: concurrent writers from separate processes commit
one at a time: each waits for the state dir's writer lease (and delta-rs writes each commit
with ``If-None-Match: *``, ``conditional_put=etag``, besides). Should a commit still be refused,
the loser gets a clear LEDGER_ERROR, nothing is lost or doubled, and rerunning it succeeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable

from compactor.errors import EXIT_OK
from compactor.log import storage
from compactor.tools.fixtures.s3_server import S3Server
from tests.objectstore.conftest import fresh_url, settings_of

REPO = Path(__file__).resolve().parents[2]


def _compactor(server: S3Server, *args: str) -> subprocess.Popen:
    # credentials and endpoint from the standard AWS environment, as an operator would set them
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(server.env)
    return subprocess.Popen([sys.executable, "-m", "compactor.cli", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_requests_commit_one_at_a_time_and_losers_can_rerun(
        s3_server: S3Server) -> None:
    ledger = fresh_url("ledger")
    init = _compactor(s3_server, "erase", "init", "--state-dir", ledger)
    assert init.wait() == EXIT_OK, init.communicate()
    keys = [f"user-{i}" for i in range(4)]
    pending = list(keys)
    rounds = 0
    losers_seen = 0
    while pending:
        rounds += 1
        assert rounds <= 6, f"still failing after {rounds - 1} rounds: {pending}"
        procs = {k: _compactor(s3_server, "erase", "request", "--state-dir", ledger, "--topic",
                               "accounts", "--key", k, "--now-ms", "1000", "--json",
                               "--reason", "art. 17")
                 for k in pending}
        pending = []
        for key, proc in procs.items():
            out, err = proc.communicate()
            if proc.returncode != EXIT_OK:
                assert "LEDGER_ERROR" in out and "run the command again" in err, (out, err)
                losers_seen += 1
                pending.append(key)
    listed = _compactor(s3_server, "erase", "list", "--state-dir", ledger, "--json")
    out, err = listed.communicate()
    assert listed.returncode == EXIT_OK, err
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    requests = [r for row in rows for r in (row.get("requests") or [row])]
    assert len({r["request_id"] for r in requests}) == len(keys)
    # each winner made exactly one commit: the table's versions are 0 (create) + one per key
    before = storage.settings()
    storage.configure(settings_of(s3_server))
    try:
        table = DeltaTable(f"{ledger}/erasure_requests",
                           storage_options=storage.delta_options(ledger))
        assert table.version() == len(keys)
        assert table.to_pyarrow_dataset().count_rows() == len(keys)
    finally:
        storage.configure(before)
    print(f"{losers_seen} conflicting commits refused and rerun")


def test_outcomes_by_kind_rewrite_the_table_on_s3_as_on_a_local_disk(
        s3_storage: S3Server, tmp_path: Path) -> None:
    """A run of many's outcomes by kind rewrite the requests table through delta-rs's object
    store on S3 (``state.tables.rewrite_rows``) and leave the rows the same rewrite leaves on
    a local copy; the files it replaced stay in the table's history, unread."""
    from compactor.erasure import ledger, rules
    from compactor.state import tables as state_tables

    def run(state: str) -> list[dict]:
        state_tables.init(state)
        for topic in ("accounts", "orders"):
            ledger.add_requests(state, [r for i in range(6) for r in rules.new_requests(
                topic=topic, digests=[rules.subject_digest(f"{topic}-{i}".encode())],
                selector="key", header_name=None, reason="test", now_ms=1, deadline_days=30,
                request_id=f"{topic}-{i}")])
        version = state_tables.table_version(state, "erasure_requests")
        assert version is not None
        base = {"outcome": "update", "expected_status": "pending", "run_id": "run-1"}
        updated = ledger.merge_kinds(
            state, [{**base, "request_id": "orders-2", "status": "applied",
                     "records_erased": 3}],
            [({"topic": "accounts", "status": "pending", "places": None},
              {**base, "status": "applied", "records_erased": 0})],
            ("status", "run_id", "records_erased"), {"action": "apply", "run_id": "run-1"},
            read_at=version)
        assert updated == 7
        table = state_tables.open_table(f"{state}/erasure_requests")
        assert table.version() == version + 1
        return sorted(state_tables.read_all(table).to_pylist(), key=lambda r: r["request_id"])

    on_s3 = run(fresh_url("kinds-state"))
    assert on_s3 == run(str(tmp_path / "state"))
    assert {r["request_id"]: r["status"] for r in on_s3 if r["status"] == "applied"}.keys() == {
        *(f"accounts-{i}" for i in range(6)), "orders-2"}
