"""The state dir's tables under racing writers: delta-spark and delta-rs in separate processes
(``tests/delta_race.py``), on a local disk here and on S3 in
``tests/objectstore/test_delta_writers_s3.py``. No commit is lost or doubled, every change
lands, and the tables stay at the protocol both libraries read and write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from compactor.erasure import ledger, rules
from compactor.log import storage
from compactor.schemas.delta import ERASURE_REQUESTS_TABLE, RUNS_TABLE
from compactor.state import tables as state_tables

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
COMMITS, ROWS = 4, 3
#: writer -> (engine, the requests it changes: delta-spark MERGEs them applied, delta-rs
#: cancels them)
WRITERS = {"spark-1": ("spark", ["r0", "r1"]), "spark-2": ("spark", ["r2", "r3"]),
           "rs-1": ("rs", ["r4", "r5"]), "rs-2": ("rs", ["r6"]), "rs-3": ("rs", ["r7"])}


def start_writers(state_dir: str, storage_options: dict[str, str] | None = None,
                  no_lock: bool = False) -> list[subprocess.Popen[str]]:
    extra = (["--storage", json.dumps(storage_options)] if storage_options else []) + (
        ["--no-lock"] if no_lock else [])
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    return [subprocess.Popen(
        [sys.executable, "-m", "tests.delta_race", engine, state_dir, writer, str(COMMITS),
         "--rows", str(ROWS), "--requests", ",".join(ids), *extra],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for writer, (engine, ids) in WRITERS.items()]


def seed(state_dir: str) -> None:
    """The tables, created by delta-rs (as every state dir's are), with 8 pending requests."""
    state_tables.init(state_dir)
    ledger.add_requests(state_dir, [r for i in range(8) for r in rules.new_requests(
        topic="accounts", digests=[rules.subject_digest(f"user-{i}".encode())], selector="key",
        header_name=None, reason="race", now_ms=1, deadline_days=30, request_id=f"r{i}")])


def race(state_dir: str, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    """Seed, run every writer at once, and check what the tables hold; returns the commits
    of both tables (delta-rs's history) for further checks."""
    seed(state_dir)
    procs = start_writers(state_dir, storage_options)
    outputs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    opts = storage.delta_options(state_dir)
    runs = DeltaTable(storage.join(state_dir, RUNS_TABLE), storage_options=opts)
    rows = runs.to_pyarrow_table().to_pylist()
    per_commit = Counter(r["run_id"] for r in rows)
    # every commit of every writer, exactly once, whole
    assert per_commit == {f"{w}-{c}": ROWS for w in WRITERS for c in range(COMMITS)}
    history = runs.history()
    appends = [h for h in history if h["operation"] in ("WRITE", "append")]
    assert len(appends) == len(WRITERS) * COMMITS
    assert sorted(h["version"] for h in history) == list(range(len(history)))
    requests = DeltaTable(storage.join(state_dir, ERASURE_REQUESTS_TABLE),
                          storage_options=opts)
    status = {r["request_id"]: (r["status"], r["run_id"])
              for r in requests.to_pyarrow_table().to_pylist()}
    for writer, (engine, ids) in WRITERS.items():
        for i in ids:
            assert status[i] == (("applied", writer) if engine == "spark"
                                 else ("cancelled", None)), (i, status[i])
    engines = Counter(h.get("engineInfo", h.get("clientVersion", "")).split("/")[0]
                      for h in history + requests.history())
    assert engines["Apache-Spark"] > 0 and any("delta-rs" in e for e in engines), engines
    for table in (runs, requests):  # what both libraries read and write
        protocol = table.protocol()
        assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
        assert not protocol.reader_features and not protocol.writer_features
    return {"runs": history, "requests": requests.history()}


def test_racing_delta_spark_and_delta_rs_writers_lose_nothing_on_a_local_disk(
        spark, tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    race(state)
    # and delta-spark reads what both wrote, at the same protocol
    assert spark.read.format("delta").load(f"{state}/runs").count() == \
        len(WRITERS) * COMMITS * ROWS
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{state}/erasure_requests`").first()
    assert (detail.minReaderVersion, detail.minWriterVersion) == (1, 2)
    assert dict(detail.properties) == state_tables.AUDIT_PROPERTIES
    statuses = {r.request_id: r.status for r in
                spark.read.format("delta").load(f"{state}/erasure_requests").collect()}
    assert Counter(statuses.values()) == {"applied": 4, "cancelled": 4}
