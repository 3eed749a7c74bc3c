"""KRaft metadata record codec: vectors built by hand from the JSON schemas' wire rules
(independent of the reader), errors for every malformed frame, and round trips."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.codec.kraft import (
    decode_control_value,
    decode_metadata_record,
    encode_control_value,
    encode_metadata_record,
    uuid_bytes,
    uuid_text,
)
from compactor.errors import CorruptMetadataError

TOPIC_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").bytes
TOPIC_ID_TEXT = "Dx4tPEtaaXiHlqW0w9Lh8A"  # Kafka's Uuid.toString of the bytes above


def compact_string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode()
    assert len(raw) + 1 < 0x80  # a one-byte unsigned varint
    return bytes([len(raw) + 1]) + raw


# (name, fields, version, bytes): frame version 1, api key, version as one-byte uvarints,
# the fields in schema order, then the tagged-field count (and tagged fields)
VECTORS = [
    ("TopicRecord", {"Name": "orders", "TopicId": TOPIC_ID_TEXT}, 0,
     b"\x01\x02\x00" + compact_string("orders") + TOPIC_ID + b"\x00"),
    ("RemoveTopicRecord", {"TopicId": TOPIC_ID_TEXT}, 0, b"\x01\x09\x00" + TOPIC_ID + b"\x00"),
    ("ConfigRecord", {"ResourceType": 2, "ResourceName": "orders", "Name": "retention.ms",
                      "Value": "3600000"}, 0,
     b"\x01\x04\x00\x02" + compact_string("orders") + compact_string("retention.ms")
     + compact_string("3600000") + b"\x00"),
    ("ConfigRecord", {"ResourceType": 4, "ResourceName": "", "Name": "log.retention.ms",
                      "Value": None}, 0,
     b"\x01\x04\x00\x04" + compact_string("") + compact_string("log.retention.ms") + b"\x00"
     + b"\x00"),
    ("FeatureLevelRecord", {"Name": "metadata.version", "FeatureLevel": 27}, 0,
     b"\x01\x0c\x00" + compact_string("metadata.version") + struct.pack(">h", 27) + b"\x00"),
    ("NoOpRecord", {}, 0, b"\x01\x14\x00\x00"),
    # tagged fields: Isr (tag 0, compact array of int32) and Leader (tag 1, int32)
    ("PartitionChangeRecord", {"PartitionId": 3, "TopicId": TOPIC_ID_TEXT, "Isr": [1, 2],
                               "Leader": 2}, 0,
     b"\x01\x05\x00" + struct.pack(">i", 3) + TOPIC_ID + b"\x02"
     + b"\x00\x09\x03" + struct.pack(">ii", 1, 2) + b"\x01\x04" + struct.pack(">i", 2)),
]


@pytest.mark.parametrize(("name", "fields", "version", "wire"), VECTORS,
                         ids=[f"{v[0]}-{i}" for i, v in enumerate(VECTORS)])
def test_hand_built_vectors_decode_and_encode(name: str, fields: dict, version: int,
                                              wire: bytes) -> None:
    decoded = decode_metadata_record(wire)
    assert decoded.name == name and decoded.version == version
    assert {k: v for k, v in decoded.fields.items() if k in fields} == fields
    assert encode_metadata_record(name, fields, version) == wire


def test_absent_tagged_fields_take_their_schema_defaults() -> None:
    wire = b"\x01\x05\x00" + struct.pack(">i", 0) + TOPIC_ID + b"\x00"
    fields = decode_metadata_record(wire).fields
    assert fields["Leader"] == -2 and fields["Isr"] is None
    assert fields["LeaderRecoveryState"] == -1


def test_unknown_tags_are_skipped_as_kafka_does() -> None:
    wire = b"\x01\x09\x00" + TOPIC_ID + b"\x01\x1f\x02\xab\xcd"
    assert decode_metadata_record(wire).fields == {"TopicId": TOPIC_ID_TEXT}


def test_snapshot_control_values() -> None:
    header = struct.pack(">hq", 0, 1_767_225_600_000) + b"\x00"
    decoded = decode_control_value(3, header)
    assert decoded.name == "SnapshotHeaderRecord"
    assert decoded.fields == {"Version": 0, "LastContainedLogTimestamp": 1_767_225_600_000}
    assert encode_control_value(3, dict(decoded.fields)) == header
    assert decode_control_value(4, b"\x00\x00\x00").name == "SnapshotFooterRecord"


@pytest.mark.parametrize(("wire", "needle"), [
    (b"\x00\x02\x00", "frame version 0"),
    (b"\x02\x02\x00", "frame version 2"),
    (b"\x01\x7f\x00\x00", "unknown metadata record type 127"),
    (b"\x01\x02\x05" + compact_string("t") + TOPIC_ID + b"\x00", "TopicRecord version 5"),
    (b"\x01\x02\x00" + compact_string("orders") + TOPIC_ID[:9], "needs 16 bytes"),
    (b"\x01\x02\x00" + compact_string("orders") + TOPIC_ID + b"\x00\x00", "garbage"),
    (b"\x01\x02\x00\x00" + TOPIC_ID + b"\x00", "non-nullable field Name is null"),
    (b"\x01\x02\x00\x03\xff\xfe" + TOPIC_ID + b"\x00", "not UTF-8"),
    (b"\x01\x09\x00" + TOPIC_ID + b"\x02\x01\x00\x00\x00", "out of order"),
    (b"\x01\x02", "runs past the record value"),
    (b"\x01\x02\x00\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
])
def test_malformed_records_are_refused_with_what_is_wrong(wire: bytes, needle: str) -> None:
    with pytest.raises(CorruptMetadataError, match=needle) as info:
        decode_metadata_record(wire)
    assert info.value.code == "CORRUPT_METADATA" and info.value.exit_code == 5


def test_uuid_text_matches_kafka_and_refuses_other_lengths() -> None:
    assert uuid_text(TOPIC_ID) == TOPIC_ID_TEXT and uuid_bytes(TOPIC_ID_TEXT) == TOPIC_ID
    with pytest.raises(ValueError):
        uuid_bytes("tooshort")


NAMES = st.text(min_size=0, max_size=40)


@given(name=NAMES, key=NAMES, value=st.none() | NAMES, resource_type=st.sampled_from([2, 4]))
def test_config_records_round_trip(name: str, key: str, value: str | None,
                                   resource_type: int) -> None:
    fields = {"ResourceType": resource_type, "ResourceName": name, "Name": key, "Value": value}
    assert decode_metadata_record(encode_metadata_record("ConfigRecord", fields)).fields == fields


@given(isr=st.none() | st.lists(st.integers(-2**31, 2**31 - 1), max_size=5),
       leader=st.integers(-2**31, 2**31 - 1), version=st.integers(0, 2))
def test_partition_change_records_round_trip(isr: list[int] | None, leader: int,
                                             version: int) -> None:
    fields = {"PartitionId": 1, "TopicId": TOPIC_ID_TEXT, "Isr": isr, "Leader": leader}
    decoded = decode_metadata_record(encode_metadata_record("PartitionChangeRecord", fields,
                                                            version))
    assert {k: decoded.fields[k] for k in fields} == fields and decoded.version == version
