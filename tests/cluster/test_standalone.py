"""The jobs on a real Spark standalone cluster (a master and two workers, separate JVMs and
Python workers) with the packaged ``--py-files``: the compaction and erasure jobs must leave
exactly what the local-mode run leaves. The cluster is stopped whatever happens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.erasure import ledger, rules
from compactor.errors import EXIT_OK
from compactor.spark import session
from compactor.tools.build.dist import build
from compactor.tools.fixtures import local_cluster
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import init_ledger, records_of, segment_bytes, topic_lines, tree_digest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NOW = str(DEFAULT_START_MS + 3 * 86_400_000)
GEN = GeneratorConfig(topics=("accounts",), partitions=2, records_per_partition=2000,
                      distinct_keys=100, segment_bytes=16 * 1024, transactional_ratio=0.3,
                      zipf_exponent=0.0, seed=13,
                      topic_configs={"accounts": {"cleanup.policy": "compact"}})


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    state = str(tmp_path_factory.mktemp("cluster"))
    try:
        yield local_cluster.start(state, workers=2, cores=1, memory="1g")
    finally:
        local_cluster.stop(state)
        assert local_cluster.load(state) is None


def _run_submit(master: str, py_files: str | None, *args: str,
                jars: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    # the installation's start (compactor.tools.ops.submit_args): delta-spark's jars on the
    # driver's classpath; the workers here run this installation, so their executors start
    # as the driver does (the class-data archive, the package's worker daemon)
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", master,
           *(session.submit_args(master, executors_installed=True) if jars else [])]
    if py_files:
        cmd += ["--py-files", py_files]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, check=False,
                          cwd=str(REPO))


def _submit(master: str, py_files: str | None, *args: str) -> dict:
    proc = _run_submit(master, py_files, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[0])


def test_a_job_without_deltas_jars_stops_before_it_changes_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under spark-submit only --jars reaches the driver's classpath: an erasure, which
    records its outcomes through delta-spark, refuses to start its work without it, instead
    of rewriting the log and then failing to record it. A compaction needs no Delta in Spark
    (its run rows go in by delta-rs) and records itself."""
    logs, state = tmp_path / "logs", tmp_path / "state"
    generate(str(logs), GEN)
    init_ledger(str(state))
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", "accounts",
                     "--key", "key-00000042", "--request-id", "r1", "--now-ms", NOW,
                     "--reason", "art. 17"]) == EXIT_OK
    capsys.readouterr()
    before = tree_digest(logs)
    proc = _run_submit("local[1]", None, "jobs/erase.py", "apply", str(logs), "--now-ms", NOW,
                       "--json", "--assume-kafka-defaults", "--state-dir", str(state),
                       jars=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    error = json.loads(proc.stdout.splitlines()[0])
    assert error["code"] == "SPARK_UNAVAILABLE" and "delta-spark's jars" in error["message"]
    assert "compactor.tools.ops.submit_args" in error["remedy"]
    assert tree_digest(logs) == before
    from deltalake import DeltaTable

    (request,) = DeltaTable(str(state / "erasure_requests")).to_pyarrow_table().to_pylist()
    assert request["status"] == "pending"
    proc = _run_submit("local[1]", None, "jobs/compact.py", str(logs), "--now-ms", NOW,
                       "--json", "--assume-kafka-defaults", "--state-dir", str(state),
                       jars=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    compacted = json.loads(proc.stdout.splitlines()[0])
    assert compacted["status"] == "ok" and tree_digest(logs) != before
    runs = DeltaTable(str(state / "runs")).to_pyarrow_table().to_pylist()
    assert {r["run_id"] for r in runs} == {compacted["run_id"]}


def test_compaction_and_erasure_on_a_cluster_equal_local_mode(
        standalone: local_cluster.Cluster, tmp_path: Path,
                capsys: pytest.CaptureFixture[str]) -> None:
    py_files = str(tmp_path / "kafka_compactor.zip")
    names = build(py_files)  # the package, with schemas/ as compactor.schemas as installed
    assert "compactor/schemas/spark.py" in names and not any(
        n.startswith(("jobs/", "schemas/")) for n in names)
    on_cluster, local = tmp_path / "cluster-logs", tmp_path / "local-logs"
    generate(str(on_cluster), GEN)
    shutil.copytree(on_cluster, local)
    # the configs come from the cluster's metadata log; the broker runs Kafka's defaults
    args = ["--now-ms", NOW, "--json", "--assume-kafka-defaults"]

    remote = _submit(standalone.master_url, py_files, "jobs/compact.py", str(on_cluster), *args)
    here = _submit("local[2]", None, "jobs/compact.py", str(local), *args)
    assert remote["status"] == here["status"] == "ok"
    assert all(p["status"] == "cleaned" for p in topic_lines(remote["partitions"]))
    assert tree_digest(on_cluster) == tree_digest(local)

    subject = b"key-00000042"
    # more requests than a run holds on the driver (ROWS_ON_DRIVER): the driver reads them
    # again by delta-rs, a pass at a time, matches the scan's candidates and MERGEs the
    # outcomes by kind
    absent = [r for r in rules.new_requests(
        topic="accounts", digests=[rules.subject_digest(f"absent-{i}".encode())
                                   for i in range(ledger.ROWS_ON_DRIVER)],
        selector="key", header_name=None, reason="art. 17", now_ms=int(NOW),
        deadline_days=30, request_id=None)]
    for logs in (on_cluster, local):
        init_ledger(str(logs) + "-state")
        assert cli_main(["erase", "request", "--state-dir", str(logs) + "-state", "--topic",
                         "accounts", "--key", subject.decode(), "--request-id", "a1",
                         "--now-ms", NOW, "--reason", "art. 17"]) == EXIT_OK
        ledger.add_requests(str(logs) + "-state", absent)
    capsys.readouterr()
    erase = ["apply", "--now-ms", NOW, "--json", "--assume-kafka-defaults"]
    remote = _submit(standalone.master_url, py_files, "jobs/erase.py", erase[0], str(on_cluster),
                     "--state-dir", str(on_cluster) + "-state", *erase[1:])
    here = _submit("local[2]", None, "jobs/erase.py", erase[0], str(local),
                   "--state-dir", str(local) + "-state", *erase[1:])
    assert remote["requests"][0]["request_id"] == here["requests"][0]["request_id"] == "a1"
    assert remote["requests"][0]["records_erased"] == here["requests"][0]["records_erased"] > 0
    assert remote["requests_by_outcome"] == {"applied": ledger.ROWS_ON_DRIVER + 1}
    assert tree_digest(on_cluster) == tree_digest(local)
    # the driver recorded the outcomes by kind (one individual request and one kind) in one
    # delta-rs commit that rewrote the table's files, the table's own log says so, and
    # every request is applied
    from deltalake import DeltaTable

    from compactor.state import tables as state_tables

    table = DeltaTable(str(on_cluster) + "-state/erasure_requests")
    assert table.history(1)[0]["engineInfo"].startswith("delta-rs")
    last = state_tables.history(str(on_cluster) + "-state", "erasure_requests")[-1]
    assert (last["operation"], last["action"]) == ("WRITE", "apply")
    assert {r["status"] for r in table.to_pyarrow_table(columns=["status"]).to_pylist()} == {
        "applied"}
    for pdir in on_cluster.glob("accounts-*"):
        assert not any(r.key == subject for r in records_of(segment_bytes(pdir)).values())


def test_compaction_on_a_cluster_against_s3_equals_local_mode(
        standalone: local_cluster.Cluster, s3_server, tmp_path: Path) -> None:
    """The executors on the workers read the segments by ranged GETs and upload the cleaned
    ones themselves; the endpoint and credentials reach them inside the job's functions
    (``--storage-option``), not through their environment."""
    from tests.objectstore.conftest import download, storage_args, tree, upload

    py_files = str(tmp_path / "kafka_compactor.zip")
    build(py_files)
    local = tmp_path / "local-logs"
    generate(str(local), GEN)
    url = upload(s3_server, local, "cluster")
    args = ["--now-ms", NOW, "--json", "--assume-kafka-defaults"]
    remote = _submit(standalone.master_url, py_files, "jobs/compact.py", url, *args,
                     *storage_args(s3_server))
    here = _submit("local[2]", None, "jobs/compact.py", str(local), *args)
    assert remote["status"] == here["status"] == "ok"
    assert all(p["status"] == "cleaned" for p in topic_lines(remote["partitions"]))
    download(s3_server, url, tmp_path / "down")
    assert tree(tmp_path / "down") == tree(local)


def test_a_master_url_that_is_not_a_spark_master_is_refused_at_once(
        standalone: local_cluster.Cluster, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28.9: a port that is not a Spark master (here the master's own web UI) took 79 s
    and ended as an internal error. Now the master is asked one RPC question first."""
    import socket
    import time

    from compactor.errors import SparkUnavailableError
    from compactor.spark.session import check_master_reachable

    check_master_reachable(standalone.master_url)  # the real one answers
    web_port = standalone.web_url.rsplit(":", 1)[1]
    with pytest.raises(SparkUnavailableError, match="not a Spark master"):
        check_master_reachable(f"spark://127.0.0.1:{web_port}")
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with pytest.raises(SparkUnavailableError, match="did not answer"):
            check_master_reachable(f"spark://127.0.0.1:{silent.getsockname()[1]}",
                                   timeout_s=1)
    logs = tmp_path / "logs"
    generate(str(logs), GEN)
    started = time.monotonic()
    code = cli_main(["compact", str(logs), "--assume-kafka-defaults", "--now-ms", NOW,
                     "--master", f"spark://127.0.0.1:{web_port}", "--json"])
    assert code == 1 and time.monotonic() - started < 30
    assert '"SPARK_UNAVAILABLE"' in capsys.readouterr().out
