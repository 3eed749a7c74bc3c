"""The Spark session a command runs in: the active one (spark-submit, tests) or a new one,
with a bounded check that a standalone master is reachable before Spark's own minute of
retries."""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import pyspark
from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from compactor.errors import SparkUnavailableError
from compactor.log import storage
from compactor.spark import daemon, delta

MASTER_CONNECT_TIMEOUT_S = 10.0
#: a local session for a round that reads at most this much runs its JVM with the C1 compiler
#: only (:func:`driver_java_options`)
SHORT_ROUND_BYTES = 1 << 30
#: PySpark's setting that trims its own frames off a Python function's traceback
SIMPLIFIED_TRACEBACK = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"
#: the settings of a local session: its workers run this interpreter, which has the package,
#: so their daemon is the one that loads the executor code once (compactor.spark.daemon); and
#: one daemon serves the RDD API's workers and the SQL engine's, so the session's start can
#: start it before the SQL engine's first query is planned (_start_workers). Spark keeps a
#: daemon per distinct worker environment (SparkEnv.createPythonWorker), and the SQL runners
#: add SPARK_SIMPLIFIED_TRACEBACK to theirs unless that setting is off
#: (BasePythonRunner.compute); off, a failing Python function's traceback also shows PySpark's
#: own frames.
LOCAL_CONF = {"spark.python.daemon.module": daemon.MODULE, SIMPLIFIED_TRACEBACK: "false"}
#: the JVM's C1-only compilation (HotSpot tiered compilation stopped at its first tier)
C1_ONLY = "-XX:TieredStopAtLevel=1"
QUIET_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2-quiet.properties")
_verbose = False


def set_verbose(verbose: bool) -> None:
    """``-v``: Spark's own logging (its default log4j profile, WARN and up) instead of errors
    only."""
    global _verbose
    _verbose = verbose


def class_archive() -> str:
    """Where this installation's class-data-sharing archive of Spark's classes is
    (``COMPACTOR_CLASS_ARCHIVE``, else in the Python environment, next to its pyspark:
    ``python -m compactor.tools.build.class_archive`` makes it, ``make`` does so once)."""
    return os.environ.get("COMPACTOR_CLASS_ARCHIVE") or os.path.join(
        sys.prefix, "share", "kafka-compactor",
        f"spark-classes-{pyspark.__version__}-{_classpath_tag()}.jsa")


def _classpath_tag() -> str:
    """A digest of the jars a local session puts on its JVM's classpath: an archive serves
    only the classpath it was made with (the JVM checks that the classpath starts with the
    archive's), so fetching S3A later calls for an archive of its own."""
    try:
        paths = delta.classpath_conf(local=True)["spark.driver.extraClassPath"]
    except SparkUnavailableError:
        paths = ""
    return hashlib.sha256(paths.encode()).hexdigest()[:8]


def driver_java_options(archive_out: str | None, *, short_round: bool = False) -> str:
    """The driver JVM's options: errors-only logging, and the JVM's class-data sharing
    (AppCDS, JDK 13+): with the installation's archive the JVM maps Spark's classes instead of
    loading and verifying each one, and a session starts in about two thirds of the time
    (README, Benchmarks). An archive the JVM cannot use (another JDK, another pyspark) is
    ignored, silently (``tests/e2e/test_class_archive.py``); the JVM's CDS messages are off
    besides, as a plain ``java`` prints its refusal of an archive on stdout.

    Args:
        short_round: the session serves one round of at most :data:`SHORT_ROUND_BYTES` in
            local mode, where the driver's JVM is the executor: compile with C1 only. A short
            JVM spends much of its CPU in C2 compiling the SQL engine's code for a peak it
            never reaches; with C1 only the demo's command took 6.7 s instead of 8.3 and a
            1 GB round a tenth less, while a JVM that shuffles for long is a sixth slower
            (README, Benchmarks).
    """
    options = [] if _verbose else [f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}"]
    if archive_out is not None:
        sharing = [f"-XX:ArchiveClassesAtExit={archive_out}"]
    elif storage.exists(class_archive()):
        sharing = [f"-XX:SharedArchiveFile={class_archive()}"]
    else:
        sharing = []
    if sharing:
        options += [*sharing, "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    if short_round:
        options.append(C1_ONLY)
    return " ".join(options)


def submit_args(master: str, *, object_store: bool = False, executors_installed: bool = False,
                input_bytes: int | None = None) -> list[str]:
    """spark-submit's arguments (``--conf``, ``--jars``; not ``--master``) that start a job
    of the tool on ``master`` as the command line starts its own session (issue 53): the
    driver's JVM gets the command line's classpath and options (:func:`driver_java_options`:
    the class-data archive, which the JVM uses only with the classpath it was made with, and
    errors-only logging), and the Python workers are this package's daemon
    (:data:`LOCAL_CONF`). ``python -m compactor.tools.ops.submit_args`` prints them; the DAGs
    pass them to every spark-submit task.

    In local mode the driver's JVM is the executor and the jars go on its classpath only:
    through ``--jars`` the executor would copy each into the session's temp dir
    (:func:`compactor.spark.delta.session_conf`). On a cluster the executors get the jars
    through ``--jars``, unless ``executors_installed``: every executor machine runs this same
    installation (the container image of ``deploy/``, or a cluster on this machine), so its
    JVMs take the driver's classpath and options and its Python workers the daemon, which
    imports this package.

    Args:
        object_store: the job's state dir is on S3 (S3A's jars too, where they are not on the
            classpath already).
        input_bytes: how much the job reads at most, when known: a local job of at most
            :data:`SHORT_ROUND_BYTES` compiles with C1 only, as the command's session for
            such a round does (:func:`driver_java_options`).

    Raises:
        SparkUnavailableError: the jars were never fetched.
    """
    local = master.startswith("local")
    classpath = delta.classpath_conf(local=True, s3a=object_store)["spark.driver.extraClassPath"]
    options = driver_java_options(None, short_round=local and input_bytes is not None
                                  and input_bytes <= SHORT_ROUND_BYTES)
    conf = {"spark.driver.extraClassPath": classpath, "spark.ui.showConsoleProgress": "false"}
    if options:
        conf["spark.driver.extraJavaOptions"] = options
    args = []
    if local or executors_installed:
        conf.update(LOCAL_CONF)
    if executors_installed and not local:
        conf["spark.executor.extraClassPath"] = classpath
        conf["spark.executor.extraJavaOptions"] = driver_java_options(None)
    elif not local:
        args += ["--jars", ",".join(delta.jars("delta")
                                    + (delta.jars("s3a") if object_store else []))]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return args


def get_spark(master: str | None, app_name: str = "kafka-compactor", *,
              archive_out: str | None = None, short_round: bool = False,
              object_store: Mapping[str, str] | None = None) -> SparkSession:
    """The active session, or a new one (``master`` or spark-submit's, else ``local[*]``),
    with Delta Lake (:func:`compactor.spark.delta.session_conf`: the jars fetched at set-up,
    Delta's extension and catalog; under spark-submit they come from its command line).

    Args:
        archive_out: write the driver JVM's class-data-sharing archive there when it exits
            (:mod:`compactor.tools.build.class_archive`).
        short_round: the session serves one round of at most :data:`SHORT_ROUND_BYTES`
            (:func:`driver_java_options`; only a new local session's JVM is affected).
        object_store: the ``deltalake`` storage options of a state dir on an object store
            (:func:`compactor.log.storage.delta_options`): the session gets Hadoop's S3A
            with the same endpoint and credentials.

    Raises:
        SparkUnavailableError: the session cannot start (no Java, or no Delta jars), or a
            session already active in this process is not on the cluster ``master`` names.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        running = active.sparkContext.master
        # a process has one SparkContext: a cluster asked for must not be served by another
        # (a local session a notebook or test started would run the job here, silently)
        if master and not master.startswith("local") and master != running:
            raise SparkUnavailableError(
                f"--master {master} cannot be used: this process already runs a Spark "
                f"session on {running}, and a process has one SparkContext",
                remedy="stop that session (spark.stop()) first, or leave --master out to run "
                       "on it; nothing was changed")
        return active
    builder = SparkSession.builder.appName(app_name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # the JVM is spark-submit's, running
    if master:
        check_master_reachable(master)
        builder = builder.master(master)
    elif not submitted:
        builder = builder.master("local[*]")
    local = not submitted and (master or "local").startswith("local")
    if local:
        # Spark picks the first non-loopback address otherwise, and warns about it
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
    if not submitted and (java_options := driver_java_options(
            archive_out, short_round=short_round and local)):
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    # local Python workers must run the interpreter that has this package installed
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (builder.config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    # Delta's extension and catalog; the jars too, except under spark-submit, whose own
    # arguments alone reach the driver's classpath (submit_args)
    conf: dict[str, Any] = dict(delta.SESSION_CONF) if submitted else delta.session_conf(
        object_store=object_store, local=local)
    builder = builder.config(map=conf)
    try:
        if not submitted:
            _launch_gateway(builder._options)
        session = builder.getOrCreate()
    except PySparkRuntimeError as err:
        raise SparkUnavailableError(f"Spark cannot start: {err}") from err
    if submitted and not _verbose:  # spark-submit's log4j config is the cluster's: WARN here
        session.sparkContext.setLogLevel("WARN")
    if submitted and object_store is not None:
        delta.reach_object_store(session, object_store)
    return session


#: What the JVM prints on stderr for the ``--add-modules=jdk.incubator.vector`` that Spark's
#: launcher adds (``JavaModuleOptions``): one line at every start, which says nothing to a user
INCUBATOR_NOTICE = b"WARNING: Using incubator modules:"


def _launch_gateway(options: dict[str, Any]) -> None:
    """Start the driver JVM (pyspark's ``launch_gateway``, with the session's ``options`` as
    its ``--conf``s, as ``getOrCreate`` would) with its stderr through :func:`_forward`, which
    drops the incubator notice; ``getOrCreate`` then uses this gateway. Nothing when a JVM is
    already up."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(target=_forward, args=(gateway.proc.stderr,), name="jvm-stderr",
                     daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def _forward(stream: Any) -> None:
    """Copy the JVM's stderr (Spark's own errors, ``-v``'s logging, its Python workers'
    output) to ours, line by line, without the incubator notice."""
    out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
    for line in iter(stream.readline, b""):
        if line.startswith(INCUBATOR_NOTICE):
            continue
        try:
            if out is not None:
                out.write(line)
                out.flush()
            else:
                sys.stderr.write(line.decode("utf-8", "replace"))
        except (OSError, ValueError):  # our stderr went away: keep draining the pipe
            out = None


class LazySession:
    """A Spark session created on first use: commands validate everything and find out
    whether there is work at all before paying for a JVM (no session when nothing compacts,
    no request is pending, or the selection is empty)."""

    def __init__(self, master: str | None = None, existing: SparkSession | None = None, *,
                 object_store: Mapping[str, str] | None = None,
                 delta_tables: bool = False) -> None:
        """``object_store``: a new session also reaches a state dir there
        (:func:`get_spark`). ``delta_tables``: the work records in the state dir's tables
        through this session, so a session without Delta is refused when it starts, before
        the work changes anything (:func:`compactor.spark.delta.require`)."""
        self._master, self._session = master, existing
        self._object_store = object_store
        self._delta_tables = delta_tables
        if existing is not None:
            self._ready(existing)
        #: seconds of ``session_start`` (JVM and SparkContext) and ``worker_start`` (the
        #: executors' Python workers) when this object started the session, for the report
        self.startup_s: dict[str, float] = {}

    def __call__(self, input_bytes: int | None = None) -> SparkSession:
        """The session, started by the first call.

        Args:
            input_bytes: how much the session's work reads through the JVM's own stages
                (scans and shuffles, not the one-task rounds whose JVM work is scheduling
                them), when known: a local session for at most :data:`SHORT_ROUND_BYTES`
                starts a JVM for short work (:func:`driver_java_options`).
        """
        if self._session is None:
            from compactor import progress

            fresh = SparkSession.getActiveSession() is None
            started = time.perf_counter()
            # shown at once: a JVM and its workers take seconds before any step has tasks
            with progress.step("starting Spark", unit="") if fresh else nullcontext():
                self._session = get_spark(self._master, short_round=input_bytes is not None
                                          and input_bytes <= SHORT_ROUND_BYTES,
                                          object_store=self._object_store)
                self._ready(self._session)
                if fresh:
                    ready = time.perf_counter()
                    self.startup_s["session_start"] = ready - started
                    _start_workers(self._session)
                    self.startup_s["worker_start"] = time.perf_counter() - ready
        return self._session

    def _ready(self, session: SparkSession) -> None:
        """A session the tool did not start (spark-submit's, a notebook's, the tests'): with
        Delta when the work needs it, reaching the state dir's object store."""
        if self._delta_tables:
            delta.require(session)
        if self._object_store is not None:
            delta.reach_object_store(session, self._object_store)

    @property
    def started(self) -> SparkSession | None:
        """The session, when the work started one (or was given one); else ``None``."""
        return self._session


def _start_workers(spark: SparkSession) -> None:
    """Spark's start that the first job would otherwise pay inside the work, done here so
    the report shows it apart: the executors' Python worker daemon with a worker per core (one
    trivial task per core) and, side by side in another thread, the JVM's first query through
    a Python function over Arrow (the shape of every stage of a round: the SQL engine's and
    the Arrow paths' classes load and compile while the daemon loads the executor code).
    The trivial tasks run only where they start the daemon the SQL engine uses (simplified
    tracebacks off, :data:`LOCAL_CONF`); elsewhere the daemon they started would serve no
    stage of a round, and the Arrow query starts the right one itself."""
    sc = spark.sparkContext
    n = max(1, sc.defaultParallelism)

    def arrow_query() -> None:
        with _job_group(sc):
            spark.range(n, numPartitions=n).mapInArrow(_pass_through, "id long").collect()

    if spark.conf.get(SIMPLIFIED_TRACEBACK, "true") != "false":
        arrow_query()
        return
    failed: list[BaseException] = []

    def python_workers() -> None:
        try:
            with _job_group(sc):
                sc.parallelize(range(n), n).mapPartitions(_nothing).count()
        except BaseException as err:  # raised again by the caller's thread
            failed.append(err)

    thread = threading.Thread(target=python_workers, name="worker-start", daemon=True)
    thread.start()
    try:
        arrow_query()
    finally:
        thread.join()
    if failed:
        raise failed[0]


@contextmanager
def _job_group(sc: SparkContext) -> Iterator[None]:
    sc.setJobGroup("kafka-compactor-worker-start", "kafka-compactor: worker_start")
    try:
        yield
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def _nothing(_: Iterable[int]) -> list[int]:
    return [0]


def _pass_through(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def check_master_reachable(master: str, timeout_s: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """For a standalone master (``spark://host:port[,host:port]``): one of its hosts accepts
    a connection within ``timeout_s`` seconds and answers like a Spark RPC server
    (:func:`_speaks_spark_rpc`). Spark itself retries registration for about a minute and
    then fails its first job with a Java stack trace; this says at once what is wrong.

    Raises:
        SparkUnavailableError: no host of the master URL accepts a connection, or the one
            that does answers as something else (a web UI, another service).
    """
    if not master.startswith("spark://"):
        return
    failures = []
    for hostport in master[len("spark://"):].split(","):
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
                problem = _speaks_spark_rpc(conn, timeout_s)
        except (OSError, ValueError) as err:
            failures.append(f"{hostport}: {getattr(err, 'strerror', None) or err}")
            continue
        if problem is None:
            return
        failures.append(f"{hostport}: {problem}")
    raise SparkUnavailableError(
        f"the Spark master {master} cannot be reached within {timeout_s:.0f} s "
        f"({'; '.join(failures)})",
        remedy="check the --master URL (the master's RPC port, 7077 by default, not its web "
               "UI) and that the master is running and reachable from this host (firewall, "
               "DNS); nothing was changed")


_PROBE_ID = 0x6B632D70726F6265  # "kc-probe"


def _speaks_spark_rpc(conn: socket.socket, timeout_s: float) -> str | None:
    """Send one Spark RPC request frame (``MessageEncoder``: frame length, type 3 =
    RpcRequest, request id, body length, body) whose body no endpoint understands: a Spark
    RPC server answers with an RpcFailure (type 5) or RpcResponse (type 4) frame for that
    request id. ``None`` when it does, or when the server closes the connection without a
    word (a master with ``spark.authenticate`` may; Spark then says more); else what it
    did instead."""
    body = b"kafka-compactor: is this a Spark master?"
    conn.settimeout(timeout_s)
    try:
        conn.sendall(struct.pack(">qbqi", 8 + 1 + 8 + 4 + len(body), 3, _PROBE_ID, len(body))
                     + body)
        data = b""
        while len(data) < 17:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        return f"it accepts connections but did not answer a Spark RPC request in {timeout_s:.0f} s"
    except OSError:
        return None  # reset: inconclusive
    if not data:
        return None
    if len(data) >= 17 and data[8] in (4, 5) and struct.unpack(">q", data[9:17])[0] == _PROBE_ID:
        return None
    shown = data[:24].decode("ascii", "replace").split("\r")[0]
    return f"it is not a Spark master: it answered {shown!r}"


def stop_child_processes() -> None:
    """SIGTERM to this process's children: on Ctrl-C, the JVM that pyspark launches
    (``java_gateway.launch_gateway`` starts it ignoring SIGINT) would otherwise outlive us,
    holding the terminal's or the caller's pipes, when the interrupt came while it started."""
    import psutil

    for child in psutil.Process().children():
        try:
            child.terminate()
        except psutil.Error:
            continue  # gone meanwhile, or not ours to signal
