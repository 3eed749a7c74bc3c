"""KRaft metadata records: the values of ``__cluster_metadata`` batches and of its snapshots.

Grammar (Kafka's ``AbstractApiMessageSerde`` / ``MetadataRecordSerde``; schemas in
``metadata/src/main/resources/common/metadata/*.json``)::

    metadata record value := frame_version:uvarint (always 1)
                             api_key:uvarint version:uvarint message(api_key, version)
    control record value  := message(control type, version 0)   (key: int16 version, int16 type;
                             SnapshotHeader 3, SnapshotFooter 4, LeaderChange 2,
                             KRaftVersion 5, KRaftVoters 6)
    message (every metadata and KRaft control message is "flexibleVersions": "0+")
            := field* tagged_fields
    field   := int8 | int16 | int32 | int64 (big-endian, signed) | uint16 | float64 | bool (1 byte)
             | uuid (16 bytes) | compact string/bytes (uvarint length + 1, 0 = null, then bytes)
             | compact array (uvarint count + 1, 0 = null, then elements) | struct (its own
               fields, then its own tagged_fields)
    tagged_fields := count:uvarint (tag:uvarint size:uvarint data[size])*

A field exists from its first version on; a tagged field lives only in ``tagged_fields`` (tag
order ascending, omitted when it holds its default). Every byte is accounted for: short data,
a null in a non-nullable field, an unknown frame version, api key or message version, and
leftover bytes raise :class:`~compactor.errors.CorruptMetadataError`. Pure: no files, no clock.
"""

from __future__ import annotations

import base64
import struct
import uuid as _uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compactor.codec.varint import encode_unsigned
from compactor.errors import CorruptMetadataError

FRAME_VERSION = 1

# ConfigRecord.ResourceType values (org.apache.kafka.common.config.ConfigResource.Type)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message schema.

    ``type`` is a primitive name (``int8`` ... ``uuid``, ``string``, ``bytes``) or a tuple of
    fields (a struct); ``array`` makes it a compact array of that type. ``since`` is the first
    version holding the field, ``nullable_since`` the first version where it may be null (None:
    never), ``tag`` marks a tagged field and ``default`` is what an absent tagged field means."""

    name: str
    type: str | tuple[Field, ...]
    array: bool = False
    since: int = 0
    nullable_since: int | None = None
    tag: int | None = None
    default: Any = None


@dataclass(frozen=True, slots=True)
class Schema:
    name: str
    api_key: int
    max_version: int
    fields: tuple[Field, ...]


def _f(name: str, type_: str | tuple[Field, ...], *, since: int = 0, nullable: int | None = None,
       tag: int | None = None, default: Any = None) -> Field:
    array = isinstance(type_, str) and type_.startswith("[]")
    return Field(name, type_[2:] if array and isinstance(type_, str) else type_, array, since,
                 nullable, tag, default)


def _af(name: str, fields: tuple[Field, ...]) -> Field:
    return Field(name, fields, True)


_ENDPOINT = (_f("Name", "string"), _f("Host", "string"), _f("Port", "uint16"),
             _f("SecurityProtocol", "int16"))
_FEATURE = (_f("Name", "string"), _f("MinSupportedVersion", "int16"),
            _f("MaxSupportedVersion", "int16"))

# The metadata record types of Kafka 4.1, by api key (the JSON schemas' apiKey/validVersions),
# with the newer versions of 4.2-4.4 (checked against their jars' HIGHEST_SUPPORTED_VERSION).
METADATA_SCHEMAS: dict[int, Schema] = {s.api_key: s for s in (
    Schema("RegisterBrokerRecord", 0, 4, (
        _f("BrokerId", "int32"), _f("IsMigratingZkBroker", "bool", since=2),
        _f("IncarnationId", "uuid"), _f("BrokerEpoch", "int64"), _af("EndPoints", _ENDPOINT),
        _af("Features", _FEATURE), _f("Rack", "string", nullable=0), _f("Fenced", "bool"),
        _f("InControlledShutdown", "bool", since=1),
        _f("LogDirs", "[]uuid", since=3, tag=0, default=[]),
        # Kafka 4.3 (KIP-1066): the broker's cordoned log dirs (null: none)
        _f("CordonedLogDirs", "[]uuid", since=4, nullable=4, tag=1, default=None))),
    Schema("UnregisterBrokerRecord", 1, 0, (_f("BrokerId", "int32"), _f("BrokerEpoch", "int64"))),
    Schema("TopicRecord", 2, 0, (_f("Name", "string"), _f("TopicId", "uuid"))),
    Schema("PartitionRecord", 3, 2, (
        _f("PartitionId", "int32"), _f("TopicId", "uuid"), _f("Replicas", "[]int32"),
        _f("Isr", "[]int32"), _f("RemovingReplicas", "[]int32"),
        _f("AddingReplicas", "[]int32"), _f("Leader", "int32"),
        _f("LeaderRecoveryState", "int8", tag=0, default=0), _f("LeaderEpoch", "int32"),
        _f("PartitionEpoch", "int32"), _f("Directories", "[]uuid", since=1),
        _f("EligibleLeaderReplicas", "[]int32", since=2, nullable=2, tag=1),
        _f("LastKnownElr", "[]int32", since=2, nullable=2, tag=2))),
    Schema("ConfigRecord", 4, 0, (
        _f("ResourceType", "int8"), _f("ResourceName", "string"), _f("Name", "string"),
        _f("Value", "string", nullable=0))),
    Schema("PartitionChangeRecord", 5, 2, (
        _f("PartitionId", "int32"), _f("TopicId", "uuid"),
        _f("Isr", "[]int32", nullable=0, tag=0), _f("Leader", "int32", tag=1, default=-2),
        _f("Replicas", "[]int32", nullable=0, tag=2),
        _f("RemovingReplicas", "[]int32", nullable=0, tag=3),
        _f("AddingReplicas", "[]int32", nullable=0, tag=4),
        _f("LeaderRecoveryState", "int8", tag=5, default=-1),
        _f("Directories", "[]uuid", since=1, nullable=1, tag=8),
        _f("EligibleLeaderReplicas", "[]int32", since=2, nullable=2, tag=6),
        _f("LastKnownElr", "[]int32", since=2, nullable=2, tag=7))),
    Schema("FenceBrokerRecord", 7, 0, (_f("Id", "int32"), _f("Epoch", "int64"))),
    Schema("UnfenceBrokerRecord", 8, 0, (_f("Id", "int32"), _f("Epoch", "int64"))),
    Schema("RemoveTopicRecord", 9, 0, (_f("TopicId", "uuid"),)),
    Schema("DelegationTokenRecord", 10, 0, (
        _f("Owner", "string"), _f("Requester", "string"), _f("Renewers", "[]string"),
        _f("IssueTimestamp", "int64"), _f("MaxTimestamp", "int64"),
        _f("ExpirationTimestamp", "int64"), _f("TokenId", "string"))),
    Schema("UserScramCredentialRecord", 11, 0, (
        _f("Name", "string"), _f("Mechanism", "int8"), _f("Salt", "bytes"),
        _f("StoredKey", "bytes"), _f("ServerKey", "bytes"), _f("Iterations", "int32"))),
    Schema("FeatureLevelRecord", 12, 0, (_f("Name", "string"), _f("FeatureLevel", "int16"))),
    Schema("ClientQuotaRecord", 14, 0, (
        _af("Entity", (_f("EntityType", "string"), _f("EntityName", "string", nullable=0))),
        _f("Key", "string"), _f("Value", "float64"), _f("Remove", "bool"))),
    Schema("ProducerIdsRecord", 15, 0, (
        _f("BrokerId", "int32"), _f("BrokerEpoch", "int64"), _f("NextProducerId", "int64"))),
    Schema("BrokerRegistrationChangeRecord", 17, 3, (
        _f("BrokerId", "int32"), _f("BrokerEpoch", "int64"),
        _f("Fenced", "int8", tag=0, default=0),
        _f("InControlledShutdown", "int8", since=1, tag=1, default=0),
        _f("LogDirs", "[]uuid", since=2, tag=2, default=[]),
        # Kafka 4.3 (KIP-1066): null leaves the cordoned log dirs as they were
        _f("CordonedLogDirs", "[]uuid", since=3, nullable=3, tag=3, default=None))),
    Schema("AccessControlEntryRecord", 18, 0, (
        _f("Id", "uuid"), _f("ResourceType", "int8"), _f("ResourceName", "string"),
        _f("PatternType", "int8"), _f("Principal", "string"), _f("Host", "string"),
        _f("Operation", "int8"), _f("PermissionType", "int8"))),
    Schema("RemoveAccessControlEntryRecord", 19, 0, (_f("Id", "uuid"),)),
    Schema("NoOpRecord", 20, 0, ()),
    Schema("ZkMigrationStateRecord", 21, 0, (_f("ZkMigrationState", "int8"),)),
    Schema("RemoveUserScramCredentialRecord", 22, 0, (
        _f("Name", "string"), _f("Mechanism", "int8"))),
    Schema("BeginTransactionRecord", 23, 0, (_f("Name", "string", nullable=0, tag=0),)),
    Schema("EndTransactionRecord", 24, 0, ()),
    Schema("AbortTransactionRecord", 25, 0, (_f("Reason", "string", nullable=0, tag=0),)),
    Schema("RemoveDelegationTokenRecord", 26, 0, (_f("TokenId", "string"),)),
    Schema("RegisterControllerRecord", 27, 0, (
        _f("ControllerId", "int32"), _f("IncarnationId", "uuid"),
        _f("ZkMigrationReady", "bool"), _af("EndPoints", _ENDPOINT),
        _af("Features", _FEATURE))),
    Schema("ClearElrRecord", 28, 0, (_f("TopicName", "string"),)),
)}
SCHEMAS_BY_NAME = {s.name: s for s in METADATA_SCHEMAS.values()}

# KRaft control records (clients/src/main/resources/common/message/*.json), by control type.
CONTROL_SCHEMAS: dict[int, Schema] = {s.api_key: s for s in (
    Schema("LeaderChangeMessage", 2, 1, (
        _f("Version", "int16"), _f("LeaderId", "int32"),
        _af("Voters", (_f("VoterId", "int32"), _f("VoterDirectoryId", "uuid", since=1))),
        _af("GrantingVoters", (_f("VoterId", "int32"), _f("VoterDirectoryId", "uuid", since=1))))),
    Schema("SnapshotHeaderRecord", 3, 0, (
        _f("Version", "int16"), _f("LastContainedLogTimestamp", "int64"))),
    Schema("SnapshotFooterRecord", 4, 0, (_f("Version", "int16"),)),
    Schema("KRaftVersionRecord", 5, 0, (_f("Version", "int16"), _f("KRaftVersion", "int16"))),
    Schema("VotersRecord", 6, 0, (
        _f("Version", "int16"),
        _af("Voters", (
            _f("VoterId", "int32"), _f("VoterDirectoryId", "uuid"),
            _af("Endpoints", (_f("Name", "string"), _f("Host", "string"),
                              _f("Port", "uint16"))),
            _f("KRaftVersionFeature", (_f("MinSupportedVersion", "int16"),
                                       _f("MaxSupportedVersion", "int16"))))))),
)}

_FIXED = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i"),
          "int64": struct.Struct(">q"), "uint16": struct.Struct(">H"),
          "float64": struct.Struct(">d"), "bool": struct.Struct(">?")}


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One decoded record: its schema's name and api key, the message version and the fields
    (Kafka's field names; uuids as Kafka prints them, base64url without padding)."""

    name: str
    api_key: int
    version: int
    fields: Mapping[str, Any]


def uuid_text(raw: bytes) -> str:
    """A 16-byte Kafka ``Uuid`` as Kafka prints it (``Uuid.toString``: URL-safe base64, no
    padding), the form of ``partition.metadata``'s ``topic_id``."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def uuid_bytes(text: str) -> bytes:
    """The inverse of :func:`uuid_text`."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a Kafka Uuid (22 characters of URL-safe base64)")
    return raw


# ---------------------------------------------------------------------------------------------
# Reading


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptMetadataError(
                f"{what} needs {n} bytes at byte {self.pos} of the record value, "
                f"{len(self.data) - self.pos} left")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uvarint(self, what: str) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise CorruptMetadataError(f"{what}: unsigned varint runs past the record value")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptMetadataError(f"{what}: unsigned varint longer than 5 bytes")

    def fixed(self, type_: str, what: str) -> Any:
        s = _FIXED[type_]
        return s.unpack(self.take(s.size, what))[0]


def _read_value(r: _Reader, field: Field, version: int, nullable: bool) -> Any:
    if field.array:
        n = r.uvarint(field.name) - 1
        if n < 0:
            if not nullable:
                raise CorruptMetadataError(f"non-nullable field {field.name} is null")
            return None
        return [_read_one(r, field, version, field.name) for _ in range(n)]
    return _read_one(r, field, version, field.name, nullable=nullable)


def _read_one(r: _Reader, field: Field, version: int, what: str, *,
              nullable: bool = False) -> Any:
    t = field.type
    if isinstance(t, tuple):
        return _read_struct(r, t, version, what)
    if t in _FIXED:
        return r.fixed(t, what)
    if t == "uuid":
        return uuid_text(r.take(16, what))
    n = r.uvarint(what) - 1  # string, bytes
    if n < 0:
        if not nullable:
            raise CorruptMetadataError(f"non-nullable field {what} is null")
        return None
    raw = r.take(n, what)
    if t == "bytes":
        return raw.hex()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptMetadataError(f"field {what} is not UTF-8 ({err})") from None


def _read_struct(r: _Reader, fields: Sequence[Field], version: int, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tagged = {}
    for f in fields:
        if version < f.since:
            continue
        if f.tag is not None:
            tagged[f.tag] = f
            out[f.name] = f.default
            continue
        nullable = f.nullable_since is not None and version >= f.nullable_since
        out[f.name] = _read_value(r, f, version, nullable)
    count = r.uvarint(f"{what} tagged field count")
    last_tag = -1
    for _ in range(count):
        tag = r.uvarint(f"{what} tag")
        if tag <= last_tag:
            raise CorruptMetadataError(f"{what}: tagged fields out of order (tag {tag} after "
                                       f"{last_tag})")
        last_tag = tag
        size = r.uvarint(f"{what} tag {tag} size")
        data = r.take(size, f"{what} tag {tag}")
        known = tagged.get(tag)
        if known is None:  # unknown tags are skipped, as Kafka's generated readers do
            continue
        sub = _Reader(data)
        nullable = known.nullable_since is not None and version >= known.nullable_since
        out[known.name] = _read_value(sub, known, version, nullable)
        if sub.pos != len(data):
            raise CorruptMetadataError(f"tagged field {known.name} has {len(data) - sub.pos} "
                                       "bytes left over")
    return out


def _decode_message(r: _Reader, schema: Schema, version: int) -> MetadataRecord:
    if not 0 <= version <= schema.max_version:
        raise CorruptMetadataError(
            f"{schema.name} version {version} is not one kafka-compactor knows "
            f"(0-{schema.max_version}, Kafka 4.1-4.4)",
            remedy="this metadata log was written by a newer Kafka; give the topic configs "
                   "with --config/--topic-configs instead of --metadata-log-dir")
    try:
        fields = _read_struct(r, schema.fields, version, schema.name)
    except CorruptMetadataError as err:
        err.message = f"{schema.name} v{version}: {err.message}"
        raise
    if r.pos != len(r.data):
        raise CorruptMetadataError(
            f"{schema.name} v{version}: {len(r.data) - r.pos} bytes of garbage after the record")
    return MetadataRecord(schema.name, schema.api_key, version, fields)


def read_frame(value: bytes) -> tuple[int, int, _Reader]:
    """The frame of a metadata record value: ``(api key, version, reader at the message)``.

    The api key may be one Kafka 4.1 does not have (a newer broker's record type): the
    caller decides whether it can skip it; :func:`decode_metadata_record` refuses it.

    Raises:
        CorruptMetadataError: an unknown frame version, or a short frame.
    """
    if value is None:
        raise CorruptMetadataError("metadata record has a null value")
    r = _Reader(bytes(value))
    frame = r.uvarint("frame version")
    if frame != FRAME_VERSION:
        raise CorruptMetadataError(
            f"unknown metadata record frame version {frame} (only {FRAME_VERSION} exists)")
    api_key = r.uvarint("api key")
    version = r.uvarint("version")
    return api_key, version, r


def decode_metadata_record(value: bytes) -> MetadataRecord:
    """Decode one record value of the metadata log or of a snapshot.

    Raises:
        CorruptMetadataError: see the module docstring; also a record type Kafka 4.1 does
            not have.
    """
    api_key, version, r = read_frame(value)
    if api_key not in METADATA_SCHEMAS:
        raise CorruptMetadataError(
            f"unknown metadata record type {api_key} (Kafka 4.1 has "
            f"{', '.join(str(k) for k in sorted(METADATA_SCHEMAS))})",
            remedy="this metadata log was written by a newer Kafka, or it is corrupt; give "
                   "the topic configs with --config/--topic-configs instead")
    return _decode_message(r, METADATA_SCHEMAS[api_key], version)


def decode_control_value(control_type: int, value: bytes | None) -> MetadataRecord:
    """Decode the value of a KRaft control record (SnapshotHeader, LeaderChange, ...); read at
    version 0 as Kafka's ``ControlRecordUtils`` does (LeaderChangeMessage too).

    Raises:
        CorruptMetadataError: an unknown control type or malformed value.
    """
    schema = CONTROL_SCHEMAS.get(control_type)
    if schema is None or value is None:
        raise CorruptMetadataError(f"control record type {control_type} is not a KRaft "
                                   "control record (2-6) or has no value")
    return _decode_message(_Reader(bytes(value)), schema, 0)


# ---------------------------------------------------------------------------------------------
# Writing (the generator's write model; tests check it against hand-built vectors)


def _write_value(field: Field, value: Any, version: int) -> bytes:
    if field.array:
        if value is None:
            return b"\x00"
        return encode_unsigned(len(value) + 1) + b"".join(
            _write_one(field, v, version) for v in value)
    return _write_one(field, value, version)


def _write_one(field: Field, value: Any, version: int) -> bytes:
    t = field.type
    if isinstance(t, tuple):
        return _write_struct(t, value, version)
    if t in _FIXED:
        return _FIXED[t].pack(value)
    if t == "uuid":
        return uuid_bytes(value)
    if value is None:
        return b"\x00"
    raw = bytes.fromhex(value) if t == "bytes" else value.encode("utf-8")
    return encode_unsigned(len(raw) + 1) + raw


def _write_struct(fields: Sequence[Field], values: Mapping[str, Any], version: int) -> bytes:
    unknown = set(values) - {f.name for f in fields}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    out = bytearray()
    tagged = []
    for f in fields:
        if version < f.since:
            continue
        value = values.get(f.name, f.default)
        if f.tag is not None:
            if value != f.default:
                tagged.append((f.tag, _write_value(f, value, version)))
            continue
        out += _write_value(f, value, version)
    out += encode_unsigned(len(tagged))
    for tag, data in sorted(tagged):
        out += encode_unsigned(tag) + encode_unsigned(len(data)) + data
    return bytes(out)


def encode_metadata_record(name: str, fields: Mapping[str, Any], version: int = 0) -> bytes:
    """The framed value of a metadata record (frame version 1)."""
    schema = SCHEMAS_BY_NAME[name]
    return (encode_unsigned(FRAME_VERSION) + encode_unsigned(schema.api_key)
            + encode_unsigned(version) + _write_struct(schema.fields, fields, version))


def encode_control_value(control_type: int, fields: Mapping[str, Any]) -> bytes:
    """The value of a KRaft control record (version 0)."""
    return _write_struct(CONTROL_SCHEMAS[control_type].fields, fields, 0)


def random_uuid_text(bits: int) -> str:
    """A Kafka ``Uuid`` text from 128 random bits (the generator's topic and directory ids)."""
    return uuid_text(_uuid.UUID(int=bits).bytes)
