"""The one place for an erasure request's status: its values, which command moves it where,
and how a dry run says it. The ledger's ``status`` column, the JSON report's and schema's enum
(``schemas/report.schema.json``, checked by a test) and the dry run's words come from here.

::

    (erase request) -> pending
    pending, applied, partially_verified --erase apply--> applied | partially_verified | failed
    applied, partially_verified --erase verify--> partially_verified | verified
                                                  | verified_local_only | failed
    failed --erase retry--> pending
    pending, applied, partially_verified, failed --erase cancel--> cancelled

A request is ``partially_verified`` while some replica the cluster's metadata names is not yet
scanned clean; ``verified_local_only`` when every local copy is clean but a tiered topic's
remote segments were not scanned. ``verified``, ``verified_local_only`` and ``cancelled`` are
final: nothing moves them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from compactor.human import human_time


class RequestStatus(StrEnum):
    """An erasure request's status (the values are the ledger's and the reports' strings)."""

    PENDING = "pending"
    APPLIED = "applied"
    PARTIALLY_VERIFIED = "partially_verified"
    VERIFIED = "verified"
    VERIFIED_LOCAL_ONLY = "verified_local_only"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def dry_run(self) -> str:
        """What ``erase apply --dry-run`` says of a request an apply would leave in this
        status (it records nothing): ``would_be_applied``, ``would_fail``,
        ``would_stay_pending``."""
        return DRY_RUN[self]

    def may_become(self, other: RequestStatus, command: str) -> bool:
        """Whether ``command`` (``apply``, ``verify``, ``retry``, ``cancel``) may move a
        request from this status to ``other``."""
        return other in TRANSITIONS.get(command, {}).get(self, frozenset())


S = RequestStatus

#: command -> status -> the statuses it may leave the request in (the MERGE of ``apply`` and
#: ``verify`` changes a row only while it is still in the status it was computed from)
TRANSITIONS: Mapping[str, Mapping[RequestStatus, frozenset[RequestStatus]]] = {
    "apply": {s: frozenset({S.APPLIED, S.PARTIALLY_VERIFIED, S.FAILED})
              for s in (S.PENDING, S.APPLIED, S.PARTIALLY_VERIFIED)},
    "verify": {s: frozenset({S.PARTIALLY_VERIFIED, S.VERIFIED, S.VERIFIED_LOCAL_ONLY, S.FAILED})
               for s in (S.APPLIED, S.PARTIALLY_VERIFIED)},
    "retry": {S.FAILED: frozenset({S.PENDING})},
    "cancel": {s: frozenset({S.CANCELLED})
               for s in (S.PENDING, S.APPLIED, S.PARTIALLY_VERIFIED, S.FAILED)},
}

#: the statuses each command reads its requests in
APPLICABLE = frozenset(TRANSITIONS["apply"])
VERIFIABLE = frozenset(TRANSITIONS["verify"])
RETRYABLE = frozenset(TRANSITIONS["retry"])
CANCELLABLE = frozenset(TRANSITIONS["cancel"])
VERIFIED = frozenset({S.VERIFIED, S.VERIFIED_LOCAL_ONLY})
#: requests the tool has finished with: nothing moves them, no alert once past their deadline
DONE = VERIFIED | {S.CANCELLED}

#: an apply's outcome said by ``--dry-run`` (which records nothing); statuses an apply never
#: leaves map to themselves
DRY_RUN: Mapping[RequestStatus, str] = {
    **{s: s.value for s in RequestStatus},
    S.APPLIED: "would_be_applied", S.PARTIALLY_VERIFIED: "would_be_applied",
    S.FAILED: "would_fail", S.PENDING: "would_stay_pending"}


def report_statuses() -> list[str]:
    """Every ``status`` a request entry of an erase report may carry: a status, or a dry run's
    word (``schemas/report.schema.json``'s enum; a test checks they agree)."""
    return list(dict.fromkeys([*(s.value for s in RequestStatus), *DRY_RUN.values()]))


def failure_words(failure: Mapping[str, object] | None) -> str:
    """Why a request failed, for a person (the ledger's ``failure`` JSON, decoded): a topic
    the cluster does not have, the subject found again by a rescan, or nothing scanned."""
    if not failure:
        return "no reason recorded"
    if "unknown_topic" in failure:
        return str(failure["unknown_topic"])
    if "residual_matches" in failure:
        first = failure.get("first") or []
        where = first[0] if isinstance(first, list) and first else None
        at = (f", the first in {where.get('dir')} at offset {where.get('offset')} (segment "
              f"{where.get('segment_base')})" if isinstance(where, Mapping) else "")
        n = failure["residual_matches"]
        return (f"the rescan found the subject again: {n} record{'s' if n != 1 else ''}{at}; "
                f"`erase retry` erases it again, `erase cancel` ends the request")
    if "nothing_scanned" in failure:
        return str(failure["nothing_scanned"])
    return "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sorted(failure.items()))


def deadline_words(request: Mapping[str, Any], now_ms: int | None = None) -> str:
    """The deadline's outcome in words: met (how long before it), missed, or still open."""
    deadline = request["deadline_ms"]
    done_at = request.get("verified_at_ms") if request["status"] in (
        RequestStatus.VERIFIED, RequestStatus.VERIFIED_LOCAL_ONLY) else None
    if done_at is not None:
        margin = (deadline - done_at) / 86_400_000
        return (f"met: verified {human_time(done_at)}, {margin:.1f} days before the deadline "
                f"({human_time(deadline)})" if done_at <= deadline else
                f"missed: verified {human_time(done_at)}, {-margin:.1f} days after the "
                f"deadline ({human_time(deadline)})")
    if request["status"] == RequestStatus.CANCELLED:
        return f"not applicable: cancelled (the deadline was {human_time(deadline)})"
    if now_ms is not None and now_ms > deadline:
        return f"missed: not verified by the deadline ({human_time(deadline)})"
    return f"open: not yet verified; the deadline is {human_time(deadline)}"
