"""Differential tests: the Spark job's output equals the pure-Python reference compactor's,
batch by batch and record by record (decompressed), over generated logs covering every
feature of the generator; both satisfy the invariants of :func:`tests.helpers.check_invariants`, and
the
output is read by aiokafka and kafka-python and passes ``inspect --verify``."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactor.cleaner import planning
from compactor.cleaner.policy import legacy_horizon_ms
from compactor.codec.checkpoints import CLEANER_OFFSET_CHECKPOINT, parse_offset_checkpoint
from compactor.codec.compression import Codec
from compactor.maintenance.compact import run
from compactor.maintenance.options import MaintenanceOptions
from compactor.spark.stages import ARROW_BATCH_LIMIT, ROUND_SETTINGS
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import (
    check_invariants,
    inspect_problems,
    read_with_independent_parsers,
    reference_round,
    segment_bytes,
    segment_view,
    tree_digest,
)

pytestmark = pytest.mark.spark

NOW_MS = DEFAULT_START_MS + 3 * 86_400_000
CASES = {
    "legacy-open-txn-logappendtime": (
        GeneratorConfig(topics=("orders-v2", "user-profiles"), partitions=1,
                        records_per_partition=1800, distinct_keys=120, segment_bytes=12 * 1024,
                        legacy_records=40, open_transaction=True,
                        log_append_time_topics=("user-profiles",), seed=11),
        {"cleanup.policy": "compact"},
    ),
    "txn-heavy-tombstones-small-groups": (
        GeneratorConfig(topics=("payments",), partitions=2, records_per_partition=1500,
                        distinct_keys=60, tombstone_ratio=0.3, transactional_ratio=0.6,
                        abort_ratio=0.5, segment_bytes=8 * 1024, max_batch_records=5,
                        codecs=(Codec.ZSTD, Codec.LZ4, Codec.NONE), seed=5),
        {"cleanup.policy": "compact", "segment.index.bytes": "72"},
    ),
    "plain-many-keys-min-lag": (
        GeneratorConfig(topics=("clicks",), partitions=1, records_per_partition=2000,
                        distinct_keys=1500, zipf_exponent=0.0, transactional_producers=0,
                        null_key_ratio=0.05, codecs=(Codec.GZIP, Codec.SNAPPY), seed=2),
        {"cleanup.policy": "compact", "min.compaction.lag.ms": str(2 * 86_400_000 + 60_000)},
    ),
}


@pytest.mark.parametrize("case, task_keys, split, arrow_bytes", [
    *((case, None, False, None) for case in sorted(CASES)),
    # the same round through the distributed offset map (the key scan's buckets, the shuffle):
    # sent there directly, and handed on by its one-pass task, whose key table passed a
    # budget of one key, with the batch decisions that task made; and both at once, the
    # larger partitions over the bytes one task takes (scanned a task per segment)
    ("txn-heavy-tombstones-small-groups", 0, False, None),
    ("txn-heavy-tombstones-small-groups", 1, False, None),
    ("txn-heavy-tombstones-small-groups", 1, True, None),
    # the map again with the session's Arrow batches of 512 bytes at most (lower than the
    # round's own, so kept): each of the map's rows a batch of its own, a group's decisions and
    # offsets in several batches (the Python side must see them whole)
    ("txn-heavy-tombstones-small-groups", 0, False, 512),
])
def test_spark_equalsreference_round(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     case: str, task_keys: int | None, split: bool,
                                     arrow_bytes: int | None) -> None:
    gen, configs = CASES[case]
    log_dir = tmp_path / "logs"
    generate(str(log_dir), gen)
    expected = reference_round(log_dir, configs, NOW_MS)
    if split:
        sizes = sorted(sum(f.stat().st_size for f in d.glob("*.log"))
                       for d in log_dir.iterdir() if d.is_dir())
        monkeypatch.setattr(planning, "ONE_TASK_BYTES", sizes[len(sizes) // 2])

    arrow_limit = ARROW_BATCH_LIMIT
    session_arrow = spark.conf.get(arrow_limit)
    if arrow_bytes is not None:
        spark.conf.set(arrow_limit, str(arrow_bytes))
    round_conf = [spark.conf.get(k) for k in ROUND_SETTINGS]
    more = {} if task_keys is None else {"task_keys": task_keys}
    try:
        report = run(spark, MaintenanceOptions(log_dir=str(log_dir), now_ms=NOW_MS,
                                               assume_kafka_defaults=True, config_all=configs,
                                               **more))
        # the round's shuffle and Arrow settings do not outlive it
        assert [spark.conf.get(k) for k in ROUND_SETTINGS] == round_conf
    finally:
        spark.conf.set(arrow_limit, session_arrow)
    assert report.exit_code == 0
    assert any(p.status == "cleaned" for p in report.partitions)
    # both writer paths: one-group rounds skip the key scan; rounds of several groups are one
    # task's within the key budget, and go through the offset map with --task-keys 0
    multi_group = any(len(p.plan.groups) > 1 for p in report.partitions if p.plan)
    assert multi_group == (case == "txn-heavy-tombstones-small-groups")
    assert {p.round_path for p in report.partitions if p.plan and len(p.plan.groups) > 1} == (
        {"offset_map"} if task_keys in (0, 1) else {"one_task"} if multi_group else set())
    if split:
        assert {p.round_path_reason for p in report.partitions
                if p.plan and len(p.plan.groups) > 1} == {"over_task_bytes", "over_task_keys"}

    checkpoint = parse_offset_checkpoint((log_dir / CLEANER_OFFSET_CHECKPOINT).read_text())
    for rep in report.partitions:
        if rep.reason == "metadata_log":
            assert rep.status == "skipped" and rep.tp.dir_name not in expected
            continue
        inp, before, ref = expected[rep.tp.dir_name]
        after = segment_bytes(log_dir / rep.tp.dir_name)
        plan = ref.plan
        assert rep.plan == plan
        if not plan.will_clean:
            assert after == before
            continue
        assert rep.status == "cleaned"
        assert (rep.records_in, rep.records_out) == (ref.records_in, ref.records_out)
        assert {k: v for k, v in rep.dropped.items() if v} == ref.dropped
        # same segments; inside the round the same batches and records as the reference
        F = plan.first_uncleanable_offset
        assert sorted(after) == sorted([*ref.outputs, *(b for b in before if b >= F)])
        for base, files in ref.outputs.items():
            assert segment_view(after[base]) == segment_view(files.log), f"segment {base}"
            part = log_dir / rep.tp.dir_name
            assert (part / f"{base:020d}.index").read_bytes() == files.index
            assert (part / f"{base:020d}.timeindex").read_bytes() == files.time_index
            txn = part / f"{base:020d}.txnindex"
            assert (txn.read_bytes() if txn.exists() else b"") == files.txn_index
        horizon = legacy_horizon_ms(inp.segments, plan.first_dirty_offset,
                                    inp.config.delete_retention_ms)
        check_invariants(before, after, first_dirty=plan.first_dirty_offset, end_offset=F,
                         now_ms=NOW_MS,
                         legacy_retain={s.base_offset: s.mtime_ms > horizon
                                        for s in inp.segments})
        assert checkpoint[rep.tp] == F
        for data in after.values():
            read_with_independent_parsers(data)
    assert inspect_problems(log_dir) == []


def test_second_run_changes_nothing_and_horizon_run_drops_tombstones(spark, tmp_path: Path) -> None:
    gen, configs = CASES["txn-heavy-tombstones-small-groups"]
    log_dir = tmp_path / "logs"
    generate(str(log_dir), gen)
    opts = MaintenanceOptions(log_dir=str(log_dir), now_ms=NOW_MS, assume_kafka_defaults=True,
                              config_all=configs)
    run(spark, opts)
    snapshot = tree_digest(log_dir)
    again = run(spark, opts)
    assert all(p.status == "skipped" for p in again.partitions)
    assert tree_digest(log_dir) == snapshot

    tombstones_before = _tombstones(log_dir)
    assert tombstones_before, "the first round keeps tombstones (with a horizon)"
    # a fresh round from the log start after delete.retention.ms: horizons have passed
    (log_dir / CLEANER_OFFSET_CHECKPOINT).unlink()
    later = NOW_MS + 86_400_000 + 1
    expected = reference_round(log_dir, configs, later)
    report = run(spark, MaintenanceOptions(log_dir=str(log_dir), now_ms=later,
                                           assume_kafka_defaults=True, config_all=configs))
    assert sum(p.dropped.get("tombstone_expired", 0) for p in report.partitions) > 0
    remaining = _tombstones(log_dir)
    assert len(remaining) < len(tombstones_before)
    for dir_name, (_, _, ref) in expected.items():
        after = segment_bytes(log_dir / dir_name)
        for base, files in ref.outputs.items():
            assert segment_view(after[base]) == segment_view(files.log)


def _tombstones(log_dir: Path) -> set[tuple[str, int]]:
    from compactor.codec.segment import iter_batches

    out = set()
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        for base, data in segment_bytes(part).items():
            for b in iter_batches(data):
                if not b.is_control:
                    out.update((part.name, r.offset) for r in b.records()
                               if r.key is not None and r.value is None)
    return out

