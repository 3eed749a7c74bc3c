"""How a job starts: the command line, spark-submit and a standalone cluster, on a small log dir.

Usage: python bench/startup.py [--runs 2] [--ways cli,submit,...] [--records 20000]

The same compaction (``compact``, with a state dir: the run history is written through
delta-spark, as the DAG's jobs do) on copies of one generated log dir of a few MB, each run a
new process as an operator's command or an Airflow task starts it:

- ``cli``: ``compactor compact --master local[2]`` (the baseline in the same run);
- ``submit-plain``: ``spark-submit --master local[2]`` with what the DAGs passed before issue 53
  (``--jars`` and the quiet log4j file);
- ``submit``: ``spark-submit`` with ``python -m compactor.tools.ops.submit_args``'s arguments
  (on the cluster with ``--executors-installed``: its workers run this installation);
- ``cluster-plain`` / ``cluster``: the same two against a standalone cluster here (a master and
  two one-core workers, started and stopped by this script) with ``--py-files``;
- ``dag``: the one-off compaction DAG's task through Airflow's ``dag.test()`` (a private
  AIRFLOW_HOME, a ``local[2]`` connection), the DAG file of ``--dags`` (default: this
  repository's; an older checkout's ``airflow_dags`` measures that one). Its line's wall time
  is the task's duration as Airflow records it.

Each line gives the process's wall time and its stages: ``launch`` (from the process's start to
its report, less the report's stages: spark-submit's launcher and JVM before Python, Python's
imports, the run history's commit), ``session_start`` and ``worker_start`` (the report's
``stages_s``: the SparkContext, the JVM too where Python starts it, then the Python workers),
``work`` (the report's other stages) and ``exit`` (from the report to the process's end: a
spark-submit JVM stops its SparkContext; the command's own JVM ends after it, unwaited).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WAYS = ("cli", "submit-plain", "submit", "cluster-plain", "cluster", "dag")
QUIET = REPO / "compactor" / "spark" / "log4j2-quiet.properties"


def _plain_args(master: str) -> list[str]:
    """What the DAGs gave spark-submit before issue 53 (``spark_conf`` and ``delta_jars``)."""
    from compactor.spark import delta

    return ["--master", master, "--jars", ",".join(delta.jars("delta")),
            "--conf", "spark.ui.showConsoleProgress=false",
            "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{QUIET}"]


def _tool_args(master: str, log_dir: Path) -> list[str]:
    # the cluster's workers are on this machine: its executors run this installation
    installed = [] if master.startswith("local") else ["--executors-installed"]
    out = subprocess.run([sys.executable, "-m", "compactor.tools.ops.submit_args", "--master",
                          master, "--log-dir", str(log_dir), "--json", *installed],
                         capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout))


def _command(way: str, master: str, py_files: str, log_dir: Path, state: Path,
             now_ms: int) -> list[str]:
    job = [str(log_dir), "--json", "--progress", "off", "--now-ms", str(now_ms),
           "--state-dir", str(state), "--assume-kafka-defaults"]
    if way == "cli":
        return [str(BIN / "compactor"), "compact", *job, "--master", master]
    args = _plain_args(master) if way.endswith("-plain") else _tool_args(master, log_dir)
    if way.startswith("cluster"):
        args += ["--py-files", py_files]
    return [str(BIN / "spark-submit"), *args, str(REPO / "jobs" / "compact.py"), *job]


def _run(cmd: list[str]) -> tuple[float, dict[str, float]]:
    """The process's wall time, and its stages: the report's, ``exit`` (from the report on
    stdout to the process's end) and ``launch`` (the rest before the report)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    started = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=tempfile.gettempdir()) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        reported = time.perf_counter()
        _, err = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])}... exited {proc.returncode}:\n{err[-3000:]}")
    stages = dict(json.loads(first)["stages_s"])
    stages["exit"] = wall - (reported - started)
    stages["launch"] = reported - started - sum(v for k, v in stages.items() if k != "exit")
    return wall, stages


#: run by ``dag``: one dag.test() of the one-off compaction DAG; prints the task's duration
#: and the report it wrote
DAG_RUN = """
import glob, json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
run = bag.dags["kafka_compaction_oneoff"].test(run_conf={
    "log_dir": sys.argv[2], "now_ms": sys.argv[3], "server_properties": sys.argv[5]})
(ti,) = run.get_task_instances()
(report,) = glob.glob(sys.argv[4] + "/kafka-compactor-*.json")
print(json.dumps({"state": ti.state, "duration": ti.duration,
                  "report": json.load(open(report))}))
"""


def _airflow_home(root: Path, dags: Path, state: Path) -> dict[str, str]:
    """A private Airflow (sqlite, migrated) whose DAG settings name this installation."""
    home = root / "airflow"
    (home / "reports").mkdir(parents=True)
    settings = home / "kafka_compactor.yaml"
    settings.write_text(json.dumps({
        "spark_conn_id": "spark_default", "jobs_dir": str(dags.parent / "jobs"),
        "python": sys.executable, "state_dir": str(state), "retries": 0,
        "report_dir": str(home / "reports")}))
    env = dict(os.environ, AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__DAGS_FOLDER=str(dags),
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
               AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}',
               KAFKA_COMPACTOR_DAGS_CONFIG=str(settings), PYSPARK_PYTHON=sys.executable,
               PATH=f"{BIN}:{os.environ['PATH']}")
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True,
                   capture_output=True)
    return env


def _run_dag(env: dict[str, str], dags: Path, log_dir: Path,
             now_ms: int) -> tuple[float, dict[str, float]]:
    reports = Path(env["AIRFLOW_HOME"]) / "reports"
    for old in reports.glob("*.json"):
        old.unlink()
    props = Path(env["AIRFLOW_HOME"]) / "server.properties"
    props.write_text("log.retention.hours=168\n")
    proc = subprocess.run([sys.executable, "-c", DAG_RUN, str(dags), str(log_dir),
                           str(now_ms), str(reports), str(props)], env=env, capture_output=True,
                          text=True, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise SystemExit(f"dag.test() failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.splitlines()[-1])
    if out["state"] != "success":
        raise SystemExit(f"the task ended {out['state']}")
    stages = dict(out["report"]["stages_s"])
    stages["exit"] = 0.0  # within the task's duration, not apart
    stages["launch"] = out["duration"] - sum(stages.values())
    return out["duration"], stages


def _line(way: str, wall: float, stages: dict[str, float]) -> str:
    named = ("launch", "session_start", "worker_start", "exit")
    work = sum(v for k, v in stages.items() if k not in named)
    return (f"{way:>14}: {wall:5.1f} s = launch {stages['launch']:4.1f} + session_start "
            f"{stages.get('session_start', 0.0):4.1f} + worker_start "
            f"{stages.get('worker_start', 0.0):4.1f} + work {work:4.1f} + exit "
            f"{stages['exit']:4.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--records", type=int, default=20_000, help="records per partition")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dags", type=Path, default=REPO / "airflow_dags",
                    help="the airflow_dags folder whose DAG the dag way runs")
    args = ap.parse_args()
    ways = args.ways.split(",")
    sys.path.insert(0, str(REPO))
    from compactor.tools.build.dist import build
    from compactor.tools.fixtures import local_cluster

    root = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    template = root / "template"
    now_ms = int(time.time()) * 1000
    subprocess.run([str(BIN / "compactor"), "generate", str(template), "--partitions", "2",
                    "--records", str(args.records), "--seed", "42",
                    "--start-ms", str(now_ms - 3_600_000),
                    "--topic-config", "user-profiles:cleanup.policy=compact",
                    "--topic-config", "orders-v2:cleanup.policy=compact,delete"],
                   check=True, capture_output=True)
    size = sum(f.stat().st_size for f in template.glob("*/*.log"))
    print(f"log dir: {size / 1e6:.1f} MB of segments in "
          f"{len(list(template.glob('*-[0-9]*')))} partition directories; "
          f"{args.runs} run(s) of each way, the median's stages")
    py_files = str(root / "kafka_compactor.zip")
    build(py_files)
    cluster_state = str(root / "cluster")
    cluster = None
    try:
        if any(w.startswith("cluster") for w in ways):
            cluster = local_cluster.start(cluster_state, workers=2, cores=1, memory="1g")
        for way in ways:
            master = cluster.master_url if way.startswith("cluster") and cluster else \
                args.master
            runs = []
            env = _airflow_home(root, args.dags, root / "state-dag") if way == "dag" else None
            for run in range(args.runs):
                work = root / f"{way}-{run}"
                shutil.copytree(template, work)
                if env is not None:
                    runs.append(_run_dag(env, args.dags, work, now_ms))
                else:
                    runs.append(_run(_command(way, master, py_files, work,
                                              root / f"state-{way}", now_ms)))
                shutil.rmtree(work)
            walls = [w for w, _ in runs]
            median = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
            print(_line(way, *median) + f"  (runs: {', '.join(f'{w:.1f}' for w in walls)}; "
                  f"median {statistics.median(walls):.1f})", flush=True)
    finally:
        if cluster is not None:
            local_cluster.stop(cluster_state)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
