"""The Spark session a command runs in: the active one (spark-submit, tests) or a new one,
with a bounded check that a standalone master is reachable before Spark's own minute of
retries."""

from __future__ import annotations

import os
import socket
import sys

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from compactor.errors import SparkUnavailableError

MASTER_CONNECT_TIMEOUT_S = 10.0


def get_spark(master: str | None, app_name: str = "kafka-compactor") -> SparkSession:
    """The active session, or a new one (``master`` or spark-submit's, else ``local[*]``).

    Raises:
        SparkUnavailableError: the session cannot start (no Java, for one).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master:
        check_master_reachable(master)
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master("local[*]")
    # local Python workers must run the interpreter that has this package installed
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        return (builder.config("spark.sql.session.timeZone", "UTC")
                .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    except PySparkRuntimeError as err:
        raise SparkUnavailableError(f"Spark cannot start: {err}") from err


class LazySession:
    """A Spark session created on first use: commands validate everything and find out
    whether there is work at all before paying for a JVM (no session when nothing compacts,
    no request is pending, or the selection is empty)."""

    def __init__(self, master: str | None = None, existing: SparkSession | None = None) -> None:
        self._master, self._session = master, existing

    def __call__(self) -> SparkSession:
        if self._session is None:
            self._session = get_spark(self._master)
        return self._session

    @property
    def started(self) -> bool:
        return self._session is not None


def check_master_reachable(master: str, timeout_s: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """For a standalone master (``spark://host:port[,host:port]``), a TCP connection to one of
    its hosts within ``timeout_s`` seconds. Spark itself retries registration for about a
    minute and then fails with a Java stack trace; this says at once what is wrong.

    Raises:
        SparkUnavailableError: no host of the master URL accepts a connection.
    """
    if not master.startswith("spark://"):
        return
    failures = []
    for hostport in master[len("spark://"):].split(","):
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except (OSError, ValueError) as err:
            failures.append(f"{hostport}: {getattr(err, 'strerror', None) or err}")
    raise SparkUnavailableError(
        f"the Spark master {master} cannot be reached within {timeout_s:.0f} s "
        f"({'; '.join(failures)})",
        remedy="check the --master URL and that the master is running and reachable from "
               "this host (firewall, DNS); nothing was changed")

