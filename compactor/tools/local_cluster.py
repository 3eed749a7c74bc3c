"""Start and stop a Spark standalone cluster on this machine from the pyspark package: one
master and N workers, each its own JVM (``bin/spark-class ...deploy.master.Master`` /
``...deploy.worker.Worker``; pyspark ships no ``sbin/start-*.sh``), their Python workers
running this interpreter. For trying the jobs on a real cluster and for the cluster test.

    compactor cluster start --dir DIR [--workers 2] [--cores 1] [--memory 1g]
    compactor cluster stop  --dir DIR
    compactor cluster status --dir DIR

``DIR`` holds ``cluster.json`` (pids, master URL, ports), the daemons' logs and work dirs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from compactor.errors import CompactorError
from compactor.log import storage

STATE_FILE = "cluster.json"


class ClusterError(CompactorError):
    code = "CLUSTER_ERROR"


@dataclass(frozen=True, kw_only=True)
class Cluster:
    master_url: str
    web_url: str
    pids: tuple[int, ...]
    workers: int


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(args: list[str], log_path: str, env: dict[str, str]) -> int:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    return proc.pid


def _alive_workers(web_url: str) -> int:
    try:
        with urllib.request.urlopen(web_url + "/json/", timeout=2) as resp:
            return int(json.load(resp).get("aliveworkers", 0))
    except (OSError, ValueError):
        return -1


def start(state_dir: str, *, workers: int = 2, cores: int = 1, memory: str = "1g",
          timeout_s: float = 90.0) -> Cluster:
    """Start a master and ``workers`` workers on 127.0.0.1; returns once every worker has
    registered. Raises ClusterError (and stops what it started) otherwise."""
    storage.make_dirs(state_dir)
    if storage.exists(storage.join(state_dir, STATE_FILE)):
        raise ClusterError("a cluster is already recorded in this directory",
                           path=state_dir, remedy="run `compactor cluster stop` first")
    home = spark_home()
    spark_class = os.path.join(home, "bin", "spark-class")
    env = dict(os.environ, SPARK_HOME=home, PYSPARK_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=state_dir)
    port, web_port = _free_port(), _free_port()
    master_url, web_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}"
    pids = [_spawn([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(port), "--webui-port", str(web_port)],
                   storage.join(state_dir, "master.log"), env)]
    cluster = Cluster(master_url=master_url, web_url=web_url, pids=tuple(pids), workers=workers)
    _record(state_dir, cluster)
    try:
        _wait(lambda: _alive_workers(web_url) >= 0, timeout_s, "the master did not start",
              state_dir)
        for i in range(workers):
            work = storage.join(state_dir, f"work-{i}")
            storage.make_dirs(work)
            pids.append(_spawn([spark_class, "org.apache.spark.deploy.worker.Worker", master_url,
                                "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                "--work-dir", work, "--webui-port", str(_free_port())],
                               storage.join(state_dir, f"worker-{i}.log"), env))
            cluster = Cluster(master_url=master_url, web_url=web_url, pids=tuple(pids),
                              workers=workers)
            _record(state_dir, cluster)
        _wait(lambda: _alive_workers(web_url) >= workers, timeout_s,
              f"not all {workers} workers registered", state_dir)
    except ClusterError:
        stop(state_dir)
        raise
    return cluster


def _record(state_dir: str, cluster: Cluster) -> None:
    storage.write_atomic(storage.join(state_dir, STATE_FILE), json.dumps(asdict(cluster)).encode())


def _wait(ready: Callable[[], bool], timeout_s: float, what: str, state_dir: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise ClusterError(f"{what} within {timeout_s:.0f} s", path=state_dir,
                       remedy="see master.log and worker-*.log in the cluster directory")


def load(state_dir: str) -> Cluster | None:
    path = storage.join(state_dir, STATE_FILE)
    if not storage.exists(path):
        return None
    raw = json.loads(storage.read_text(path))
    return Cluster(master_url=raw["master_url"], web_url=raw["web_url"],
                   pids=tuple(raw["pids"]), workers=raw["workers"])


def stop(state_dir: str, *, timeout_s: float = 30.0) -> int:
    """Stop every daemon recorded in ``state_dir`` (SIGTERM to its process group, SIGKILL
    after ``timeout_s``); returns how many were still running."""
    cluster = load(state_dir)
    if cluster is None:
        return 0
    running = [pid for pid in cluster.pids if _alive(pid)]
    for pid in running:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(p) for p in running):
        time.sleep(0.2)
    for pid in running:
        if _alive(pid):
            _signal_group(pid, signal.SIGKILL)
    for pid in running:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    storage.remove(storage.join(state_dir, STATE_FILE), missing_ok=True)
    return len(running)


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def status(state_dir: str) -> dict[str, Any]:
    cluster = load(state_dir)
    if cluster is None:
        return {"running": False}
    return {"running": any(_alive(p) for p in cluster.pids), **asdict(cluster),
            "alive_workers": _alive_workers(cluster.web_url)}
