"""The erasure statuses live in one place (``compactor.erasure.status``): the ledger's values,
the report schema's enum, the dry run's words and the reference all agree with it, and the
outcome functions only ever make the moves its transitions allow. A request row's integrity
digest catches a changed field. Expected values are written out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor.erasure import outcomes
from compactor.erasure.rules import STATUSES, new_requests, request_integrity, row_problem
from compactor.erasure.status import (
    APPLICABLE,
    CANCELLABLE,
    DONE,
    RETRYABLE,
    TRANSITIONS,
    VERIFIABLE,
    RequestStatus,
    report_statuses,
)

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "schemas" / "report.schema.json").read_text())


def test_the_statuses_and_the_sets_commands_read() -> None:
    assert STATUSES == ("pending", "applied", "partially_verified", "verified",
                        "verified_local_only", "failed", "cancelled")
    assert APPLICABLE == {"pending", "applied", "partially_verified"}
    assert VERIFIABLE == {"applied", "partially_verified"}
    assert RETRYABLE == {"failed"}
    assert CANCELLABLE == {"pending", "applied", "partially_verified", "failed"}
    assert DONE == {"verified", "verified_local_only", "cancelled"}
    # nothing leaves a final status
    assert not any(s in DONE for moves in TRANSITIONS.values() for s in moves)


def test_the_report_schema_enum_is_the_statuses_and_the_dry_run_words() -> None:
    enum = SCHEMA["$defs"]["erase_request"]["properties"]["status"]["enum"]
    assert enum == report_statuses()
    assert set(enum) == set(STATUSES) | {"would_be_applied", "would_fail", "would_stay_pending"}
    assert RequestStatus.PARTIALLY_VERIFIED.dry_run == "would_be_applied"


def test_the_reference_names_every_status() -> None:
    reference = (REPO / "docs" / "reference.md").read_text()
    assert all(f"`{s}`" in reference for s in STATUSES)


PLACE = {"node_id": 1, "directory_id": "d1", "log_dir": "/logs"}


def _row(status: str, topic: str = "t") -> dict:
    return {"request_id": "r", "topic": topic, "status": status, "places": None,
            "tombstones_left": None}


@pytest.mark.parametrize("status", sorted(APPLICABLE))
@pytest.mark.parametrize("unknown", [False, True])
def test_an_apply_only_makes_allowed_moves(status: str, unknown: bool) -> None:
    ctx = outcomes.ApplyContext(run_id="a", now_ms=1, place=PLACE, key="node 1 dir d1",
                                dirs=[], unknown_topics={"t": "no such topic"} if unknown else {},
                                matched={})
    out = outcomes.applied_update(_row(status), ctx)
    assert RequestStatus(status).may_become(RequestStatus(out["status"]), "apply")


@pytest.mark.parametrize("status", sorted(VERIFIABLE))
@pytest.mark.parametrize(("segments", "residual", "tiered", "replicas"), [
    (3, [], False, []), (3, [], True, []), (3, [{"offset": 1}], False, []), (0, [], False, None),
    (3, [], False, [{"partition": "t-0", "node_id": 2, "directory_id": None}])])
def test_a_verify_only_makes_allowed_moves(status: str, segments: int, residual: list,
                                           tiered: bool, replicas: list | None) -> None:
    ctx = outcomes.VerifyContext(
        run_id="v", now_ms=1, place=PLACE, key="node 1 dir d1",
        dirs=[outcomes.DirState("t-0", "t", "live", False, segments=segments, records=9,
                                tiered=tiered)],
        residual={"r": residual} if residual else {}, replicas={"t": replicas})
    out = outcomes.verified_update(_row(status), ctx)
    if out["outcome"] == outcomes.UPDATE:
        assert RequestStatus(status).may_become(RequestStatus(out["status"]), "verify")


def test_a_request_rows_integrity_catches_any_changed_field() -> None:
    (request,) = new_requests(topic="t", digests=["ab" * 32], selector="key", header_name=None,
                              reason="r", now_ms=5, deadline_days=30, request_id=None)
    row = {"request_id": request.request_id, "topic": "t", "selector": "key",
           "header_name": None, "subject_sha256": "ab" * 32, "leave_tombstone": False,
           "requested_at_ms": 5, "deadline_ms": 5 + 30 * 86_400_000, "status": "pending",
           "integrity": request.integrity}
    assert request_integrity(row) == request.integrity and row_problem(row) is None
    for field, value in (("subject_sha256", "ac" + "ab" * 31), ("topic", "u"),
                         ("leave_tombstone", True), ("deadline_ms", 6),
                         ("request_id", "er-00000000000000000000")):
        assert "integrity digest" in row_problem({**row, field: value})
    # a ledger row of an earlier version (no digest): a derived id must match its subject
    legacy = {**row, "integrity": None}
    assert row_problem(legacy) is None
    assert "derived" in row_problem({**legacy, "subject_sha256": "ac" + "ab" * 31})
    assert row_problem({**legacy, "request_id": "ticket-7"}) is None  # a chosen id: unchecked
    assert "status" in row_problem({**row, "status": "done"})
    assert "hex" in row_problem({**row, "subject_sha256": "AB" * 32})
