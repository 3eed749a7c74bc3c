"""Crash injection for subprocesses: patch the storage module so that the process kills
itself (SIGKILL, a real process death, no cleanup) right before its N-th file operation."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable
from typing import Any

from compactor import storage

FILE_OPERATIONS = ("rename", "remove", "fsync_dir", "write_atomic", "write_durable")


def kill_before(crash_at: int, names: Iterable[str] = FILE_OPERATIONS) -> Callable[[], int]:
    """Count calls to the named ``compactor.storage`` functions and SIGKILL this process
    before call number ``crash_at``. Returns a function giving the count so far."""
    count = 0

    def counted(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal count
            count += 1
            if count == crash_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)
        return wrapper

    for name in names:
        setattr(storage, name, counted(getattr(storage, name)))
    return lambda: count
