"""The cluster's state as its KRaft metadata log tells it: topic names and ids, removed topics,
topic configs and dynamic broker configs. Pure: the caller reads the files
(:func:`compactor.cluster.metadata_log.load_cluster_metadata`) and feeds the batches in offset
order.

What a controller or broker does on load (``MetadataLoader``, ``MetadataDelta.replay``): take the
latest snapshot (``<end offset>-<epoch>.checkpoint``, its records between a SnapshotHeader and a
SnapshotFooter control record), then every record of the log from the snapshot's end offset on.
Records inside a metadata transaction (KIP-868: BeginTransactionRecord ... EndTransactionRecord)
count only once it ends, and not at all when it is aborted or still open.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.cluster.release import METADATA_VERSION
from compactor.codec.kraft import (
    METADATA_SCHEMAS,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    MetadataRecord,
    decode_control_value,
    decode_metadata_record,
    read_frame,
)
from compactor.codec.records import ControlType, RecordBatch
from compactor.errors import CompactorError, CorruptMetadataError

SNAPSHOT_SUFFIX = ".checkpoint"
# Kafka's Snapshots.filenameFromSnapshotId: 20-digit end offset, '-', 10-digit epoch
_SNAPSHOT_NAME = re.compile(r"^(?P<offset>[0-9]{20})-(?P<epoch>[0-9]{10})\.checkpoint$")
# The record types whose fields the tool reads (topics, their partitions' replicas and configs);
# every other type is framed and skipped, a type newer than Kafka 4.1 too (with a count).
_REPLAYED = {2: "TopicRecord", 3: "PartitionRecord", 4: "ConfigRecord",
             5: "PartitionChangeRecord", 9: "RemoveTopicRecord"}
# replayed for what they tell of the brokers (the release they run, their cordoned log dirs);
# a version newer than the tool knows is counted and skipped like a newer record type, never
# fatal: without them the tool takes the rules that delete the least
# (compactor.cluster.release)
_BROKERS = {0: "RegisterBrokerRecord", 1: "UnregisterBrokerRecord", 12: "FeatureLevelRecord",
            17: "BrokerRegistrationChangeRecord"}
_TXN = {23: "begin", 24: "end", 25: "abort"}


def parse_snapshot_name(name: str) -> tuple[int, int] | None:
    """``(end offset, epoch)`` of a complete snapshot file name; ``None`` for other names
    (``.checkpoint.part`` being written, ``.checkpoint.deleted`` being removed)."""
    m = _SNAPSHOT_NAME.match(name)
    return (int(m["offset"]), int(m["epoch"])) if m else None


@dataclass(kw_only=True)
class PartitionState:
    """One partition as the metadata image holds it (``PartitionRegistration``): its replicas
    (broker ids), in-sync replicas and, per replica, the directory id of the log dir holding
    it (``Directories``, KIP-858; empty before metadata.version 3.7-IV2)."""

    replicas: list[int]
    isr: list[int]
    directories: list[str]
    # KIP-966: replicas out of the ISR that still hold the log up to the high watermark
    # (a cleanly stopped broker's replicas land here when no ISR member is left)
    elr: list[int] = field(default_factory=list)


@dataclass(kw_only=True)
class ClusterMetadata:
    """What the metadata says about topics and configs.

    Attributes:
        topic_ids: live topic name -> topic id (``Uuid`` text, as in ``partition.metadata``).
        removed_ids: ids of topics removed by a RemoveTopicRecord.
        topic_configs: topic name -> {config: value} from TOPIC ConfigRecords.
        broker_configs: broker resource name (``""``: the cluster-wide default, else a node
            id) -> {broker config: value} from BROKER ConfigRecords.
        partitions: topic id -> partition id -> its replicas, ISR and directories.
        unknown_record_types: api keys of records newer than Kafka 4.1 -> how many were
            skipped by their frame (none of them changes topics, partitions or configs in the
            versions the tool knows); broker registrations of a version newer than 4.4's too.
        snapshot: the snapshot replayed first (file name), if any.
        end_offset: the offset after the last record replayed.
        records: records replayed (snapshot and log).
    """

    topic_ids: dict[str, str] = field(default_factory=dict)
    removed_ids: set[str] = field(default_factory=set)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[str, dict[int, PartitionState]] = field(default_factory=dict)
    unknown_record_types: dict[int, int] = field(default_factory=dict)
    #: the cluster's finalized metadata.version feature level (FeatureLevelRecord)
    metadata_version: int | None = None
    #: broker id -> the highest metadata.version its registration supports (its release)
    broker_levels: dict[int, int] = field(default_factory=dict)
    #: broker id -> the directory ids of its cordoned log dirs (KIP-1066, Kafka 4.3)
    cordoned: dict[int, list[str]] = field(default_factory=dict)
    snapshot: str | None = None
    end_offset: int = 0
    records: int = 0

    def topic_name(self, topic_id: str) -> str | None:
        return next((n for n, i in self.topic_ids.items() if i == topic_id), None)

    def partition(self, topic_id: str, partition: int) -> PartitionState | None:
        return self.partitions.get(topic_id, {}).get(partition)

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot": self.snapshot, "end_offset": self.end_offset,
                "records": self.records, "topics": len(self.topic_ids),
                "removed_topics": len(self.removed_ids),
                "metadata_version": self.metadata_version,
                "unknown_record_types": {str(k): n for k, n in
                                         sorted(self.unknown_record_types.items())}}


class Replay:
    """Applies metadata records in offset order to a :class:`ClusterMetadata`."""

    def __init__(self) -> None:
        self.state = ClusterMetadata()
        self._txn: list[MetadataRecord] | None = None

    def apply(self, record: MetadataRecord) -> None:
        if record.name in _BROKERS.values():
            self._broker(record)
        elif record.name == "TopicRecord":
            self.state.topic_ids[record.fields["Name"]] = record.fields["TopicId"]
        elif record.name == "RemoveTopicRecord":
            topic_id = record.fields["TopicId"]
            self.state.removed_ids.add(topic_id)
            name = self.state.topic_name(topic_id)
            if name is not None:  # its configs go with it (ConfigurationsDelta, KAFKA-12976)
                del self.state.topic_ids[name]
                self.state.topic_configs.pop(name, None)
            self.state.partitions.pop(topic_id, None)
        elif record.name == "PartitionRecord":
            f = record.fields
            self.state.partitions.setdefault(f["TopicId"], {})[f["PartitionId"]] = \
                PartitionState(replicas=list(f["Replicas"]), isr=list(f["Isr"]),
                               directories=list(f.get("Directories") or []),
                               elr=list(f.get("EligibleLeaderReplicas") or []))
        elif record.name == "PartitionChangeRecord":
            # a null field leaves the value as it was (PartitionRegistration.merge)
            f = record.fields
            state = self.state.partition(f["TopicId"], f["PartitionId"])
            if state is None:
                return
            if f.get("Replicas") is not None:
                state.replicas = list(f["Replicas"])
            if f.get("Isr") is not None:
                state.isr = list(f["Isr"])
            if f.get("Directories") is not None:
                state.directories = list(f["Directories"])
            if f.get("EligibleLeaderReplicas") is not None:
                state.elr = list(f["EligibleLeaderReplicas"])
        elif record.name == "ConfigRecord":
            f = record.fields
            if f["ResourceType"] == RESOURCE_TOPIC:
                target = self.state.topic_configs
            elif f["ResourceType"] == RESOURCE_BROKER:
                target = self.state.broker_configs
            else:
                return
            configs = target.setdefault(f["ResourceName"], {})
            if f["Value"] is None:
                configs.pop(f["Name"], None)
            else:
                configs[f["Name"]] = f["Value"]

    def _broker(self, record: MetadataRecord) -> None:
        """The cluster's metadata.version, and each broker's release and cordoned log dirs
        (``FeatureControlManager.replay``, ``ClusterControlManager.replay``)."""
        f, state = record.fields, self.state
        if record.name == "FeatureLevelRecord":
            if f["Name"] == METADATA_VERSION:
                state.metadata_version = f["FeatureLevel"]
        elif record.name == "RegisterBrokerRecord":
            broker = f["BrokerId"]
            level = next((x["MaxSupportedVersion"] for x in f["Features"]
                          if x["Name"] == METADATA_VERSION), None)
            if level is None:
                state.broker_levels.pop(broker, None)
            else:
                state.broker_levels[broker] = level
            state.cordoned[broker] = list(f.get("CordonedLogDirs") or [])
        elif record.name == "UnregisterBrokerRecord":
            state.broker_levels.pop(f["BrokerId"], None)
            state.cordoned.pop(f["BrokerId"], None)
        elif f.get("CordonedLogDirs") is not None:  # BrokerRegistrationChangeRecord
            state.cordoned[f["BrokerId"]] = list(f["CordonedLogDirs"])

    def feed(self, batches: Iterable[RecordBatch], *, path: str, from_offset: int = 0,
             snapshot: bool = False) -> None:
        """Replay the records at or above ``from_offset`` of ``batches`` (one file's).

        With ``snapshot``, the file must open with a SnapshotHeader and close with a
        SnapshotFooter control record, as Kafka's ``RecordsSnapshotReader`` requires.

        Raises:
            CorruptMetadataError: naming ``path``, the batch's byte position and base offset,
                the record's offset and type.
        """
        first = last = None
        iterator = iter(batches)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            except CompactorError as err:  # framing, CRC: the metadata log is corrupt
                raise CorruptMetadataError(f"{err.message} ({err.code})", path=err.path or path,
                                           position=err.position,
                                           base_offset=err.base_offset) from err
            try:
                if batch.is_control:
                    for rec in batch.records():
                        control = rec.key and int.from_bytes(rec.key[2:4], "big", signed=True)
                        if control in (ControlType.SNAPSHOT_HEADER, ControlType.SNAPSHOT_FOOTER):
                            decode_control_value(control, rec.value)
                        first = control if first is None else first
                        last = control
                    continue
                for rec in batch.records():
                    first = -100 if first is None else first
                    last = -100
                    if rec.offset < from_offset:
                        continue
                    self._one(rec.value, rec.offset)
                    self.state.end_offset = rec.offset + 1
            except CompactorError as err:
                if isinstance(err, CorruptMetadataError):
                    raise err.with_location(path=path, position=batch.position,
                                            base_offset=batch.base_offset)
                raise CorruptMetadataError(err.message, path=path, position=batch.position,
                                           base_offset=batch.base_offset) from err
        if snapshot and (first != ControlType.SNAPSHOT_HEADER
                         or last != ControlType.SNAPSHOT_FOOTER):
            raise CorruptMetadataError(
                "snapshot does not start with a SnapshotHeader and end with a SnapshotFooter "
                "control record (incomplete or not a KRaft snapshot)", path=path)

    def _one(self, value: bytes | None, offset: int) -> None:
        try:
            api_key, version, _ = read_frame(value)  # type: ignore[arg-type]
            if api_key not in METADATA_SCHEMAS or (  # a newer Kafka's: framed, counted, skipped
                    api_key in _BROKERS and version > METADATA_SCHEMAS[api_key].max_version):
                unknown = self.state.unknown_record_types
                unknown[api_key] = unknown.get(api_key, 0) + 1
            elif api_key in _TXN:
                self._transaction(_TXN[api_key])
            elif api_key in _REPLAYED or api_key in _BROKERS:
                record = decode_metadata_record(value)  # type: ignore[arg-type]
                if self._txn is not None:
                    self._txn.append(record)
                else:
                    self.apply(record)
        except CorruptMetadataError as err:
            err.message = f"record at offset {offset}: {err.message}"
            raise
        self.state.records += 1

    def _transaction(self, kind: str) -> None:
        if kind == "begin":
            self._txn = []
            return
        pending, self._txn = self._txn or [], None
        if kind == "end":
            for record in pending:
                self.apply(record)


def topic_layers_of(meta: ClusterMetadata, node_id: str | None) -> tuple[
        Mapping[str, str], Mapping[str, str]]:
    """The dynamic broker configs that apply to this broker: ``(cluster-wide default,
    this broker's own)`` (a BROKER ConfigRecord named ``""`` or named by ``node_id``)."""
    cluster = meta.broker_configs.get("", {})
    own = meta.broker_configs.get(node_id, {}) if node_id is not None else {}
    return cluster, own
