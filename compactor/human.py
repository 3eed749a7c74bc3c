"""Sizes and times as people read them (summaries, progress, history); pure."""

from __future__ import annotations

import time


def human_bytes(n: int | None) -> str:
    """``1.5 GB``-style sizes (decimal units, as Kafka's own tools print them); ``-`` for
    none."""
    if n is None:
        return "-"
    if abs(n) < 1000:
        return f"{n} B"
    size = float(n)
    for unit in ("kB", "MB", "GB"):
        size /= 1000
        if abs(size) < 1000:
            break
    else:
        size /= 1000
        unit = "TB"
    return f"{size:.1f} {unit}"


def human_time(ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def human_duration(ms: int) -> str:
    """``41.2 d``, ``3.5 h``, ``12 min``, ``40 s`` (the largest unit that is at least one)."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if abs(ms) >= size:
            value = ms / size
            return f"{value:.1f} {unit}" if unit != "min" else f"{value:.0f} {unit}"
    return f"{ms / 1000:.0f} s"
