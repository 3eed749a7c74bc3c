"""What an ``erase apply`` or ``erase verify`` records for each request: pure functions of the
request's ledger row and a small context of the run (the directories it read, what matched
where), applied row by row inside Spark (:mod:`compactor.maintenance.erase`), so a million
pending requests never sit on the driver (a run of few requests applies them on the driver:
:func:`of_rows`, :func:`summary`). The context holds only what the run found (its directories
and the requests that matched), never the list of requests.

A row function reads only :data:`ROW_COLUMNS` of its row, and the request's id only to look it
up among the requests the run found something of (:attr:`RunContext.individual`): every
other request's outcome is a function of its topic, status and places, which Spark computes
once per kind of row (:func:`compactor.spark.stages.request_outcomes`); a million requests
nothing matched cost one call, not a million.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactor.erasure.rules import covers_topic, missing_replicas, totals
from compactor.erasure.status import RequestStatus

#: the request columns the row functions read (a run hands them nothing else)
ROW_COLUMNS = ("request_id", "topic", "status", "places")
#: what a row function's outcome depends on for a request not :attr:`RunContext.individual`
KIND_COLUMNS = ("topic", "status", "places")
#: what a row function returns besides the request's new columns
UPDATE, BLOCKED, UNVERIFIED, NO_REPLICA_HERE = "update", "blocked", "unverified", "no_replica_here"

#: a row function of this module with its run's context bound (``functools.partial``)
RowOutcome = Callable[[Mapping[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class DirState:
    """One directory a run read: its name, topic, whether it stopped the run's requests on
    its topic (unreadable, refused, or failed to rewrite) and, for a verify, what it scanned."""

    name: str
    topic: str
    kind: str
    bad: bool
    segments: int = 0
    records: int = 0
    tiered: bool = False
    line: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Matched:
    """What an apply erased of one request here: its records by (dir id, segment base,
    offset), the bare tombstones it left and the older records of its keys it took along."""

    offsets: frozenset[tuple[int, int, int]]
    tombstones_left: tuple[tuple[str, int], ...] = ()
    superseded: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RunContext:
    """The run: its id and clock, its place (one log dir of one broker: the place dict and
    its key, :func:`compactor.erasure.rules.place_key`) and the directories it read."""

    run_id: str
    now_ms: int
    place: Mapping[str, Any]
    key: str
    dirs: Sequence[DirState]

    @property
    def individual(self) -> frozenset[str]:
        """The requests whose outcome depends on more than their topic, status and places:
        those the run found records of."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyContext(RunContext):
    #: topic -> why no log dir holds it (a request on it can never be proven erased)
    unknown_topics: Mapping[str, str]
    matched: Mapping[str, Matched]
    #: ``erase apply --remote``: (directory id, segment start offset) -> the remote segment
    #: replaced there (partition, old and new segment id, offsets), named in the place of each
    #: request whose records it held
    remote_segments: Mapping[tuple[int, int], Mapping[str, Any]] = field(default_factory=dict)

    @property
    def individual(self) -> frozenset[str]:
        return frozenset(self.matched)


def _places(row: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return json.loads(row.get("places") or "{}")


def applied_update(row: Mapping[str, Any], ctx: ApplyContext) -> dict[str, Any]:
    """An apply's outcome for one request row (status pending, applied or partially
    verified): ``outcome`` ``update`` with the request's new columns, or ``blocked`` with the
    directories that kept it pending (``blocked_by``)."""
    rid, topic = row["request_id"], row["topic"]
    if topic in ctx.unknown_topics:  # never provable: refused with the reason
        return {"request_id": rid, "outcome": UPDATE, "status": RequestStatus.FAILED.value,
                "run_id": ctx.run_id,
                "applied_at_ms": ctx.now_ms, "records_erased": 0, "superseded_by_erased": 0,
                "partitions_rewritten": 0, "segments_rewritten": 0, "tombstones_left": "[]",
                "places": row.get("places"),
                "failure": json.dumps({"unknown_topic": ctx.unknown_topics[topic]})}
    bad = [d.name for d in ctx.dirs if d.bad and covers_topic(topic, d.topic)]
    if bad:
        return {"request_id": rid, "outcome": BLOCKED, "blocked_by": json.dumps(bad)}
    found = ctx.matched.get(rid, Matched(frozenset()))
    left = list(found.tombstones_left)
    here = {**ctx.place, "applied_run_id": ctx.run_id, "applied_at_ms": ctx.now_ms,
            "records_erased": len(found.offsets) - len(left),
            "superseded_by_erased": found.superseded,
            "partitions_rewritten": len({i for i, _, _ in found.offsets}),
            "segments_rewritten": len({(i, b) for i, b, _ in found.offsets}),
            "tombstones_left": [{"dir": d, "offset": o} for d, o in left]}
    held = sorted({(i, b) for i, b, _ in found.offsets} & set(ctx.remote_segments))
    if held:
        here["remote_segments"] = [dict(ctx.remote_segments[x]) for x in held]
    places = _places(row)
    places = {**places, ctx.key: {**places.get(ctx.key, {}), **here}}
    return {"request_id": rid, "outcome": UPDATE,
            "status": (RequestStatus.PARTIALLY_VERIFIED.value
                       if row["status"] == RequestStatus.PARTIALLY_VERIFIED
                       else RequestStatus.APPLIED.value),
            "run_id": ctx.run_id, **totals(places), "applied_at_ms": ctx.now_ms,
            "tombstones_left": json.dumps([t for p in places.values()
                                           for t in p.get("tombstones_left", [])]),
            "places": json.dumps(places, sort_keys=True), "failure": None}


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyContext(RunContext):
    #: request id -> the records found again that the request did not ask to leave
    residual: Mapping[str, Sequence[Mapping[str, Any]]]
    #: request topic -> the replicas the cluster's metadata names for it (``None``: unknown)
    replicas: Mapping[str, Sequence[Mapping[str, Any]] | None]
    #: what the run says of each request topic, made once a topic (:meth:`view`)
    _views: dict[str, TopicView] = field(default_factory=dict, compare=False, repr=False)

    def view(self, topic: str) -> TopicView:
        """What this run scanned of the directories a request on ``topic`` covers: the
        same for every request on it, so a million requests cost one computation a topic."""
        found = self._views.get(topic)
        if found is None:
            mine = [d for d in self.dirs if covers_topic(topic, d.topic)]
            replicas = self.replicas.get(topic)
            found = TopicView(
                bad=[d.name for d in mine if d.bad], segments=sum(d.segments for d in mine),
                records=sum(d.records for d in mine),
                expected_here=replicas is None or any(
                    x["node_id"] == self.place["node_id"]
                    and x["directory_id"] in (None, self.place["directory_id"])
                    for x in replicas),
                tiered=sorted({d.topic for d in mine if d.tiered}),
                remote=sorted({d.topic for d in mine if d.kind == "remote"}),
                live=sorted(d.name for d in mine if d.kind == "live"),
                coverage=json.dumps([{**self.place, **d.line, "segments": d.segments,
                                      "records": d.records} for d in mine]))
            self._views[topic] = found
        return found

    @property
    def individual(self) -> frozenset[str]:
        return frozenset(self.residual)


@dataclass(frozen=True, slots=True)
class TopicView:
    """A verify's directories of one request topic (:meth:`VerifyContext.view`): those that
    could not be scanned, the segments and records scanned, whether the metadata expects a
    replica here, the tiered topics whose remote segments it did not read, those whose remote
    segments it read (through the broker's RemoteStorageManager), the live directories, the
    coverage JSON."""

    bad: list[str]
    segments: int
    records: int
    expected_here: bool
    tiered: list[str]
    remote: list[str]
    live: list[str]
    coverage: str


def verified_update(row: Mapping[str, Any], ctx: VerifyContext) -> dict[str, Any]:
    """A verify's outcome for one applied or partially verified request row: ``outcome``
    ``update`` (verified, partially verified or failed, with the new columns), ``unverified``
    (a directory of its topic could not be scanned: ``unverified_because``) or
    ``no_replica_here`` (no replica of its topics lives in this log dir: nothing proven)."""
    rid, topic = row["request_id"], row["topic"]
    view = ctx.view(topic)
    if view.bad:
        return {"request_id": rid, "outcome": UNVERIFIED,
                "unverified_because": json.dumps(view.bad)}
    residual = list(ctx.residual.get(rid, ()))
    scanned = view.segments
    replicas = ctx.replicas.get(topic)
    if not residual and not scanned and not view.expected_here:
        return {"request_id": rid, "outcome": NO_REPLICA_HERE}
    places = _places(row)
    here = {**places.get(ctx.key, {}), **ctx.place, "verify_run_id": ctx.run_id,
            "tiered_topics": view.tiered, "remote_scanned": view.remote,
            "verified_at_ms": ctx.now_ms if not residual and scanned else None,
            "verify_status": "residual" if residual else "clean" if scanned
            else "nothing_scanned",
            "scanned": view.live}
    places = {**places, ctx.key: here}
    missing = missing_replicas(places, replicas) if replicas is not None else None
    # a tiered topic anywhere (this log dir or another place's) leaves remote segments that
    # no scan reached, unless a place's verify read them (the remote tier is one copy, shared
    # by every replica)
    tiered = sorted({t for p in places.values() for t in p.get("tiered_topics", [])}
                    - {t for p in places.values() for t in p.get("remote_scanned", [])})
    update: dict[str, Any] = {
        "request_id": rid, "outcome": UPDATE, "verify_run_id": ctx.run_id,
        "verified_segments_scanned": scanned,
        "verified_records_scanned": view.records,
        "coverage": view.coverage,
        "remote_tier": "not_covered" if tiered else "scanned" if view.remote else None,
        "places": json.dumps(places, sort_keys=True),
        "missing_replicas": json.dumps(missing) if missing is not None else None,
        "residual": json.dumps(residual[:10]) if residual else None,
        "tiered_topics": json.dumps(tiered) if tiered else None}
    if residual or not scanned:
        failure = ({"residual_matches": len(residual), "first": residual[:10]} if residual
                   else {"nothing_scanned": "no segment of the request's topic was scanned, "
                                            "so nothing proves the erasure"})
        update.update(status=RequestStatus.FAILED.value, verified_at_ms=None,
                      failure=json.dumps(failure))
    elif missing is None or missing:
        # clean here, but other replicas (or, without the metadata, unknown ones) may still
        # hold the subject: not verified until every one is scanned clean
        update.update(status=RequestStatus.PARTIALLY_VERIFIED.value, verified_at_ms=None,
                      failure=None)
    else:
        update.update(status=(RequestStatus.VERIFIED_LOCAL_ONLY if tiered
                              else RequestStatus.VERIFIED).value,
                      verified_at_ms=ctx.now_ms, failure=None)
    return update


def accepted_tombstone(row: Mapping[str, Any], key: str, dir_name: str, offset: int,
                       bare_tombstone: bool) -> bool:
    """Whether a record a verify found is a bare tombstone the request (its ledger ``row``)
    asked to leave at this place (``key``)."""
    if not bare_tombstone:
        return False
    left = _places(row).get(key, {}).get("tombstones_left")
    if left is None:
        left = json.loads(row.get("tombstones_left") or "[]")
    return any(t["dir"] == dir_name and t["offset"] == offset for t in left)


def of_rows(rows: Iterable[Mapping[str, Any]], outcome: RowOutcome,
            individual: Collection[str] | None = None) -> Iterator[dict[str, Any]]:
    """Each request row's ``outcome`` with the status it was computed from
    (``expected_status``, what the MERGE requires the request to be in still). With
    ``individual`` (:attr:`RunContext.individual`), ``outcome`` runs once a row for those
    requests and once a kind (:data:`KIND_COLUMNS`) for the others, as a row whose id is no
    request's: what Spark's join of kinds gives each of them
    (:func:`compactor.spark.stages.request_outcomes`)."""
    kinds: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        if individual is None or row["request_id"] in individual:
            out = outcome(row)
        else:
            kind = tuple(row.get(c) for c in KIND_COLUMNS)
            shared = kinds.get(kind)
            if shared is None:
                shared = kinds[kind] = outcome({**row, "request_id": None})
            out = {**shared, "request_id": row["request_id"]}
        yield {**out, "expected_status": row["status"]}


def counted_as(outcome: Mapping[str, Any]) -> str:
    """What a run's counts count an outcome as: an ``update``'s new status, the others by
    their outcome."""
    return str(outcome["status"] if outcome["outcome"] == UPDATE else outcome["outcome"])


def summary(outcomes: Iterable[Mapping[str, Any]], columns: Sequence[str], limit: int
            ) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Of a run's outcomes (:func:`of_rows`): how many ended in each status
    (:func:`counted_as`), and the first ``limit`` by request id with ``columns``, as
    :func:`compactor.spark.stages.outcome_summary` counts them in Spark."""
    counts: Counter[str] = Counter()

    def counted() -> Iterator[Mapping[str, Any]]:
        for row in outcomes:
            counts[counted_as(row)] += 1
            yield row

    first = heapq.nsmallest(limit, counted(), key=lambda r: r["request_id"])
    return dict(counts), [{c: r.get(c) for c in columns} for r in first]


def kind_outcome(kind: Mapping[str, Any], outcome: RowOutcome) -> dict[str, Any]:
    """The outcome every request of a kind (its :data:`KIND_COLUMNS`) that is not
    :attr:`RunContext.individual` gets, as :func:`of_rows` computes it."""
    row = {"request_id": None, **{c: kind[c] for c in KIND_COLUMNS}}
    return next(of_rows([row], outcome, ()))


def summary_by_kind(own: Iterable[Mapping[str, Any]],
                    kinds: Iterable[tuple[Mapping[str, Any], int]],
                    first: Iterable[Mapping[str, Any]], outcome: RowOutcome,
                    individual: Collection[str], columns: Sequence[str], limit: int
                    ) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """:func:`summary` of a run whose outcomes are held by kind: ``own``, the outcomes of
    the individual requests; ``kinds``, each kind's outcome (:func:`kind_outcome`) and how
    many requests share it; ``first``, the first request rows by id (at least ``limit``,
    with :data:`ROW_COLUMNS`). The same counts and rows as :func:`summary` of every
    request's outcome (tested)."""
    counts: Counter[str] = Counter(counted_as(o) for o in own)
    for shared, n in kinds:
        counts[counted_as(shared)] += n
    return dict(counts), summary(of_rows(first, outcome, individual), columns, limit)[1]
