"""Pure erasure rules: the compacted-topic supersession rule, the tombstone position, replica
directory names as Kafka parses them. Expected values are written out by hand."""

from __future__ import annotations

import hashlib

import pytest

from compactor.erasure.rules import (
    latest_per_key,
    new_requests,
    parse_subject_digest,
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
