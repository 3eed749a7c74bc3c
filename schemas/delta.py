"""Schemas of the Delta tables under ``--state-dir`` (written by ``deltalake`` where no Spark
runs and by ``delta-spark`` in the Spark commands: :mod:`compactor.state.tables`). One source
of truth: the ledger code and the tests use these.

No column ever holds a raw key or header value: subjects are SHA-256 digests (hex).
"""

from __future__ import annotations

import pyarrow as pa

ERASURE_REQUESTS_TABLE = "erasure_requests"
RUNS_TABLE = "runs"

# One row per erasure request; its status moves pending -> applied -> verified (or failed).
ERASURE_REQUESTS = pa.schema([
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),  # "*" = every topic
    pa.field("selector", pa.string(), nullable=False),  # "key" | "header"
    pa.field("header_name", pa.string()),  # for selector "header"
    pa.field("subject_sha256", pa.string(), nullable=False),  # hex digest of the key/value bytes
    pa.field("reason", pa.string()),
    pa.field("requested_at_ms", pa.int64(), nullable=False),
    pa.field("deadline_ms", pa.int64(), nullable=False),
    # pending | applied | partially_verified | verified | verified_local_only | failed
    pa.field("status", pa.string(), nullable=False),
    pa.field("run_id", pa.string()),  # the apply run that erased it
    pa.field("records_erased", pa.int64()),
    pa.field("partitions_rewritten", pa.int64()),
    pa.field("segments_rewritten", pa.int64()),
    pa.field("applied_at_ms", pa.int64()),
    pa.field("verify_run_id", pa.string()),
    pa.field("verified_at_ms", pa.int64()),
    pa.field("verified_segments_scanned", pa.int64()),
    pa.field("verified_records_scanned", pa.int64()),
    pa.field("failure", pa.string()),  # what a failed verification found (offsets, files)
    # columns added later (older ledgers get them on first use, state.tables.ensure_table)
    pa.field("leave_tombstone", pa.bool_()),  # key erasure leaving a bare tombstone
    pa.field("tombstones_left", pa.string()),  # JSON [{dir, offset}] the apply left
    pa.field("superseded_by_erased", pa.int64()),  # older records of compacted keys erased too
    # "not_covered": a tiered topic's remote segments were not read; "scanned": they were
    pa.field("remote_tier", pa.string()),
    pa.field("coverage", pa.string()),  # JSON [{dir, copy, segments, records}] the verify scanned
    # JSON {place: {node_id, directory_id, log_dir, applied_run_id, applied_at_ms, records_erased,
    # ..., verify_run_id, verified_at_ms, verify_status, scanned}}: one log dir of one broker each
    pa.field("places", pa.string()),
    pa.field("missing_replicas", pa.string()),  # JSON [{partition, node_id, directory_id}]
    # hex SHA-256 of the fields that never change (compactor.erasure.rules.request_integrity):
    # a tampered or rotted row is a LEDGER_ERROR, never a request applied to the wrong subject
    pa.field("integrity", pa.string()),
])

# One row per partition per run of compaction, retention or erasure: the operational history.
RUNS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    # compact | retain | erase_apply | erase_verify
    pa.field("command", pa.string(), nullable=False),
    pa.field("log_dir", pa.string(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("started_at_ms", pa.int64(), nullable=False),
    pa.field("finished_at_ms", pa.int64(), nullable=False),
    pa.field("now_ms", pa.int64(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("records_in", pa.int64()),
    pa.field("records_out", pa.int64()),
    pa.field("bytes_in", pa.int64()),
    pa.field("bytes_out", pa.int64()),
    pa.field("segments_before", pa.int64()),
    pa.field("segments_after", pa.int64()),
    pa.field("segments_rewritten", pa.int64()),
    pa.field("segments_deleted", pa.int64()),
    pa.field("records_erased", pa.int64()),
    pa.field("seconds", pa.float64()),
    pa.field("report_json", pa.string(), nullable=False),  # the partition's JSON report line
    # added later: disk space the step freed (compaction and erasure: bytes in - bytes out;
    # retention: the deleted segments' bytes)
    pa.field("bytes_reclaimed", pa.int64()),
    # erase_apply / erase_verify: JSON [{request_id, status, computed, records_erased}] of the
    # requests whose status moved while the run ran (a cancel or retry): the run's outcome was
    # not recorded on them, yet an apply erased their records; the same on every row of the run
    pa.field("requests_changed", pa.string()),
])
