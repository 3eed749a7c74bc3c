"""The writer's native path (``compactor/native/fast.py``, numba kernels) against the pure-Python
path, byte for byte: per batch under generated records, keep sets, codecs, timestamp types and
horizons; per group on generated logs with every codec, transactions, LogAppendTime, legacy
entries and horizons; and the kernels' varints against the pure codec's."""

from __future__ import annotations

import functools
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.cleaner.planning import OVER_TASK_KEYS
from compactor.cleaner.policy import KEPT, LOCAL, BatchDecision, BatchRetention
from compactor.cleaner.rebatch import filter_batch
from compactor.cleaner.rewrite import sliced
from compactor.codec import varint
from compactor.codec.compression import Codec
from compactor.codec.records import TimestampType, encode_batch
from compactor.codec.segment import iter_batches
from compactor.native import chunks, engine, fast, kernels
from compactor.spark.writer import write_group, write_groups
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import reference_round, varint_size
from tests.property.strategies import new_batches

NOW_MS = DEFAULT_START_MS + 3 * 86_400_000


def _decision(retention: BatchRetention, marker_horizon: bool = False) -> BatchDecision:
    return BatchDecision(retention=retention, aborted=False, discard_records=False,
                         retain_deletes=True, marker_horizon=marker_horizon, txn_entry=None)


@settings(max_examples=300, deadline=None)
@given(batch=new_batches(), timestamp_type=st.sampled_from(list(TimestampType)),
       keep=st.lists(st.booleans(), min_size=12, max_size=12),
       retention=st.sampled_from([BatchRetention.DELETE_EMPTY, BatchRetention.RETAIN_EMPTY]),
       marker_horizon=st.booleans(), counted=st.booleans())
def test_a_batch_filtered_natively_is_byte_identical_to_the_pure_path(
        batch, timestamp_type, keep, retention, marker_horizon, counted) -> None:
    raw = encode_batch(replace(batch, timestamp_type=timestamp_type))
    (source,) = iter_batches(raw)
    records = source.compiled_records()
    goes = [not keep[i] for i in range(len(records))]
    reasons = np.array([LOCAL if g else KEPT for g in goes], np.int8)
    # the retained tombstones, as the backward pass counts them (or left uncounted)
    tombstones = sum(r.value is None for r, g in zip(records, goes) if not g) if counted else -1
    fate = fast.BatchFate(reasons if any(goes) else None, sum(goes), tombstones=tombstones)
    decision = _decision(retention, marker_horizon)
    expected = filter_batch(source, decision, frozenset(r.offset for r, g in zip(records, goes)
                                                        if g),
                            now_ms=NOW_MS, delete_retention_ms=86_400_000)
    got = fast.filter_fast(source, decision, fate, now_ms=NOW_MS,
                           delete_retention_ms=86_400_000)
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=-(2**62), max_value=2**62), min_size=1, max_size=20))
def test_kernel_varints_match_the_pure_codec(values) -> None:
    out = np.zeros(12 * len(values), np.uint8)
    pos = 0
    for v in values:
        pos = kernels._put_varint(out, pos, v)
        assert kernels._varint_size(v) == varint_size(v)
    assert out[:pos].tobytes() == b"".join(varint.encode(v) for v in values)
    pos = 0
    for v in values:
        value, pos, minimal = kernels._varint(out, pos, out.shape[0], 10)
        assert (value, minimal) == (v, True)


def test_a_non_minimal_varint_is_left_to_the_pure_path() -> None:
    buf = np.frombuffer(bytes([0x80, 0x00]), np.uint8)  # 0 written in two bytes
    assert kernels._varint(buf, 0, 2, 10) == (0, 2, False)
    assert kernels._varint(buf, 0, 1, 10)[1] == -1  # runs past the end


CASES = {
    "every-codec-txn-horizons": GeneratorConfig(
        topics=("payments",), partitions=1, records_per_partition=1500, distinct_keys=80,
        tombstone_ratio=0.3, transactional_ratio=0.5, abort_ratio=0.4, segment_bytes=8 * 1024,
        max_batch_records=8, codecs=tuple(Codec), seed=7),
    "uncompressed-txn-tombstones": GeneratorConfig(
        topics=("orders",), partitions=1, records_per_partition=1500, distinct_keys=70,
        tombstone_ratio=0.3, transactional_ratio=0.5, abort_ratio=0.4, null_key_ratio=0.05,
        segment_bytes=8 * 1024, max_batch_records=8, codecs=(Codec.NONE,), seed=9),
    "logappendtime-legacy": GeneratorConfig(
        topics=("user-profiles",), partitions=1, records_per_partition=1200, distinct_keys=90,
        segment_bytes=10 * 1024, legacy_records=30, open_transaction=True,
        log_append_time_topics=("user-profiles",), seed=3),
}
CONFIGS = {"cleanup.policy": "compact", "delete.retention.ms": "3600000",
           "segment.index.bytes": "72"}  # several groups: records superseded across groups


def _mapped_under(directory: Path) -> list[str]:
    """The files under ``directory`` this process has memory-mapped (``/proc/self/maps``)."""
    prefix = str(directory.resolve()) + "/"
    with open("/proc/self/maps") as maps:
        fields = [line.split(maxsplit=5) for line in maps]
    return [f[5].strip() for f in fields if len(f) == 6 and f[5].startswith(prefix)]


@pytest.mark.parametrize("case, keep", [(case, fast.KEEP_EXPANDED_BYTES) for case in sorted(CASES)]
                         + [("every-codec-txn-horizons", 0)])
def test_a_group_written_natively_is_byte_identical_to_the_pure_path(
        tmp_path: Path, case: str, keep: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``keep``: the bytes of decompressed chunks the backward pass may keep for the forward
    pass (0: the forward pass decompresses every compressed chunk again)."""
    monkeypatch.setattr(fast, "KEEP_EXPANDED_BYTES", keep)
    native_dir, pure_dir = tmp_path / "native", tmp_path / "pure"
    within_dir = tmp_path / "within"  # native, told what goes within the group
    untold_dir = tmp_path / "pure-untold"  # pure, not told (it checks its count when told)
    generate(str(native_dir), CASES[case])
    for copy in (pure_dir, within_dir, untold_dir):
        shutil.copytree(native_dir, copy)
    rounds = reference_round(native_dir, CONFIGS, NOW_MS)
    chunks.STATS.clear()
    groups = 0
    paths: list[str] = []  # which path wrote each group (the commit message says)
    for name, (inp, logs, ref) in rounds.items():
        if not ref.plan.will_clean:
            continue
        headers = [h for h in _headers(inp, logs)]
        decisions = {(h.segment_base, h.position): d for h, d in inp.decide(ref.plan, headers)}
        for group in ref.plan.groups:
            within = _superseded_within(inp, logs, ref.plan, group, decisions)
            # as the offset map hands them over: what goes within the group never crosses it
            superseded = _superseded_across_groups(inp, logs, ref.plan, group,
                                                   decisions) - within
            messages = {}
            for label, root, told in (("native", native_dir, None), ("pure", pure_dir, within),
                                      ("within", within_dir, within),
                                      ("pure-untold", untold_dir, None)):
                part = replace(inp, path=str(root / name),
                               segments=tuple(replace(s, log_path=str(root / name / Path(
                                   s.log_path).name)) for s in inp.segments))
                m = write_group(part, group, decisions, superseded,
                                first_dirty=ref.plan.first_dirty_offset,
                                engine=engine({"within": "native",
                                               "pure-untold": "pure"}.get(label, label)),
                                within=None if told is None else np.asarray(sorted(told)))
                assert m.error is None, m.error
                messages[label] = replace(m, seconds=0.0, writer="")
                paths.append(m.writer)
                # the passes read the segments through views of their maps, no copies: none
                # of them outlives the write (a view kept would keep its map)
                assert not _mapped_under(root / name), f"{label} left segments mapped"
            # the pure path, told, checks its own count against ``within``
            assert (messages["native"] == messages["pure"] == messages["within"]
                    == messages["pure-untold"])
            for suffix in messages["native"].cleaned_suffixes:
                cleaned = f"{group[0]:020d}{suffix}.cleaned"
                assert ((native_dir / name / cleaned).read_bytes()
                        == (pure_dir / name / cleaned).read_bytes()
                        == (within_dir / name / cleaned).read_bytes()
                        == (untold_dir / name / cleaned).read_bytes()), cleaned
            # and both equal the independent reference round
            assert ((native_dir / name / f"{group[0]:020d}.log.cleaned").read_bytes()
                    == ref.outputs[group[0]].log)
            groups += 1
    assert groups >= 2
    # the native path really ran (and the legacy groups really fell back)
    assert "native" in paths and chunks.STATS["batches_rebuilt"] >= 10
    assert paths.count("pure") == 2 * groups  # told and untold
    if case == "logappendtime-legacy":
        assert "fallback" in paths
    else:
        assert "fallback" not in paths
    if case == "uncompressed-txn-tombstones":  # whole chunks decided in one native call
        assert chunks.STATS["chunks_native"] >= 5 and chunks.STATS["chunks_filtered"] >= 5
    if case == "every-codec-txn-horizons":  # compressed chunks in one call, each way
        assert chunks.STATS["chunks_expanded"] >= 5 and chunks.STATS["chunks_filtered"] >= 5
        again = chunks.STATS["chunks_expanded_again"]
        assert again == 0 if keep else again == chunks.STATS["chunks_expanded"]


@pytest.mark.parametrize("label", ["native", "pure"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_round_of_several_groups_in_one_task_writes_what_the_offset_map_writes(
        tmp_path: Path, case: str, label: str) -> None:
    """``write_groups`` (one key table carried from the newest group to the oldest) against
    the independent reference round group by group, and its commit messages against the
    ones each group gets from ``write_group`` with the offset map's supersessions. Its key
    budget is exact: with as many keys as enter the offset map it writes the round, with
    one fewer it stops and writes nothing."""
    one_dir, each_dir, over_dir = tmp_path / "one", tmp_path / "each", tmp_path / "over"
    generate(str(one_dir), CASES[case])
    shutil.copytree(one_dir, each_dir)
    shutil.copytree(one_dir, over_dir)
    rounds = reference_round(one_dir, CONFIGS, NOW_MS)
    rounds_checked = 0
    for name, (inp, logs, ref) in rounds.items():
        if not ref.plan.will_clean or len(ref.plan.groups) < 2:
            continue
        headers = _headers(inp, logs)
        decisions = {(h.segment_base, h.position): d for h, d in inp.decide(ref.plan, headers)}

        def moved(root: Path):
            return replace(inp, path=str(root / name), segments=tuple(
                replace(s, log_path=str(root / name / Path(s.log_path).name))
                for s in inp.segments))

        map_keys = len(_map_entries(inp, logs, ref.plan, decisions))
        assert map_keys >= 1
        assert write_groups(moved(over_dir), ref.plan.groups, decisions,
                            first_dirty=ref.plan.first_dirty_offset, engine=engine(label),
                            max_keys=map_keys - 1) == OVER_TASK_KEYS
        assert not list((over_dir / name).glob("*.cleaned"))
        got = write_groups(moved(one_dir), ref.plan.groups, decisions,
                           first_dirty=ref.plan.first_dirty_offset, engine=engine(label),
                           max_keys=map_keys)
        assert not isinstance(got, str)
        assert [m.group_base for m in got] == [g[0] for g in ref.plan.groups]
        # a legacy entry sends the whole round to the pure path
        assert {m.writer for m in got} == ({"fallback"} if case == "logappendtime-legacy"
                                           and label == "native" else {label})
        for group, message in zip(ref.plan.groups, got, strict=True):
            assert message.error is None, message.error
            each = write_group(moved(each_dir), group, decisions,
                               _superseded_across_groups(inp, logs, ref.plan, group, decisions),
                               first_dirty=ref.plan.first_dirty_offset, engine=engine(label))
            assert replace(message, seconds=0.0, writer="") == replace(each, seconds=0.0,
                                                                        writer="")
            assert ((one_dir / name / f"{group[0]:020d}.log.cleaned").read_bytes()
                    == ref.outputs[group[0]].log)
        rounds_checked += 1
    assert rounds_checked >= 1


def _headers(inp, logs):
    from compactor.cleaner.scan import batch_header

    return [batch_header(b, s.base_offset) for s in inp.segments
            for b in iter_batches(logs[s.base_offset])]


def _superseded_across_groups(inp, logs, plan, group, decisions) -> set[int]:
    """Offsets of the group's records whose key has a later offset-map record in a later
    group (what the distributed offset map hands a writer), computed from the batches."""
    latest = _map_entries(inp, logs, plan, decisions)
    group_end = max(b.next_offset for b in iter_batches(logs[group[-1]])) \
        if logs[group[-1]] else group[-1]
    out: set[int] = set()
    for base in group:
        for b in iter_batches(logs[base]):
            d = decisions[(base, b.position)]
            if b.is_control or d.discard_records or d.retention == BatchRetention.DELETE:
                continue
            for r in b.records():
                if r.key is not None and latest.get(r.key, -1) >= group_end:
                    out.add(r.offset)
    return out


def _superseded_within(inp, logs, plan, group, decisions) -> set[int]:
    """Offsets of the group's records that a later record of their key in the group
    supersedes (one that enters the offset map: data, not aborted, in the dirty section),
    computed from the batches: what the offset map's scan hands a writer as ``within``."""
    later: set[bytes] = set()
    out: set[int] = set()
    for base in reversed(group):
        for b in reversed(list(iter_batches(logs[base]))):
            d = decisions[(base, b.position)]
            if b.is_control or d.discard_records:
                continue
            for r in reversed(b.records()):
                if r.key is None:
                    continue
                if r.key in later:
                    out.add(r.offset)
                elif not d.aborted and r.offset >= plan.first_dirty_offset:
                    later.add(r.key)
    return out


def _map_entries(inp, logs, plan, decisions) -> dict[bytes, int]:
    """The offset map of the round, from the batches: each key of a record of the dirty
    section (data, not aborted) with its largest offset."""
    latest: dict[bytes, int] = {}
    for s in inp.segments:
        for b in iter_batches(logs[s.base_offset]):
            d = decisions.get((s.base_offset, b.position))
            if d is None or b.is_control or d.aborted or b.last_offset < plan.first_dirty_offset:
                continue
            for r in b.records():
                if r.key is not None and r.offset >= plan.first_dirty_offset:
                    latest[r.key] = r.offset
    return latest



@pytest.mark.parametrize("case", sorted(CASES))
def test_the_native_key_scan_reads_what_the_compiled_reader_reads(tmp_path: Path,
                                                                  case: str) -> None:
    from compactor.cleaner.scan import batch_flags, keyed_records

    generate(str(tmp_path / "logs"), CASES[case])
    chunks.STATS.clear()
    rows = 0
    for seg in sorted((tmp_path / "logs").glob("*/*.log")):
        data = seg.read_bytes()
        flags = {b.position: batch_flags(0, is_control=b.is_control, aborted=False,
                                         discard_records=False)
                 for b in iter_batches(data)}
        flags = {k: v for k, v in flags.items() if v is not None}
        native = keyed_records(data, str(seg), flags, first_dirty=40, engine=engine("native"))
        pure = keyed_records(data, str(seg), flags, first_dirty=40, engine=engine("pure"))
        for name in ("group_base", "offset", "key_hi", "key_lo", "in_map"):
            assert np.array_equal(getattr(native, name), getattr(pure, name)), (seg, name)
        rows += len(pure)
    assert rows > 500
    assert chunks.STATS["batches_scanned"] > 50  # the kernels read them, not the fallback


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_native_header_scan_reads_what_the_pure_scan_reads(tmp_path: Path,
                                                               case: str) -> None:
    from compactor.cleaner.scan import segment_headers

    generate(str(tmp_path / "logs"), CASES[case])
    chunks.STATS.clear()
    framed = legacy = 0
    for seg in sorted((tmp_path / "logs").glob("*/*.log")):
        data = seg.read_bytes()
        base = int(seg.stem)
        native = chunks.segment_headers(data, str(seg), base)
        if any(b.magic < 2 for b in iter_batches(data)):
            assert native is None  # the pure scan reads a segment with legacy entries
            legacy += 1
            continue
        assert native == segment_headers(data, str(seg), base), seg
        framed += 1
    assert framed >= 5 and chunks.STATS["segments_framed"] == framed
    assert legacy >= 1 if case == "logappendtime-legacy" else legacy == 0


@settings(max_examples=150, deadline=None)
@given(where=st.floats(min_value=0, max_value=1, exclude_max=True),
       bit=st.integers(min_value=0, max_value=7), cut=st.booleans())
def test_a_damaged_segment_is_left_to_the_pure_header_scan(where, bit, cut) -> None:
    """A flipped bit anywhere (or a cut tail): the native scan gives the pure scan's headers
    or hands the segment to it (``None``), never headers the pure scan would refuse."""
    from compactor.cleaner.scan import segment_headers
    from compactor.errors import CompactorError

    data = bytearray(_header_segment())
    at = int(where * len(data))
    if cut:
        del data[at:]
    else:
        data[at] ^= 1 << bit
    native = chunks.segment_headers(bytes(data), "x.log", 0)
    try:
        pure = segment_headers(bytes(data), "x.log", 0)
    except CompactorError:
        assert native is None
        return
    assert native is None or native == pure


@functools.cache
def _header_segment() -> bytes:
    """A segment of every codec, transactions and control batches (generated once)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp, replace(CASES["every-codec-txn-horizons"], records_per_partition=300,
                              segment_bytes=1 << 20))
        return max(Path(tmp).glob("*/*.log"), key=lambda p: p.stat().st_size).read_bytes()



@pytest.mark.parametrize("flip", ["record", "header"])
def test_a_corrupt_chunk_gives_the_pure_paths_located_error(tmp_path: Path, flip: str) -> None:
    """A flipped byte in an uncompressed segment: the native chunk walk refuses the chunk
    (CRC or header) and the general walk reports the same located error as the pure path;
    no .cleaned file is left."""
    cfg = CASES["uncompressed-txn-tombstones"]
    native_dir, pure_dir = tmp_path / "native", tmp_path / "pure"
    generate(str(native_dir), cfg)
    rounds = reference_round(native_dir, CONFIGS, NOW_MS)
    name, (inp, logs, ref) = next((n, r) for n, r in rounds.items() if r[2].plan.will_clean)
    group = ref.plan.groups[0]
    seg = native_dir / name / f"{group[0]:020d}.log"
    data = bytearray(seg.read_bytes())
    victim = list(iter_batches(bytes(data)))[len(list(iter_batches(bytes(data)))) // 2]
    at = victim.position + (victim.size_in_bytes - 3 if flip == "record" else 16)
    data[at] ^= 0x40
    seg.write_bytes(bytes(data))
    shutil.copytree(native_dir, pure_dir)
    error = same_error_on_both_paths(inp, logs, ref.plan, group, name, seg.name, native_dir,
                                     pure_dir)
    assert error["position"] == victim.position


def same_error_on_both_paths(inp, logs, plan, group, name: str, segment: str,
                             native_dir: Path, pure_dir: Path) -> dict:
    """Write ``group`` of partition ``name`` from two copies of a corrupt log dir, natively
    and in pure Python: both must refuse with the same located error naming ``segment`` and
    leave no ``.cleaned`` file. Returns the error (without its path)."""
    decisions = {(h.segment_base, h.position): d
                 for h, d in inp.decide(plan, _headers(inp, logs))}
    errors = {}
    for label, root in (("native", native_dir), ("pure", pure_dir)):
        part = replace(inp, path=str(root / name),
                       segments=tuple(replace(s, log_path=str(root / name / Path(
                           s.log_path).name)) for s in inp.segments))
        m = write_group(part, group, decisions, set(), first_dirty=plan.first_dirty_offset,
                        engine=engine(label))
        assert m.error is not None, f"the {label} writer carried the batch into its output"
        errors[label] = {k: v for k, v in m.error.items() if k != "path"}
        assert m.error["path"].endswith(segment)
        assert not list((root / name).glob("*.cleaned"))
    assert errors["native"] == errors["pure"]
    return errors["native"]


@st.composite
def _chunk(draw: st.DrawFn) -> list[tuple[bytes, list[bool], BatchDecision]]:
    """Uncompressed v2 batches, data and control, with each record's fate and a decision."""
    from compactor.codec.records import (
        ControlType,
        NewRecord,
        NewRecordBatch,
        control_key,
        marker_value,
    )

    out, offset = [], draw(st.integers(min_value=0, max_value=2**40))
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        if draw(st.booleans()):
            batch = replace(draw(new_batches()), compression=Codec.NONE, base_offset=offset,
                            timestamp_type=draw(st.sampled_from(list(TimestampType))))
        else:
            batch = NewRecordBatch(
                base_offset=offset, is_control=True, is_transactional=True,
                producer_id=draw(st.integers(min_value=0, max_value=2**40)), producer_epoch=1,
                delete_horizon_ms=draw(st.one_of(st.none(), st.integers(0, 2**41))),
                records=[NewRecord(offset_delta=0, timestamp=draw(st.integers(0, 2**41)),
                                   key=control_key(ControlType.COMMIT),
                                   value=marker_value(draw(st.integers(0, 100))))])
        raw = encode_batch(batch)
        (source,) = iter_batches(raw)
        count = len(source.compiled_records())
        if source.is_control and draw(st.booleans()):
            goes = [True] * count  # an expired marker: discarded
        elif source.is_control:
            goes = [False] * count
        else:
            goes = draw(st.lists(st.booleans(), min_size=count, max_size=count))
        retention = (draw(st.sampled_from([BatchRetention.DELETE, BatchRetention.DELETE_EMPTY,
                                           BatchRetention.RETAIN_EMPTY]))
                     if all(goes) else draw(st.sampled_from([BatchRetention.DELETE_EMPTY,
                                                             BatchRetention.RETAIN_EMPTY])))
        decision = BatchDecision(retention=retention, aborted=False,
                                 discard_records=bool(source.is_control and goes and all(goes)),
                                 retain_deletes=True, marker_horizon=draw(st.booleans()),
                                 txn_entry=None)
        out.append((raw, goes, decision))
        offset = source.next_offset + draw(st.integers(min_value=0, max_value=3))
    return out


@settings(max_examples=300, deadline=None)
@given(chunk=_chunk(), lead=st.integers(min_value=0, max_value=3))
def test_a_chunk_filtered_in_one_call_equals_the_batches_filtered_one_by_one(chunk,
                                                                              lead) -> None:
    """``filter_chunk_batches`` (data and control batches, horizons, empty headers, deleted
    batches) against the pure path batch by batch: the same output batches."""
    padding = b"".join(raw for raw, _, _ in chunk[:lead])  # the chunk starts mid-segment
    data = padding + b"".join(raw for raw, _, _ in chunk[lead:])
    batches = list(iter_batches(data))[len(chunk[:lead]):]
    items = chunk[lead:]
    if not items:
        return
    expected, fates = [], []
    for batch, (_, goes, decision) in zip(batches, items):
        records = batch.compiled_records()
        dropped = frozenset(r.offset for r, g in zip(records, goes) if g)
        result = filter_batch(batch, decision, dropped, now_ms=NOW_MS,
                              delete_retention_ms=86_400_000)
        if result.data is not None:
            expected.append(result.data)
        reasons = np.array([LOCAL if g else KEPT for g in goes], np.int8)
        tombstones = (-1 if batch.is_control else
                      sum(r.value is None for r, g in zip(records, goes) if not g))
        # as the backward pass marks it: records the pure encoder would write differently
        pure = bool(fast._Section(batch).status & kernels.NOT_CANONICAL)
        fates.append(fast.BatchFate(reasons if any(goes) else None, sum(goes), pure,
                                    tombstones=tombstones))
    start = len(padding)
    done = fast.filter_chunk_batches(
        data[start:], start, [b.position for b in batches], [b.base_offset for b in batches],
        fates, [d for _, _, d in items], now_ms=NOW_MS, delete_retention_ms=86_400_000)
    if any(f.pure for f in fates):
        assert done is None  # the batch-by-batch walk takes the chunk
        return
    assert done is not None
    runs, txn_entries, records_in, records_out = done
    got = []
    for run, sizes in runs:
        assert sizes and sum(sizes) == len(run)
        got += [bytes(run[sum(sizes[:i]):sum(sizes[:i + 1])]) for i in range(len(sizes))]
    assert got == expected
    assert txn_entries == []  # none of the decisions carries one
    assert records_in == sum(b.records_count for b in batches)


def test_every_kernel_compiles_on_empty_input() -> None:
    """``make kernels`` (before the demo and the tests) compiles them all this way."""
    fast.compile_kernels()


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("chunk_bytes", [200, 4096])
def test_the_chunked_key_scan_reads_what_the_compiled_reader_reads(
        tmp_path: Path, case: str, chunk_bytes: int) -> None:
    """``segment_keys`` with chunks small enough that most batches span their own (or
    several) chunks: every keyed record of the listed batches, with the library's digest of
    its key, exactly once and in offset order, whatever the kernels leave to the
    batch-by-batch reader; the compressed data batches read by the kernels."""
    generate(str(tmp_path / "logs"), CASES[case])
    read = left = squeezed = 0
    for seg in sorted((tmp_path / "logs").glob("*/*.log")):
        data = seg.read_bytes()
        batches = [b for b in iter_batches(data) if not b.is_control]
        listed = [b.position for k, b in enumerate(batches) if k % 3]  # some left out
        (offsets, key_hi, key_lo, which), rest = chunks.segment_keys(data, listed, chunk_bytes,
                                                                   sliced)
        expected = {}
        for k, b in enumerate(batches):
            if not k % 3 or b.position in rest:
                continue
            for r in b.compiled_records():
                if r.key is not None:
                    digest = xxhash.xxh3_128_intdigest(r.key)
                    expected[r.offset] = (listed.index(b.position), digest)
        got = {o: (j, ((int(h) & (2**64 - 1)) << 64) | (int(lo) & (2**64 - 1)))
               for o, h, lo, j in zip(offsets.tolist(), key_hi.tolist(), key_lo.tolist(),
                                      which.tolist())}
        assert len(got) == len(offsets) and got == expected, seg
        assert np.all(offsets[1:] > offsets[:-1])  # in offset order, each record once
        assert set(rest) <= set(listed)
        # compressed data batches are decompressed and read by the kernels too
        compressed = {b.position for b in batches if b.magic == 2 and b.records_count
                      and b.compression != Codec.NONE}
        assert not compressed & set(rest), seg
        read, left = read + len(got), left + len(rest)
        squeezed += len(compressed & set(listed))
    assert read > 50  # the kernels read some themselves
    if case == "every-codec-txn-horizons":
        assert squeezed > 50
    if case == "logappendtime-legacy":
        assert left > 0  # legacy batches: the batch-by-batch reader's


class _Recording:
    """An engine that keeps the group rewrites it makes, to ask how far a round got."""

    def __init__(self, inner) -> None:
        self.inner, self.made = inner, []

    def group(self, *args, **kwargs):
        self.made.append(self.inner.group(*args, **kwargs))
        return self.made[-1]

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@pytest.mark.parametrize("label", ["native", "pure"])
def test_a_round_projected_over_its_key_budget_stops_early(tmp_path: Path, monkeypatch,
                                                           label: str) -> None:
    """Uniform keys, most records a new one: the key table passes the budget only after
    three quarters of the round, but the newest eighth already shows it will pass it by more
    than the margin (``planning.over_task_keys``), so ``write_groups`` stops there and writes
    nothing. Without the projection it decides most of the round first. Few keys written
    over and over are never projected past a budget they stay within."""
    from compactor.cleaner import planning

    monkeypatch.setattr(planning, "PROJECT_AFTER_KEYS", 10)  # both rounds hold more
    margin = planning.PROJECT_MARGIN
    for name, keys in (("many", 40_000), ("few", 60)):
        generate(str(tmp_path / name), GeneratorConfig(
            topics=(name,), partitions=1, records_per_partition=6_000, distinct_keys=keys,
            zipf_exponent=0.0, tombstone_ratio=0.0, transactional_ratio=0.0,
            null_key_ratio=0.0, segment_bytes=16 * 1024, codecs=(Codec.NONE,), seed=5))
        ((_, (inp, logs, ref)),) = reference_round(tmp_path / name, CONFIGS, NOW_MS).items()
        assert len(ref.plan.groups) >= 4
        decisions = {(h.segment_base, h.position): d
                     for h, d in inp.decide(ref.plan, _headers(inp, logs))}
        map_keys = len(_map_entries(inp, logs, ref.plan, decisions))
        records = sum(b.records_count for s in inp.segments
                      for b in iter_batches(logs[s.base_offset]))

        def attempt(budget: int) -> tuple[object, int]:
            recording = _Recording(engine(label))
            got = write_groups(inp, ref.plan.groups, decisions,
                               first_dirty=ref.plan.first_dirty_offset, engine=recording,
                               max_keys=budget)
            return got, recording.made[-1].records()

        if name == "few":
            got, _ = attempt(map_keys)
            assert not isinstance(got, str) and all(m.error is None for m in got)
            continue
        budget = map_keys * 3 // 4  # passed once three quarters of the keys are in
        got, decided = attempt(budget)
        assert got == planning.PROJECTED_OVER_TASK_KEYS  # the report tells the two apart
        assert not list((tmp_path / name).rglob("*.cleaned"))
        assert decided < records / 3
        monkeypatch.setattr(planning, "PROJECT_MARGIN", float("inf"))
        got, decided = attempt(budget)
        assert got == planning.OVER_TASK_KEYS and decided > records * 2 / 3
        monkeypatch.setattr(planning, "PROJECT_MARGIN", margin)


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_erased_segment_framed_natively_is_byte_identical_to_the_pure_path(
        tmp_path: Path, case: str) -> None:
    """``erase apply``'s rewrite of a segment: the native engine frames it in bulk and
    decodes only the batches it erases from; the pure one reads every batch. Both write the
    same files and message, and the erased records are gone from what they wrote (read back by
    the codec)."""
    from compactor.config import TopicConfig
    from compactor.log.layout import load_partition
    from compactor.spark.writer import write_erased_segment

    native_dir, pure_dir = tmp_path / "native", tmp_path / "pure"
    generate(str(native_dir), CASES[case])
    shutil.copytree(native_dir, pure_dir)
    chunks.STATS.clear()
    rewritten = legacy = 0
    for part_dir in sorted(p for p in native_dir.iterdir() if p.is_dir()):
        part = load_partition(str(part_dir))
        twin = load_partition(str(pure_dir / part_dir.name))
        for seg, twin_seg in zip(part.segments, twin.segments, strict=True):
            data = Path(seg.log_path).read_bytes()
            erased: dict[int, list[int]] = {}
            tombstones: dict[int, list[int]] = {}
            retain: set[int] = set()
            for n, batch in enumerate(iter_batches(data)):
                if batch.is_control or batch.magic < 2 and n % 2:
                    continue
                records = batch.records()
                if n % 3 == 0:  # erase every record: the batch goes, or stays empty
                    erased[batch.position] = [r.offset for r in records]
                    if n % 6 == 0:
                        retain.add(batch.position)
                elif n % 3 == 1:  # erase the first, leave a bare tombstone for a keyed last
                    erased[batch.position] = [records[0].offset]
                    if len(records) > 1 and records[-1].key is not None:
                        tombstones[batch.position] = [records[-1].offset]
            if not erased:
                continue
            legacy += any(b.magic < 2 for b in iter_batches(data))
            messages = [replace(write_erased_segment(p.path, s, erased, retain, TopicConfig(),
                                                     tombstones=tombstones, engine=engine(w)),
                                seconds=0.0)
                        for p, s, w in ((part, seg, "native"), (twin, twin_seg, "pure"))]
            assert messages[0].error is None, messages[0].error
            assert messages[0] == messages[1]
            assert messages[0].dropped["erased"] == sum(map(len, erased.values()))
            for suffix in messages[0].cleaned_suffixes:
                cleaned = f"{seg.base_offset:020d}{suffix}.cleaned"
                assert ((part_dir / cleaned).read_bytes()
                        == (pure_dir / part_dir.name / cleaned).read_bytes()), cleaned
            left = {r.offset: r for b in iter_batches(
                (part_dir / f"{seg.base_offset:020d}.log.cleaned").read_bytes())
                for r in b.records()}
            assert not {o for offsets in erased.values() for o in offsets} & set(left)
            assert all(left[o].value is None and not left[o].headers
                       for offsets in tombstones.values() for o in offsets)
            rewritten += 1
    assert rewritten >= 5
    # the native engine framed every segment without a legacy entry; those fell back
    assert chunks.STATS["segments_framed"] == rewritten - legacy
    assert legacy >= 1 if case == "logappendtime-legacy" else legacy == 0
