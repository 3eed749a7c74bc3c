"""The kafka-compactor DAGs: scheduled log maintenance, daily GDPR erasure, one-off compaction.

Declarative: every task is a ``SparkSubmitOperator`` calling a job of ``jobs/`` with the
arguments of its command line. Settings come from ``kafka_compactor.yaml`` next to this file
(or ``$KAFKA_COMPACTOR_DAGS_CONFIG``) and from DAG params. Parsing this file imports no project
code and reads no connection or Variable; each job's JSON report goes to the task log and, with
``state_dir``, to the ``runs`` Delta table.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from typing import Any

import yaml
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

CONFIG_PATH = os.environ.get(
    "KAFKA_COMPACTOR_DAGS_CONFIG",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "kafka_compactor.yaml"))
with open(CONFIG_PATH, encoding="utf-8") as handle:
    SETTINGS = yaml.safe_load(handle) or {}

START = datetime(2026, 1, 1)
# a job that fails is retried (a lock held by a broker restart, a storage hiccup); retries and
# their delay come from the settings
DEFAULT_ARGS = {"retries": int(SETTINGS.get("retries", 2)),
                "retry_delay": timedelta(minutes=float(SETTINGS.get("retry_delay_minutes", 5)))}
LOG_DIRS = {d["name"]: d for d in SETTINGS.get("maintenance", {}).get("log_dirs", [])}


def spark_job(task_id: str, job: str, args: list[str], **kwargs: Any) -> SparkSubmitOperator:
    """A task running ``jobs/<job>.py`` with ``args`` (its command line, templated)."""
    python = SETTINGS.get("python")
    return SparkSubmitOperator(
        task_id=task_id,
        application=os.path.join(SETTINGS["jobs_dir"], f"{job}.py"),
        application_args=args,
        conn_id=SETTINGS.get("spark_conn_id", "spark_default"),
        spark_binary=SETTINGS.get("spark_binary", "spark-submit"),
        py_files=SETTINGS.get("py_files"),
        conf={"spark.pyspark.python": python} if python else None,
        env_vars={"PYSPARK_PYTHON": python} if python else None,
        name=f"kafka-compactor-{task_id}",
        **kwargs,
    )


def cluster_args(log_dir: dict) -> list[str]:
    """Where the cluster's own configs are, when not in the log dir itself."""
    args = []
    if log_dir.get("metadata_log_dir"):
        args += ["--metadata-log-dir", log_dir["metadata_log_dir"]]
    if log_dir.get("server_properties"):
        args += ["--server-properties", log_dir["server_properties"]]
    return args


def maintenance_args(log_dir: dict) -> list[str]:
    args = [log_dir["path"], "--json", "--now-ms", "{{ params.now_ms }}", *cluster_args(log_dir)]
    if log_dir.get("config"):
        args += ["--config-json", json.dumps(log_dir["config"], sort_keys=True)]
    if log_dir.get("topic_configs"):
        args += ["--topic-configs", log_dir["topic_configs"]]
    if SETTINGS.get("state_dir"):
        args += ["--state-dir", SETTINGS["state_dir"]]
    return args


NOW_PARAM = Param("", type=["string", "integer"],
                  description="the jobs' clock in epoch ms; empty: wall clock")

with DAG(
    dag_id="kafka_log_maintenance",
    description="Recover, then compaction and retention per topic cleanup.policy, per log dir",
    schedule=SETTINGS.get("maintenance", {}).get("schedule", "@hourly"),
    start_date=START, catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS,
    params={"now_ms": NOW_PARAM}, tags=["kafka", "compaction", "retention"],
):
    for name, log_dir in LOG_DIRS.items():
        recover = spark_job(f"recover_{name}", "recover", [log_dir["path"], "--json"])
        maintain = spark_job(f"run_{name}", "run", maintenance_args(log_dir))
        recover >> maintain

with DAG(
    dag_id="kafka_gdpr_erasure",
    description="Erase pending requests, verify by rescan, fail when a request is overdue",
    schedule=SETTINGS.get("erasure", {}).get("schedule", "@daily"),
    start_date=START, catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS,
    params={"now_ms": NOW_PARAM}, tags=["kafka", "gdpr"],
):
    state = SETTINGS.get("state_dir", "")
    now = ["--now-ms", "{{ params.now_ms }}"]
    # runs even when an apply or verify failed: an overdue request must still alert
    status = spark_job("erase_status", "erase", ["status", "--state-dir", state, "--json", *now],
                       trigger_rule="all_done")
    for name in SETTINGS.get("erasure", {}).get("log_dirs") or list(LOG_DIRS):
        path = LOG_DIRS[name]["path"]
        cluster = cluster_args(LOG_DIRS[name])
        apply = spark_job(f"erase_apply_{name}", "erase",
                          ["apply", path, "--state-dir", state, "--json", *now, *cluster])
        verify = spark_job(f"erase_verify_{name}", "erase",
                           ["verify", path, "--state-dir", state, "--json", *now, *cluster])
        apply >> verify >> status

with DAG(
    dag_id="kafka_compaction_oneoff",
    description="One compaction round over one log dir, triggered by hand with params",
    schedule=None, start_date=START, catchup=False, default_args=DEFAULT_ARGS,
    params={
        "log_dir": Param("", type="string", minLength=1, description="the Kafka log dir"),
        "topics": Param("", type="string", description="comma-separated; empty: every topic"),
        "metadata_log_dir": Param("", type="string",
                                  description="holds __cluster_metadata-0; empty: the log dir"),
        "server_properties": Param("", type="string",
                                   description="the broker's server.properties; empty: none"),
        "configs": Param({}, type="object",
                         description="overrides for every selected topic; empty: the "
                                     "cluster's configs"),
        "now_ms": NOW_PARAM,
        "dry_run": Param(False, type="boolean",
                         description="plan only: report what would be cleaned, change nothing"),
    },
    tags=["kafka", "compaction"],
):
    spark_job("compact", "compact", [
        "{{ params.log_dir }}", "--dry-run={{ params.dry_run }}", "--topics", "{{ params.topics }}",
        "--metadata-log-dir", "{{ params.metadata_log_dir }}",
        "--server-properties", "{{ params.server_properties }}",
        "--config-json", "{{ params.configs | tojson }}", "--now-ms", "{{ params.now_ms }}",
        "--json", *(["--state-dir", SETTINGS["state_dir"]] if SETTINGS.get("state_dir") else []),
    ])
