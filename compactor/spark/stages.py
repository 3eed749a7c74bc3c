"""The Spark stages the driver runs, each returning collected Python values: what a round
and an erasure need from the executors (header scans, plans, the offset map, rewrites), built
from the DataFrame transforms of :mod:`compactor.spark.transforms`. The driver modules
(:mod:`compactor.maintenance`) decide what to do with the results; nothing here swaps or
deletes a live file."""

from __future__ import annotations

import functools
import heapq
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from compactor.cleaner.planning import ONE_TASK_KEYS
from compactor.cleaner.policy import BatchHeader, CleaningPlan, PartitionInput
from compactor.config import TopicConfig
from compactor.erasure import ledger, outcomes
from compactor.erasure.ledger import OutcomeRows, RunLedger
from compactor.erasure.outcomes import KIND_COLUMNS, ROW_COLUMNS
from compactor.erasure.rules import request_matches
from compactor.erasure.sketch import DigestFilter
from compactor.model import CommitMessage, SegmentInfo
from compactor.schemas.delta import ERASURE_REQUESTS_TABLE
from compactor.schemas.spark import (
    ERASURE_TASK,
    GROUP_SLOT,
    REMOTE_SEGMENT_TASK,
    REQUEST_OUTCOME,
    SEGMENT_TASK,
)
from compactor.spark import delta, transforms
from compactor.spark.progress import spark_step
from compactor.state import tables as state_tables

#: Spark's limit on the bytes of rows in one Arrow batch sent to a Python task
ARROW_BATCH_LIMIT = "spark.sql.execution.arrow.maxBytesPerBatch"
#: the session's settings a round sets for itself (:func:`round_settings`)
ROUND_SETTINGS = ("spark.sql.adaptive.coalescePartitions.enabled", "spark.sql.shuffle.partitions",
                  ARROW_BATCH_LIMIT)
#: the bytes of rows a round's Python task gets from the JVM in one Arrow batch at most. The
#: offset map's bucket tasks take rows of about a megabyte each (a group's keyed records in one
#: bucket, :func:`compactor.spark.transforms.key_buckets`), which Spark's own limits (10,000
#: rows or 64 MiB a batch) sent as one batch of a task's whole input, about 18 MB on the 1 M-key
#: benchmark log: its first tasks then took 0.5-1.3 s to receive it, most of it the JVM's own
#: CPU, where batches of 2 MiB take under 0.12 s (the stage's wall 1.4-1.6 s -> 0.5-0.6 s; 16
#: MiB did not help, 4 MiB halfway; docs/benchmarks-history.md, the fifteenth part). The
#: grouped stages' batches (a group's decisions or offsets) stay far below it.
ROUND_ARROW_BATCH_BYTES = 2 << 20


class HasSegments(Protocol):
    """A partition as far as the segment scans care (``PartitionInput``, ``PartitionLog``)."""

    @property
    def segments(self) -> Sequence[SegmentInfo]: ...


def size_shuffles(spark: SparkSession, inputs: Mapping[int, PartitionInput]) -> None:
    """Shuffle settings for a round (the session's own are restored after it), and its Arrow
    batches of at most :data:`ROUND_ARROW_BATCH_BYTES` (or the session's own limit if lower).

    Adaptive execution must not coalesce shuffle partitions: the grouped stages (plan,
    decide, scan, rewrite — one Python task per partition or group) shuffle little data but do
    heavy work per key, and coalescing them by bytes runs them all in one task, on one core.
    Spark's default of 200 shuffle partitions costs seconds of task overhead on small log dirs;
    when the session still has that default, size it to the input: two per core, or one per
    64 MiB of segments when that is more."""
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    # a registered setting: the session's value or Spark's default ("67108864b"), never unset
    own = spark_bytes(spark, spark.conf.get(ARROW_BATCH_LIMIT) or "64m")
    spark.conf.set(ARROW_BATCH_LIMIT, str(min(own, ROUND_ARROW_BATCH_BYTES)))
    if spark.conf.get("spark.sql.shuffle.partitions") != "200":
        return
    wanted = max(2 * spark.sparkContext.defaultParallelism, -(-input_bytes(inputs) // (64 << 20)))
    spark.conf.set("spark.sql.shuffle.partitions", str(wanted))


def spark_bytes(spark: SparkSession, value: str) -> int:
    """A byte size as Spark reads its settings (``64m``, ``67108864b``, ``2048``: bytes
    without a unit), by Spark's own parser (``JavaUtils.byteStringAsBytes``)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic session's driver
    return int(jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(value))


def group_slots(spark: SparkSession, groups: Sequence[tuple[int, int]]) -> DataFrame:
    """``GROUP_SLOT`` rows for ``(tp id, group base)`` pairs: slot values that Spark's hash
    partitioning sends to shuffle partitions of their own.

    The grouped stages (key scan, rewrite) run one Python task per group, and a group is
    heavy. Hashing the groups themselves into the shuffle partitions puts two of them in one
    task every so often (birthday odds: two out of four groups in 17 partitions about a third
    of the time), and that task then doubles the stage's time while cores idle. Slots are
    found by asking Spark which partition each candidate value hashes to (the same hash its
    shuffles use); the session's shuffle partitions are raised to the number of groups when
    lower, and adaptive execution must not coalesce them (the round's setting, see
    :func:`size_shuffles`)."""
    n = max(len(groups), int(spark.conf.get("spark.sql.shuffle.partitions") or 0))
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    slots = partition_slots(spark, n)
    return spark.createDataFrame([(tp_id, base, slots[k])
                                  for k, (tp_id, base) in enumerate(groups)], GROUP_SLOT)


def partition_slots(spark: SparkSession, n: int) -> list[int]:
    """``n`` values that Spark's hash partitioning into ``n`` partitions sends one to each
    partition (the ``k``-th to partition ``k``): found by asking Spark which partition each
    candidate value hashes to, with the hash its shuffles use. The candidates come back as
    Arrow columns and the smallest of each partition is kept in numpy (the offset map's
    buckets can number hundreds of thousands: 8 candidates each). Asked once per ``n`` in a
    process (each asking is a Spark job of 0.2-0.3 s)."""
    if n in _SLOTS:
        return list(_SLOTS[n])
    slot_of: dict[int, int] = {}
    start = 0
    while len(slot_of) < n:
        probe = (spark.range(start, start + 8 * n)
                 .select("id", F.pmod(F.hash("id"), F.lit(n)).alias("partition"))
                 .toArrow())
        ids = probe.column("id").to_numpy()
        order = np.argsort(ids, kind="stable")
        partitions, first = np.unique(probe.column("partition").to_numpy()[order],
                                      return_index=True)
        for partition, value in zip(partitions.tolist(), ids[order][first].tolist(),
                                    strict=True):
            slot_of.setdefault(partition, value)
        start += 8 * n
    _SLOTS[n] = tuple(slot_of[k] for k in range(n))
    return list(_SLOTS[n])


#: :func:`partition_slots` by ``n``, for the process: Spark's hash partitioning of a value
#: (``Murmur3Hash`` with seed 42, ``HashPartitioning``) is the same in every session
_SLOTS: dict[int, tuple[int, ...]] = {}


def segment_tasks(spark: SparkSession, partitions: Mapping[int, HasSegments]) -> DataFrame:
    """One ``SEGMENT_TASK`` row per segment of the partitions, in tasks of about equal bytes
    (:func:`balanced_tasks`)."""
    return balanced_tasks(spark, [
        ((i, s.base_offset, s.log_path, nxt.base_offset if nxt else None), s.size_bytes)
        for i, p in partitions.items()
        for s, nxt in zip(p.segments, [*p.segments[1:], None], strict=True)], SEGMENT_TASK)


def balanced_tasks(spark: SparkSession, rows: Sequence[tuple[tuple[Any, ...], int]],
                   schema: StructType) -> DataFrame:
    """``rows`` (each a row of ``schema`` and the bytes its task reads) in tasks of about equal
    bytes: at most :data:`TASKS_PER_CORE` a core, each row, the largest first, into
    the task with the fewest bytes so far."""
    count = max(1, min(len(rows), spark.sparkContext.defaultParallelism * TASKS_PER_CORE))
    tasks: list[list[tuple[Any, ...]]] = [[] for _ in range(count)]
    loads = [(0, t) for t in range(count)]
    for row, size in sorted(rows, key=lambda e: -e[1]):
        load, t = heapq.heappop(loads)
        tasks[t].append(row)
        heapq.heappush(loads, (load + size, t))
    # one element a slice, so one task a list: no shuffle places the rows
    placed = spark.sparkContext.parallelize(tasks, count).flatMap(lambda task: task)
    return spark.createDataFrame(placed, schema)


#: the tasks of a scan or an erasure's rewrite a core at most. Measured on the erasure
#: benchmark's 20 segments (30 Nov, 2 cores, a 1,000-subject verify): 8 tasks placed by
#: ``repartition`` (round robin) ran 104-487 ms each and the verify took 1.55-1.57 s; 8 of
#: equal bytes 170-357 ms, 1.42 s; 4 of equal bytes 335-409 ms, 1.22 s (1.54 s of tasks,
#: against 2.0: each task costs its own); 2, 1.22 s, with no room left for a slow one
TASKS_PER_CORE = 2


def write_cleaned_segments(spark: SparkSession, inputs: Mapping[int, PartitionInput],
                           plans: Mapping[int, CleaningPlan], *,
                           writer: str = "native",
                           on_stage: Callable[[str], None] | None = None,
                           headers: DataFrame | None = None,
                           decisions: DataFrame | None = None) -> list[CommitMessage]:
    """The executor part of a round: ``.cleaned`` segments written next to the live ones,
    one commit message per group (nothing is swapped yet).

    The distributed offset map only serves partitions whose round has several groups: in a
    one-group round every key's latest record is in the group itself, so the map-side combine
    of the scan would leave nothing for the shuffle to supersede, and the writer decides the
    whole group alone (:func:`compactor.cleaner.rebatch.iter_drops`). Those partitions skip
    the key scan and the decision rows too: the task that writes the group decides its
    batches from the header rows (:func:`transforms.rewrite_whole_partitions`). Both kinds
    are written by one Spark job, the offset map's stages included. ``headers`` and
    ``decisions``, when given, are the rows
    :func:`scan_and_plan` cached (the decisions of every partition of ``plans`` with several
    groups); otherwise they are made here."""
    if not plans:
        return []
    cleaning = {i: inputs[i] for i in plans}
    if headers is None:
        headers = segment_tasks(spark, cleaning).transform(transforms.scan_headers(writer))
    slots = group_slots(spark, [(i, g[0]) for i, p in plans.items() for g in p.groups])
    whole = {i: p for i, p in plans.items() if len(p.groups) == 1}
    mapped = {i: p for i, p in plans.items() if len(p.groups) > 1}
    writes: list[DataFrame] = []
    persisted: list[DataFrame] = []
    if whole:
        writes.append(headers.transform(transforms.rewrite_whole_partitions(
            cleaning, whole, slots, writer=writer)))
    if mapped:
        if decisions is None:
            decisions = (headers.transform(transforms.decide_batches(cleaning, mapped))
                         .persist())
            persisted.append(decisions)
        else:
            decisions = decisions.where(F.col("tp_id").isin(list(mapped)))
        buckets = offset_map_buckets(spark, _group_bytes(cleaning, mapped))
        superseded = (decisions.transform(transforms.scan_keys(
            cleaning, mapped, slots, partition_slots(spark, buckets), writer=writer))
                      .transform(transforms.superseded_records(buckets)))
        writes.append(transforms.rewrite_groups(cleaning, mapped, slots,
                                                writer=writer)(decisions, superseded))
    # one job: the offset map's key scan and buckets shuffle their output straight to the
    # writers (a cached map and a job of its own cost a tenth of a round, docs/benchmarks.md)
    with spark_step(spark, "rewrite", total_bytes=_group_bytes(cleaning, plans)):
        rows = functools.reduce(DataFrame.unionByName, writes).collect()
    for df in persisted:
        df.unpersist()
    if on_stage:
        on_stage("rewrite")
    return [transforms.message_from_row(r) for r in rows]


#: segment bytes of a round per bucket of the distributed offset map at most: a bucket's task
#: holds its keyed records in memory (:func:`compactor.spark.transforms.superseded_records`,
#: about 100 bytes a record at its peak), so 256 MiB of 110-byte records, at most 2.4 M, take
#: about 250 MB
OFFSET_MAP_BUCKET_BYTES = 256 << 20


def offset_map_buckets(spark: SparkSession, map_bytes: int) -> int:
    """The distributed offset map's buckets for a round whose groups read ``map_bytes``: two
    per core, or more when its buckets would hold more than :data:`OFFSET_MAP_BUCKET_BYTES`
    of input each. Not the session's shuffle partitions, which the round sizes for its groups
    (one per 64 MiB of segments, :func:`size_shuffles`): a bucket's task is cheap next to a
    group's, so past two per core each costs Spark's per-task work and one more row a group
    for nothing. On ``bench/kafka_cleaner.py``'s 1.1 GB log, 5 buckets where it had 17: the
    map's stage 0.75-0.85 -> 0.48 s of task time and the writers' shuffle 13.4 -> 3.9 MB
    (30 Nov, docs/benchmarks-history.md)."""
    cores = 2 * spark.sparkContext.defaultParallelism
    return max(1, cores, -(-map_bytes // OFFSET_MAP_BUCKET_BYTES))


def _group_bytes(inputs: Mapping[int, HasSegments], plans: Mapping[int, CleaningPlan]) -> int:
    """The bytes of the source segments of the plans' groups (a round's input)."""
    total = 0
    for i, inp in inputs.items():
        sizes = {s.base_offset: s.size_bytes for s in inp.segments}
        total += sum(sizes[b] for g in plans[i].groups for b in g)
    return total


def input_bytes(parts: Mapping[int, HasSegments]) -> int:
    """The bytes of the partitions' segments: what a scan of them reads."""
    return sum(s.size_bytes for p in parts.values() for s in p.segments)


@contextmanager
def round_settings(spark: SparkSession,
                   inputs: Mapping[int, PartitionInput]) -> Iterator[None]:
    """Shuffle and Arrow settings sized for one round (:func:`size_shuffles`), the session's
    own restored afterwards."""
    saved = {key: spark.conf.get(key) for key in ROUND_SETTINGS}
    try:
        size_shuffles(spark, inputs)
        yield
    finally:
        for key, value in saved.items():
            if value is not None:
                spark.conf.set(key, value)


def balanced_bins(sizes: Mapping[int, int], count: int) -> list[list[int]]:
    """The keys of ``sizes`` in at most ``count`` bins of nearly equal total size (largest
    first into the lightest bin), the heaviest bin first: Spark starts tasks in partition
    order, so the long ones start first."""
    count = max(1, min(count, len(sizes)))
    heap = [(0, b) for b in range(count)]
    bins: list[list[int]] = [[] for _ in range(count)]
    for key in sorted(sizes, key=lambda k: (-sizes[k], k)):
        load, b = heapq.heappop(heap)
        bins[b].append(key)
        heapq.heappush(heap, (load + sizes[key], b))
    loads = {b: load for load, b in heap}
    return [bins[b] for b in sorted(range(count), key=lambda b: (-loads[b], b)) if bins[b]]


@dataclass(frozen=True)
class OnePass:
    """What :func:`clean_in_one_pass` found and wrote."""

    #: the plans of the partitions with at least one batch
    plans: dict[int, CleaningPlan]
    #: the first error (``CompactorError.to_dict()``) of each partition a check refused
    errors: dict[int, dict[str, Any]]
    #: the commit messages of the groups written
    messages: list[CommitMessage]
    #: why each round planned but not written here goes to the distributed offset map
    #: (``compactor.cleaner.planning.over_task_keys``, or ``task_keys_0``)
    handed_on: dict[int, str]
    #: those rounds' ``DECISION`` rows, cached for the offset map (``None``: no such round)
    scanned: Scanned | None


def clean_in_one_pass(spark: SparkSession, inputs: Mapping[int, PartitionInput], *,
                      write: bool, writer: str = "native",
                      task_keys: int = ONE_TASK_KEYS) -> OnePass:
    """Scan, plan and (when ``write``) write the partitions in one Spark job of one stage,
    a task per bin of partitions (:func:`transforms.clean_in_one_pass`): for partitions
    small enough for one task (:func:`compactor.cleaner.planning.one_task_scans`), where the
    header rows, plans, decisions and offset-map shuffle of the general path would cost more
    than the work itself. The tasks come from ``spark.range``, so no row is serialized and
    nothing is shuffled to start them.

    Args:
        task_keys: a round of several groups is written here unless its key table comes
            to hold more than this many keys (it is then planned and decided, not written;
            with 0 it is never tried).

    Returns:
        The plans, errors and commit messages, and, when a round passed ``task_keys`` (or
        was projected to), why, with the ``DECISION`` rows of those rounds cached for the
        distributed offset map (the driver neither scans nor decides them again; the caller
        unpersists them). Should an executor be lost, Spark computes the lost rows again
        by running their tasks again, as it retries a failed task: those write the same
        ``.cleaned`` bytes again, and nothing is swapped before the rewrite's last stage.
    """
    found = OnePass({}, {}, [], {}, None)
    if not inputs:
        return found
    bins = balanced_bins({i: input_bytes({i: inp}) for i, inp in inputs.items()},
                         4 * spark.sparkContext.defaultParallelism)
    done = (spark.range(len(bins), numPartitions=len(bins))
            .transform(transforms.clean_in_one_pass(inputs, bins, write=write, writer=writer,
                                                    task_keys=task_keys)))
    if write:
        done = done.persist()
    with spark_step(spark, "one_pass", total_bytes=input_bytes(inputs)):
        rows = done.select("tp_id", "plan", "messages", "error", "handed_on").collect()
    for r in rows:
        if r.error is not None:
            found.errors[r.tp_id] = json.loads(r.error)
        elif r.plan is not None:
            found.plans[r.tp_id] = transforms.plan_from_row(r.plan.asDict())
        found.messages.extend(transforms.message_from_row(m) for m in r.messages or ())
        if r.handed_on is not None:
            found.handed_on[r.tp_id] = r.handed_on
    if not found.handed_on:
        done.unpersist()
        return found
    decisions = (done.where(F.col("decisions").isNotNull())
                 .select(F.explode("decisions").alias("d")).select("d.*"))
    return replace(found, scanned=Scanned(None, decisions, (done,)))


@dataclass(frozen=True)
class Scanned:
    """What :func:`scan_and_plan` and :func:`clean_in_one_pass` leave on the executors for
    the rewrite: the batch header rows of the partitions scanned (``None``: none), the
    ``DECISION`` rows of the rounds the distributed offset map writes (``None``: not asked
    for), and the cached frames they come from."""

    headers: DataFrame | None
    decisions: DataFrame | None
    cached: tuple[DataFrame, ...]

    def __add__(self, other: Scanned | None) -> Scanned:
        """Both partitions' rows (of different partitions)."""
        if other is None:
            return self
        headers = [df for df in (self.headers, other.headers) if df is not None]
        decisions = [df for df in (self.decisions, other.decisions) if df is not None]
        return Scanned(functools.reduce(DataFrame.unionByName, headers) if headers else None,
                       functools.reduce(DataFrame.unionByName, decisions) if decisions
                       else None, self.cached + other.cached)

    def unpersist(self) -> None:
        for df in self.cached:
            df.unpersist()


def scan_and_plan(spark: SparkSession, inputs: Mapping[int, PartitionInput], *,
                  writer: str = "native", decide: bool = False
                  ) -> tuple[dict[int, CleaningPlan], dict[int, dict[str, Any]], Scanned | None]:
    """Scan every batch header of the partitions (framed by the ``writer`` engine) and plan
    their rounds on the executors; with ``decide``, the task that plans a round of several
    groups decides its batches too (:func:`transforms.plan_rounds`).

    Returns:
        The plans of the partitions with at least one batch, the first error (as
        ``CompactorError.to_dict()``) of each partition a segment check or a partition-wide
        check refused, and the rows cached for the rewrite (the caller unpersists them).
    """
    plans: dict[int, CleaningPlan] = {}
    errors: dict[int, dict[str, Any]] = {}
    if not inputs:
        return plans, errors, None
    headers = (segment_tasks(spark, inputs).transform(transforms.scan_headers(writer))
               .persist())
    with spark_step(spark, "scan", total_bytes=input_bytes(inputs)):
        failed = headers.where(F.col("error").isNotNull()).select("tp_id", "error").collect()
    for row in failed:
        if row.tp_id in inputs and row.tp_id not in errors:
            errors[row.tp_id] = json.loads(row.error)
    readable = {i: inp for i, inp in inputs.items() if i not in errors}
    valid = headers.where(F.col("tp_id").isin(list(readable)))
    planned = valid.transform(transforms.plan_rounds(readable, decide=decide))
    if decide:
        planned = planned.persist()
    with spark_step(spark, "plan"):
        rows = planned.where(F.col("plan").isNotNull()).select("plan.*").collect()
    for row in rows:
        if row.error is not None:  # a partition-wide check failed: never rewritten
            errors[row.tp_id] = json.loads(row.error)
        else:
            plans[row.tp_id] = transforms.plan_from_row(row.asDict())
    if not decide:
        return plans, errors, Scanned(headers, None, (headers,))
    return plans, errors, Scanned(headers, planned.where(F.col("plan").isNull()).drop("plan"),
                                  (headers, planned))


# -- erasure ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RemoteScan:
    """Remote segments an erasure scan reads too (``tp_id``: its own ids, beside the local
    partitions'), fetched through the broker's RemoteStorageManager with its
    ``server_properties`` and the remote log metadata of ``log_dir``, by the tier's helper
    in ``helper`` (:mod:`compactor.remote.tier`)."""

    helper: str
    server_properties: str
    log_dir: str
    segments: Mapping[int, Sequence[tuple[str, int, int]]]  # tp id -> (id, start, end)


#: what a match carries: the candidate's place (from the scan) and what the request says of it
MATCH_FROM_SCAN = ("tp_id", "segment_base", "position", "offset", "key_digest",
                   "bare_tombstone")
MATCH_FROM_REQUEST = ("request_id", "selector", "leave_tombstone", "status", "places",
                      "tombstones_left")
#: the scan's columns a match on the driver reads (the segment rows and the candidates)
CANDIDATE_COLUMNS = ("tp_id", "segment_base", "kind", "position", "offset", "name", "digest",
                     "key_digest", "bare_tombstone", "batches", "records", "error")


#: the requests of a run, read at one table version: their rows on the driver when the
#: ledger's summary kept them (few: :attr:`compactor.erasure.ledger.PendingSummary.rows`), else
#: the ledger they are read from again, a pass at a time (:class:`RunLedger`)
RunRequests = list[dict[str, Any]] | RunLedger


def requests_frame(spark: SparkSession, run: RunLedger) -> DataFrame:
    """A run's requests as a DataFrame read by delta-spark at the run's version, the
    subject's digest as 32 bytes (``digest``): what the executors give each request its
    outcome from when the driver cannot hold the outcomes by kind."""
    path = state_tables.table_path(run.state_dir, ERASURE_REQUESTS_TABLE)
    return delta.read_requests(spark, path, run.statuses, version=run.version,
                               not_applied_at=run.not_applied_at)


def erasure_matches(spark: SparkSession, parts: Mapping[int, HasSegments],
                    topics: Mapping[int, str], requests: RunRequests,
                    header_names: frozenset[str], digests: DigestFilter, *,
                    writer: str = "native", remote: RemoteScan | None = None,
                    with_headers: bool = False
                    ) -> tuple[list[Row], list[Row], dict[int, list[BatchHeader]]]:
    """Every segment of the partitions scanned, and its records matched against the ledger's
    ``requests`` on the driver (:func:`compactor.erasure.rules.request_matches`). The scan
    sends to the match only the records a Bloom filter of the requests' digests may hold
    (:mod:`compactor.erasure.sketch`, ``digests``: built as the driver streamed the ledger's
    summary, broadcast; it holds bits, no subject), and one job brings back its segment
    rows, those candidates and, ``with_headers``, the batch headers: the log is read once
    and nothing is cached. A run of many requests (:data:`RunRequests`) reads from the
    ledger only the requests with a candidate's digest
    (:func:`compactor.erasure.ledger.requests_with_digests`). Returns one
    row per segment (tp_id, segment_base, batches, records, error) and one per matched record
    and request (:data:`MATCH_FROM_SCAN`, :data:`MATCH_FROM_REQUEST`: the request's selector,
    tombstone choice, status, places and tombstones left come with it).

    Args:
        topics: the topic of each partition id of ``parts``.
        header_names: the header names some request matches on (the scan digests only
            those headers' values).
        digests: the filter of every digest ``requests`` holds
            (:attr:`compactor.erasure.ledger.PendingSummary.digests`).
        writer: the engine that reads the records (``native``: the kernels digest them;
            ``pure``: the reference).
        remote: remote segments scanned with them (one task per segment).
        with_headers: also return the batch headers, read by the same scan, of every local
            partition with a match that its partition-wide checks read (an apply's rewrite:
            one read of the log for both; :func:`compactor.erasure.rules.partition_check_batches`).
    """
    remote_rows = [(i, sid, start, end) for i, found in (remote.segments.items() if remote
                                                          else ()) for sid, start, end in found]
    if not any(p.segments for p in parts.values()) and not remote_rows:
        return [], [], {}
    with spark_step(spark, "erase_scan", total_bytes=input_bytes(parts)):
        sketch = spark.sparkContext.broadcast(digests)
        scanned = (segment_tasks(spark, parts)
                   .transform(transforms.scan_erasure(header_names, sketch, writer,
                                                      with_headers=with_headers)))
        if remote is not None and remote_rows:
            scanned = scanned.unionByName(
                spark.createDataFrame(remote_rows, REMOTE_SEGMENT_TASK)
                .repartition(len(remote_rows))
                .transform(transforms.scan_remote_erasure(
                    remote.helper, remote.server_properties, remote.log_dir, header_names,
                    sketch, writer)))
        try:
            # one job: the segment rows, the filter's candidates (and the headers)
            batches, rows = _scanned_rows(scanned, with_headers=with_headers)
        finally:
            sketch.destroy()
    segments = [r for r in rows if r.kind == "segment"]
    candidates = [r for r in rows if r.kind != "segment"]
    if isinstance(requests, RunLedger):
        requests = ledger.requests_with_digests(
            requests, {bytes(c.digest) for c in candidates}, HELD_BY_KIND)
    # the partitions scanned here, local or remote
    where = {i: t for i, t in topics.items()
             if i in parts or (remote is not None and i in remote.segments)}
    matches = _matched_on_driver(candidates, requests, where)
    hit = sorted({r.tp_id for r in matches if r.tp_id in parts}) if with_headers else []
    table = (batches.filter(pc.is_in(batches["tp_id"], pa.array(hit, batches["tp_id"].type)))
             if hit and batches is not None else None)
    headers = {i: transforms.headers_from_arrow(table.filter(pc.equal(table["tp_id"], i)))
               for i in hit} if table is not None else {}
    return segments, matches, headers


def _scanned_rows(scanned: DataFrame, *, with_headers: bool
                  ) -> tuple[pa.Table | None, list[Row]]:
    """A small run's scan read by one job: its segment and candidate rows
    (:data:`CANDIDATE_COLUMNS`) and, ``with_headers``, its batch header rows (``tp_id`` and
    the header fields), in Arrow. Neither cached nor read twice: an apply's scan with
    headers took 2.3-2.5 s where a verify's took 1.3-1.4 s, when its scan was persisted and
    read by a job for the candidates and another for the headers."""
    if not with_headers:
        return None, scanned.where(F.col("kind") != "batch").select(*CANDIDATE_COLUMNS).collect()
    table = scanned.toArrow()
    batch = pc.equal(table["kind"], "batch")
    rest = table.filter(pc.invert(batch)).select(list(CANDIDATE_COLUMNS))
    return (table.filter(batch).select(["tp_id", *transforms.HEADER_FIELDS]),
            [Row(**r) for r in rest.to_pylist()])


def _matched_on_driver(candidates: Sequence[Row], requests: Sequence[Mapping[str, Any]],
                       topics: Mapping[int, str]) -> list[Row]:
    """The scan's ``candidates`` (the records the Bloom filter kept) in the partitions of
    ``topics`` matched against the ``requests`` rows held on the driver
    (:func:`compactor.erasure.rules.request_matches`)."""
    by_digest: dict[bytes, list[Mapping[str, Any]]] = {}
    for r in requests:
        by_digest.setdefault(r["digest"], []).append(r)
    found = []
    for c in candidates:
        for r in by_digest.get(bytes(c.digest), ()) if c.tp_id in topics else ():
            if request_matches(r, kind=c.kind, name=c.name, digest=c.digest,
                               topic=topics[c.tp_id]):
                found.append(Row(**{n: c[n] for n in MATCH_FROM_SCAN},
                                 **{n: r[n] for n in MATCH_FROM_REQUEST}))
    return found


def outcome_summary(result: DataFrame, columns: Sequence[str], limit: int) -> tuple[
        dict[str, int], list[dict[str, Any]]]:
    """Of ``REQUEST_OUTCOME`` rows: how many ended in each status (an ``update``'s new
    status; the others by their outcome), and the first ``limit`` rows by request id with
    ``columns`` (the driver holds these, never all the requests)."""
    kind = F.when(F.col("outcome") == "update", F.col("status")).otherwise(F.col("outcome"))
    counts = {r["kind"]: r["n"] for r in result.groupBy(kind.alias("kind"))
              .agg(F.count("*").alias("n")).collect()}
    shown = [r.asDict() for r in result.select(*columns).orderBy("request_id")
             .limit(limit).collect()]
    return counts, shown


class KindOutcomes:
    """A run's outcomes held on the driver by kind, for a run of many requests of which few
    are :attr:`compactor.erasure.outcomes.RunContext.individual`: ``own``, the outcomes of
    those; ``kinds``, each kind (``topic``, ``status``, ``places``) with the outcome its other
    requests get. The ledger MERGEs them by kind (:func:`compactor.erasure.ledger.merge_kinds`);
    when it cannot (the table moved since the run read it, or is too large for the driver to
    rewrite), :meth:`frame` gives every request's outcome, computed on the executors then."""

    def __init__(self, own: list[dict[str, Any]],
                 kinds: list[tuple[dict[str, Any], dict[str, Any]]],
                 frame: Callable[[], DataFrame]) -> None:
        self.own, self.kinds = own, kinds
        self._build = frame
        self._frame: DataFrame | None = None

    def frame(self) -> DataFrame:
        """Every request's outcome (:func:`request_outcomes`), built once, persisted."""
        if self._frame is None:
            self._frame = self._build()
        return self._frame

    def unpersist(self) -> None:
        if self._frame is not None:
            self._frame.unpersist()


#: a run's outcomes (``REQUEST_OUTCOME`` rows): on the driver when it computed them there,
#: by kind when the requests are many but few are individual, else a persisted DataFrame on
#: the executors
RunResult = DataFrame | list[dict[str, Any]] | KindOutcomes


@dataclass(frozen=True, slots=True)
class RunOutcomes:
    """Every request's outcome of a run (for the ledger's MERGE:
    :func:`compactor.spark.ledger.merge_outcomes`), how many ended in each status and the
    first of them by request id (:func:`outcome_summary`)."""

    result: RunResult
    counts: dict[str, int]
    shown: list[dict[str, Any]]

    def unpersist(self) -> None:
        if not isinstance(self.result, list):
            self.result.unpersist()


#: a run of many requests holds its outcomes by kind (:class:`KindOutcomes`) when at most
#: this many are individual and at most this many kinds
HELD_BY_KIND = 20_000


def run_outcomes(spark: SparkSession, requests: RunRequests,
                 outcome: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                 individual: Collection[str], columns: Sequence[str], limit: int
                 ) -> RunOutcomes:
    """The outcomes of a run's ``requests``, summarized with ``columns`` and ``limit``:
    computed on the driver when it holds their rows
    (:func:`compactor.erasure.outcomes.of_rows`); by kind when they are many but few are
    individual and few kinds (one pass over the ledger on the driver:
    :func:`compactor.erasure.ledger.outcome_rows`); else on the executors
    (:func:`request_outcomes`, the requests read by delta-spark). No Spark job in the first
    two ways. Each way the same rows, counts and report (tested); the caller unpersists the
    result."""
    if isinstance(requests, RunLedger):
        if len(individual) <= HELD_BY_KIND:
            read = ledger.outcome_rows(requests, individual, limit, HELD_BY_KIND)
            if read is not None:
                return _held_by_kind(spark, requests, read, outcome, individual, columns,
                                     limit)
        frame = request_outcomes(spark, requests_frame(spark, requests), outcome, individual)
        try:
            return RunOutcomes(frame, *outcome_summary(frame, columns, limit))
        except BaseException:
            frame.unpersist()
            raise
    rows = list(outcomes.of_rows(requests, outcome, individual))
    return RunOutcomes(rows, *outcomes.summary(rows, columns, limit))


def _held_by_kind(spark: SparkSession, run: RunLedger, read: OutcomeRows,
                  outcome: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                  individual: Collection[str], columns: Sequence[str], limit: int
                  ) -> RunOutcomes:
    """A run's outcomes held by kind (:class:`KindOutcomes`) from what the ledger's pass
    read: the row function runs on the driver once an individual request and once a
    kind."""
    own = list(outcomes.of_rows(read.own, outcome, individual))
    kinds = [(k, outcomes.kind_outcome(k, outcome)) for k in read.kinds]
    counts, shown = outcomes.summary_by_kind(
        own, [(o, k["count"]) for k, o in kinds], read.first, outcome, individual, columns,
        limit)
    held = KindOutcomes(own, [({c: k[c] for c in KIND_COLUMNS}, o) for k, o in kinds],
                        lambda: request_outcomes(spark, requests_frame(spark, run), outcome,
                                                 individual))
    return RunOutcomes(held, counts, shown)


#: at most this many kinds of request rows (:func:`request_outcomes`) are broadcast to the
#: join; more are joined by shuffle
BROADCAST_KINDS = 100_000


def request_outcomes(spark: SparkSession, requests: DataFrame,
                     outcome: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                     individual: Collection[str] | None = None) -> DataFrame:
    """``outcome`` (a pure function of a request row: :mod:`compactor.erasure.outcomes`)
    applied to every row of ``requests`` on the executors: ``REQUEST_OUTCOME`` rows, each
    carrying the status it was computed from (``expected_status``), for a MERGE that changes
    only rows still in that status. Persisted: the caller counts, reports and merges it.

    With ``individual`` (the run's :attr:`compactor.erasure.outcomes.RunContext.individual`),
    ``outcome`` runs once a row for those requests only; every other row gets the outcome of
    its kind (topic, status, places), computed once a kind and joined back in Spark SQL."""
    from pyspark import StorageLevel

    rows = requests.select(*ROW_COLUMNS)
    if individual is None:
        result = rows.transform(transforms.request_outcomes(outcome))
    else:
        ids = spark.createDataFrame([(r,) for r in sorted(individual)], "request_id string")
        own = (rows.join(F.broadcast(ids), "request_id", "left_semi")
               .transform(transforms.request_outcomes(outcome)))
        shared = rows.join(F.broadcast(ids), "request_id", "left_anti")
        # few kinds: one task a core computes them (not one a shuffle partition)
        kinds = (shared.select(*(F.col(c).alias(f"kind_{c}") for c in KIND_COLUMNS)).distinct()
                 .coalesce(spark.sparkContext.defaultParallelism)
                 .transform(transforms.kind_outcomes(outcome))
                 .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            joined = F.broadcast(kinds) if kinds.count() <= BROADCAST_KINDS else kinds
            same = functools.reduce(lambda a, b: a & b, (
                F.col(f"r.{c}").eqNullSafe(F.col(f"k.kind_{c}")) for c in KIND_COLUMNS))
            result = (shared.alias("r").join(joined.alias("k"), same)
                      .select("r.request_id", *(f"k.{f.name}" for f in REQUEST_OUTCOME.fields
                                                if f.name != "request_id"))
                      .unionByName(own).persist(StorageLevel.MEMORY_AND_DISK))
            result.count()  # computed while the kinds are cached
            return result
        finally:
            kinds.unpersist()
    return result.persist(StorageLevel.MEMORY_AND_DISK)


def key_offsets(spark: SparkSession, parts: Mapping[int, HasSegments],
                keys: Mapping[int, frozenset[bytes]]) -> list[Row]:
    """Offsets (segment base, batch position, offset, key digest) of every record of the
    partitions whose key digest is in ``keys``; rows with ``error`` for unreadable segments."""
    with spark_step(spark, "scan_keys", total_bytes=input_bytes(parts)):
        return segment_tasks(spark, parts).transform(transforms.scan_key_offsets(keys)).collect()


def rewrite_segments(spark: SparkSession, tasks: Sequence[tuple[Any, ...]],
                     segments: Mapping[tuple[int, int], tuple[str, SegmentInfo, TopicConfig]],
                     *, writer: str = "native") -> list[CommitMessage]:
    """Write the erased copy of each segment of ``tasks`` (``compactor.schemas.spark.ERASURE_TASK``
    rows) as ``.cleaned`` files, the segments framed by the ``writer`` engine; one commit
    message per segment."""
    sizes = [segments[(t[0], t[1])][1].size_bytes if (t[0], t[1]) in segments else 0
             for t in tasks]
    df = balanced_tasks(spark, list(zip(tasks, sizes, strict=True)), ERASURE_TASK)
    total = sum(sizes)
    with spark_step(spark, "erase_rewrite", total_bytes=total):
        rows = df.transform(transforms.rewrite_erased(segments, writer=writer)).collect()
    return [transforms.message_from_row(r) for r in rows]
