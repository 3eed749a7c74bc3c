"""One of several processes writing the state dir's tables at once (tests of the writer lock):
``python -m tests.delta_race ENGINE STATE_DIR WRITER COMMITS [--storage JSON] [--no-lock]``.

ENGINE ``spark`` is a Spark command: its run rows appended by delta-rs (as every command's
are), then a MERGE of outcomes for its requests by delta-spark in a session of its own; ``rs``
is a command without Spark: delta-rs appends, then ``erase cancel`` of its requests. Each
commit appends rows tagged with the writer and the commit number, so the test can tell a lost
or doubled commit. ``--no-lock`` replaces the state dir's writer lock by nothing (the
experiment that shows what the lock is for; never the product's behaviour).
Prints one JSON line: the writer, its commits and how many it saw refused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

from compactor.erasure import ledger
from compactor.log import storage
from compactor.spark import ledger as spark_ledger
from compactor.state import runs as run_history


def run_row(writer: str, commit: int, n: int) -> dict[str, object]:
    return {"run_id": f"{writer}-{commit}", "command": "race", "log_dir": "/race",
            "topic": writer, "partition": n, "started_at_ms": commit, "finished_at_ms": commit,
            "now_ms": commit, "status": "ok", "report_json": "{}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=("spark", "rs"))
    ap.add_argument("state_dir")
    ap.add_argument("writer")
    ap.add_argument("commits", type=int)
    ap.add_argument("--rows", type=int, default=3)
    ap.add_argument("--requests", default="", help="comma-separated request ids to change")
    ap.add_argument("--storage", default=None, help="StorageSettings options as JSON")
    ap.add_argument("--no-lock", action="store_true")
    args = ap.parse_args(argv)
    if args.storage:
        storage.configure(storage.StorageSettings(options=json.loads(args.storage)))
    if args.no_lock:
        storage.state_dir_lock = lambda *a, **k: contextlib.nullcontext()  # type: ignore
    spark = None
    if args.engine == "spark":
        from compactor.spark.session import get_spark

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        spark = get_spark("local[1]", "delta-race",
                          object_store=storage.delta_options(args.state_dir))
    refused = 0
    started = time.time()
    for commit in range(args.commits):
        rows = [run_row(args.writer, commit, n) for n in range(args.rows)]
        while True:
            try:
                run_history.append_runs(args.state_dir, rows)
                break
            except Exception as err:  # a refused commit: counted, tried again
                refused += 1
                print(f"refused: {type(err).__name__}: {str(err)[:200]}", file=sys.stderr)
                if refused > 50:
                    raise
    ids = [i for i in args.requests.split(",") if i]
    if ids:
        if spark is not None:
            from compactor.schemas.spark import REQUEST_OUTCOME

            outcomes = spark.createDataFrame(
                [{**{f: None for f in REQUEST_OUTCOME.fieldNames()}, "request_id": i,
                  "outcome": "update", "expected_status": "pending", "status": "applied",
                  "run_id": args.writer, "places": "{}"} for i in ids], REQUEST_OUTCOME)
            spark_ledger.merge_outcomes(args.state_dir, spark, outcomes, ("status", "run_id"),
                                        {"action": "apply", "run_id": args.writer},
                                        read_at=-1)  # a DataFrame's MERGE reads no version
        else:
            ledger.change_status(args.state_dir, ids, action="cancel",
                                 allowed=frozenset({"pending"}), status="cancelled",
                                 reason=f"by {args.writer}", now_ms=1)
    print(json.dumps({"writer": args.writer, "commits": args.commits, "refused": refused,
                      "seconds": round(time.time() - started, 2)}))
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown racing the JVM's or Arrow's threads


if __name__ == "__main__":
    main()
