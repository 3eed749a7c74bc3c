"""Spark schemas of the compaction pipeline: one source of truth for the DataFrames that pass
between transforms (``compactor/transforms.py``) and the executor functions that produce them.

Partitions are identified by ``tp_id``, an index into the job's list of partitions (the
driver keeps the mapping); offsets are absolute Kafka offsets.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)


def _schema(*fields: tuple[str, DataType, bool]) -> StructType:
    return StructType([StructField(name, kind, nullable) for name, kind, nullable in fields])


# One row per segment to read: the input of the header scan.
SEGMENT_TASK = _schema(
    ("tp_id", IntegerType(), False),
    ("segment_base", LongType(), False),
    ("path", StringType(), False),
    ("next_base", LongType(), True),  # the next segment's base; null for the active segment
)

# One row per remote segment to read (a broker's remote tier, compactor.remote.tier): the input
# of the erasure's remote scan.
REMOTE_SEGMENT_TASK = _schema(
    ("tp_id", IntegerType(), False),
    ("segment_id", StringType(), False),
    ("start_offset", LongType(), False),
    ("end_offset", LongType(), False),
)

# One row per group of a round: the value its grouped stages (key scan, rewrite) group by, chosen
# so that Spark's hash partitioning gives every group a shuffle partition of its own.
GROUP_SLOT = _schema(
    ("tp_id", IntegerType(), False),
    ("group_base", LongType(), False),
    ("slot", LongType(), False),
)

# One row per batch (no records), or one error row per unreadable segment (error not null).
BATCH_HEADER = _schema(
    ("tp_id", IntegerType(), False),
    ("segment_base", LongType(), False),
    ("position", LongType(), True),
    ("size_in_bytes", IntegerType(), True),
    ("base_offset", LongType(), True),
    ("last_offset", LongType(), True),
    ("magic", IntegerType(), True),
    ("is_control", BooleanType(), True),
    ("is_transactional", BooleanType(), True),
    ("control_type", IntegerType(), True),
    ("producer_id", LongType(), True),
    ("producer_epoch", IntegerType(), True),
    ("max_timestamp", LongType(), True),
    ("horizon_ms", LongType(), True),
    ("records_count", IntegerType(), True),
    ("error", StringType(), True),
)

# One row per partition: the plan of its round (policy.CleaningPlan).
PLAN = _schema(
    ("tp_id", IntegerType(), False),
    ("log_start_offset", LongType(), False),
    ("log_end_offset", LongType(), False),
    ("high_watermark", LongType(), False),
    ("last_stable_offset", LongType(), False),
    ("first_dirty_offset", LongType(), False),
    ("first_uncleanable_offset", LongType(), False),
    ("checkpoint_reset", BooleanType(), False),
    ("clean_bytes", LongType(), False),
    ("cleanable_bytes", LongType(), False),
    ("compaction_delay_ms", LongType(), False),
    ("dirty_ratio", DoubleType(), False),
    ("reason", IntegerType(), False),
    ("groups", ArrayType(ArrayType(LongType(), False), False), False),
    ("held_by", StringType(), False),  # what set the first uncleanable offset
    ("error", StringType(), True),  # a partition-wide check failed (JSON of the error)
)

# One row per batch of the round: its decision (policy.BatchDecision) and output group.
DECISION = _schema(
    ("tp_id", IntegerType(), False),
    ("group_base", LongType(), False),
    ("segment_base", LongType(), False),
    ("position", LongType(), False),
    ("base_offset", LongType(), False),
    ("is_control", BooleanType(), False),
    ("retention", IntegerType(), False),
    ("aborted", BooleanType(), False),
    ("discard_records", BooleanType(), False),
    ("retain_deletes", BooleanType(), False),
    ("marker_horizon", BooleanType(), False),
    ("txn_producer_id", LongType(), True),
    ("txn_first_offset", LongType(), True),
    ("txn_last_offset", LongType(), True),
    ("txn_last_stable_offset", LongType(), True),
)

# What the plan stage gives (``compactor.spark.stages.scan_and_plan``): per partition one row
# with its plan (``plan`` set, the other columns null but ``tp_id``) and, when asked for, one
# ``DECISION`` row per batch of a round of several groups (``plan`` null): the batches the
# distributed offset map and its writers work from, decided in the task that planned them.
PLANNED = StructType([*(StructField(f.name, f.dataType, True) for f in DECISION.fields),
                      StructField("plan", PLAN, True)])

# The offset map's input: the keyed records of one group that fall in one bucket of the map,
# as columns packed in binary values (little-endian int64, 8 bytes a record; ``in_map`` one
# byte a record), a row per (group, bucket) rather than per record, so the JVM moves blocks of
# bytes instead of converting millions of rows. Only records that can be superseded travel:
# data batches the round does not discard, not already superseded within their group; values,
# null keys, markers and discarded batches never do (the writer decides those). ``bucket`` is
# the value the shuffle hashes to the bucket's own partition. ``within`` carries, spread over
# the group's rows, the offsets of the group's records that a later record of their key in
# the group supersedes (the scan's map-side combine found them), packed as a list or, when
# dense, a bitmap (``compactor.spark.transforms.pack_offsets``): they pass through the bucket
# to the group's writer. A group that cannot be decoded gives one row
# with ``error`` set (and no records).
KEY_BUCKET = _schema(
    ("tp_id", IntegerType(), False),
    ("group_base", LongType(), False),
    ("bucket", LongType(), False),
    ("offsets", BinaryType(), False),
    ("key_hi", BinaryType(), False),
    ("key_lo", BinaryType(), False),
    ("in_map", BinaryType(), False),
    ("within", BinaryType(), False),
    ("error", StringType(), True),
)

# The offsets of one group's records that one bucket of the offset map found superseded by a
# later record of their key in the dirty section of another group (``offsets``), and the ones
# of the group's rows that bucket carried superseded within the group (``within``, from
# ``KEY_BUCKET``), each packed by ``compactor.spark.transforms.pack_offsets``. A row per
# (group, bucket) with records.
SUPERSEDED = _schema(
    ("tp_id", IntegerType(), False),
    ("group_base", LongType(), False),
    ("offsets", BinaryType(), False),
    ("within", BinaryType(), False),
)

# One row per group written by an executor: the commit message the driver acts on.
COMMIT_MESSAGE = _schema(
    ("tp_id", IntegerType(), False),
    ("group_base", LongType(), False),
    ("source_bases", ArrayType(LongType(), False), False),
    ("cleaned_suffixes", ArrayType(StringType(), False), False),
    ("log_checksum", LongType(), True),
    ("bytes_in", LongType(), False),
    ("bytes_out", LongType(), False),
    ("batches_in", LongType(), False),
    ("batches_out", LongType(), False),
    ("records_in", LongType(), False),
    ("records_out", LongType(), False),
    ("dropped", StringType(), False),  # JSON: reason -> records
    ("seconds", DoubleType(), False),
    ("error", StringType(), True),
    ("writer", StringType(), False),  # which path wrote it: native, pure or fallback
    # empty batches kept at the group's end where Kafka's cleaner keeps none (0 or 1)
    ("placeholders", IntegerType(), False),
)

# One row per partition cleaned in one pass (one task scans, plans and, when the round is one
# group or its groups fit one key table, writes it): its plan, or the error that stopped it,
# and the commit messages of the groups it wrote (empty when it wrote none). A round of several
# groups whose key table passed the budget (or was projected to) is written by the distributed
# offset map instead: ``handed_on`` then says why (``compactor.cleaner.policy.over_task_keys``,
# or ``task_keys_0``) and ``decisions`` holds its batches' ``DECISION`` rows, which that path
# works from (both null for every other partition).
ONE_PASS = _schema(
    ("tp_id", IntegerType(), False),
    ("plan", PLAN, True),
    ("messages", ArrayType(COMMIT_MESSAGE, False), True),
    ("error", StringType(), True),
    ("handed_on", StringType(), True),
    ("decisions", ArrayType(DECISION, False), True),
)

# Erasure scan (jobs/erase.py): one row per digest a record can be matched by (kind "key": its
# key's; kind "header": a named header value's), joined with the ledger's requests in Spark,
# plus one summary row per segment (kind "segment": batches and records scanned, or the error
# that stopped it).
ERASURE_SCAN = _schema(
    ("tp_id", IntegerType(), False),
    ("segment_base", LongType(), False),
    ("kind", StringType(), False),  # segment | key | header | batch
    ("position", LongType(), True),
    ("offset", LongType(), True),
    ("name", StringType(), True),  # the header's name (header rows)
    ("digest", BinaryType(), True),  # SHA-256 of the key or of the header's value
    ("key_digest", BinaryType(), True),  # SHA-256 of the record's key (null key: null)
    ("bare_tombstone", BooleanType(), True),
    ("batches", LongType(), True),  # segment rows: what was scanned, or the error
    ("records", LongType(), True),
    ("error", StringType(), True),
    # batch rows: each batch's header (BATCH_HEADER's fields), for an apply's rewrite
    *((f.name, f.dataType, True) for f in BATCH_HEADER.fields
      if f.name not in ("tp_id", "segment_base", "position", "error")),
)

# What an erase apply or verify makes of one ledger request (compactor.erasure.outcomes),
# computed on the executors: "update" rows carry the request's new columns (MERGEd into the
# ledger where the request is still in expected_status); "blocked", "unverified" and
# "no_replica_here" rows only say why it was left as it is.
REQUEST_OUTCOME = _schema(
    ("request_id", StringType(), False),
    ("outcome", StringType(), False),
    ("expected_status", StringType(), False),
    ("status", StringType(), True),
    ("run_id", StringType(), True),
    ("records_erased", LongType(), True),
    ("superseded_by_erased", LongType(), True),
    ("partitions_rewritten", LongType(), True),
    ("segments_rewritten", LongType(), True),
    ("applied_at_ms", LongType(), True),
    ("tombstones_left", StringType(), True),
    ("places", StringType(), True),
    ("failure", StringType(), True),
    ("verify_run_id", StringType(), True),
    ("verified_at_ms", LongType(), True),
    ("verified_segments_scanned", LongType(), True),
    ("verified_records_scanned", LongType(), True),
    ("coverage", StringType(), True),
    ("remote_tier", StringType(), True),
    ("missing_replicas", StringType(), True),
    ("blocked_by", StringType(), True),  # JSON [dir]: kept pending by these directories
    ("unverified_because", StringType(), True),  # JSON [dir]: could not be scanned
    ("residual", StringType(), True),  # JSON: the first records found again
    ("tiered_topics", StringType(), True),  # JSON [topic]: remote segments not scanned
)

# One row per kind of request row that nothing of a run tells apart (its topic, status and
# places: ``compactor.erasure.outcomes.RunContext.individual``): the outcome every request of
# that kind gets, computed once (``compactor.spark.stages.request_outcomes``).
OUTCOME_KIND = StructType([
    StructField("kind_topic", StringType(), True),
    StructField("kind_status", StringType(), True),
    StructField("kind_places", StringType(), True),
    *(f for f in REQUEST_OUTCOME.fields if f.name != "request_id"),
])

# Other records of the keys an erasure matched (the compacted-topic supersession rule).
KEY_OFFSET = _schema(
    ("tp_id", IntegerType(), False),
    ("segment_base", LongType(), False),
    ("position", LongType(), True),
    ("offset", LongType(), True),
    ("key_digest", BinaryType(), True),
    ("error", StringType(), True),
)

# One segment to rewrite without its erased records: {position: [offsets]} and the positions
# of batches that stay as empty headers, as JSON (small: a subject's records).
ERASURE_TASK = _schema(
    ("tp_id", IntegerType(), False),
    ("segment_base", LongType(), False),
    ("erased_json", StringType(), False),
    ("retain_empty_json", StringType(), False),
    ("tombstone_json", StringType(), False),  # {position: [offsets]} left as bare tombstones
)
