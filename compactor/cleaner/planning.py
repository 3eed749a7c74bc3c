"""How a compaction round is executed, not what it decides: whether one task scans, plans
and writes a partition's round with one key table, or its groups go through the distributed
offset map, and why (the ``round_path`` and ``round_path_reason`` of a cleaned partition's
report line). None of this is a Kafka rule: Kafka's cleaner has one thread and one fixed
offset map (``log.cleaner.dedupe.buffer.size``); the records a round leaves are the same on
either path. The budget of one task (:data:`ONE_TASK_KEYS`, :data:`ONE_TASK_BYTES`), the
key-count projection that hands a round on early, and the choice are decided here only
(``tests/test_layout.py``).

PURE: no files, no Spark, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from compactor.cleaner.policy import CleaningPlan, fits_one_group
from compactor.model import SegmentInfo

#: a round of several groups is cleaned in one task with one key table
#: (``compactor.spark.writer.write_groups``) while the table holds at most this many keys;
#: the task stops deciding (before it writes anything) as soon as it holds more, and the
#: round goes through the distributed offset map. The table (32-byte slots, a power of two
#: of them, at most half full) for this many keys takes 256 MiB (512 MiB if the chunk that
#: passes the budget carries it past 4.19 M keys), plus the bytes of keys longer than 16:
#: twice Kafka's default ``log.cleaner.dedupe.buffer.size`` (128 MiB, about 5.6 M keys at
#: 24 bytes each).
ONE_TASK_KEYS = 4_000_000
#: a partition of more bytes than this is not offered to one task even when its round has few
#: keys: its groups are written in parallel through the distributed offset map
ONE_TASK_BYTES = 2 * 1024**3


#: the key budget's projection (:func:`over_task_keys`) speaks only once the newest this share
#: of a round's bytes is decided and its key table holds this many keys: a smaller sample says
#: too little of the rest (and an attempt stopped later has cost little)
PROJECT_AFTER_SHARE = 1 / 8
PROJECT_AFTER_KEYS = 100_000
#: a one-task round stops once its keys are projected above this multiple of the budget
PROJECT_MARGIN = 1.25


def projected_keys(keys: int, records: int, share: float) -> float:
    """The distinct keys a round is projected to hold when the newest ``share`` of its bytes
    held ``keys`` distinct keys among ``records`` records.

    The occupancy estimate: ``n`` records drawing their keys uniformly from ``K`` keys hold
    ``K (1 - e^(-n/K))`` distinct ones on average. ``K`` is solved from the sample, and the
    whole round (``records / share`` records) is drawn from it. Keys skewed towards a few,
    or new keys that replace old ones over time, make this an underestimate (the newest
    records then hold fewer distinct keys than the same number of older ones would). A
    newest part with more distinct keys than the rest, such as a full re-publish of every
    key at the end of the log, makes it an overestimate.
    """
    if records <= 0 or keys <= 0 or share <= 0:
        return float(keys)
    total = records / min(share, 1.0)
    ratio = keys / records
    if ratio >= 1.0:
        return total  # every record a new key so far: as many as records
    # (1 - e^-x) / x falls from 1 to 0 as x = n/K grows: bisect for the ratio seen
    low, high = 0.0, 2.0 / ratio + 2.0
    for _ in range(100):
        x = (low + high) / 2
        if -math.expm1(-x) / x > ratio:
            low = x
        else:
            high = x
    population = records / ((low + high) / 2)
    return population * -math.expm1(-total / population)


def over_task_keys(keys: int, records: int, share: float, budget: int) -> str | None:
    """Why a one-task round (``compactor.spark.writer.write_groups``) stops and hands its
    decisions to the distributed offset map, or ``None`` while it goes on: its key table
    holds more than ``budget`` keys (:data:`OVER_TASK_KEYS`), or, once the newest
    :data:`PROJECT_AFTER_SHARE` of its bytes and at least :data:`PROJECT_AFTER_KEYS` keys are
    in, the whole round is projected to hold more than :data:`PROJECT_MARGIN` times the
    budget (:func:`projected_keys`; :data:`PROJECTED_OVER_TASK_KEYS`). Both ways clean the
    same records: the projection only spares a round that would pass the budget late the
    cost of deciding most of it twice; a wrong projection costs time, never a record.

    Args:
        keys: the distinct keys in the table so far.
        records: the records decided so far.
        share: the share of the round's bytes decided so far.
        budget: the most keys the table may hold (``--task-keys``).
    """
    if keys > budget:
        return OVER_TASK_KEYS
    if (share >= PROJECT_AFTER_SHARE and keys >= PROJECT_AFTER_KEYS
            and projected_keys(keys, records, share) > PROJECT_MARGIN * budget):
        return PROJECTED_OVER_TASK_KEYS
    return None


#: the two ways a round is written (a cleaned partition's report line says which, and why:
#: ``round_path`` and ``round_path_reason``): by one task, or through the distributed offset map
ONE_TASK, OFFSET_MAP = "one_task", "offset_map"
#: why one task wrote it: the round is one group, or its groups' keys stayed within the budget
ONE_GROUP, WITHIN_TASK_KEYS = "one_group", "within_task_keys"
#: why the offset map did (:func:`offset_map_reason`, or a task's key table passed the budget
#: or was projected to: :func:`over_task_keys`)
OVER_TASK_BYTES, OVER_TASK_KEYS, TASK_KEYS_ZERO = "over_task_bytes", "over_task_keys", "task_keys_0"
PROJECTED_OVER_TASK_KEYS = "projected_over_task_keys"
ROUND_PATH_REASONS = (ONE_GROUP, WITHIN_TASK_KEYS, OVER_TASK_BYTES, OVER_TASK_KEYS,
                      PROJECTED_OVER_TASK_KEYS, TASK_KEYS_ZERO)


def one_task_scans(segments: Sequence[SegmentInfo], segment_bytes: int,
                   segment_index_bytes: int) -> bool:
    """Whether one task scans, plans and decides a partition's round
    (``compactor.spark.stages.clean_in_one_pass``): its round is one group
    (:func:`fits_one_group`), or its segments total at most :data:`ONE_TASK_BYTES`. Whether
    that task writes it too, :func:`offset_map_reason` says; a round it does not write goes
    through the distributed offset map with the batch decisions the task made. A larger
    partition is scanned a task per segment."""
    return (fits_one_group(segments, segment_bytes, segment_index_bytes)
            or sum(s.size_bytes for s in segments) <= ONE_TASK_BYTES)


def offset_map_reason(segments: Sequence[SegmentInfo], segment_bytes: int,
                      segment_index_bytes: int, task_keys: int = ONE_TASK_KEYS) -> str | None:
    """Why a partition's round is not offered to one task to write
    (``compactor.spark.stages.clean_in_one_pass``) but goes through the distributed offset
    map, or ``None`` when it is offered: its round is one group (:func:`fits_one_group`), or
    its segments total at most :data:`ONE_TASK_BYTES` and ``task_keys`` allows several groups
    at all (the task then writes them unless its key table comes to hold more than
    ``task_keys`` keys: :data:`OVER_TASK_KEYS`)."""
    if fits_one_group(segments, segment_bytes, segment_index_bytes):
        return None
    if task_keys <= 0:
        return TASK_KEYS_ZERO
    if not one_task_scans(segments, segment_bytes, segment_index_bytes):
        return OVER_TASK_BYTES
    return None


def round_path(plan: CleaningPlan, *, by_one_task: bool, offset_map_why: str | None,
               handed_on: str | None) -> tuple[str, str]:
    """How a partition's round was written, for its report line: by its one-pass task (one
    group, or several within the key budget), or through the distributed offset map and why:
    not offered to one task (``offset_map_why``: :func:`offset_map_reason`), or offered and
    handed on, as its task says (``handed_on``: its key table passed the budget or was
    projected to: :func:`over_task_keys`)."""
    if by_one_task:
        return ONE_TASK, ONE_GROUP if len(plan.groups) == 1 else WITHIN_TASK_KEYS
    return OFFSET_MAP, offset_map_why or handed_on or OVER_TASK_KEYS
