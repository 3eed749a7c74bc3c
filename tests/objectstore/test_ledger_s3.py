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
