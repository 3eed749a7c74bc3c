"""The native writer's key table (``compactor/native/fast.py``): keys of up to 16 bytes live in
their slot, longer ones in the arena, and either way a record is superseded only by exactly its
key. Checked against a dict of the keys themselves, on keys built to tell the two homes apart
(lengths 0 to 40, shared prefixes, trailing zero bytes, the 16/17-byte edge), and with a hash
hit planted on a different key, which must be refused, never trusted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.cleaner.policy import BatchDecision, BatchRetention
from compactor.cleaner.rewrite import Fallback
from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.codec.segment import iter_batches
from compactor.native import fast, keytable

_PREFIX = b"customer-000000-"  # 16 bytes: keys past it leave the slot for the arena


def _key_pool() -> st.SearchStrategy[list[bytes]]:
    near = st.sampled_from([b"", b"\x00", b"a", b"a\x00", b"a\x00\x00", _PREFIX[:15], _PREFIX,
                            _PREFIX + b"\x00", _PREFIX + b"1", _PREFIX + b"2", b"\x00" * 16,
                            b"\x00" * 17, b"\xff" * 8, b"\xff" * 9])
    return st.lists(st.one_of(near, st.binary(max_size=40)), min_size=1, max_size=12,
                    unique=True)


def _decision() -> BatchDecision:
    return BatchDecision(retention=BatchRetention.DELETE_EMPTY, aborted=False,
                         discard_records=False, retain_deletes=True, marker_horizon=False,
                         txn_entry=None)


def _chunk(keys: list[bytes | None], per_batch: int) -> bytes:
    batches = []
    for first in range(0, len(keys), per_batch):
        records = [NewRecord(offset_delta=i, timestamp=1_700_000_000_000 + first + i, key=k,
                             value=b"v") for i, k in enumerate(keys[first:first + per_batch])]
        batches.append(encode_batch(NewRecordBatch(base_offset=first, records=records)))
    return b"".join(batches)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), pool=_key_pool(), per_batch=st.integers(min_value=1, max_value=7))
def test_a_record_goes_only_when_a_later_record_has_exactly_its_key(data, pool,
                                                                     per_batch) -> None:
    keys = data.draw(st.lists(st.one_of(st.none(), st.sampled_from(pool)), min_size=1,
                              max_size=60))
    chunk = _chunk(keys, per_batch)
    batches = list(iter_batches(chunk))
    decisions = {(0, b.position): _decision() for b in batches}
    rewrite = fast.NativeRewrite(superseded=(), first_dirty=0)
    decided = rewrite.decide_chunk(chunk, 0, 0, decisions)
    assert decided is not None  # the whole chunk in the kernel
    _, _, fates = decided
    went = set()
    for batch, fate in zip(batches, fates):
        if fate.reasons is not None:
            went |= {batch.base_offset + i for i, code in enumerate(fate.reasons.tolist())
                     if code}
    # independent: the newest offset of each key, and null keys always go
    newest = {k: offset for offset, k in enumerate(keys) if k is not None}
    expected = {offset for offset, k in enumerate(keys) if k is None or newest[k] != offset}
    assert went == expected


@pytest.mark.parametrize("stored, probed", [
    (b"key-00000001", b"key-00000002"),  # both in their slots
    (b"a", b"a\x00"),  # the same words, another length
    (_PREFIX + b"-account-1", _PREFIX + b"-account-2"),  # both in the arena
    (_PREFIX + b"1", _PREFIX + b"2"),  # 17 bytes, alike in the 16 a slot could hold
    (_PREFIX + b"1", _PREFIX[:15]),  # one in the arena, one in a slot
])
def test_a_hash_hit_on_another_key_is_refused_not_trusted(stored: bytes, probed: bytes) -> None:
    """The table holds ``stored`` under ``probed``'s hash (a 64-bit collision, planted): the
    group must fall back to the pure path rather than drop the probed record."""
    rewrite = fast.NativeRewrite(superseded=(), first_dirty=0)
    (older,) = iter_batches(_chunk([probed], 1))
    rewrite.decide_batch(_keyed_batch(stored, base_offset=1), _decision())  # enters the table
    # re-file the stored key under the probed key's hash
    slots = rewrite.table.reshape(-1, keytable._SLOT)
    (row,) = np.flatnonzero(slots[:, 1])
    entry = slots[row].copy()
    slots[row] = 0
    probe = np.frombuffer(probed, np.uint8)
    entry[0] = keytable._hash(probe, 0, len(probed))
    slots[keytable._slot(rewrite.table, int(entry[0]))] = entry
    with pytest.raises(Fallback):
        rewrite.decide_batch(older, _decision())


def test_the_same_key_under_its_own_hash_is_superseded() -> None:
    """The control for the planted collisions: the real later key supersedes the record."""
    for key in (b"key-00000001", _PREFIX + b"-account-1", b""):
        rewrite = fast.NativeRewrite(superseded=(), first_dirty=0)
        rewrite.decide_batch(_keyed_batch(key, base_offset=1), _decision())
        (older,) = iter_batches(_chunk([key], 1))
        assert rewrite.decide_batch(older, _decision()).dropped == 1


def _keyed_batch(key: bytes, *, base_offset: int):
    raw = encode_batch(NewRecordBatch(base_offset=base_offset, records=[
        NewRecord(offset_delta=0, timestamp=1_700_000_000_000, key=key, value=b"v")]))
    (batch,) = iter_batches(raw)
    return batch


def test_the_kernel_grows_a_full_table_itself() -> None:
    """The kernel's own growth (the safety net behind ``NativeRewrite``'s growing ahead):
    from four slots, 300 keys of both homes all enter, and every one is found again."""
    from compactor.native import kernels

    keys = [b"k%d" % i if i % 2 else _PREFIX + b"%d" % i for i in range(300)]
    (batch,) = iter_batches(_chunk(keys, 300))
    buf = np.frombuffer(batch.raw, np.uint8)
    layout = np.empty((300, kernels.COLUMNS), np.int64)
    assert kernels.parse_layout(buf, 61, len(buf), 300, 299, layout) == kernels.OK
    table, arena = np.zeros(keytable._SLOT << 2, np.int64), np.empty(8, np.uint8)
    used, tally = np.zeros(2, np.int64), np.zeros(8, np.int64)
    for newer in (True, False):  # the same records as a later batch, then as an earlier one
        reasons = np.zeros(300, np.int8)
        status, dropped, _, table, arena = keytable.decide_records(
            buf, layout, 300, 0, 0, False, np.zeros(0, np.int64), np.zeros(0, np.int64), True,
            table, arena, used, reasons, tally)
        assert status == kernels.OK and dropped == (0 if newer else 300)
    assert used[1] == 300 and table.shape[0] >= 2 * keytable._SLOT * 300


@pytest.fixture
def spares(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """The worker's spare tables, kept from tables of 64 KiB up for the test's small keys."""
    monkeypatch.setattr(keytable, "SPARE_TABLE_MIN_BYTES", 64 * 1024)
    monkeypatch.setattr(keytable, "_spares", [])
    return keytable._spares


def _decided_group(keys: list[bytes]) -> tuple[fast.NativeRewrite, list[int]]:
    """A group of ``keys`` (one batch each) decided newest first; the offsets that go."""
    chunk = _chunk(list(keys), 1)
    batches = list(iter_batches(chunk))
    rewrite = fast.NativeRewrite(superseded=(), first_dirty=0)
    decided = rewrite.decide_chunk(chunk, 0, 0, {(0, b.position): _decision() for b in batches})
    assert decided is not None
    return rewrite, [b.base_offset for b, fate in zip(batches, decided[2]) if fate.dropped]


def test_a_spare_table_is_cleared_before_the_next_group_reads_it(spares) -> None:
    """The first group's keys must not supersede the second group's records: a spare table
    still holding them would drop every record of a key the first group had."""
    first, _ = _decided_group([b"key-%d" % i for i in range(5000)])
    grown = first.table
    assert grown.nbytes >= keytable.SPARE_TABLE_MIN_BYTES
    first.decided()
    assert spares[0] is grown  # the largest first (the table it grew from is kept too)
    # the same keys again: each appears once, so nothing goes
    second, went = _decided_group([b"key-%d" % i for i in range(5000)])
    assert second.table is grown and all(t is not grown for t in spares)  # taken
    assert went == []


def test_a_decided_group_refuses_to_decide_again(spares) -> None:
    rewrite, _ = _decided_group([b"a", b"b"])
    rewrite.decided()
    (batch,) = iter_batches(_chunk([b"c"], 1))
    with pytest.raises(RuntimeError, match="decided"):
        rewrite.decide_batch(batch, _decision())


def test_spares_keep_the_largest_tables_up_to_their_bound(spares, monkeypatch) -> None:
    monkeypatch.setattr(keytable, "SPARE_TABLE_BYTES", 3 * 128 * 1024)
    tables = [np.zeros(n, np.int64) for n in (8192, 16384, 32768, 16384)]  # 64-256 KiB
    for table in tables:
        keytable.spare_table(table)
    assert [t.nbytes for t in spares] == [256 * 1024, 128 * 1024]
    taken = keytable._zeroed_table(16384)
    assert any(taken is t for t in tables[1::2]) and [t.nbytes for t in spares] == [256 * 1024]
    assert keytable._zeroed_table(16384) is not taken  # none left of that size: a new one
