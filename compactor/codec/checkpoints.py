"""Checkpoint text files (Kafka's ``CheckpointFile``).

Grammar (UTF-8, ``\\n`` line separator, one trailing newline)::

    <version>          integer, 0 for every file handled here
    <n>                number of entry lines
    <entry>{n}         fields separated by runs of whitespace

Offset checkpoints (``cleaner-offset-checkpoint``, ``log-start-offset-checkpoint``,
``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``) hold
``<topic> <partition> <offset>``; ``leader-epoch-checkpoint`` holds ``<epoch> <startOffset>``.
An empty file reads as no entries, as in Kafka's ``CheckpointFile``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from compactor.errors import CorruptCheckpointError
from compactor.model import EpochEntry, TopicPartition

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
ROOT_CHECKPOINTS = (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
CHECKPOINT_VERSION = 0


def parse_entries(
    text: str, *, fields: int, path: str | None = None, version: int = CHECKPOINT_VERSION
) -> list[list[str]]:
    """Split a checkpoint into entry lines of ``fields`` whitespace-separated fields.

    Raises:
        CorruptCheckpointError: wrong version, entry count that does not match the lines,
            or a malformed line. ``position`` is the byte position of the offending line.
    """
    if text == "":
        return []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    positions = []
    cursor = 0
    for line in lines:
        positions.append(cursor)
        cursor += len(line.encode("utf-8")) + 1

    def fail(message: str, line_no: int) -> CorruptCheckpointError:
        pos = positions[line_no] if line_no < len(positions) else cursor
        return CorruptCheckpointError(f"{message} (line {line_no + 1})", path=path, position=pos)

    if len(lines) < 2:
        raise fail("checkpoint needs a version line and an entry count line", len(lines))
    try:
        found_version = int(lines[0].strip())
    except ValueError as err:
        raise fail(f"version {lines[0]!r} is not an integer", 0) from err
    if found_version != version:
        raise fail(f"unsupported checkpoint version {found_version}, expected {version}", 0)
    try:
        count = int(lines[1].strip())
    except ValueError as err:
        raise fail(f"entry count {lines[1]!r} is not an integer", 1) from err
    entries = lines[2:]
    if count != len(entries):
        raise fail(f"entry count says {count} but {len(entries)} entry lines follow", 1)
    parsed = []
    for i, line in enumerate(entries, start=2):
        parts = line.split()
        if len(parts) != fields:
            raise fail(f"entry {line!r} has {len(parts)} fields, expected {fields}", i)
        parsed.append(parts)
    return parsed


def _int(value: str, path: str | None, what: str) -> int:
    try:
        return int(value)
    except ValueError as err:
        raise CorruptCheckpointError(f"{what} {value!r} is not an integer", path=path) from err


def parse_offset_checkpoint(text: str, *, path: str | None = None) -> dict[TopicPartition, int]:
    """Parse an offset checkpoint into ``{TopicPartition: offset}``."""
    result: dict[TopicPartition, int] = {}
    for topic, partition, offset in parse_entries(text, fields=3, path=path):
        tp = TopicPartition(topic, _int(partition, path, "partition"))
        result[tp] = _int(offset, path, "offset")
    return result


def format_offset_checkpoint(offsets: Mapping[TopicPartition, int]) -> str:
    """Render an offset checkpoint; entries sorted for reproducible files (Kafka's order is
    unspecified)."""
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
    return "\n".join(lines) + "\n"


def parse_leader_epoch_checkpoint(text: str, *, path: str | None = None) -> list[EpochEntry]:
    """Parse ``leader-epoch-checkpoint``; epochs and start offsets must increase."""
    entries = [
        EpochEntry(epoch=_int(e, path, "epoch"), start_offset=_int(o, path, "start offset"))
        for e, o in parse_entries(text, fields=2, path=path)
    ]
    for prev, cur in zip(entries, entries[1:]):
        if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
            raise CorruptCheckpointError(
                f"leader epoch entry ({cur.epoch}, {cur.start_offset}) does not follow "
                f"({prev.epoch}, {prev.start_offset})",
                path=path,
            )
    return entries


def format_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> str:
    """Render ``leader-epoch-checkpoint``."""
    items = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(items))]
    lines += [f"{e.epoch} {e.start_offset}" for e in items]
    return "\n".join(lines) + "\n"


def truncate_epochs_from_start(entries: list[EpochEntry], start_offset: int) -> list[EpochEntry]:
    """Kafka's ``LeaderEpochFileCache.truncateFromStart``: drop entries with start offset <=
    ``start_offset`` and re-add the latest dropped epoch as ``(epoch, start_offset)``."""
    kept = [e for e in entries if e.start_offset > start_offset]
    dropped = [e for e in entries if e.start_offset <= start_offset]
    if dropped:
        kept.insert(0, EpochEntry(epoch=dropped[-1].epoch, start_offset=start_offset))
    return kept
