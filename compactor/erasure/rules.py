"""GDPR erasure, pure part: subjects as SHA-256 digests, erasure requests, the compacted-topic
rule and where a request was applied and verified. Nothing here touches files, Delta or
Spark; the ledger lives in :mod:`compactor.erasure.ledger`, the Spark pass (a join of the
scanned digests against the requests) in :mod:`compactor.maintenance.erase`.

A request names a subject by the SHA-256 digest of the record key (selector ``key``) or of
the value of a named record header (selector ``header``), in one topic or in every topic
(``*``). Raw keys never leave the process that parses the request.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from compactor.cleaner.policy import BatchHeader, replay_producers
from compactor.erasure.sketch import hex_digest_text
from compactor.erasure.status import RequestStatus

if TYPE_CHECKING:
    import pyarrow as pa

ALL_TOPICS = "*"
KEY = "key"


#: Kafka's internal topics, exactly ``Topic.INTERNAL_TOPICS`` (``Topic.isInternal``): the group,
#: transaction and share-group coordinators' state under Kafka's binary keys
KAFKA_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state",
                                   "__share_group_state"})
#: the other logs Kafka's own components keep, named (not matched by prefix): the KRaft
#: metadata log (``Topic.CLUSTER_METADATA_TOPIC_NAME``) and the remote log metadata topic
#: (``TopicBasedRemoteLogMetadataManagerConfig.REMOTE_LOG_METADATA_TOPIC_NAME``)
KAFKA_COMPONENT_LOGS = frozenset({"__cluster_metadata", "__remote_log_metadata"})


def is_internal_topic(topic: str) -> bool:
    """Whether ``topic`` holds Kafka's own state rather than an application's records: one of
    :data:`KAFKA_INTERNAL_TOPICS` or :data:`KAFKA_COMPONENT_LOGS`. A user topic whose name
    merely starts with ``__`` (``__orders`` is legal) is an application topic."""
    return topic in KAFKA_INTERNAL_TOPICS or topic in KAFKA_COMPONENT_LOGS


HEADER = "header"
#: every status a request row may hold (:class:`compactor.erasure.status.RequestStatus`, which
#: owns the transitions)
STATUSES = tuple(s.value for s in RequestStatus)
DAY_MS = 86_400_000
SHA256_HEX = 64


def subject_digest(value: bytes) -> str:
    """The hex SHA-256 digest a subject is stored and matched by."""
    return hashlib.sha256(value).hexdigest()


def is_subject_digest(text: str) -> bool:
    """Whether ``text`` is a digest as the ledger stores it: 64 lower-case hex digits."""
    return len(text) == SHA256_HEX and all(c in "0123456789abcdef" for c in text)


def parse_subject_digest(text: str) -> str:
    """A subject given already digested (``--key-sha256``): 64 hex digits, lower-cased.

    Raises:
        ValueError: anything else, without repeating ``text`` (it may be the raw subject
            typed into the wrong field).
    """
    digest = text.strip().lower()
    if not is_subject_digest(digest):
        raise ValueError(f"not a SHA-256 digest: expected {SHA256_HEX} hex digits, got "
                         f"{len(text)} characters (the value is not repeated here: it may be "
                         f"the subject itself)")
    return digest


def default_request_id(topic: str, selector: str, header_name: str | None, digest: str) -> str:
    """A request id derived from what is erased, so asking twice for the same subject is the
    same request (idempotent without the caller choosing ids)."""
    material = "\0".join((topic, selector, header_name or "", digest)).encode()
    return "er-" + hashlib.sha256(material).hexdigest()[:20]


#: the columns a request row's integrity digest covers: what identifies the request and what it
#: erases, none of which any command changes after ``erase request`` wrote it
INTEGRITY_FIELDS = ("request_id", "topic", "selector", "header_name", "subject_sha256",
                    "leave_tombstone", "requested_at_ms", "deadline_ms")
_DERIVED_ID = re.compile(r"^er-[0-9a-f]{20}$")


def request_integrity(row: Mapping[str, Any]) -> str:
    """The hex SHA-256 of a request row's :data:`INTEGRITY_FIELDS`, stored in its
    ``integrity`` column when the row is written: a field changed afterwards (a tampered or
    rotted row) no longer matches it. It detects change, not a forger who recomputes it: the
    ledger's Delta history keeps every version of the row."""
    material = "\0".join(("" if row.get(k) is None else
                          ("1" if row[k] else "0") if k == "leave_tombstone" else str(row[k]))
                         for k in INTEGRITY_FIELDS)
    return hashlib.sha256(material.encode()).hexdigest()


def row_problem(row: Mapping[str, Any]) -> str | None:
    """What is wrong with a request row as read from the ledger, or ``None``: a field that no
    command could have written (an unknown status or selector, a digest that is not 64
    lower-case hex digits, a header selector without a name), an integrity digest that does
    not match the row, or (a row of a ledger written before the digest existed) an id of the
    derived form ``er-...`` that is not derived from the row's topic and subject."""
    if row.get("status") not in STATUSES:
        return f"its status {row.get('status')!r} is not one of {', '.join(STATUSES)}"
    if row.get("selector") not in (KEY, HEADER):
        return f"its selector {row.get('selector')!r} is neither {KEY!r} nor {HEADER!r}"
    if (row["selector"] == HEADER) != bool(row.get("header_name")):
        return "a header selector needs a header name, a key selector none"
    digest = row.get("subject_sha256") or ""
    if not is_subject_digest(digest):
        return "its subject_sha256 is not 64 lower-case hex digits"
    stored = row.get("integrity")
    if stored is not None:
        return (None if stored == request_integrity(row) else
                "its fields do not match its integrity digest: the row was changed after "
                "`erase request` wrote it, outside kafka-compactor, or its file has rotted")
    if _DERIVED_ID.match(str(row.get("request_id"))) and row["request_id"] != default_request_id(
            row.get("topic") or "", row["selector"], row.get("header_name"), digest):
        return ("its id is not the one derived from its topic and subject digest: the row was "
                "changed after `erase request` wrote it, or its file has rotted")
    return None


#: the columns :func:`first_problem_row` reads
CHECKED_COLUMNS = tuple(sorted({"status", "integrity", *INTEGRITY_FIELDS}))


#: the hex SHA-256 of each value of a ``large_binary`` array, as a ``large_string`` array:
#: :func:`hex_sha256` (``hashlib``), or the native seam's kernel
#: (:func:`compactor.native.sha256.hex_sha256`), which :func:`first_problem_row` may be given
HexSha256 = Callable[["pa.Array"], "pa.Array"]


def hex_sha256(values: pa.Array) -> pa.Array:
    """The hex SHA-256 of each value of ``values`` (``large_binary``), one ``hashlib`` call a
    value: the reference the native kernel is held to (``tests/property/test_sha256.py``)."""
    import pyarrow as pa

    bounds = np.frombuffer(values.buffers()[1], dtype=np.int64,
                           count=len(values) + 1, offset=values.offset * 8).tolist()
    data = (values.buffers()[2] or pa.py_buffer(b"")).to_pybytes()
    sha256 = hashlib.sha256
    return pa.array([sha256(data[bounds[i]:bounds[i + 1]]).hexdigest()
                     for i in range(len(values))], pa.large_string())


def _all_hex_digests(column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether every value of a string ``column`` is :data:`SHA256_HEX` lower-case hex digits
    (:func:`is_hex_sha256` of each), decided over its data buffer at once
    (:func:`compactor.erasure.sketch.hex_digest_text`): the digits decoded and encoded again
    must give the same text (``bytes.fromhex`` takes upper case and spaces too, ``bytes.hex``
    writes lower case only). 0.05 s for a million digests where RE2 took 0.1 s; ``False``
    says only that some value is not, and the caller's regular expression finds which."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return all(_all_hex_digests(chunk) for chunk in column.chunks)
    text = hex_digest_text(column)
    try:
        return text is not None and bytes.fromhex(text).hex() == text
    except ValueError:  # not hex digits
        return False


def first_problem_row(batch: pa.RecordBatch | pa.Table,
                      hasher: HexSha256 = hex_sha256) -> int | None:
    """The index of the first row of ``batch`` (with :data:`CHECKED_COLUMNS`) that
    :func:`row_problem` refuses, or ``None``: the same checks column by column (Arrow compute,
    the integrity digests by ``hasher`` over the rows' material at once), so a million rows
    are checked in under a second without a Python dict a row. :func:`row_problem` then says
    what is wrong with the row found (``tests/property/test_ledger_rows.py`` holds the two to
    the same answer)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    if n == 0:
        return None
    col = batch.column

    def text(name: str) -> pa.Array:  # a string column, null as empty
        return pc.fill_null(pc.cast(col(name), pa.large_string()), "")

    selector = text("selector")
    ok = pc.and_(pc.is_in(text("status"), pa.array(STATUSES, pa.large_string())),
                 pc.is_in(selector, pa.array([KEY, HEADER], pa.large_string())))
    ok = pc.and_(ok, pc.equal(pc.equal(selector, HEADER),
                              pc.not_equal(text("header_name"), "")))
    if not _all_hex_digests(col("subject_sha256")):  # which rows: by the regular expression
        ok = pc.and_(ok, pc.match_substring_regex(text("subject_sha256"),
                                                  f"^[0-9a-f]{{{SHA256_HEX}}}$"))
    # the integrity digest, where the row has one: request_integrity's material, joined
    # column-wise (a null field is the empty string, a boolean 1 or 0, a number its digits)
    parts = []
    for k in INTEGRITY_FIELDS:
        c = col(k)
        if pa.types.is_boolean(c.type):
            c = pc.if_else(c, "1", "0")
        parts.append(pc.cast(c, pa.large_string()))
    material = pc.binary_join_element_wise(*parts, pa.scalar("\0", pa.large_string()),
                                           null_handling="replace",
                                           null_replacement="")
    stored = col("integrity")
    has = pc.is_valid(stored).to_numpy(zero_copy_only=False)
    if isinstance(material, pa.ChunkedArray):
        material = material.combine_chunks()
    material = material.cast(pa.large_binary())
    good = np.ones(n, dtype=bool)
    checked = np.flatnonzero(has)
    if len(checked):  # compared column-wise (no numpy scalar a row)
        made = hasher(material if len(checked) == n else material.take(pa.array(checked)))
        kept = pc.cast(stored if len(checked) == n else pc.take(stored, pa.array(checked)),
                       pa.large_string())
        good[checked] = pc.equal(made, kept).to_numpy(zero_copy_only=False)
    unchecked = np.flatnonzero(~has)
    if len(unchecked):  # a ledger written before the digest existed: the derived id's check
        ids, topics, selectors, headers, subjects = (
            col(k).to_pylist() for k in ("request_id", "topic", "selector", "header_name",
                                         "subject_sha256"))
        for i in unchecked:
            if _DERIVED_ID.match(str(ids[i])) and ids[i] != default_request_id(
                    topics[i] or "", selectors[i] or "", headers[i], subjects[i] or ""):
                good[i] = False
    bad = np.flatnonzero(~(ok.to_numpy(zero_copy_only=False) & good))
    return int(bad[0]) if len(bad) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class ErasureRequest:
    """One subject to erase (a row of ``erasure_requests``, ``compactor.schemas.delta``)."""

    request_id: str
    topic: str
    selector: str
    header_name: str | None
    subject_sha256: str
    reason: str | None
    requested_at_ms: int
    deadline_ms: int
    status: str = RequestStatus.PENDING
    leave_tombstone: bool = False
    # place key (:func:`place_key`) -> what the apply and verify runs there did
    places: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False,
                                                   hash=False)
    # (directory name, offset) of the bare tombstones an apply left (``leave_tombstone``)
    tombstones_left: tuple[tuple[str, int], ...] = ()

    @property
    def integrity(self) -> str:
        """:func:`request_integrity` of the request's row."""
        return request_integrity({k: getattr(self, k) for k in INTEGRITY_FIELDS})

    def applies_to(self, topic: str) -> bool:
        """Whether the request covers ``topic``: ``*`` means every application topic, whatever
        its name; Kafka's own logs (:func:`is_internal_topic`) only when named."""
        return covers_topic(self.topic, topic)


def covers_topic(request_topic: str, topic: str) -> bool:
    """Whether a request for ``request_topic`` covers ``topic``: ``*`` covers every application
    topic (:func:`is_internal_topic` is false), a name only itself. The one rule apply, verify,
    the proof's replica map and status expand ``*`` by."""
    if request_topic == ALL_TOPICS:
        return not is_internal_topic(topic)
    return request_topic == topic


def request_matches(request: Mapping[str, Any], *, kind: str, name: str | None,
                    digest: bytes, topic: str) -> bool:
    """Whether a record's ``digest`` (of its key, ``kind`` ``key``; of its header ``name``'s
    value, ``kind`` ``header``) in ``topic`` is the subject of ``request`` (a ledger row with
    its digest as 32 bytes, ``digest``): the same digest, selector and header name, on a topic
    the request covers (:func:`covers_topic`)."""
    return (request["digest"] == digest and request["selector"] == kind
            and request.get("header_name") == name and covers_topic(request["topic"], topic))


def new_requests(*, topic: str, digests: Sequence[str], selector: str,
                 header_name: str | None, reason: str | None, now_ms: int, deadline_days: int,
                 request_id: str | None, leave_tombstone: bool = False) -> list[ErasureRequest]:
    """Requests for the subjects whose SHA-256 ``digests`` (:func:`subject_digest`,
    :func:`parse_subject_digest`) are given. With ``request_id`` and several subjects the ids
    are ``<request_id>-<n>`` (n from 1, in the given order)."""
    if selector not in (KEY, HEADER) or (selector == HEADER) != bool(header_name):
        raise ValueError("a header selector needs a header name, a key selector none")
    if leave_tombstone and selector != KEY:
        raise ValueError("only a key erasure can leave a tombstone")
    out = []
    for n, digest in enumerate(digests, start=1):
        if request_id is None:
            rid = default_request_id(topic, selector, header_name, digest)
        else:
            rid = request_id if len(digests) == 1 else f"{request_id}-{n}"
        out.append(ErasureRequest(
            request_id=rid, topic=topic, selector=selector, header_name=header_name,
            subject_sha256=digest, reason=reason, requested_at_ms=now_ms,
            deadline_ms=now_ms + deadline_days * DAY_MS, leave_tombstone=leave_tombstone,
        ))
    return out


def superseded_by_erased(matched: Mapping[bytes, Collection[int]],
                         others: Iterable[tuple[bytes, int]]) -> dict[bytes, list[int]]:
    """On a compacted topic, the records an erasure must take with it so that no older value
    of a key is ever resurrected.

    For each key: when its latest erased record (``matched``) is newer than every record of
    the key that stays (``others``, the key's other records), it was the key's current state
    (``LogCleaner`` keeps only a key's latest record, so every older one is already dead to a
    compacted reader), and once it is gone the next older one would become the key's state
    again: every record that stays is then older, and all of them go. When a record of the
    key newer than every erased one stays, it remains the key's state and nothing more goes.

    Returns:
        key digest -> offsets to erase too (ascending), only for keys with any.
    """
    rest: dict[bytes, list[int]] = {}
    for key, offset in others:
        if offset not in matched.get(key, ()):
            rest.setdefault(key, []).append(offset)
    out = {}
    for key, offsets in rest.items():
        erased = matched.get(key)
        if erased and max(erased) > max(offsets):
            out[key] = sorted(offsets)
    return out


def latest_per_key(matched: Iterable[tuple[bytes, int]]) -> dict[bytes, int]:
    """Each key's latest matched offset (where ``--leave-tombstone`` leaves its tombstone)."""
    out: dict[bytes, int] = {}
    for key, offset in matched:
        if offset > out.get(key, -1):
            out[key] = offset
    return out


def partition_check_batches(headers: Sequence[BatchHeader]) -> list[BatchHeader]:
    """The batches of a segment that an apply's partition-wide checks read: every batch
    with a producer id or the transactional flag, and the segment's last batch.
    :func:`keep_when_emptied` reads the last batch of the log and the producers' batches
    (``replay_producers`` skips the others), the transaction index check
    (``compactor.cleaner.verify.txn_problems``) the transactional batches (a producer's,
    unless the log is damaged: kept either way). So the union of a partition's segments'
    batches from here gives both what all its batches give (its last batch is its last
    segment's), and an erasure's scan sends the driver only these: half the batch headers of
    the benchmark's log, whose producers are half idempotent, and one a segment of a log
    without producer ids."""
    if not headers:
        return []
    last = headers[-1]
    kept = [h for h in headers if h.producer_id >= 0 or h.is_transactional]
    if not kept or kept[-1] is not last:
        kept.append(last)
    return kept


def keep_when_emptied(headers: Sequence[BatchHeader], high_watermark: int) -> set[tuple[int, int]]:
    """``(segment base, position)`` of the batches that must stay as an empty header if an
    erasure removes all their records: the last batch of the log (it holds the log end
    offset) and the last data batch of each producer at its current epoch (a broker rebuilds
    producer state from it). Every other emptied batch disappears."""
    keep: set[tuple[int, int]] = set()
    if not headers:
        return keep
    last = max(headers, key=lambda h: h.next_offset)
    keep.add((last.segment_base, last.position))
    producers = replay_producers(headers, high_watermark).producers
    for h in headers:
        if h.producer_id < 0 or h.is_control:
            continue
        entry = producers.get(h.producer_id)
        if entry is not None and entry.last_data_offset == h.last_offset:
            keep.add((h.segment_base, h.position))
    return keep


# ---------------------------------------------------------------------------------------------
# Places: a request is erased from every replica, and proven so replica by replica. A place is
# one log dir of one broker, named as the metadata names replica locations (KIP-858: node id
# and directory id; the path when the log dir has no directory.id).


def place_key(place: Mapping[str, Any]) -> str:
    """``node <id> dir <directory id or path>``: one log dir of one broker; ``remote tier via
    node <id> dir ...`` (a place whose ``tier`` is ``remote``): the remote segments of the
    partitions whose remote log metadata that log dir holds (``erase apply --remote``)."""
    where = f"node {place['node_id']} dir {place['directory_id'] or place['log_dir']}"
    return f"remote tier via {where}" if place.get("tier") == "remote" else where


def covers(place: Mapping[str, Any], replica: Mapping[str, Any]) -> bool:
    """Whether a clean verify at ``place`` proves ``replica`` (partition, node_id,
    directory_id) clean: the same broker, the replica's directory (any of the broker's when
    the metadata assigns none), and the partition's live directory was scanned there."""
    return (place.get("verify_status") == "clean" and place["node_id"] == replica["node_id"]
            and replica["partition"] in place.get("scanned", ())
            and replica["directory_id"] in (None, place["directory_id"]))


def missing_replicas(places: Mapping[str, Mapping[str, Any]],
                     replicas: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The replicas no clean verify covers yet."""
    return [r for r in replicas if not any(covers(p, r) for p in places.values())]


def totals(places: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """What every place's apply erased, summed (the request row's counters)."""
    keys = ("records_erased", "superseded_by_erased", "partitions_rewritten",
            "segments_rewritten")
    return {k: sum(int(p.get(k) or 0) for p in places.values()) for k in keys}
