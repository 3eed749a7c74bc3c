"""``kafka-dump-log``'s text, line for line (``DumpLogSegments`` of Kafka 4.1:
``printBatchLevel``, ``printRecordMetadata``, ``printControlRecord``, ``dumpIndex``,
``dumpTimeIndex``, ``dumpTxnIndex``, ``dumpProducerIdSnapshot``), from the dictionaries
:mod:`compactor.tools.ops.inspect` builds. Pure: dictionaries in, lines out."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

#: ``TimestampType.toString``
_TIMESTAMP_TYPE = {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime",
                   "NO_TIMESTAMP_TYPE": "NoTimestampType"}


def optional_long(value: int | None) -> str:
    """Java's ``OptionalLong.toString``."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def batch_line(b: Mapping[str, Any]) -> str:
    """``printBatchLevel``: a v2 batch's header, or a legacy entry's wrapper offset."""
    ts_type = _TIMESTAMP_TYPE.get(b["timestamp_type"], b["timestamp_type"])
    if b["magic"] >= 2:
        head = (f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} "
                f"count: {b['count']} baseSequence: {b['base_sequence']} "
                f"lastSequence: {b['last_sequence']} producerId: {b['producer_id']} "
                f"producerEpoch: {b['producer_epoch']} "
                f"partitionLeaderEpoch: {b['partition_leader_epoch']} "
                f"isTransactional: {_bool(b['is_transactional'])} "
                f"isControl: {_bool(b['is_control'])} "
                f"deleteHorizonMs: {optional_long(b['delete_horizon_ms'])}")
    else:
        head = f"offset: {b['last_offset']}"
    # a batch that did not frame or check is a problem, never dumped: what is here is valid
    return (f"{head} position: {b['position']} {ts_type}: {b['max_timestamp']} "
            f"size: {b['size']} magic: {b['magic']} compresscodec: {b['codec']} "
            f"crc: {b['crc']} isvalid: true")


def record_line(b: Mapping[str, Any], r: Mapping[str, Any], *, contents: bool) -> str:
    """``printRecordMetadata`` (and, with ``contents``, ``printRecordContents`` as
    ``--print-data-log`` adds it; metadata log records as ``--cluster-metadata-decoder``)."""
    ts_type = _TIMESTAMP_TYPE.get(b["timestamp_type"], b["timestamp_type"])
    value_size = -1 if r["value_size"] is None else r["value_size"]
    line = (f"| offset: {r['offset']} {ts_type}: {r['timestamp']} keySize: {r['key_size']} "
            f"valueSize: {value_size}")
    if b["magic"] >= 2:
        keys = ",".join(k for k, _ in r["headers"])
        line += f" sequence: {r['sequence']} headerKeys: [{keys}]"
    marker = r.get("end_txn_marker")
    if marker is not None:
        line += f" endTxnMarker: {marker['type']} coordinatorEpoch: {marker['coordinator_epoch']}"
    elif b["is_control"] and r.get("payload"):
        payload = r["payload"]
        line += f" {payload.get('type')} {json.dumps(payload.get('data'), separators=(',', ':'))}"
    if contents and not b["is_control"]:
        if "payload" in r:  # metadata records have no key
            line += f" payload: {json.dumps(r['payload'], separators=(',', ':'))}"
        else:
            if r["key"] is not None:
                line += f" key: {r['key']}"
            if r.get("value") is not None:
                line += f" payload: {r['value']}"
    return line


def segment_lines(segment: Mapping[str, Any], *, records: bool,
                  snapshot: tuple[int, int] | None = None) -> Iterator[str]:
    """``dumpLog`` of one ``.log`` file or KRaft snapshot (``snapshot``: its end offset and
    epoch)."""
    yield f"Dumping {segment['path']}"
    if snapshot is None:
        yield f"Log starting offset: {segment['base_offset']}"
    else:
        yield f"Snapshot end offset: {snapshot[0]}, epoch: {snapshot[1]}"
    for b in segment["batches"]:
        yield batch_line(b)
        for r in b.get("records", ()):
            yield record_line(b, r, contents=records)


def index_lines(dump: Mapping[str, Any]) -> Iterator[str]:
    """``dumpIndex``, ``dumpTimeIndex``, ``dumpTxnIndex``, ``dumpProducerIdSnapshot``."""
    yield f"Dumping {dump['path']}"
    kind, entries = dump["kind"], dump["entries"]
    if kind == "index" and not entries:
        yield f"{dump['path']} is empty."
    for e in entries:
        if kind == "index":
            yield f"offset: {e['offset']} position: {e['position']}"
        elif kind == "timeindex":
            yield f"timestamp: {e['timestamp']} offset: {e['offset']}"
        elif kind == "txnindex":
            yield (f"version: {e['version']} producerId: {e['producer_id']} "
                   f"firstOffset: {e['first_offset']} lastOffset: {e['last_offset']} "
                   f"lastStableOffset: {e['last_stable_offset']}")
        else:
            line = (f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']} "
                    f"coordinatorEpoch: {e['coordinator_epoch']} "
                    f"currentTxnFirstOffset: {optional_long(e['current_txn_first_offset'])} "
                    f"lastTimestamp: {e['last_timestamp']}")
            if e.get("batch") is not None:
                m = e["batch"]
                line += (f" firstSequence: {m['first_sequence']} "
                         f"lastSequence: {m['last_sequence']} lastOffset: {m['last_offset']} "
                         f"offsetDelta: {m['offset_delta']} timestamp: {m['timestamp']}")
            yield line
