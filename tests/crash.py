"""Crash injection for subprocesses: patch the storage module so that the process kills
itself (SIGKILL, a real process death, no cleanup) right before its N-th file operation."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable
from typing import Any

from compactor.log import storage

FILE_OPERATIONS = ("rename", "remove", "fsync_dir", "write_atomic", "write_durable")


def kill_before(crash_at: int, names: Iterable[str] = FILE_OPERATIONS) -> Callable[[], int]:
    """Count calls to the named ``compactor.log.storage`` functions and SIGKILL this process
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


# A subprocess script: `compactor erase apply` (argv[3:]) that kills itself (SIGKILL) before
# file operation argv[1] of the swap of the first partition directory whose path ends with
# argv[2] (any directory when empty).
ERASE_APPLY_CRASHER = r"""
import os, sys
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
from compactor.log import swap
from compactor.cli import main
from tests.crash import kill_before
original = swap.commit_partition
def crashing_commit(path, *args, **kwargs):  # count only that swap's file operations
    if path.endswith(sys.argv[2]):
        kill_before(int(sys.argv[1]), ("rename", "remove", "fsync_dir"))
        swap.commit_partition = original
    return original(path, *args, **kwargs)
swap.commit_partition = crashing_commit
sys.exit(main(sys.argv[3:]))
"""
