"""``compactor generate``: realistic Kafka log dirs for the demo, the tests and the benchmarks.

Each partition is written the way a broker would have written it: batches from plain,
idempotent and transactional producers (each producer with its own codec), interleaved
transactions ending in COMMIT or ABORT markers (optionally one left open), Zipf-like key reuse,
tombstones, null keys, headers, millisecond timestamps, leader epoch changes, segments rolled at
``segment.bytes`` with canonical ``.index``/``.timeindex``, ``.txnindex`` entries for aborted
transactions, a producer ``.snapshot`` at every roll, segment mtimes at their last timestamp,
root checkpoints, ``meta.properties`` and ``partition.metadata``. An optional legacy prefix
writes the first records of each partition as v0 then v1 messages (a message-format upgrade).

Everything is derived from ``seed``: the same config gives byte-identical files.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import itertools
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactor import progress
from compactor.codec.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
)
from compactor.codec.compression import Codec
from compactor.codec.indexes import (
    AbortedTxn,
    BatchIndexInfo,
    build_indexes,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
)
from compactor.codec.kraft import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    encode_control_value,
    encode_metadata_record,
    random_uuid_text,
)
from compactor.codec.legacy import LegacyRecord, encode_message_set
from compactor.codec.records import (
    ControlType,
    NewRecord,
    NewRecordBatch,
    TimestampType,
    add_sequence,
    control_key,
    encode_batch,
    marker_value,
)
from compactor.codec.snapshot import ProducerSnapshotEntry, encode_snapshot
from compactor.config import INTERNAL_TOPIC_CONFIGS
from compactor.errors import ConfigError, LogDirError
from compactor.log import storage
from compactor.log.names import METADATA_DIR_NAME
from compactor.model import EpochEntry, TopicPartition, segment_file_prefix

DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True, kw_only=True)
class GeneratorConfig:
    """Shape of a generated log dir. Sizes are per partition."""

    topics: Sequence[str] = ("orders-v2", "user-profiles")
    partitions: int = 2
    records_per_partition: int = 5_000
    distinct_keys: int = 500
    zipf_exponent: float = 1.1
    value_bytes: int = 100
    tombstone_ratio: float = 0.1
    null_key_ratio: float = 0.01
    header_ratio: float = 0.2
    max_batch_records: int = 20
    segment_bytes: int = 64 * 1024
    index_interval_bytes: int = 4096
    codecs: Sequence[Codec] = tuple(Codec)
    plain_producers: int = 2
    idempotent_producers: int = 2
    transactional_producers: int = 2
    transactional_ratio: float = 0.3
    abort_ratio: float = 0.3
    open_transaction: bool = False
    legacy_records: int = 0
    leader_epochs: int = 3
    start_ms: int = DEFAULT_START_MS
    record_interval_ms: int = 50
    log_append_time_topics: Sequence[str] = ()
    seed: int = 0
    # the cluster around the data: a KRaft metadata log (__cluster_metadata-0, a snapshot and
    # the log after it) naming every topic, with these topic configs as ConfigRecords
    metadata_log: bool = True
    topic_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Kafka's internal topics to create (with the configs Kafka creates them with)
    internal_topics: Sequence[str] = ()
    # topics whose partition dirs are written but that the metadata then removed, and topics
    # deleted and re-created (their dirs keep the old topic id)
    removed_topics: Sequence[str] = ()
    recreated_topics: Sequence[str] = ()
    # dynamic broker configs as BROKER ConfigRecords: "" = the cluster-wide default, "1" = this
    # broker (node.id 1 in meta.properties)
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # the broker whose log dir this is, and the brokers holding a replica of every partition
    # (the metadata's PartitionRecords; each broker's log dir has its own directory.id, the
    # same in every broker's copy of the metadata): a three-broker cluster is three generate()
    # calls with the same seed and node_id 1, 2 and 3
    node_id: int = 1
    replicas: Sequence[int] = (1,)
    # topics whose partitions have a second replica (node 2) that is out of the ISR
    out_of_sync_topics: Sequence[str] = ()
    # the broker's static configs (log.* and any other), written to a server.properties
    # beside the log dir when generate() is given a path for it
    static_configs: Mapping[str, str] = field(default_factory=dict)
    # the Kafka release of the cluster whose metadata log is written: its latest
    # metadata.version is finalized and in the broker's registration (compactor.cluster.release)
    kafka_release: str = "4.1"
    # the broker's registration lists its first log dir as cordoned (KIP-1066, Kafka 4.3+)
    cordoned: bool = False

    def validate(self) -> None:
        """Raise :class:`ConfigError` for values that cannot produce a log."""
        checks = [
            (self.partitions >= 1, "partitions must be >= 1"),
            (self.kafka_release in LATEST_METADATA_VERSION,
             f"kafka_release must be one of {', '.join(LATEST_METADATA_VERSION)}"),
            (self.records_per_partition >= 0, "records per partition must be >= 0"),
            (self.distinct_keys >= 1, "distinct keys must be >= 1"),
            (self.value_bytes >= 0, "value bytes must be >= 0"),
            (self.max_batch_records >= 1, "max batch records must be >= 1"),
            (self.segment_bytes >= 1024, "segment bytes must be >= 1024"),
            (self.plain_producers + self.idempotent_producers + self.transactional_producers >= 1,
             "at least one producer is needed"),
            (all(0 <= r <= 1 for r in (self.tombstone_ratio, self.null_key_ratio,
                                       self.header_ratio, self.transactional_ratio,
                                       self.abort_ratio)), "ratios must lie in [0, 1]"),
            (len(self.codecs) >= 1, "at least one codec is needed"),
            (self.legacy_records >= 0, "legacy records must be >= 0"),
            (all("/" not in t and t for t in self.topics), "topic names must be non-empty "
                                                            "and contain no '/'"),
            (self.node_id in self.replicas, "node_id must be one of replicas"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"invalid generator setting: {message}")


@dataclass(slots=True)
class _Producer:
    kind: str  # plain | idempotent | transactional
    producer_id: int
    epoch: int
    codec: Codec
    next_sequence: int = 0
    txn_first_offset: int | None = None
    txn_batches: int = 0
    last_offset: int = -1
    last_offset_delta: int = 0
    last_timestamp: int = -1
    coordinator_epoch: int = 0


@dataclass(slots=True)
class PartitionSummary:
    """What was generated for one partition (used by tests and the demo)."""

    tp: TopicPartition
    log_end_offset: int = 0
    records: int = 0
    batches: int = 0
    segments: int = 0
    aborted_txns: int = 0
    committed_txns: int = 0
    open_txn_first_offset: int | None = None
    bytes: int = 0


@dataclass(slots=True)
class GenerationSummary:
    log_dir: str
    partitions: list[PartitionSummary] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "log_dir": self.log_dir,
            "partitions": [
                {"topic": p.tp.topic, "partition": p.tp.partition, "log_end_offset":
                 p.log_end_offset, "records": p.records, "batches": p.batches,
                 "segments": p.segments, "aborted_txns": p.aborted_txns,
                 "committed_txns": p.committed_txns,
                 "open_txn_first_offset": p.open_txn_first_offset, "bytes": p.bytes}
                for p in self.partitions
            ],
        }


class _SegmentWriter:
    """Accumulates one partition's segments and writes them as they roll."""

    def __init__(self, partition_dir: str, cfg: GeneratorConfig) -> None:
        self.dir = partition_dir
        self.cfg = cfg
        self.base_offset = 0
        self.chunks: list[bytes] = []
        self.size = 0
        self.index_infos: list[BatchIndexInfo] = []
        self.aborted: list[AbortedTxn] = []
        self.max_timestamp = -1
        self.segments = 0

    def append(self, entry: bytes, *, base_offset: int, last_offset: int, max_timestamp: int,
               on_roll: Callable[[int], None]) -> None:
        if self.chunks and self.size + len(entry) > self.cfg.segment_bytes:
            self.flush()
            on_roll(base_offset)
        if not self.chunks:
            self.base_offset = base_offset
        self.index_infos.append(BatchIndexInfo(position=self.size, size_in_bytes=len(entry),
                                               last_offset=last_offset,
                                               max_timestamp=max_timestamp))
        self.chunks.append(entry)
        self.size += len(entry)
        self.max_timestamp = max(self.max_timestamp, max_timestamp)

    def flush(self) -> None:
        prefix = storage.join(self.dir, segment_file_prefix(self.base_offset))
        offsets, times = build_indexes(self.index_infos, self.base_offset,
                                       index_interval_bytes=self.cfg.index_interval_bytes)
        mtime = self.max_timestamp if self.max_timestamp > 0 else self.cfg.start_ms
        storage.write_durable(prefix + ".log", b"".join(self.chunks), mtime_ms=mtime,
                              fsync=False)
        storage.write_durable(prefix + ".index", encode_offset_index(offsets, self.base_offset),
                              mtime_ms=mtime, fsync=False)
        storage.write_durable(prefix + ".timeindex", encode_time_index(times, self.base_offset),
                              mtime_ms=mtime, fsync=False)
        if self.aborted:
            storage.write_durable(prefix + ".txnindex", encode_txn_index(self.aborted),
                                  mtime_ms=mtime, fsync=False)
        self.segments += 1
        self.chunks, self.size, self.index_infos, self.aborted = [], 0, [], []
        self.max_timestamp = -1


class _KeyChooser:
    def __init__(self, rng: random.Random, count: int, exponent: float) -> None:
        weights = [1.0 / (k + 1) ** exponent for k in range(count)]
        self.cum = list(itertools.accumulate(weights))
        self.total = self.cum[-1]
        self.rng = rng
        # Shuffle which key ids are hot so hot keys spread over the key space.
        self.ids = list(range(count))
        rng.shuffle(self.ids)

    def __call__(self) -> bytes:
        rank = bisect.bisect_left(self.cum, self.rng.random() * self.total)
        return b"key-%08d" % self.ids[min(rank, len(self.ids) - 1)]


def generate(out_dir: str, cfg: GeneratorConfig, *, server_properties: str | None = None,
             extra_log_dirs: Sequence[str] = ()) -> GenerationSummary:
    """Write a log dir under ``out_dir`` (created when missing), the broker's other JBOD log
    dirs ``extra_log_dirs`` (the partitions spread over all of them round-robin, each dir with
    its own ``directory.id`` and root checkpoints, the metadata log in the first as Kafka puts
    it by default) and, at ``server_properties``, the static configuration of the broker that
    owns them (:func:`write_server_properties`).

    Raises:
        ConfigError: an invalid setting.
        LogDirError: a target exists and is not empty (generated files would mix with
            what is there: a real log dir, a partition directory).
    """
    cfg.validate()
    dirs = [out_dir, *extra_log_dirs]
    for d in dirs:
        if storage.exists(d) and (not storage.is_dir(d) or storage.list_dir(d)):
            raise LogDirError("the target exists and is not an empty directory", path=d,
                              remedy="nothing was written; give a new or empty directory")
    rng = random.Random(cfg.seed)
    cluster_id = base64.urlsafe_b64encode(uuid.UUID(int=rng.getrandbits(128)).bytes).rstrip(
        b"=").decode()
    for index, d in enumerate(dirs):
        storage.make_dirs(d)
        storage.write_durable(
            storage.join(d, "meta.properties"),
            f"#Generated by kafka-compactor\nnode.id={cfg.node_id}\nversion=1\n"
            f"cluster.id={cluster_id}\n"
            f"directory.id={directory_id(cfg.seed, cfg.node_id, index)}\n".encode(),
            fsync=False,
        )
    summary = GenerationSummary(log_dir=out_dir)
    unknown = (set(cfg.topic_configs) | set(cfg.removed_topics) | set(cfg.recreated_topics)) \
        - set(cfg.topics) - set(cfg.internal_topics)
    if unknown:
        raise ConfigError(f"invalid generator setting: configs or removals for topics that are "
                          f"not generated: {', '.join(sorted(unknown))}")
    topic_ids: dict[str, str] = {}
    all_topics = (*cfg.topics, *cfg.internal_topics)
    homes: dict[TopicPartition, int] = {}
    with progress.step("generate", total=len(all_topics) * cfg.partitions,
                       unit="partitions") as step:
        for topic_index, topic in enumerate(all_topics):
            topic_id = base64.urlsafe_b64encode(
                uuid.UUID(int=rng.getrandbits(128)).bytes).rstrip(b"=").decode()
            topic_ids[topic] = topic_id
            for partition in range(cfg.partitions):
                tp = TopicPartition(topic, partition)
                homes[tp] = (topic_index * cfg.partitions + partition) % len(dirs)
                seed = hash((cfg.seed, topic_index, partition)) & 0xFFFFFFFF
                summary.partitions.append(_generate_partition(
                    dirs[homes[tp]], tp, topic_id, cfg, random.Random(seed)))
                step.advance()
    if cfg.metadata_log:
        _write_metadata_log(out_dir, cfg, topic_ids, rng, homes)
    for index, d in enumerate(dirs):
        hw = {p.tp: p.log_end_offset for p in summary.partitions if homes[p.tp] == index}
        storage.write_durable(storage.join(d, REPLICATION_OFFSET_CHECKPOINT),
                              format_offset_checkpoint(hw).encode(), fsync=False)
        storage.write_durable(storage.join(d, RECOVERY_POINT_CHECKPOINT),
                              format_offset_checkpoint(hw).encode(), fsync=False)
        storage.write_durable(storage.join(d, LOG_START_OFFSET_CHECKPOINT),
                              format_offset_checkpoint({}).encode(), fsync=False)
    if server_properties is not None:
        write_server_properties(server_properties, dirs, cfg.static_configs,
                                node_id=cfg.node_id)
    return summary


# MetadataVersion.latestProduction() of each release (its feature level)
LATEST_METADATA_VERSION = {"4.1": 27, "4.2": 29, "4.3": 30, "4.4": 33}


def directory_id(seed: int, node_id: int, index: int = 0) -> str:
    """The ``directory.id`` of node ``node_id``'s ``index``-th generated log dir (KIP-858),
    the same in every broker's copy of the metadata; drawn outside the generator's random
    stream, so the brokers of one seed write the same topic ids and records."""
    digest = hashlib.sha256(f"{seed}/{node_id}/{index}".encode()).digest()
    return random_uuid_text(int.from_bytes(digest[:16], "big") | (1 << 100))


def write_server_properties(path: str, log_dirs: Sequence[str],
                            static_configs: Mapping[str, str], *, node_id: int = 1) -> None:
    """A combined broker and controller's ``server.properties`` as a KRaft node of the
    generated cluster has it: its ``node.id`` (that of ``meta.properties``), its
    ``log.dirs`` (absolute; the metadata log in the first, Kafka's ``metadata.log.dir``
    default) and ``static_configs`` (say ``log.retention.hours``)."""
    lines = ["# Generated by kafka-compactor: the static configs of the broker owning the "
             "log dirs below", "process.roles=broker,controller", f"node.id={node_id}",
             f"controller.quorum.voters={node_id}@localhost:9093",
             "listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
             "controller.listener.names=CONTROLLER",
             "log.dirs=" + ",".join(storage.absolute(d) for d in log_dirs)]
    lines += [f"{k}={v}" for k, v in static_configs.items()]
    storage.write_durable(path, ("\n".join(lines) + "\n").encode(), fsync=False)


def _generate_partition(
    out_dir: str, tp: TopicPartition, topic_id: str, cfg: GeneratorConfig, rng: random.Random
) -> PartitionSummary:
    pdir = storage.join(out_dir, tp.dir_name)
    storage.make_dirs(pdir)
    storage.write_durable(storage.join(pdir, "partition.metadata"),
                          f"version: 0\ntopic_id: {topic_id}".encode(), fsync=False)
    partition = _PartitionLog(pdir, tp, cfg, rng)
    partition.write_legacy_prefix()
    partition.write_batches()
    partition.close_transactions()
    return partition.finish()


class _PartitionLog:
    """One partition being written, oldest record first: its producers, clock, offsets,
    leader epochs and segments. The random draws happen in a fixed order, so the same seed
    writes the same bytes."""

    def __init__(self, pdir: str, tp: TopicPartition, cfg: GeneratorConfig,
                 rng: random.Random) -> None:
        self.pdir, self.cfg, self.rng = pdir, cfg, rng
        self.summary = PartitionSummary(tp=tp)
        self.choose_key = _KeyChooser(rng, cfg.distinct_keys, cfg.zipf_exponent)
        self.value_pool = rng.randbytes(64 * 1024) + bytes(64 * 1024)  # half random, half not
        self.ts_type = (TimestampType.LOG_APPEND_TIME if tp.topic in cfg.log_append_time_topics
                        else TimestampType.CREATE_TIME)
        self.producers: list[_Producer] = []
        next_pid = 1000 + rng.randrange(1000)
        for kind, count in (("plain", cfg.plain_producers),
                            ("idempotent", cfg.idempotent_producers),
                            ("transactional", cfg.transactional_producers)):
            for _ in range(count):
                pid = -1 if kind == "plain" else next_pid
                next_pid += 1 + rng.randrange(5)
                self.producers.append(_Producer(kind=kind, producer_id=pid,
                                                epoch=-1 if kind == "plain" else rng.randrange(3),
                                                codec=rng.choice(list(cfg.codecs))))
        self.plain = [p for p in self.producers if p.kind != "transactional"]
        self.txn_producers = [p for p in self.producers if p.kind == "transactional"]
        self.writer = _SegmentWriter(pdir, cfg)
        self.epochs: list[EpochEntry] = []
        self.epoch_len = max(1, cfg.records_per_partition // max(1, cfg.leader_epochs))
        self.offset = 0
        self.clock = cfg.start_ms

    def snapshot_at(self, roll_offset: int) -> None:
        """The producer snapshot a broker writes when it rolls a segment at ``roll_offset``."""
        entries = [
            ProducerSnapshotEntry(
                producer_id=p.producer_id, epoch=p.epoch,
                last_sequence=add_sequence(p.next_sequence, -1) if p.next_sequence else -1,
                last_offset=p.last_offset, offset_delta=p.last_offset_delta,
                timestamp=p.last_timestamp, coordinator_epoch=p.coordinator_epoch,
                current_txn_first_offset=(p.txn_first_offset if p.txn_first_offset is not None
                                          else -1),
            )
            for p in self.producers if p.producer_id >= 0 and p.last_offset >= 0
        ]
        storage.write_durable(
            storage.join(self.pdir, segment_file_prefix(roll_offset) + ".snapshot"),
            encode_snapshot(entries), fsync=False)

    def leader_epoch(self) -> int:
        """The leader epoch at the current offset (a new epoch entry where it changes)."""
        epoch = min(self.offset // self.epoch_len, max(0, self.cfg.leader_epochs - 1))
        if not self.epochs or self.epochs[-1].epoch != epoch:
            self.epochs.append(EpochEntry(epoch=epoch, start_offset=self.offset))
        return epoch

    def tick(self) -> int:
        self.clock += self.rng.randrange(0, 2 * self.cfg.record_interval_ms + 1)
        return self.clock

    def make_record(self, delta: int, txn: bool) -> NewRecord:
        cfg, rng = self.cfg, self.rng
        ts = self.tick()
        key: bytes | None = self.choose_key()
        if not txn and rng.random() < cfg.null_key_ratio:
            key = None
        if key is not None and rng.random() < cfg.tombstone_ratio:
            value = None
        else:
            start = (rng.randrange(0, len(self.value_pool) - cfg.value_bytes)
                     if cfg.value_bytes else 0)
            value = self.value_pool[start : start + cfg.value_bytes]
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if rng.random() < cfg.header_ratio:
            headers = (("trace-id", b"%016x" % rng.getrandbits(64)),
                       ("source", rng.choice([b"svc-a", b"svc-b", None])))
        return NewRecord(offset_delta=delta, timestamp=ts, key=key, value=value, headers=headers)

    def emit(self, entry: bytes, base: int, last: int, max_ts: int, records: int) -> None:
        self.writer.append(entry, base_offset=base, last_offset=last, max_timestamp=max_ts,
                           on_roll=self.snapshot_at)
        self.summary.batches += 1
        self.summary.records += records
        self.summary.bytes += len(entry)

    def emit_marker(self, p: _Producer, epoch: int) -> None:
        """End ``p``'s open transaction with a commit or abort marker."""
        offset = self.offset
        abort = self.rng.random() < self.cfg.abort_ratio
        ts = self.tick()
        marker = NewRecordBatch(
            base_offset=offset,
            records=[NewRecord(offset_delta=0, timestamp=ts,
                               key=control_key(ControlType.ABORT if abort else ControlType.COMMIT),
                               value=marker_value(p.coordinator_epoch))],
            timestamp_type=self.ts_type,
            max_timestamp=ts,
            is_transactional=True,
            is_control=True,
            partition_leader_epoch=epoch,
            producer_id=p.producer_id,
            producer_epoch=p.epoch,
        )
        first = p.txn_first_offset if p.txn_first_offset is not None else offset
        self.emit(encode_batch(marker), offset, offset, ts, 0)
        if abort:
            # LSO right after the abort: first offset of the earliest other open transaction
            lso = min((q.txn_first_offset for q in self.txn_producers
                       if q is not p and q.txn_first_offset is not None), default=offset + 1)
            self.writer.aborted.append(AbortedTxn(producer_id=p.producer_id, first_offset=first,
                                                  last_offset=offset, last_stable_offset=lso))
            self.summary.aborted_txns += 1
        else:
            self.summary.committed_txns += 1
        p.txn_first_offset = None
        p.txn_batches = 0
        p.last_offset = offset
        p.last_offset_delta = 0
        p.last_timestamp = ts
        self.offset += 1

    def write_legacy_prefix(self) -> None:
        """v0 messages, then v1, as after a message-format upgrade."""
        cfg, rng = self.cfg, self.rng
        legacy_left = min(cfg.legacy_records, cfg.records_per_partition)
        while legacy_left > 0:
            offset = self.offset
            magic = 0 if offset < cfg.legacy_records // 2 else 1
            n = min(legacy_left, 1 + rng.randrange(cfg.max_batch_records))
            codec = rng.choice([c for c in cfg.codecs if c != Codec.ZSTD] or [Codec.NONE])
            recs = [LegacyRecord(offset=offset + i, key=self.choose_key(),
                                 value=b"legacy-%d" % (offset + i),
                                 timestamp=self.tick() if magic == 1 else -1) for i in range(n)]
            if codec == Codec.NONE:
                for r in recs:
                    entry = encode_message_set([r], magic=magic)
                    self.emit(entry, r.offset, r.offset, r.timestamp, 1)
            else:
                entry = encode_message_set(recs, magic=magic, codec=codec)
                self.emit(entry, offset, offset + n - 1, max(r.timestamp for r in recs), n)
            self.leader_epoch()
            self.offset += n
            legacy_left -= n

    def write_batches(self) -> None:
        """v2 batches until the partition holds its records: plain and idempotent producers'
        and transactions, each ended by a marker at random."""
        cfg, rng, summary = self.cfg, self.rng, self.summary
        while summary.records < cfg.records_per_partition:
            use_txn = self.txn_producers and rng.random() < cfg.transactional_ratio
            producer = rng.choice(self.txn_producers if use_txn
                                  else self.plain or self.txn_producers)
            epoch = self.leader_epoch()
            if producer.kind == "transactional":
                if producer.txn_first_offset is not None and producer.txn_batches >= 1 and \
                        rng.random() < 0.35:
                    self.emit_marker(producer, epoch)
                    continue
                if producer.txn_first_offset is None:
                    producer.txn_first_offset = self.offset
            self._write_batch(producer, epoch)

    def _write_batch(self, producer: _Producer, epoch: int) -> None:
        cfg, offset = self.cfg, self.offset
        n = min(1 + self.rng.randrange(cfg.max_batch_records),
                cfg.records_per_partition - self.summary.records)
        records = [self.make_record(i, producer.kind == "transactional") for i in range(n)]
        appended = self.ts_type == TimestampType.LOG_APPEND_TIME
        batch = NewRecordBatch(
            base_offset=offset,
            records=records,
            compression=producer.codec,
            timestamp_type=self.ts_type,
            max_timestamp=self.clock if appended else None,
            is_transactional=producer.kind == "transactional",
            partition_leader_epoch=epoch,
            producer_id=producer.producer_id,
            producer_epoch=producer.epoch,
            base_sequence=producer.next_sequence if producer.producer_id >= 0 else -1,
        )
        entry = encode_batch(batch)
        max_ts = self.clock if appended else max(r.timestamp for r in records)
        self.emit(entry, offset, offset + n - 1, max_ts, n)
        if producer.producer_id >= 0:
            producer.next_sequence = add_sequence(producer.next_sequence, n)
            producer.last_offset = offset + n - 1
            producer.last_offset_delta = n - 1
            producer.last_timestamp = max_ts
        if producer.kind == "transactional":
            producer.txn_batches += 1
        self.offset += n

    def close_transactions(self) -> None:
        """End every open transaction, but one with ``open_transaction``."""
        keep_open = self.cfg.open_transaction
        for p in self.txn_producers:
            if p.txn_first_offset is None:
                continue
            if keep_open:
                keep_open = False
                self.summary.open_txn_first_offset = p.txn_first_offset
                continue
            self.emit_marker(p, self.leader_epoch())

    def finish(self) -> PartitionSummary:
        """The last segment flushed, the leader-epoch checkpoint written: the summary."""
        writer = self.writer
        if writer.chunks or writer.segments == 0:
            if not writer.chunks:
                writer.base_offset = self.offset
            writer.flush()
        self.summary.segments = writer.segments
        self.summary.log_end_offset = self.offset
        storage.write_durable(storage.join(self.pdir, LEADER_EPOCH_CHECKPOINT),
                              format_leader_epoch_checkpoint(self.epochs).encode(), fsync=False)
        return self.summary


def _write_metadata_log(out_dir: str, cfg: GeneratorConfig, topic_ids: dict[str, str],
                        rng: random.Random, homes: Mapping[TopicPartition, int]) -> None:
    """``__cluster_metadata-0`` as a single-node KRaft cluster leaves it: the log (leader
    change, metadata.version, the broker's registration, every topic with its partitions and
    ConfigRecords), a snapshot of that state, then the log after the snapshot (topic removals
    and re-creations, a no-op)."""
    pdir = storage.join(out_dir, METADATA_DIR_NAME)
    storage.make_dirs(pdir)
    clock = cfg.start_ms - 3_600_000

    def rec(name: str, fields: dict[str, Any], version: int = 0) -> bytes:
        return encode_metadata_record(name, fields, version)

    def topic_records(topic: str, topic_id: str) -> list[bytes]:
        out = [rec("TopicRecord", {"Name": topic, "TopicId": topic_id})]
        replicas = [*cfg.replicas, *([2] if topic in cfg.out_of_sync_topics
                                     and 2 not in cfg.replicas else [])]
        for p in range(cfg.partitions):
            out.append(rec("PartitionRecord", {
                "PartitionId": p, "TopicId": topic_id, "Replicas": replicas,
                "Isr": [n for n in cfg.replicas if topic not in cfg.out_of_sync_topics
                        or n != 2] or [cfg.node_id],
                "RemovingReplicas": [], "AddingReplicas": [], "Leader": 1, "LeaderEpoch": 0,
                "PartitionEpoch": 0,
                # this broker's replica in the JBOD dir holding it; another broker's in its first
                "Directories": [directory_id(cfg.seed, n, homes.get(TopicPartition(topic, p), 0)
                                             if n == cfg.node_id else 0)
                                for n in replicas]}, 1))
        configs = {**INTERNAL_TOPIC_CONFIGS.get(topic, {}), **cfg.topic_configs.get(topic, {})}
        for key, value in configs.items():
            out.append(rec("ConfigRecord", {"ResourceType": RESOURCE_TOPIC,
                                            "ResourceName": topic, "Name": key, "Value": value}))
        return out

    level = LATEST_METADATA_VERSION[cfg.kafka_release]
    registration = 4 if cfg.cordoned else 3  # CordonedLogDirs: version 4 (Kafka 4.3)
    state = [rec("FeatureLevelRecord", {"Name": "metadata.version", "FeatureLevel": level}),
             rec("RegisterBrokerRecord", {
                 "BrokerId": 1, "IncarnationId": random_uuid_text(rng.getrandbits(128)),
                 "BrokerEpoch": 2, "EndPoints": [{"Name": "PLAINTEXT", "Host": "localhost",
                                                  "Port": 9092, "SecurityProtocol": 0}],
                 "Features": [{"Name": "metadata.version", "MinSupportedVersion": 7,
                               "MaxSupportedVersion": level}],
                 "Rack": None, "Fenced": False, "InControlledShutdown": False,
                 "CordonedLogDirs": [directory_id(cfg.seed, cfg.node_id)] if cfg.cordoned
                 else None}, registration)]
    for resource, configs in cfg.broker_configs.items():
        for key, value in configs.items():
            state.append(rec("ConfigRecord", {"ResourceType": RESOURCE_BROKER,
                                              "ResourceName": resource, "Name": key,
                                              "Value": value}))
    stale_ids = {}
    for topic, topic_id in topic_ids.items():
        if topic in cfg.recreated_topics:  # the dirs hold this id; the metadata moves on
            stale_ids[topic] = topic_id
        state.extend(topic_records(topic, topic_id))
    after = []
    for topic in cfg.removed_topics:
        after.append(rec("RemoveTopicRecord", {"TopicId": topic_ids[topic]}))
    for topic, old in stale_ids.items():
        new_id = random_uuid_text(rng.getrandbits(128))
        after += [rec("RemoveTopicRecord", {"TopicId": old}), *topic_records(topic, new_id)]
    after.append(rec("NoOpRecord", {}))

    def batch(base: int, values: Sequence[bytes]) -> bytes:
        return encode_batch(NewRecordBatch(
            base_offset=base, partition_leader_epoch=1,
            records=[NewRecord(offset_delta=i, timestamp=clock, key=None, value=v)
                     for i, v in enumerate(values)]))

    def control(base: int, control_type: ControlType, fields: dict[str, Any]) -> bytes:
        return encode_batch(NewRecordBatch(
            base_offset=base, is_control=True, partition_leader_epoch=1,
            records=[NewRecord(offset_delta=0, timestamp=clock, key=control_key(control_type),
                               value=encode_control_value(control_type, fields))]))

    # the log: a leader change, then the state in batches of up to 10 records, then the rest
    entries = [control(0, ControlType.LEADER_CHANGE, {
        "Version": 0, "LeaderId": 1, "Voters": [{"VoterId": 1}],
        "GrantingVoters": [{"VoterId": 1}]})]
    offset = 1
    for i in range(0, len(state), 10):
        entries.append(batch(offset, state[i:i + 10]))
        offset += len(state[i:i + 10])
    snapshot_end = offset
    entries.append(batch(offset, after))
    offset += len(after)
    infos, position = [], 0
    for e in entries:
        infos.append(BatchIndexInfo(position=position, size_in_bytes=len(e),
                                    last_offset=-1, max_timestamp=clock))
        position += len(e)
    # last offsets from the batches themselves (a control batch holds one record)
    last = 0
    fixed = []
    for info, e in zip(infos, entries):
        count = int.from_bytes(e[57:61], "big")
        fixed.append(BatchIndexInfo(position=info.position, size_in_bytes=info.size_in_bytes,
                                    last_offset=last + count - 1, max_timestamp=clock))
        last += count
    prefix = storage.join(pdir, segment_file_prefix(0))
    offsets, times = build_indexes(fixed, 0, index_interval_bytes=cfg.index_interval_bytes)
    storage.write_durable(prefix + ".log", b"".join(entries), mtime_ms=clock, fsync=False)
    storage.write_durable(prefix + ".index", encode_offset_index(offsets, 0), mtime_ms=clock,
                          fsync=False)
    storage.write_durable(prefix + ".timeindex", encode_time_index(times, 0), mtime_ms=clock,
                          fsync=False)
    # the snapshot of everything below snapshot_end (Kafka's <end offset>-<epoch>.checkpoint)
    snap = [control(0, ControlType.SNAPSHOT_HEADER, {"Version": 0,
                                                     "LastContainedLogTimestamp": clock})]
    for i in range(0, len(state), 10):
        snap.append(batch(1 + i, state[i:i + 10]))
    snap.append(control(1 + len(state), ControlType.SNAPSHOT_FOOTER, {"Version": 0}))
    storage.write_durable(storage.join(pdir, f"{snapshot_end:020d}-{1:010d}.checkpoint"),
                          b"".join(snap), mtime_ms=clock, fsync=False)
    storage.write_durable(storage.join(pdir, LEADER_EPOCH_CHECKPOINT),
                          format_leader_epoch_checkpoint([EpochEntry(epoch=1, start_offset=0)])
                          .encode(), fsync=False)
    storage.write_durable(storage.join(pdir, "partition.metadata"),
                          b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", fsync=False)
    storage.write_durable(storage.join(pdir, "quorum-state"),
                          b'{"leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0,'
                          b'"currentVoters":[{"voterId":1}],"data_version":0}', fsync=False)
