"""The pass after an erasure scan over the requests (``compactor.erasure.ledger``): which rows
hold a candidate's digest, and the first rows by id it keeps for the report, against brute
force over the same rows."""

from __future__ import annotations

import hashlib

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from compactor.erasure import ledger

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
