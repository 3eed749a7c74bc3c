"""The README's analyst view, run as written (only its state dir path replaced) against a state
dir the commands filled: a compaction, a retention and an erasure. Expected values come from
the commands' JSON reports, not from the queries."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from compactor.errors import EXIT_OK
from compactor.tools.ops.generator import DEFAULT_START_MS
from tests.helpers import cli_json, init_ledger

pytestmark = pytest.mark.spark

DAY = 86_400_000
NOW = DEFAULT_START_MS + 3 * DAY
REPO = Path(__file__).resolve().parents[2]
README_STATE = "/var/lib/kafka-compactor"


def analyst_example() -> str:
    """The first python block after the reference's "The analyst's view"."""
    text = (REPO / "docs" / "reference.md").read_text()
    after = text[text.index("**The analyst's view.**"):]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match is not None
    return match.group(1)


def test_the_readmes_analyst_queries_run_on_a_real_state_dir(
        spark, small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    args = ["--assume-kafka-defaults", str(small_log), "--now-ms", str(NOW), "--json",
            "--state-dir", str(state)]
    code, compacted = cli_json(capsys, "compact", *args, "--config",
                               "cleanup.policy=compact,delete")
    assert code == EXIT_OK
    code, retained = cli_json(capsys, "retain", *args, "--config", "cleanup.policy=delete",
                              "--config", "retention.ms=86400000")
    assert code in (EXIT_OK, 6), retained
    # a request whose deadline passed (filed 40 days before NOW with the default 30)
    init_ledger(str(state))
    assert cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", "*",
                    "--key", "key-00000007", "--now-ms", str(NOW - 40 * DAY),
                    "--json", "--reason", "art. 17")[0] == EXIT_OK
    code, applied = cli_json(capsys, "erase", "apply", *args)
    assert code in (EXIT_OK, 6), applied

    scope: dict[str, Any] = {}
    exec(analyst_example().replace(README_STATE, str(state)), scope)  # noqa: S102

    assert scope["spark"] is spark  # compactor.spark_session() is the active session
    by_status = {r["status"]: r["count"] for r in scope["requests"].groupBy("status")
                 .count().collect()}
    assert by_status == {applied["requests"][0]["status"]: 1}
    # applied is not done: the request is overdue (deadline 10 days before NOW, long ago)
    assert [r.request_id for r in scope["overdue"].collect()] == \
        [applied["requests"][0]["request_id"]]
    expected: dict[str, int] = defaultdict(int)
    for line in compacted["partitions"]:
        if line.get("bytes_in") is not None and line.get("bytes_out") is not None:
            expected[line["topic"]] += line["bytes_in"] - line["bytes_out"]
    for line in retained["partitions"]:
        for v in (line.get("deleted_by_reason") or {}).values():
            expected[line["topic"]] += v["bytes"]
    for line in applied["partitions"]:
        expected[line["topic"]] += line["bytes_in"] - line["bytes_out"]
    got: dict[str, int] = defaultdict(int)
    for r in scope["reclaimed"].collect():
        got[r.topic] += r.bytes_reclaimed or 0
    assert {t: n for t, n in got.items() if n} == {t: n for t, n in expected.items() if n}
    assert any(n > 0 for n in got.values())
    # the audit trail: delta-rs created the table, filed the request and (a run of few
    # requests) merged the apply's outcomes, its metadata in delta-spark's own column
    history = scope["history"].collect()
    operations = [(h.operation, h.engineInfo.split("/")[0].split(":")[0]) for h in history]
    assert operations == [("MERGE", "delta-rs"), ("MERGE", "delta-rs"),
                          ("CREATE TABLE", "delta-rs")]
    merge = history[0]
    assert json.loads(merge.userMetadata) == {"action": "apply",
                                              "run_id": applied["run_id"]}
    # version 1 is the request as filed; today it is applied
    assert [r.status for r in scope["first"].collect()] == ["pending"]
    assert {r.status: r.n for r in scope["then"].collect()} == by_status
