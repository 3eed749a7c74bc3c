"""Pure erasure rules: the compacted-topic supersession rule, the tombstone position, replica
directory names as Kafka parses them. Expected values are written out by hand."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.cleaner.policy import NO_CONTROL_TYPE, BatchHeader
from compactor.cleaner.verify import txn_problems
from compactor.codec.indexes import AbortedTxn
from compactor.codec.records import ControlType
from compactor.erasure.rules import (
    keep_when_emptied,
    latest_per_key,
    new_requests,
    parse_subject_digest,
    partition_check_batches,
    subject_digest,
    superseded_by_erased,
)
from compactor.log.layout import parse_copy_dir_name
from compactor.model import TopicPartition

A, B, C = b"a" * 32, b"b" * 32, b"c" * 32


@pytest.mark.parametrize(("matched", "others", "expected"), [
    # the erased record was the key's latest: every older record of the key goes
    ({A: {9}}, [(A, 1), (A, 5), (A, 9)], {A: [1, 5]}),
    # a newer record stays the key's state: nothing more goes
    ({A: {5}}, [(A, 1), (A, 5), (A, 9)], {}),
    # several erased records, the latest of them newer than all that stay
    ({A: {3, 9}}, [(A, 1), (A, 3), (A, 6), (A, 9)], {A: [1, 6]}),
    # keys are independent; a key with nothing else left needs nothing
    ({A: {9}, B: {2}, C: {4}}, [(A, 1), (B, 2), (B, 7), (C, 4)], {A: [1]}),
    ({}, [(A, 1)], {}),
])
def test_superseded_by_erased(matched: dict, others: list, expected: dict) -> None:
    assert superseded_by_erased(matched, others) == expected


def test_latest_per_key() -> None:
    assert latest_per_key([(A, 3), (B, 1), (A, 7), (A, 5)]) == {A: 7, B: 1}


def test_only_key_requests_leave_tombstones() -> None:
    with pytest.raises(ValueError, match="key erasure"):
        new_requests(topic="t", digests=[subject_digest(b"v")], selector="header", header_name="h",
                     reason=None, now_ms=0, deadline_days=1, request_id=None,
                     leave_tombstone=True)
    (r,) = new_requests(topic="t", digests=[subject_digest(b"k")], selector="key", header_name=None,
                        reason=None, now_ms=0, deadline_days=1, request_id=None,
                        leave_tombstone=True)
    assert r.leave_tombstone


def test_a_given_digest_is_64_hex_digits_and_never_echoed() -> None:
    digest = hashlib.sha256(b"user-42").hexdigest()
    assert parse_subject_digest(digest.upper()) == digest == subject_digest(b"user-42")
    for wrong in ("user-42@example.com", digest[:-1], digest + "0", "g" * 64):
        with pytest.raises(ValueError) as info:
            parse_subject_digest(wrong)
        assert wrong not in str(info.value)


@pytest.mark.parametrize(("name", "expected"), [
    ("orders-3", (TopicPartition("orders", 3), "live")),
    ("my-topic-12", (TopicPartition("my-topic", 12), "live")),
    ("orders-3.9f1e2d3c4b5a69788796a5b4c3d2e1f0-future", (TopicPartition("orders", 3), "future")),
    ("orders.v2-0.9f1e2d3c4b5a69788796a5b4c3d2e1f0-delete",
     (TopicPartition("orders.v2", 0), "delete")),
    ("a-b-7.00000000000000000000000000000000-stray", (TopicPartition("a-b", 7), "stray")),
    ("orders-x.9f1e-future", None),
    ("ledger", None),
])
def test_replica_dir_names_parse_as_kafka_reads_them(name: str, expected: tuple | None) -> None:
    copy = parse_copy_dir_name(name)
    assert (None if copy is None else (copy.tp, copy.kind)) == expected


# -- the batches an apply's partition-wide checks read ----------------------------------------


@st.composite
def _partition(draw: st.DrawFn) -> list[list[BatchHeader]]:
    """A partition's batches in segments (file order = offset order): producers -1 (none),
    1 and 2 at epochs 0-1, transactional data, COMMIT / ABORT markers and emptied markers,
    and now and then transactional ones without a producer id, as a damaged log has them."""
    segments, offset = [], 0
    for _ in range(draw(st.integers(1, 4))):
        base, batches = offset, []
        for position in range(draw(st.integers(1, 6))):
            pid = draw(st.sampled_from([-1, 1, 2]))
            # a transactional batch without a producer id only in a damaged log: now and then
            kind = draw(st.sampled_from(["data", "txn", "commit", "abort", "emptied"])
                        if pid >= 0 else st.sampled_from(["data"] * 8 + ["txn", "abort"]))
            control = {"commit": int(ControlType.COMMIT), "abort": int(ControlType.ABORT),
                       "emptied": NO_CONTROL_TYPE}.get(kind)
            last = offset + draw(st.integers(0, 2))
            batches.append(BatchHeader(
                segment_base=base, position=position * 100, size_in_bytes=70,
                base_offset=offset, last_offset=last, magic=2, is_control=control is not None,
                is_transactional=kind != "data", control_type=-1 if control is None else control,
                producer_id=pid, producer_epoch=draw(st.integers(0, 1)) if pid >= 0 else -1,
                max_timestamp=0, horizon_ms=-1, records_count=last - offset + 1))
            offset = last + 1
        segments.append(batches)
    return segments


@given(_partition(), st.integers(0, 30))
def test_the_checks_read_of_each_segment_what_they_read_of_the_partition(
        segments: list[list[BatchHeader]], hw: int) -> None:
    everything = [h for s in segments for h in s]
    chosen = [h for s in segments for h in partition_check_batches(s)]
    # the ABORT markers' index entries, one starting late, to exercise every txn finding
    entries = [AbortedTxn(producer_id=h.producer_id, first_offset=h.base_offset - i % 2,
                          last_offset=h.base_offset, last_stable_offset=h.base_offset)
               for i, h in enumerate(everything) if h.control_type == int(ControlType.ABORT)
               and i % 3]
    assert keep_when_emptied(chosen, hw) == keep_when_emptied(everything, hw)
    assert ([str(e) for e in txn_problems("p", chosen, entries)]
            == [str(e) for e in txn_problems("p", everything, entries)])


def test_a_segment_whose_last_batch_has_no_producer_keeps_it() -> None:
    # the log end offset's batch stays as an empty header whoever wrote it
    def header(offset: int, pid: int) -> BatchHeader:
        return BatchHeader(segment_base=0, position=offset, size_in_bytes=70,
                           base_offset=offset, last_offset=offset, magic=2, is_control=False,
                           is_transactional=False, control_type=NO_CONTROL_TYPE,
                           producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                           max_timestamp=0, horizon_ms=-1, records_count=1)

    segment = [header(0, -1), header(1, 7), header(2, -1), header(3, -1)]
    assert partition_check_batches(segment) == [segment[1], segment[3]]
    assert keep_when_emptied(partition_check_batches(segment), 0) == {(0, 1), (0, 3)}
    assert partition_check_batches([]) == []


def test_a_damaged_logs_transaction_without_a_producer_id_is_still_checked() -> None:
    # transactional data and its ABORT marker without a producer id (only a damaged log has
    # them) and no .txnindex entry: the check must see them among the chosen batches too
    def header(offset: int, *, txn: bool, abort: bool = False) -> BatchHeader:
        return BatchHeader(segment_base=0, position=offset * 100, size_in_bytes=70,
                           base_offset=offset, last_offset=offset, magic=2, is_control=abort,
                           is_transactional=txn,
                           control_type=int(ControlType.ABORT) if abort else NO_CONTROL_TYPE,
                           producer_id=-1, producer_epoch=-1, max_timestamp=0,
                           horizon_ms=-1, records_count=1)

    segment = [header(0, txn=False), header(1, txn=True), header(2, txn=False),
               header(3, txn=True, abort=True), header(4, txn=False)]
    everything = txn_problems("p", segment, [])
    assert len(everything) == 1
    chosen = txn_problems("p", partition_check_batches(segment), [])
    assert [str(e) for e in chosen] == [str(e) for e in everything]
