"""The published report schema, the code's registries and the reference's tables list the same
statuses, reasons and error codes; the schema rejects what a report must never hold."""

from __future__ import annotations

import copy
import inspect
import json
import re
from pathlib import Path

import jsonschema
import pytest

import compactor.errors as errors
from compactor.cleaner import planning
from compactor.cleaner.rebatch import DROP_REASONS
from compactor.cleaner.rewrite import PATHS
from compactor.config import SOURCES
from compactor.maintenance.report import REASONS, ErasureOutcome, Outcome, RunStatus
from compactor.retention import RetentionReason

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "schemas" / "report.schema.json").read_text())
DEFS = SCHEMA["$defs"]
REFERENCE = (REPO / "docs" / "reference.md").read_text()


def _error_codes() -> set[str]:
    return {cls.code for _, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, errors.CompactorError)}


def test_schema_is_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_reasons_and_error_codes_match_the_code() -> None:
    assert set(DEFS["reason"]["anyOf"][0]["enum"]) == set(REASONS)
    assert set(DEFS["error_code"]["enum"]) == _error_codes()
    assert set(DEFS["round_partition"]["properties"]["dropped"]["properties"]) == set(
        DROP_REASONS)
    assert set(DEFS["retention_partition"]["properties"]["deleted_by_reason"]["properties"]) == {
        r.value for r in RetentionReason}
    assert set(DEFS["configs"]["additionalProperties"]["properties"]["source"]["enum"]) == set(
        SOURCES)
    statuses = (set(DEFS["round_partition"]["properties"]["status"]["enum"])
                | set(DEFS["retention_partition"]["properties"]["status"]["enum"]))
    assert statuses == {o.value for o in Outcome}
    assert set(DEFS["erase_partition"]["properties"]["status"]["enum"]) == {
        o.value for o in ErasureOutcome}
    assert set(DEFS["head"]["properties"]["status"]["enum"]) == {s.value for s in RunStatus}
    writers = DEFS["round_partition"]["properties"]["writers"]["additionalProperties"]["enum"]
    assert set(writers) == set(PATHS)
    round_path = DEFS["round_partition"]["properties"]
    assert set(round_path["round_path"]["enum"]) == {planning.ONE_TASK, planning.OFFSET_MAP}
    assert set(round_path["round_path_reason"]["enum"]) == set(planning.ROUND_PATH_REASONS)


def test_readme_lists_every_status_reason_and_error_code() -> None:
    section = REFERENCE[REFERENCE.index("## Reports"):]
    listed = set(re.findall(r"^\| `([A-Za-z_]+)`", section, re.M))
    listed |= set(re.findall(r"^\| `[a-z_]+` / `([a-z_]+)`", section, re.M))
    listed |= set(re.findall(r"^\| `[a-z_]+` / `[a-z_]+` / `([a-z_]+)`", section, re.M))
    erase = {o.value for o in ErasureOutcome}
    assert {o.value for o in Outcome} | erase | set(REASONS) | _error_codes() <= listed


@pytest.mark.parametrize("mutate", [
    lambda r: r["partitions"][0].update(status="done"),
    lambda r: r["partitions"][0].update(reason="because"),
    lambda r: r["partitions"][0].update(records_out=-1),
    lambda r: r["partitions"][0]["dropped"].update(mystery=1),
    lambda r: r.pop("now_ms"),
    lambda r: r["partitions"][0].update(error={"code": "OOPS", "message": "m", "path": None,
                                               "position": None, "base_offset": None,
                                               "remedy": None}),
])
def test_the_schema_rejects_what_a_report_never_holds(mutate) -> None:  # type: ignore[no-untyped-def]
    report = {"type": "report", "command": "compact", "log_dir": "/l", "now_ms": 1,
              "partitions_by_status": {"cleaned": 1}, "stages_s": {"commit": 0.1},
              "status": "ok", "recovered_partitions": 0, "cluster": None, "foreign": [],
              "partitions": [{
                  "topic": "t", "partition": 0, "status": "cleaned", "reason": "clean",
                  "config": None, "segments_before": 2, "segments_after": 1,
                  "records_in": 10, "records_out": 4, "bytes_in": 100, "bytes_out": 40,
                  "batches_in": 2, "batches_out": 1,
                  "dropped": {r: 0 for r in DROP_REASONS}, "stages_s": {"commit": 0.1}}]}
    jsonschema.validate(report, SCHEMA, cls=jsonschema.Draft202012Validator)
    bad = copy.deepcopy(report)
    mutate(bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA, cls=jsonschema.Draft202012Validator)
