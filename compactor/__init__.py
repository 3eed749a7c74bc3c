"""kafka-compactor: offline compaction, retention and GDPR erasure for Kafka log dirs.

The Python API (:mod:`compactor.api`) is importable from here; it is loaded on first use, so
``import compactor`` stays cheap for executors and the command line::

    import compactor
    compactor.plan(log_dir, configs={"cleanup.policy": "compact"}).summary
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactor.api import Result, compact, erase, plan, retain, run, spark_session

__all__ = ["Result", "compact", "erase", "plan", "retain", "run", "spark_session"]


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kafka-compactor")
    except PackageNotFoundError:  # a source tree that was never installed (a --py-files zip)
        return "unknown"


__version__ = _installed_version()


def __getattr__(name: str) -> Any:
    if name in __all__:
        from compactor import api

        return getattr(api, name)
    raise AttributeError(f"module 'compactor' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API (loaded on first use) and the module's dunders: what tab completion offers."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
