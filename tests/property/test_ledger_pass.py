"""The pass after an erasure scan over the requests (``compactor.erasure.ledger``): which rows
hold a candidate's digest, and the first rows by id it keeps for the report, against brute
force over the same rows."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from compactor.erasure import ledger
from compactor.state import tables as state_tables

#: digests that share their first 8 bytes (the words the lookup compares first) in pairs, so
#: the whole comparison decides
_SHARED = st.integers(0, 7).map(lambda i: hashlib.sha256(bytes([i])).digest())
_DIGESTS = st.builds(lambda head, tail: head[:8] + tail, _SHARED, st.binary(min_size=24,
                                                                             max_size=24))


@given(st.lists(_DIGESTS, max_size=60), st.lists(_DIGESTS, max_size=20), st.integers(0, 5))
def test_the_rows_with_a_candidates_digest_are_those_brute_force_finds(
        rows: list[bytes], candidates: list[bytes], skip: int) -> None:
    column = pa.array([d.hex() for d in rows], pa.string())[skip:]
    held = ledger._DigestSet(candidates).holds(column).to_pylist()
    assert held == [d in set(candidates) for d in rows[skip:]]


@given(st.lists(st.lists(st.text(max_size=6), max_size=12), max_size=6), st.integers(0, 15))
def test_the_first_rows_by_id_are_the_smallest_ids_of_every_batch(
        batches: list[list[str]], limit: int) -> None:
    first = ledger._FirstById(limit)
    seen: set[str] = set()
    every: list[str] = []
    for ids in batches:
        ids = [i for i in dict.fromkeys(ids) if i not in seen]  # ids are unique in a ledger
        seen.update(ids)
        every.extend(ids)
        first.add(pa.RecordBatch.from_pydict({"request_id": pa.array(ids, pa.string()),
                                              "n": pa.array(range(len(ids)), pa.int64())}))
    assert [r["request_id"] for r in first.rows()] == sorted(every)[:limit]


#: a kind's columns as a ledger holds them: few values, null among them
_KIND_VALUES = st.sampled_from([None, "", "accounts", "orders",
                                '{"b1:/d": {"applied_run_id": "r"}}', '{"b2:/d": {}}'])
_KIND_ROWS = st.lists(st.tuples(_KIND_VALUES, _KIND_VALUES, _KIND_VALUES), max_size=40)


def _kind_batch(rows: list[tuple[str | None, ...]], as_dictionary: bool) -> pa.RecordBatch:
    columns = {}
    for i, name in enumerate(ledger.KIND_COLUMNS):
        values = pa.array([r[i] for r in rows], pa.string())
        columns[name] = values.dictionary_encode() if as_dictionary else values
    return pa.RecordBatch.from_pydict(columns)


@given(_KIND_ROWS, st.booleans())
def test_the_kinds_counted_by_their_codes_are_those_brute_force_counts(
        rows: list[tuple[str | None, ...]], as_dictionary: bool) -> None:
    counts: dict[tuple[object, ...], int] = {}
    ledger._count_kinds(counts, _kind_batch(rows, as_dictionary))
    expected: dict[tuple[object, ...], int] = {}
    for row in rows:
        expected[row] = expected.get(row, 0) + 1
    assert counts == expected


_PLACES = st.sampled_from([None, "", "{}", '{"b1:/d": {"applied_run_id": "r"}}', '{"b2:/d": {}}',
                           '{"b1:/d": {}, "b2:/d": {"applied_run_id": "r"}}'])


@given(st.lists(_PLACES, max_size=40), st.sampled_from(["b1:/d", "b2:/d", "b3:/d"]))
def test_a_place_not_applied_is_the_same_read_plain_or_as_a_dictionary(
        places: list[str | None], key: str) -> None:
    plain = pa.array(places, pa.string())
    expected = ["applied_run_id" not in json.loads(p or "{}").get(key, {}) for p in places]
    assert ledger._not_applied(plain, key).to_pylist() == expected
    assert ledger._not_applied(plain.dictionary_encode(), key).to_pylist() == expected


@given(st.lists(_KIND_VALUES, max_size=40), st.sets(st.sampled_from(["", "accounts", "orders"])))
def test_one_of_is_the_same_on_a_dictionary_and_never_holds_a_null(
        values: list[str | None], wanted: set[str]) -> None:
    plain = pa.array(values, pa.string())
    chosen = pa.array(sorted(wanted), pa.string())
    expected = [v is not None and v in wanted for v in values]
    assert state_tables.is_one_of(plain, chosen).to_pylist() == expected
    assert state_tables.is_one_of(plain.dictionary_encode(), chosen).to_pylist() == expected


@given(st.lists(st.lists(st.tuples(st.integers(0, 5), st.text(max_size=4)), max_size=12),
                max_size=6), st.integers(0, 15))
def test_status_lists_the_earliest_requests_of_every_batch(
        batches: list[list[tuple[int, str]]], limit: int) -> None:
    """``erase status``'s lists (overdue, failed, partially verified): the first ``limit``
    rows by (requested_at_ms, request_id) of all the batches, as its items, and how many
    rows there were; a batch turns only its own first rows into Python values."""
    earliest = ledger._Earliest(lambda r: {"id": r["request_id"], "n": r["n"]}, limit)
    seen: set[str] = set()
    every: list[tuple[int, str, int]] = []
    for rows in batches:
        rows = [(ms, i) for ms, i in rows if i not in seen]  # ids are unique in a ledger
        rows = list({i: (ms, i) for ms, i in rows}.values())
        seen.update(i for _, i in rows)
        every.extend((ms, i, len(every) + n) for n, (ms, i) in enumerate(rows))
        earliest.add(pa.RecordBatch.from_pydict({
            "requested_at_ms": pa.array([ms for ms, _ in rows], pa.int64()),
            "request_id": pa.array([i for _, i in rows], pa.string()),
            "n": pa.array([e[2] for e in every[len(every) - len(rows):]], pa.int64())}))
    assert earliest.count == len(every)
    assert earliest.items() == [{"id": i, "n": n} for _, i, n in sorted(every)[:limit]]
