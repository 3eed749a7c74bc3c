"""Kafka's retention rules (Kafka's ``UnifiedLog.deleteOldSegments``), pure: segment metadata in,
the prefix of segments to delete and the new log start offset out.

    plan_retention(segments, ...) -> RetentionPlan(deleted=[(segment, reason)], roll, ...)

The passes run in Kafka's order, each on what the previous one left: log start offset
(every policy), then ``retention.bytes`` and ``retention.ms`` (only when ``cleanup.policy``
contains ``delete``). A segment is deletable only when every offset it holds is below the
high watermark, deletion is always a prefix, and an empty last segment is never deleted. When
every segment goes, an empty segment is rolled at the log end offset so the partition keeps
its offsets (``UnifiedLog.deleteSegments``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from compactor.config import FLAG, TOPIC_FLAG, TopicConfig
from compactor.errors import ConfigError
from compactor.model import SegmentInfo


class RetentionReason(str, Enum):
    """Why a segment is deleted (the pass that deleted it)."""

    LOG_START_OFFSET = "log_start_offset"
    RETENTION_BYTES = "retention_bytes"
    RETENTION_MS = "retention_ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPlan:
    """What retention does to one partition.

    Attributes:
        deleted: the segments that go, oldest first (always a prefix), with their reason.
        roll: every segment goes; an empty segment is created at ``log_end_offset`` first.
        log_start_offset: before; ``new_log_start_offset``: after (never lower, never above
            the high watermark).
        first_segment_base: base offset of the first segment afterwards (the rolled one's
            when ``roll``); ``log-start-offset-checkpoint`` holds the partition only when the
            new log start offset lies above it.
    """

    deleted: tuple[tuple[SegmentInfo, RetentionReason], ...]
    roll: bool
    log_start_offset: int
    new_log_start_offset: int
    log_end_offset: int
    high_watermark: int
    first_segment_base: int

    @property
    def bytes_deleted(self) -> int:
        return sum(s.size_bytes for s, _ in self.deleted)

    def by_reason(self) -> dict[str, dict[str, int]]:
        """Segments and bytes deleted, by reason (every reason listed)."""
        out = {r.value: {"segments": 0, "bytes": 0} for r in RetentionReason}
        for seg, reason in self.deleted:
            out[reason.value]["segments"] += 1
            out[reason.value]["bytes"] += seg.size_bytes
        return out


def segment_timestamp(seg: SegmentInfo) -> int:
    """The time a segment is aged by: its largest timestamp, else its mtime
    (``UnifiedLog.deleteRetentionMsBreachedSegments``)."""
    return seg.largest_timestamp_ms if seg.largest_timestamp_ms >= 0 else seg.mtime_ms


Predicate = Callable[[SegmentInfo, SegmentInfo | None], bool]


def deletable_segments(segments: Sequence[SegmentInfo], predicate: Predicate, *,
                       log_end_offset: int, high_watermark: int) -> list[SegmentInfo]:
    """``UnifiedLog.deletableSegments``: the longest prefix whose segments lie wholly below
    the high watermark and satisfy ``predicate(segment, successor)``; an empty last segment
    is never deletable."""
    out = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        if nxt is None and seg.size_bytes == 0:
            break
        upper = nxt.base_offset if nxt is not None else log_end_offset
        if not (high_watermark >= upper and predicate(seg, nxt)):
            break
        out.append(seg)
    return out


def plan_retention(segments: Sequence[SegmentInfo], *, config: TopicConfig,
                   log_start_offset: int, log_end_offset: int, high_watermark: int,
                   now_ms: int) -> RetentionPlan:
    """Kafka's ``deleteOldSegments`` for one partition.

    Args:
        segments: the partition's segments, ascending.
        log_start_offset: max(``log-start-offset-checkpoint`` entry, first segment base).
        high_watermark: :func:`compactor.cleaner.policy.high_watermark` (the checkpoint's
            entry, else 0 as a broker loads it).
    """
    remaining = list(segments)
    deleted: list[tuple[SegmentInfo, RetentionReason]] = []
    start = log_start_offset

    def run(reason: RetentionReason, predicate: Predicate) -> None:
        nonlocal remaining, start
        gone = deletable_segments(remaining, predicate, log_end_offset=log_end_offset,
                                  high_watermark=high_watermark)
        if not gone:
            return
        deleted.extend((s, reason) for s in gone)
        remaining = remaining[len(gone):]
        new_start = remaining[0].base_offset if remaining else log_end_offset
        start = max(start, new_start)

    run(RetentionReason.LOG_START_OFFSET,
        lambda seg, nxt: nxt is not None and nxt.base_offset <= start)
    if config.delete:
        if config.retention_bytes >= 0:
            total = sum(s.size_bytes for s in remaining)
            if total >= config.retention_bytes:
                diff = total - config.retention_bytes

                def size_breached(seg: SegmentInfo, nxt: SegmentInfo | None) -> bool:
                    nonlocal diff
                    if diff - seg.size_bytes >= 0:
                        diff -= seg.size_bytes
                        return True
                    return False

                run(RetentionReason.RETENTION_BYTES, size_breached)
        if config.retention_ms >= 0:
            run(RetentionReason.RETENTION_MS,
                lambda seg, nxt: now_ms - segment_timestamp(seg) > config.retention_ms)
    return RetentionPlan(
        deleted=tuple(deleted), roll=bool(segments) and not remaining,
        log_start_offset=log_start_offset, new_log_start_offset=start,
        log_end_offset=log_end_offset, high_watermark=high_watermark,
        first_segment_base=remaining[0].base_offset if remaining else log_end_offset,
    )


def explain_retention(segments: Sequence[SegmentInfo], plan: RetentionPlan,
                      config: TopicConfig, now_ms: int,
                      sources: Mapping[str, str] | None = None) -> str:
    """The numbers behind a partition's retention decision, in the order Kafka checks them:
    the log start offset, then the size against ``retention.bytes`` and the oldest segment's
    age (its newest record's, :func:`segment_timestamp`) against ``retention.ms``, each with
    where its value came from (``sources``: config name -> source)."""
    from compactor.human import human_bytes, human_duration

    def source(name: str) -> str:
        return f" from {sources[name]}" if sources and name in sources else ""

    parts = []
    by_reason = plan.by_reason()
    if by_reason[RetentionReason.LOG_START_OFFSET.value]["segments"]:
        parts.append(f"log start offset {plan.new_log_start_offset} lies past "
                     f"{by_reason['log_start_offset']['segments']} segments")
    if not config.delete:
        parts.append("cleanup.policy has no delete: only the log start offset deletes")
        return "; ".join(parts)
    size = sum(s.size_bytes for s in segments)
    if config.retention_bytes < 0:
        parts.append(f"size {human_bytes(size)}, retention.bytes unlimited"
                     f"{source('retention.bytes')}")
    else:
        over = size >= config.retention_bytes
        parts.append(f"size {human_bytes(size)} {'at or over' if over else 'under'} "
                     f"retention.bytes {human_bytes(config.retention_bytes)}"
                     f"{source('retention.bytes')}")
    if config.retention_ms < 0:
        parts.append(f"retention.ms unlimited{source('retention.ms')}")
    elif segments:
        age = now_ms - segment_timestamp(segments[0])
        past = age > config.retention_ms
        parts.append(f"oldest segment's newest record {human_duration(age)} old, "
                     f"{'past' if past else 'within'} retention.ms "
                     f"{human_duration(config.retention_ms)}{source('retention.ms')}")
    return "; ".join(parts)


# Retention settings typed on our command line below these floors delete data faster than any
# production topic should; they are refused unless the user passes
# --allow-aggressive-retention. The cluster's own values are Kafka's to judge: a topic whose
# ConfigRecords say retention.ms=60000 is retained as Kafka retains it.
MIN_RETENTION_MS = 3_600_000  # 1 hour
MIN_RETENTION_BYTES = 1 << 20  # 1 MiB per partition
_FLAGS = (FLAG, TOPIC_FLAG)


#: How far before the newest record a given ``now`` may lie without ``--allow-past-now``:
#: producer clock skew, not a mistyped or stale value.
PAST_TOLERANCE_MS = 3_600_000


def check_now_after_newest(now_ms: int, newest: Mapping[str, int]) -> None:
    """A ``now`` given on the command line must not lie before the newest record of a
    partition the command may change: compaction would stamp delete horizons (``now`` +
    ``delete.retention.ms``, ``LogCleaner``'s ``currentTime``) that have already passed, so
    the next round drops tombstones consumers never had the time to read.

    Args:
        newest: the largest record timestamp of each partition (name -> epoch ms).

    Raises:
        ConfigError: naming the partition and both times.
    """
    if not newest:
        return
    where, latest = max(newest.items(), key=lambda item: item[1])
    if now_ms < latest - PAST_TOLERANCE_MS:
        behind = (latest - now_ms) / 86_400_000
        raise ConfigError(
            f"--now-ms {now_ms} lies {behind:.1f} days before the newest record of {where} "
            f"({latest}): delete horizons would be set in the past and tombstones dropped "
            f"before consumers could read them",
            remedy="check the value (or leave --now-ms out: the wall clock); pass "
                   "--allow-past-now if you mean it; no segment was rewritten or deleted")


def check_safety_floor(configs: Mapping[str, TopicConfig], *, allow_aggressive: bool) -> None:
    """Refuse retention settings from flags below the floors (unless allowed), naming rule
    and value.

    Raises:
        ConfigError: a topic with ``delete`` in its policy has, from ``--config`` or
            ``--topic-config``, ``retention.ms`` in ``[0, MIN_RETENTION_MS)`` or
            ``retention.bytes`` in ``[0, MIN_RETENTION_BYTES)``.
    """
    if allow_aggressive:
        return
    for topic, cfg in sorted(configs.items()):
        if not cfg.delete or not cfg.configured:  # unconfigured topics are never retained
            continue
        if cfg.sources.get("retention.ms") in _FLAGS and 0 <= cfg.retention_ms < MIN_RETENTION_MS:
            raise ConfigError(
                f"topic {topic}: retention.ms={cfg.retention_ms} is below the safety floor of "
                f"{MIN_RETENTION_MS} ms (1 hour) that kafka-compactor keeps (value from "
                f"{cfg.sources.get('retention.ms', 'default')}): segments older than that "
                "would be deleted. Kafka itself allows any value >= -1",
                remedy="raise retention.ms, or pass --allow-aggressive-retention if you mean it")
        if cfg.sources.get("retention.bytes") in _FLAGS and \
                0 <= cfg.retention_bytes < MIN_RETENTION_BYTES:
            raise ConfigError(
                f"topic {topic}: retention.bytes={cfg.retention_bytes} is below the safety floor "
                f"of {MIN_RETENTION_BYTES} bytes (1 MiB) per partition that kafka-compactor keeps "
                f"(value from {cfg.sources.get('retention.bytes', 'default')}). Kafka itself "
                "allows any value >= -1",
                remedy="raise retention.bytes, or pass --allow-aggressive-retention if you mean it")
