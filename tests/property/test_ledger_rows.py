"""The ledger's column-wise row check (:func:`compactor.erasure.rules.first_problem_row`, what
an apply and a verify run over every request they read) finds exactly the first row the
row-by-row reference (:func:`compactor.erasure.rules.row_problem`) refuses: on rows the tool
wrote, and on the same rows with one field changed, dropped or rotted."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.erasure.rules import (
    CHECKED_COLUMNS,
    STATUSES,
    default_request_id,
    first_problem_row,
    request_integrity,
    row_problem,
)
from compactor.native import sha256
from compactor.schemas.delta import ERASURE_REQUESTS

SCHEMA = pa.schema([ERASURE_REQUESTS.field(c).with_nullable(True) for c in CHECKED_COLUMNS])
HEX = "0123456789abcdef"


@st.composite
def written_rows(draw: st.DrawFn) -> dict[str, Any]:
    """A row as ``erase request`` writes it (integrity digest included), or as a ledger
    written before the digest existed (no digest, a derived or a chosen id)."""
    header = draw(st.sampled_from([None, "user-id", "e\u0301mail", "x\0y"]))
    row: dict[str, Any] = {
        "topic": draw(st.sampled_from(["orders", "*", "t\u00e9", "a.b-c_d"])),
        "selector": "header" if header else "key", "header_name": header,
        "subject_sha256": "".join(draw(st.lists(st.sampled_from(HEX), min_size=64,
                                                max_size=64))),
        "leave_tombstone": draw(st.sampled_from([None, True, False])),
        "requested_at_ms": draw(st.integers(-(2**62), 2**62)),
        "deadline_ms": draw(st.one_of(st.none(), st.integers(0, 2**62))),
        "status": draw(st.sampled_from(STATUSES)),
    }
    row["request_id"] = draw(st.sampled_from([
        default_request_id(row["topic"], row["selector"], header, row["subject_sha256"]),
        "chosen-1", "er-0123456789abcdef0123"]))
    row["integrity"] = request_integrity(row) if draw(st.booleans()) else None
    return row


def changed(row: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """The row with one field changed as tampering or rot would change it."""
    key = data.draw(st.sampled_from(sorted(CHECKED_COLUMNS)))
    value, kind = row[key], SCHEMA.field(key).type
    if pa.types.is_boolean(kind):
        new: Any = data.draw(st.sampled_from([not value, None]))
    elif pa.types.is_integer(kind):
        new = data.draw(st.sampled_from([(value or 0) + 1, None, -(value or 0)]))
    else:
        new = data.draw(st.sampled_from([None, "", (value or "") + "0", (value or "x")[:-1],
                                         (value or "x").upper(), (value or "x")[:-1] + "é",
                                         "pending", "header", "key"]))
    return {**row, key: new}


@settings(max_examples=150, deadline=None)
@given(st.lists(written_rows(), min_size=1, max_size=12), st.data())
def test_the_column_check_finds_the_first_row_the_reference_refuses(
        rows: list[dict[str, Any]], data: st.DataObject) -> None:
    for i in data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=3)):
        rows[i] = changed(rows[i], data)
    expected = next((i for i, r in enumerate(rows) if row_problem(r) is not None), None)
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    assert first_problem_row(batch) == expected
    # as delta-rs may hand the strings over (large or view types) and in more than one chunk
    table = pa.Table.from_batches([batch]).cast(pa.schema([
        pa.field(f.name, pa.large_string()) if pa.types.is_string(f.type) else f
        for f in SCHEMA]))
    assert first_problem_row(table) == expected
    # with the native seam's hasher, as an erasure run checks its requests
    assert first_problem_row(batch, sha256.hex_sha256) == expected


@given(st.lists(st.sampled_from([*HEX, "A", "F", "g", " ", "é", "\0"]), min_size=60,
                max_size=68), st.integers(0, 5))
def test_a_digest_of_anything_but_64_lower_case_hex_digits_is_refused(
        digits: list[str], others: int) -> None:
    """The subject digest's format alone (a row without an integrity digest and with a
    chosen id, so nothing else can refuse it), among rows the tool wrote."""
    good = {"topic": "orders", "selector": "key", "header_name": None,
            "subject_sha256": "ab" * 32, "leave_tombstone": False, "requested_at_ms": 1,
            "deadline_ms": 2, "status": "pending", "request_id": "chosen-1", "integrity": None}
    rows = [dict(good) for _ in range(others)] + [{**good, "subject_sha256": "".join(digits)}]
    expected = next((i for i, r in enumerate(rows) if row_problem(r) is not None), None)
    assert (expected is None) == (len(digits) == 64 and set(digits) <= set(HEX))
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    assert first_problem_row(batch) == expected
    assert first_problem_row(pa.Table.from_batches([batch, batch])) == expected
    if others:  # a slice: its buffers start before its first row
        assert first_problem_row(batch.slice(1)) == (None if expected is None else
                                                     expected - 1)


@given(st.lists(st.sampled_from(HEX), min_size=64, max_size=64), st.integers(0, 63),
       st.sampled_from(["A", "F", "g", " ", "é", "\0", "", "00"]), st.integers(0, 3))
def test_a_digest_one_character_from_a_good_one_is_refused(
        digits: list[str], at: int, other: str, before: int) -> None:
    """A digest that is 64 lower-case hex digits but for one character (upper case, not hex,
    not ASCII, one fewer or one more) is refused, after good rows and in the same batch:
    the check that decides a whole batch's digests at once must not let it through."""
    good = {"topic": "orders", "selector": "key", "header_name": None,
            "subject_sha256": "ab" * 32, "leave_tombstone": False, "requested_at_ms": 1,
            "deadline_ms": 2, "status": "pending", "request_id": "chosen-1", "integrity": None}
    near = "".join(digits[:at]) + other + "".join(digits[at + 1:])
    rows = [dict(good) for _ in range(before)] + [{**good, "subject_sha256": near}]
    assert row_problem(rows[-1]) is not None
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    assert first_problem_row(batch) == before
    assert first_problem_row(pa.Table.from_batches([batch])) == before
