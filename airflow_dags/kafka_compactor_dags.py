"""The kafka-compactor DAGs: scheduled log maintenance, daily GDPR erasure, one-off compaction.

Declarative: every task calls a job of ``jobs/`` with the arguments of its command line, under
spark-submit (:class:`CompactorJob`) when it needs Spark, else directly
(:class:`CompactorCommand`: ``erase request`` and ``erase status``). Settings come from
``kafka_compactor.yaml`` next to this file (or ``$KAFKA_COMPACTOR_DAGS_CONFIG``) and from DAG
params. Parsing this file imports no project code and reads no connection or Variable. Each job
writes its JSON report
with ``--report-file``; the task pushes it to XCom (``return_value``, and ``report`` also when
the job fails) and, with ``state_dir``, the job records it in the ``runs`` Delta table.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from datetime import datetime, timedelta
from typing import Any

import yaml
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, BaseOperator, Param
from airflow.sdk.exceptions import AirflowException, AirflowFailException

CONFIG_PATH = os.environ.get(
    "KAFKA_COMPACTOR_DAGS_CONFIG",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "kafka_compactor.yaml"))
with open(CONFIG_PATH, encoding="utf-8") as handle:
    SETTINGS = yaml.safe_load(handle) or {}

START = datetime(2026, 1, 1)
_TASK_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _number(key: str, default: float, problems: list[str]) -> float:
    value = SETTINGS.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not \
            0 <= value < 10_000:
        problems.append(f"{key}: {value!r} is not a number from 0 to 10000")
        return default
    return value


def _log_dir_problems(entries: Any) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The valid ``maintenance.log_dirs`` by name, and what is wrong with the others."""
    if entries is None:
        return {}, []
    if not isinstance(entries, list):
        return {}, ["maintenance.log_dirs: expected a list of log dirs"]
    out: dict[str, dict[str, Any]] = {}
    problems = []
    for i, d in enumerate(entries):
        where = f"maintenance.log_dirs[{i}]"
        if not isinstance(d, dict):
            problems.append(f"{where}: expected a mapping with name and path")
            continue
        name = d.get("name")
        if not isinstance(name, str) or not _TASK_SAFE.match(name):
            problems.append(f"{where}: name {name!r} must be letters, digits, '_', '.', '-'")
            continue
        if name in out:
            problems.append(f"{where}: name {name!r} is used twice (each log dir needs its "
                            f"own: a second one would replace the first)")
            continue
        if not isinstance(d.get("path"), str) or not d["path"]:
            problems.append(f"{where} ({name}): path is missing")
            continue
        if not d.get("server_properties") and d.get("assume_kafka_defaults") is not True:
            problems.append(f"{where} ({name}): server_properties is missing (or say "
                            f"assume_kafka_defaults: true for a broker that sets no log.* "
                            f"config)")
            continue
        bad = [k for k, kind in (("config", dict), ("server_properties", str),
                                 ("metadata_log_dir", str), ("topic_configs", str))
               if d.get(k) not in (None, "", {}) and not isinstance(d[k], kind)]
        if bad:
            problems.append(f"{where} ({name}): {', '.join(bad)} has the wrong type")
            continue
        out[name] = d
    return out, problems


# Each DAG is checked on its own: a wrong field shows as that DAG's failing task with the
# message (and in the scheduler's log), while the other DAGs parse and run.
COMMON_PROBLEMS: list[str] = []
# retries and their delay come from the settings; which failures are retried, from the job's
# exit code and error (CompactorJob)
DEFAULT_ARGS = {"retries": int(_number("retries", 2, COMMON_PROBLEMS)),
                "retry_delay": timedelta(minutes=_number("retry_delay_minutes", 5,
                                                         COMMON_PROBLEMS))}
LOG_DIRS, LOG_DIR_PROBLEMS = _log_dir_problems(
    (SETTINGS.get("maintenance") or {}).get("log_dirs", []))

#: Failures worth a retry: the log dir locked (exit 4: a broker restarting, another run), an
#: object store, the ledger or the Spark master refusing for the moment. Configuration errors
#: (exit 3), corrupt input (5), partial success (6: a corrupt partition stays corrupt), an
#: overdue erasure request (exit 1 of erase status) and unexpected errors fail at once.
RETRY_EXIT_CODES = frozenset({4})
RETRY_ERROR_CODES = frozenset({"LOG_DIR_LOCKED", "STORAGE_ERROR", "LEDGER_ERROR",
                               "SPARK_UNAVAILABLE"})
#: An erasure run that did its work while some requests failed on their own (a topic the
#: cluster lacks, the subject found again): compactor's EXIT_REQUESTS_FAILED. The task
#: succeeds, logging one line per failed request, so that the other requests go on to their
#: verify in the same run; the status task then fails the run naming them.
REQUESTS_FAILED_EXIT_CODE = 7
#: Reports larger than this go to XCom as their head (the partition lines left out).
XCOM_REPORT_BYTES = 48 * 1024


def _read_report(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def _for_xcom(report: dict[str, Any]) -> dict[str, Any]:
    """The report, or without its partition lines when it is too large for XCom."""
    if len(json.dumps(report)) <= XCOM_REPORT_BYTES:
        return report
    return {k: v for k, v in report.items() if k not in ("partitions", "compaction",
                                                         "retention")}


def _report_file(ti: Any) -> str:
    """Where a task's job writes its report: the settings' ``report_dir`` (made when missing),
    else the system's temp dir, named by DAG, task, run and try."""
    key = re.sub(r"[^A-Za-z0-9_.-]", "_",
                 f"{ti.dag_id}.{ti.task_id}.{ti.run_id}.{ti.map_index}.{ti.try_number}")
    folder = SETTINGS.get("report_dir")
    if folder:
        os.makedirs(folder, exist_ok=True)
    return os.path.join(folder or tempfile.gettempdir(), f"kafka-compactor-{key}.json")


def _done_with(report_file: str) -> None:
    """The task has read its job's report (it is in XCom and the task log): a file in the
    system's temp dir goes, one in the settings' ``report_dir`` stays (the operator keeps
    them there)."""
    if not SETTINGS.get("report_dir"):
        with contextlib.suppress(OSError):
            os.remove(report_file)


def _failed(task_id: str, ti: Any, report: dict[str, Any] | None, exit_code: int | None,
            err: BaseException) -> BaseException:
    """What a failed job raises: its ``report`` goes to XCom (``report``); ``err`` itself (a
    retry) when the exit or error code says a retry can help, else ``AirflowFailException``
    naming the error."""
    report = report or {}
    exit_code = report.get("exit_code", exit_code)
    if report:
        ti.xcom_push(key="report", value=_for_xcom(report))
    if exit_code in RETRY_EXIT_CODES or report.get("code") in RETRY_ERROR_CODES:
        return err
    return AirflowFailException(f"{task_id}: the job ended with exit code {exit_code}: "
                                f"{_what_failed(report)}; not retried: a retry cannot fix it")


def _what_failed(report: dict[str, Any]) -> str:
    """A failed job's report in words: its error, the requests that failed or are overdue
    (by id and reason, never a subject: reports hold digests only), what a run that decided
    nothing needed, or its status."""
    if report.get("code"):
        return f"[{report['code']}] {report.get('message')}"
    if report.get("unconfigured"):  # a run that decided nothing (it changed nothing)
        return f"nothing was decided, no topic's configs are known: {report['unconfigured']}"
    named = [f"request {f['request_id']} failed: {f.get('reason') or 'see its report'}"
             for f in report.get("failed") or []]
    named += [f"request {o['request_id']} is past its deadline by "
              f"{o['overdue_ms'] // 3_600_000} h (status {o['status']})"
              for o in report.get("overdue") or []]
    requests = report.get("requests")  # an erase run's entries (erase status: a count)
    named += [f"request {r['request_id']} failed: {r['reason']}"
              for r in requests if r.get("reason")] if isinstance(requests, list) else []
    if named:
        return "; ".join(named)
    if report.get("partially_verified"):
        return (f"{len(report['partially_verified'])} request(s) not yet verified on every "
                "replica (erase status lists the replicas still to scan)")
    return f"the run ended {report['status']}" if report.get("status") else "no report"


class CompactorJob(SparkSubmitOperator):
    """A kafka-compactor job under spark-submit: ``--report-file`` is added to its arguments,
    the report it writes goes to XCom, and a failure is retried only when its exit code or
    error code says a retry can help (:data:`RETRY_EXIT_CODES`, :data:`RETRY_ERROR_CODES`);
    any other failure raises ``AirflowFailException`` (no retry) naming the error.
    ``log_dir`` (templated): the log dir the job reads, whose size decides how its JVM starts
    (:meth:`_start_as_the_command_line`)."""

    template_fields = (*SparkSubmitOperator.template_fields, "log_dir")

    def __init__(self, *, log_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.log_dir = log_dir
        # the settings' own (spark_conf, delta_jars): over the installation's, at every start
        self._own_conf, self._own_jars = dict(self.conf or {}), self.jars

    def execute(self, context: Any) -> Any:
        ti = context["ti"]
        report_file = _report_file(ti)
        self.application_args = [*(self.application_args or []), "--report-file",
                                 report_file]
        self._start_as_the_command_line()
        try:
            super().execute(context)
        except AirflowException as err:
            submitted = getattr(getattr(self, "_hook", None), "_submit_sp", None)
            code = getattr(submitted, "returncode", None)
            report = _read_report(report_file)
            _done_with(report_file)
            if code == REQUESTS_FAILED_EXIT_CODE and report is not None:
                return _requests_failed(self, report)
            raise _failed(self.task_id, ti, report, code, err) from err
        done = _read_report(report_file)
        _done_with(report_file)
        return None if done is None else _for_xcom(done)

    def _start_as_the_command_line(self) -> None:
        """spark-submit's arguments from the installation of the settings' ``python``
        (``python -m compactor.tools.ops.submit_args``, for the connection's master): the job's
        driver JVM and Python workers start as the ``compactor`` command's do (issue 53:
        class-data archive, the jars on the classpath, the package's worker daemon). The
        settings' ``delta_jars`` and ``spark_conf`` go over them."""
        import subprocess

        self._hook = self._get_hook()  # resolves the connection: its master
        master = self._hook._connection["master"]
        command = [SETTINGS.get("python") or "python3", "-m", "compactor.tools.ops.submit_args",
                   "--master", master, "--json"]
        if str(SETTINGS.get("state_dir", "")).startswith("s3://"):
            command.append("--object-store")
        if SETTINGS.get("executors_installed"):
            command.append("--executors-installed")
        if self.log_dir:  # a local job of at most 1 GiB: C1 only, as the command's
            command += ["--log-dir", self.log_dir]
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise AirflowFailException(
                f"{self.task_id}: {' '.join(command[:3])} failed: {proc.stderr.strip()}")
        args = json.loads(proc.stdout)
        conf, jars = {}, None
        for flag, value in zip(args[::2], args[1::2]):
            if flag == "--conf":
                key, _, val = value.partition("=")
                conf[key] = val
            elif flag == "--jars":
                jars = value
        self.conf = {**conf, **self._own_conf}
        self.jars = self._own_jars or jars
        self._hook = self._get_hook()


class CompactorCommand(BaseOperator):
    """A kafka-compactor job that needs no Spark (``erase request``, ``erase status``): the
    job's script run by the settings' ``python`` directly, without spark-submit's JVM (seconds
    instead of 10-14 s), with ``py_files`` on its ``PYTHONPATH``. Reports, XCom and retries
    as :class:`CompactorJob`. Its arguments never hold a subject (``--key-sha256`` or
    ``--keys-file``), and its output is the job's, which never prints one."""

    template_fields = ("arguments",)

    def __init__(self, *, job: str, arguments: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job, self.arguments = job, arguments

    def execute(self, context: Any) -> Any:
        import subprocess

        ti = context["ti"]
        report_file = _report_file(ti)
        env = dict(os.environ)
        if SETTINGS.get("py_files"):
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (SETTINGS["py_files"], env.get("PYTHONPATH")) if p)
        command = [SETTINGS.get("python") or "python3",
                   os.path.join(SETTINGS["jobs_dir"], f"{self.job}.py"),
                   *self.arguments, "--report-file", report_file]
        self.log.info("Running %s", " ".join(command))
        proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        for stream in (proc.stdout, proc.stderr):
            for line in stream.splitlines():
                self.log.info("%s", line)
        done = _read_report(report_file)
        _done_with(report_file)
        if proc.returncode == REQUESTS_FAILED_EXIT_CODE and done is not None:
            return _requests_failed(self, done)
        if proc.returncode != 0:
            err = AirflowException(f"{self.task_id}: exit code {proc.returncode}")
            raise _failed(self.task_id, ti, done, proc.returncode, err)
        return None if done is None else _for_xcom(done)


def _requests_failed(task: BaseOperator, report: dict[str, Any]) -> dict[str, Any]:
    """An erasure job whose only failures are requests of its own: one line per failed
    request in the task's log (its id and reason), and the task succeeds, so that the other
    requests are verified in the same run (the status task fails the run, naming them)."""
    for r in report.get("requests") or []:
        if r.get("status") == "failed":
            task.log.error("request %s failed: %s", r["request_id"],
                           r.get("reason") or "see the report")
    return _for_xcom(report)


def _raise_failed(upstream: str) -> None:
    raise AirflowFailException(f"a task of this run failed ({upstream}): the run fails so "
                               f"that Airflow's alerting (email_on_failure, callbacks) fires")


def spark_conf() -> dict[str, str]:
    """The settings' own ``spark_conf`` for every job (over the installation's start-up
    arguments, :meth:`CompactorJob._start_as_the_command_line`), and the settings'
    ``python``."""
    conf = {"spark.pyspark.python": SETTINGS["python"]} if SETTINGS.get("python") else {}
    return {**conf, **{str(k): str(v) for k, v in (SETTINGS.get("spark_conf") or {}).items()}}


def delta_jars() -> str:
    """spark-submit's ``--jars`` from the settings' ``delta_jars`` folder (or folders), for a
    cluster whose executors find them elsewhere than the installation's own (empty: the
    installation's, :meth:`CompactorJob._start_as_the_command_line`)."""
    import glob

    folders = SETTINGS.get("delta_jars") or []
    folders = [folders] if isinstance(folders, str) else list(folders)
    return ",".join(jar for folder in folders
                    for jar in sorted(glob.glob(os.path.join(folder, "*.jar"))))


def spark_job(task_id: str, job: str, args: list[str], **kwargs: Any) -> SparkSubmitOperator:
    """A task running ``jobs/<job>.py`` with ``args`` (its command line, templated; its log
    dir, ``log_dir=``, when it reads one)."""
    python = SETTINGS.get("python")
    return CompactorJob(
        task_id=task_id,
        application=os.path.join(SETTINGS["jobs_dir"], f"{job}.py"),
        application_args=args,
        conn_id=SETTINGS.get("spark_conn_id", "spark_default"),
        spark_binary=SETTINGS.get("spark_binary", "spark-submit"),
        py_files=SETTINGS.get("py_files"),
        jars=delta_jars() or None,
        conf=spark_conf(),
        env_vars={"PYSPARK_PYTHON": python} if python else None,
        name=f"kafka-compactor-{task_id}",
        **kwargs,
    )


def cluster_args(log_dir: dict[str, Any]) -> list[str]:
    """Where the cluster's own configs are: the broker's server.properties (or the explicit
    statement that it sets no log.* config), and the metadata log when neither the log dir
    nor server.properties places it."""
    args = []
    if log_dir.get("metadata_log_dir"):
        args += ["--metadata-log-dir", log_dir["metadata_log_dir"]]
    if log_dir.get("server_properties"):
        args += ["--server-properties", log_dir["server_properties"]]
    if log_dir.get("assume_kafka_defaults") is True:
        args.append("--assume-kafka-defaults")
    return args


def maintenance_args(log_dir: dict[str, Any]) -> list[str]:
    args = [log_dir["path"], "--json", "--now-ms", "{{ params.now_ms }}", *cluster_args(log_dir)]
    if log_dir.get("config"):
        args += ["--config-json", json.dumps(log_dir["config"], sort_keys=True)]
    if log_dir.get("topic_configs"):
        args += ["--topic-configs", log_dir["topic_configs"]]
    if SETTINGS.get("state_dir"):
        args += ["--state-dir", SETTINGS["state_dir"]]
    # node_exporter's textfile collector reads *.prom; each log dir writes its own file, and
    # its HTML page next to the others (both replaced atomically by each run)
    if SETTINGS.get("metrics_dir"):
        args += ["--metrics-file",
                 os.path.join(SETTINGS["metrics_dir"], f"kafka_compactor_{log_dir['name']}.prom")]
    if SETTINGS.get("html_report_dir"):
        args += ["--html-report",
                 os.path.join(SETTINGS["html_report_dir"], f"{log_dir['name']}.html")]
    return args


def _named(log_dir: str) -> dict[str, Any]:
    """The settings of a log dir named (or whose path is given) in the one-off DAG's params."""
    if log_dir in LOG_DIRS:
        return LOG_DIRS[log_dir]
    return next((d for d in LOG_DIRS.values() if d["path"] == log_dir), {})


def oneoff_path(log_dir: str) -> str:
    """A log dir's name in the settings -> its path; a path stays as it is."""
    return _named(log_dir).get("path", log_dir)


def oneoff_configs(log_dir: str, overrides: dict[str, Any]) -> str:
    """The settings' configs of that log dir, with the run's ``configs`` param over them."""
    return json.dumps({**_named(log_dir).get("config", {}), **(overrides or {})},
                      sort_keys=True)


def oneoff_setting(log_dir: str, key: str, param: str) -> str:
    """The run's param when given, else the settings' value for that log dir, else empty."""
    return param or _named(log_dir).get(key, "") or ""


NOW_PARAM = Param("", type=["string", "integer"],
                  description="the jobs' clock in epoch ms or ISO-8601 with an offset "
                              "(2026-11-25T10:00:00Z); empty: wall clock; more than an hour "
                              "ahead of the clock is refused")

def _erasure_problems() -> list[str]:
    problems = [] if SETTINGS.get("state_dir") else ["state_dir: required for erasure"]
    names = (SETTINGS.get("erasure") or {}).get("log_dirs") or list(LOG_DIRS)
    if not isinstance(names, list):
        return [*problems, "erasure.log_dirs: expected a list of names"]
    seen = set()
    for name in names:
        if name in seen:
            problems.append(f"erasure.log_dirs: {name!r} is named twice")
        elif name not in LOG_DIRS:
            problems.append(f"erasure.log_dirs: {name!r} is not a valid maintenance.log_dirs "
                            f"name" + (" (see its own problem)" if LOG_DIR_PROBLEMS else ""))
        seen.add(name)
    # a log dir left out of a broker's erasure would leave the subject there: every problem
    # of maintenance.log_dirs stops the erasure DAG too
    return problems + LOG_DIR_PROBLEMS


def request_topic_check() -> list[str]:
    """``erase request``'s ``--log-dir``: the first erasure log dir, whose topics (or its
    cluster's metadata) a request's topic must be among, so a typo is refused when filed."""
    names = (SETTINGS.get("erasure") or {}).get("log_dirs") or list(LOG_DIRS)
    first = LOG_DIRS.get(names[0]) if names and isinstance(names, list) else None
    if not first:
        return []
    return ["--log-dir", first["path"], *(["--metadata-log-dir", first["metadata_log_dir"]]
                                          if first.get("metadata_log_dir") else [])]


def _rolling_brokers() -> tuple[list[str], list[str]]:
    """The broker names of the rolling plan (``rolling.plan``, the file ``compactor rolling``
    reads), in its order, and what is wrong. Read at parse time: the DAG has a task per
    broker."""
    section = SETTINGS.get("rolling") or {}
    plan_path = section.get("plan")
    if not plan_path:
        return [], ["rolling.plan: the path of the rolling plan (see `compactor rolling`) "
                    "is missing"]
    try:
        with open(plan_path, encoding="utf-8") as handle:
            plan = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as err:
        return [], [f"rolling.plan: {plan_path} cannot be read: {err}"]
    names = [b.get("name") for b in plan.get("brokers") or [] if isinstance(b, dict)]
    bad = [n for n in names if not isinstance(n, str) or not _TASK_SAFE.match(n)]
    if not names or bad:
        return [], [f"rolling.plan: {plan_path} names no brokers, or a name that is not "
                    f"letters, digits, '_', '.', '-' ({bad})"]
    return [str(n) for n in names], []


ROLLING_BROKERS, ROLLING_PROBLEMS = _rolling_brokers() if SETTINGS.get("rolling") else ([], [])

PROBLEMS = {
    "kafka_rolling_maintenance": COMMON_PROBLEMS + ROLLING_PROBLEMS,
    "kafka_log_maintenance": COMMON_PROBLEMS + LOG_DIR_PROBLEMS,
    "kafka_state_maintenance": COMMON_PROBLEMS,
    "kafka_gdpr_erasure": COMMON_PROBLEMS + _erasure_problems(),
    "kafka_compaction_oneoff": COMMON_PROBLEMS,
    "kafka_gdpr_request": COMMON_PROBLEMS + ([] if SETTINGS.get("state_dir")
                                             else ["state_dir: required for erasure"]),
}


def _refuse(message: str) -> None:
    raise AirflowFailException(message)


def invalid_settings(dag_id: str) -> bool:
    """Add the failing task of a DAG whose settings are wrong; ``True`` when it did (the DAG
    then has that task only)."""
    if not PROBLEMS[dag_id]:
        return False
    from airflow.providers.standard.operators.python import PythonOperator

    message = (f"{CONFIG_PATH}: the settings of {dag_id} are wrong: "
               + "; ".join(PROBLEMS[dag_id]) + ". Fix the file; the other DAGs are not "
               "affected.")
    logging.getLogger(__name__).error(message)
    PythonOperator(task_id="invalid_settings", python_callable=_refuse,
                   op_args=[message], retries=0)
    return True


# the rolling maintenance of a live cluster: defined when the settings have a rolling section
# (the shipped ones do), so that a setup for copies and archives only has no failing DAG
if SETTINGS.get("rolling"):
    with DAG(
        dag_id="kafka_rolling_maintenance",
        description="One broker at a time: stop, recover, run (and erase), start, back in sync",
        schedule=SETTINGS["rolling"].get("schedule", "@weekly"),
        start_date=START, catchup=False, max_active_runs=1,
        # a roll is not retried by Airflow: a failed roll left the broker it stopped running
        # again, and the next scheduled run starts over from the health check
        default_args={**DEFAULT_ARGS, "retries": 0},
        params={"now_ms": NOW_PARAM}, tags=["kafka", "compaction", "retention", "rolling"],
    ):
        if not invalid_settings("kafka_rolling_maintenance"):
            previous = None
            for name in ROLLING_BROKERS:
                # one task per broker, chained: never two brokers down, and a failed one
                # stops the chain (the later brokers' tasks end upstream_failed)
                roll = CompactorCommand(task_id=f"roll_{name}", job="rolling", arguments=[
                    "--config", SETTINGS["rolling"]["plan"], "--broker", name, "--json",
                    "--now-ms", "{{ params.now_ms }}"])
                if previous is not None:
                    previous >> roll
                previous = roll

with DAG(
    dag_id="kafka_log_maintenance",
    description="Log dirs no broker serves (copies, archives): recover, then compaction and "
                "retention per topic cleanup.policy, per log dir",
    schedule=SETTINGS.get("maintenance", {}).get("schedule", None),
    start_date=START, catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS,
    params={"now_ms": NOW_PARAM}, tags=["kafka", "compaction", "retention"],
):
    for name, log_dir in ({} if invalid_settings("kafka_log_maintenance") else LOG_DIRS).items():
        recover = spark_job(f"recover_{name}", "recover", [log_dir["path"], "--json"],
                            log_dir=log_dir["path"])
        maintain = spark_job(f"run_{name}", "run", maintenance_args(log_dir),
                             log_dir=log_dir["path"])
        recover >> maintain

with DAG(
    dag_id="kafka_gdpr_erasure",
    description="Erase pending requests, verify by rescan, fail when a request is overdue",
    schedule=SETTINGS.get("erasure", {}).get("schedule", "@daily"),
    start_date=START, catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS,
    params={"now_ms": NOW_PARAM}, tags=["kafka", "gdpr"],
):
    if not invalid_settings("kafka_gdpr_erasure"):
        from airflow.providers.standard.operators.python import PythonOperator

        state = SETTINGS.get("state_dir", "")
        now = ["--now-ms", "{{ params.now_ms }}"]
        # runs even when an apply or verify failed: an overdue request must still alert; it
        # fails for an overdue or failed request (exit 1) and a partially verified one (6)
        status = CompactorCommand(task_id="erase_status", job="erase",
                                  arguments=["status", "--state-dir", state, "--json", *now],
                                  trigger_rule="all_done")
        # the run fails when any task failed, whatever the status task says: the "watcher"
        # of Airflow's own system tests (a leaf that runs only on a failure upstream)
        watcher = PythonOperator(task_id="fail_if_any_task_failed",
                                 python_callable=_raise_failed,
                                 op_args=["{{ ti.dag_id }} {{ run_id }}"],
                                 trigger_rule="one_failed", retries=0)
        # every log dir applies before any verifies (and none verifies after a failed apply,
        # which would find the subject and fail the request): a request is verified only once
        # every replica the metadata names was scanned clean
        applies, verifies = [], []
        for name in (SETTINGS.get("erasure") or {}).get("log_dirs") or list(LOG_DIRS):
            path = LOG_DIRS[name]["path"]
            cluster = cluster_args(LOG_DIRS[name])
            applies.append(spark_job(f"erase_apply_{name}", "erase",
                                     ["apply", path, "--state-dir", state, "--json", *now,
                                      *cluster], log_dir=path))
            verifies.append(spark_job(f"erase_verify_{name}", "erase",
                                      ["verify", path, "--state-dir", state, "--json", *now,
                                       *cluster], log_dir=path))
        for verify in verifies:
            applies >> verify >> status
        [*applies, *verifies, status] >> watcher

# the state dir's Delta tables: every run appends files; compacted and vacuumed weekly
if SETTINGS.get("state_dir"):
    with DAG(
        dag_id="kafka_state_maintenance",
        description="Compact and vacuum the state dir's Delta tables (ledger and run history)",
        schedule=SETTINGS.get("state_maintenance_schedule", "@weekly"),
        start_date=START, catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS,
        tags=["kafka", "gdpr"],
    ):
        if not invalid_settings("kafka_state_maintenance"):
            CompactorCommand(task_id="optimize_state", job="optimize", arguments=[
                "--state-dir", SETTINGS["state_dir"], "--json"])

with DAG(
    dag_id="kafka_compaction_oneoff",
    description="One compaction round over one log dir, triggered by hand with params",
    schedule=None, start_date=START, catchup=False, default_args=DEFAULT_ARGS,
    user_defined_macros={"kc_path": oneoff_path, "kc_configs": oneoff_configs,
                         "kc_setting": oneoff_setting},
    params={
        "log_dir": Param("", type="string", minLength=1,
                         description="a log dir's name in kafka_compactor.yaml (its configs "
                                     "and topic configs apply) or a path"),
        "topics": Param("", type="string", description="comma-separated; empty: every topic"),
        "metadata_log_dir": Param("", type="string",
                                  description="holds __cluster_metadata-0; empty: the log dir"),
        "server_properties": Param("", type="string",
                                   description="the broker's server.properties; empty: none"),
        "configs": Param({}, type="object",
                         description="overrides for every selected topic, over the "
                                     "settings' configs of the log dir; empty: those and the "
                                     "cluster's"),
        "now_ms": NOW_PARAM,
        "dry_run": Param(False, type="boolean",
                         description="plan only: report what would be cleaned, change nothing"),
    },
    tags=["kafka", "compaction"],
):
    if not invalid_settings("kafka_compaction_oneoff"):
        spark_job("compact", "compact", [
            "{{ kc_path(params.log_dir) }}", "--dry-run={{ params.dry_run }}",
            "--topics", "{{ params.topics }}",
            "--metadata-log-dir",
            "{{ kc_setting(params.log_dir, 'metadata_log_dir', params.metadata_log_dir) }}",
            "--server-properties",
            "{{ kc_setting(params.log_dir, 'server_properties', params.server_properties) }}",
            "--config-json", "{{ kc_configs(params.log_dir, params.configs) }}",
            "--topic-configs", "{{ kc_setting(params.log_dir, 'topic_configs', '') }}",
            "--now-ms", "{{ params.now_ms }}",
            "--json",
            *(["--state-dir", SETTINGS["state_dir"]] if SETTINGS.get("state_dir") else []),
        ], log_dir="{{ kc_path(params.log_dir) }}")

with DAG(
    dag_id="kafka_gdpr_request",
    description="File a GDPR erasure request (the kafka_gdpr_erasure DAG applies it)",
    schedule=None, start_date=START, catchup=False, default_args=DEFAULT_ARGS,
    params={
        "topic": Param("", type="string", minLength=1,
                       description="the topic, or * for every topic"),
        "key_sha256": Param("", type="string", pattern="^([0-9a-fA-F]{64})?$",
                            description="the SHA-256 of the record key's bytes (64 hex "
                                        "digits: `compactor erase digest`); never the key "
                                        "itself: what is typed here is kept in Airflow's "
                                        "database"),
        "keys_file": Param("", type="string",
                           description="a file of keys, one per line, readable by the job "
                                       "(instead of key_sha256; its keys stay out of "
                                       "Airflow)"),
        "header_name": Param("", type="string",
                             description="a record header's name: records whose header "
                                         "value has the SHA-256 header_sha256"),
        "header_sha256": Param("", type="string", pattern="^([0-9a-fA-F]{64})?$",
                               description="with header_name: the SHA-256 of the value"),
        "reason": Param("", type="string", minLength=1,
                        description="why, or the ticket id (required; kept in the audit "
                                    "proof)"),
        "deadline_days": Param(30, type="integer", minimum=0,
                               description="days until the request is overdue"),
        "request_id": Param("", type="string",
                            description="the ticket id; empty: derived from topic and subject"),
        "now_ms": NOW_PARAM,
    },
    tags=["kafka", "gdpr"],
):
    if not invalid_settings("kafka_gdpr_request"):
        subject = ("{{ '--keys-file=' ~ params.keys_file if params.keys_file else "
                   "('--header-sha256=' ~ params.header_name ~ '=' ~ params.header_sha256 "
                   "if params.header_name else '--key-sha256=' ~ params.key_sha256) }}")
        CompactorCommand(task_id="erase_request", job="erase", arguments=[
            "request", "--state-dir", SETTINGS.get("state_dir", ""),
            "--topic", "{{ params.topic }}", subject, "--reason={{ params.reason }}",
            "--deadline-days", "{{ params.deadline_days }}",
            "--request-id={{ params.request_id }}", "--now-ms={{ params.now_ms }}", "--json",
            *request_topic_check()])
