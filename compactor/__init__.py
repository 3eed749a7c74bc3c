"""kafka-compactor: offline compaction, retention and GDPR erasure for Kafka log dirs.

The Python API (:mod:`compactor.api`) is importable from here; it is loaded on first use, so
``import compactor`` stays cheap for executors and the command line::

    import compactor
    compactor.plan(log_dir, configs={"cleanup.policy": "compact"}).summary
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactor.api import Result, compact, erase, plan, retain, run

__all__ = ["Result", "compact", "erase", "plan", "retain", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from compactor import api

        return getattr(api, name)
    raise AttributeError(f"module 'compactor' has no attribute {name!r}")
