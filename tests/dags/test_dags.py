"""The Airflow DAGs: they parse through a DagBag with no import error and no connection or
Variable access; every task's rendered spark-submit arguments are accepted by the job's own
parser (the DAG and the job cannot drift); and real ``dag.test()`` runs (sqlite metadata DB,
local Spark through the venv's spark-submit) do what the commands do."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag
from deltalake import DeltaTable

from compactor.cli import main as cli_main
from compactor.cli.args import options_from_args
from compactor.errors import EXIT_OK
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import (
    init_ledger,
    lock_held_by_other_process,
    records_of,
    segment_bytes,
    tree_digest,
)

REPO = Path(__file__).resolve().parents[2]
DAG_IDS = {"kafka_log_maintenance", "kafka_gdpr_erasure", "kafka_compaction_oneoff",
           "kafka_gdpr_request", "kafka_rolling_maintenance", "kafka_state_maintenance"}
NOW = DEFAULT_START_MS + 2 * 3_600_000  # two hours after the first record
DAY = 86_400_000
SUBJECT = b"key-00000005"
DIGEST = hashlib.sha256(SUBJECT).hexdigest()  # what an operator gives the request DAG
# the cluster's own configs, in its metadata log: the DAG settings name none
TOPIC_CONFIGS = {"accounts": {"cleanup.policy": "compact"},
                 "events": {"cleanup.policy": "delete", "retention.ms": "3600000"}}
GEN = GeneratorConfig(topics=("accounts", "events"), partitions=1, records_per_partition=1500,
                      distinct_keys=80, segment_bytes=16 * 1024, zipf_exponent=0.0, seed=17,
                      topic_configs=TOPIC_CONFIGS)


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A generated log dir and the DAG settings file pointing at it."""
    logs = tmp_path / "logs"
    generate(str(logs), GEN)
    server_properties = tmp_path / "server.properties"
    server_properties.write_text("log.retention.hours=168\n")
    (tmp_path / "textfile").mkdir()
    (tmp_path / "pages").mkdir()
    plan = tmp_path / "rolling.yaml"
    plan.write_text(yaml.safe_dump({"bootstrap_servers": "127.0.0.1:9", "brokers": [
        {"name": f"k{i}", "node_id": i, "server_properties": str(server_properties),
         "stop": "false", "start": "false"} for i in (1, 2)]}))
    cfg = {
        "spark_conn_id": "spark_default", "jobs_dir": str(REPO / "jobs"),
        "rolling": {"schedule": "@weekly", "plan": str(plan)},
        "metrics_dir": str(tmp_path / "textfile"), "html_report_dir": str(tmp_path / "pages"),
        "python": os.environ["PYSPARK_PYTHON"], "state_dir": str(tmp_path / "state"),
        "retries": 0,  # dag.test() of a failing job must fail at once
        "maintenance": {"schedule": "@hourly", "log_dirs": [
            {"name": "b1", "path": str(logs), "server_properties": str(server_properties),
             "metadata_log_dir": str(logs)}]},
        "erasure": {"schedule": "@daily", "log_dirs": ["b1"]},
    }
    path = tmp_path / "kafka_compactor.yaml"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("KAFKA_COMPACTOR_DAGS_CONFIG", str(path))
    init_ledger(tmp_path / "state")  # `compactor erase init`, once, as an operator sets it up
    return {"logs": logs, "state": tmp_path / "state", "server_properties": server_properties,
            **cfg}


def _bag() -> DagBag:
    return DagBag(dag_folder=str(REPO / "airflow_dags"))


def test_dags_parse_without_errors_connections_or_variables(
        settings: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk import BaseHook, Variable

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("connection or Variable read at parse time")

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(forbidden))
    monkeypatch.setattr(Variable, "get", staticmethod(forbidden))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT")
    bag = _bag()
    assert bag.import_errors == {}
    assert set(bag.dags) == DAG_IDS
    assert set(bag.dags["kafka_log_maintenance"].task_dict) == {"recover_b1", "run_b1"}
    assert set(bag.dags["kafka_gdpr_erasure"].task_dict) == {
        "erase_apply_b1", "erase_verify_b1", "erase_status", "fail_if_any_task_failed"}
    assert bag.dags["kafka_compaction_oneoff"].schedule is None
    # the rolling DAG: a task per broker of the plan, in its order, one after the other
    rolling = bag.dags["kafka_rolling_maintenance"]
    assert set(rolling.task_dict) == {"roll_k1", "roll_k2"}
    assert rolling.task_dict["roll_k2"].upstream_task_ids == {"roll_k1"}


def test_every_rendered_argv_is_accepted_by_its_job_parser(settings: dict) -> None:
    bag = _bag()
    checked = 0
    for dag in bag.dags.values():
        params = {k: v.value if hasattr(v, "value") else v for k, v in dag.params.items()}
        if dag.dag_id == "kafka_compaction_oneoff":
            params.update(log_dir=str(settings["logs"]), topics="accounts",
                          configs={"cleanup.policy": "compact,delete", "retention.ms": 86_400_000},
                          now_ms=str(NOW))
        if dag.dag_id == "kafka_gdpr_request":
            params.update(topic="accounts", key_sha256=DIGEST, reason="ticket 7")
        for task in dag.tasks:
            if task.task_id == "fail_if_any_task_failed":
                continue
            if hasattr(task, "application_args"):  # spark-submit
                argv = task.render_template(task.application_args, {"params": params})
                application = Path(task.application)
            else:  # the jobs that need no Spark run without spark-submit
                argv = task.render_template(task.arguments, {"params": params})
                application = REPO / "jobs" / f"{task.job}.py"
            job = importlib.import_module(f"jobs.{application.stem}")
            assert application.parent == REPO / "jobs"
            args = job.build_parser().parse_args(argv)
            if isinstance(getattr(args, "log_dir", None), list):  # the broker's log dirs
                (args.log_dir,) = args.log_dir  # one per task here
            if hasattr(args, "config") and dag.dag_id != "kafka_rolling_maintenance":
                # maintenance and compaction: validate the configs too
                opts = options_from_args(args)
                if dag.dag_id == "kafka_compaction_oneoff":
                    assert opts.topics == {"accounts"} and opts.now_ms == NOW
                    assert opts.config_all == {"cleanup.policy": "compact,delete",
                                               "retention.ms": "86400000"}
            if dag.dag_id == "kafka_rolling_maintenance":
                assert (args.config, args.broker, args.now_ms) == (
                    settings["rolling"]["plan"], [task.task_id.removeprefix("roll_")], None)
            if dag.dag_id == "kafka_gdpr_request":
                assert (args.action, args.topic, args.key, args.key_sha256, args.keys_file,
                        args.reason, args.deadline_days, args.request_id, args.now_ms) == (
                    "request", "accounts", None, DIGEST, None, "ticket 7", 30, "", None)
                # the request's topic is checked against the erasure log dir when filed
                assert args.log_dir == str(settings["logs"])
            if getattr(args, "log_dir", None) and dag.dag_id != "kafka_compaction_oneoff":
                assert args.log_dir == str(settings["logs"])
                if hasattr(args, "metadata_log_dir"):  # the commands that read configs
                    assert args.metadata_log_dir == str(settings["logs"])
            if getattr(args, "server_properties", None) and dag.dag_id == "kafka_log_maintenance":
                assert args.server_properties == str(settings["server_properties"])
                # the settings turn on metrics and the HTML page, one file per log dir
                assert args.metrics_file == f"{settings['metrics_dir']}/kafka_compactor_b1.prom"
                assert args.html_report == f"{settings['html_report_dir']}/b1.html"
            if hasattr(args, "state_dir"):
                assert args.state_dir == settings["state_dir"]
            checked += 1
    assert checked == 10


@pytest.mark.slow
def test_log_maintenance_dag_compacts_and_retains_like_compactor_run(
        settings: dict, airflow_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    logs = settings["logs"]
    expected = logs.parent / "expected"
    shutil.copytree(logs, expected)
    assert cli_main(["run", str(expected), "--now-ms", str(NOW), "--json",
                     "--server-properties", str(settings["server_properties"])]) == EXIT_OK
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    statuses = {f"{p['topic']}-{p['partition']}": (p["status"], p["reason"])
                for p in report["compaction"]["partitions"]}
    assert statuses == {"__cluster_metadata-0": ("skipped", "metadata_log"),
                        "accounts-0": ("cleaned", "clean"),
                        "events-0": ("skipped", "not_compacted")}
    assert report["retention"]["segments_deleted"] > 0

    run = _bag().dags["kafka_log_maintenance"].test(run_conf={"now_ms": str(NOW)})
    assert run.state == "success"
    assert tree_digest(logs) == tree_digest(expected)
    # the task's report reached XCom: the same figures as the command's
    (pushed,) = _xcom(run, "run_b1")
    for part in ("compaction", "retention"):
        assert [(p["topic"], p["status"], p.get("records_out"), p.get("deleted_segments"))
                for p in pushed[part]["partitions"]] == [
            (p["topic"], p["status"], p.get("records_out"), p.get("deleted_segments"))
            for p in report[part]["partitions"]]
    assert segment_bytes(logs / "events-0") == {max(segment_bytes(logs / "events-0")): b""}
    # the settings' metrics and HTML page, labelled with the log dir
    prom = (Path(settings["metrics_dir"]) / "kafka_compactor_b1.prom").read_text()
    assert f'log_dir="{logs}"' in prom and "kafka_compactor_last_run_ok" in prom
    assert "<h2>Compaction</h2>" in (Path(settings["html_report_dir"]) / "b1.html").read_text()
    history = DeltaTable(str(settings["state"] / "runs")).to_pyarrow_table().to_pylist()
    assert {(r["command"], r["topic"]) for r in history} == {
        (command, topic) for command in ("compact", "retain")
        for topic in ("__cluster_metadata", "accounts", "events")}


@pytest.mark.slow
def test_gdpr_erasure_dag_erases_and_verifies_a_request(
        settings: dict, airflow_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    logs, state = settings["logs"], settings["state"]
    assert any(r.key == SUBJECT for r in records_of(segment_bytes(logs / "accounts-0")).values())
    # filed through the request DAG, as an operator would from Airflow's UI: by digest
    filed = _bag().dags["kafka_gdpr_request"].test(run_conf={
        "topic": "*", "key_sha256": DIGEST, "request_id": "ticket-1", "reason": "art. 17",
        "now_ms": str(NOW)})
    assert filed.state == "success"
    assert _xcom(filed, "erase_request") == [{"type": "requests", "added": ["ticket-1"],
                                              "existing": [], "existing_requests": []}]
    run = _bag().dags["kafka_gdpr_erasure"].test(run_conf={"now_ms": str(NOW)})
    assert run.state == "success"
    assert _states(run)["fail_if_any_task_failed"] == "skipped"
    for pdir in logs.glob("*-0"):
        assert not any(r.key == SUBJECT for r in records_of(segment_bytes(pdir)).values())
    (row,) = DeltaTable(str(state / "erasure_requests")).to_pyarrow_table().to_pylist()
    assert row["status"] == "verified" and row["records_erased"] > 0
    assert row["reason"] == "art. 17" and row["subject_sha256"] == DIGEST
    # a corrupt segment blocks a new request (apply fails, the request stays pending): the
    # run fails at once, before any deadline
    segment = sorted((logs / "accounts-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[200] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", "accounts",
                     "--key", "key-00000006", "--request-id", "blocked",
                     "--now-ms", str(NOW), "--reason", "art. 17"]) == EXIT_OK
    run = _bag().dags["kafka_gdpr_erasure"].test(run_conf={"now_ms": str(NOW)})
    assert run.state == "failed"
    assert _states(run) == {"erase_apply_b1": "failed", "erase_verify_b1": "upstream_failed",
                            "erase_status": "success", "fail_if_any_task_failed": "failed"}
    # past its deadline the status task fails too
    run = _bag().dags["kafka_gdpr_erasure"].test(run_conf={"now_ms": str(NOW + 31 * DAY)})
    assert run.state == "failed" and _states(run)["erase_status"] == "failed"


@pytest.mark.slow
def test_a_bad_request_fails_alone_and_is_named_with_its_reason(
        settings: dict, airflow_db: str, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 53.3: a request for a topic the cluster lacks (filed where the topic could not be
    checked) fails on its own: the apply task succeeds for the others, they are verified in
    the same run, and the task's log and the run's failure name the request and the reason
    in one line each."""
    state = str(settings["state"])
    for rid, topic, key in (("good", "accounts", "key-00000003"),
                            ("bad", "acounts", "key-00000004")):
        assert cli_main(["erase", "request", "--state-dir", state, "--topic", topic,
                         "--key-sha256", hashlib.sha256(key.encode()).hexdigest(),
                         "--request-id", rid, "--reason", "art. 17",
                         "--now-ms", str(NOW)]) == EXIT_OK
    capfd.readouterr()
    run = _bag().dags["kafka_gdpr_erasure"].test(run_conf={"now_ms": str(NOW)})
    assert run.state == "failed"
    assert _states(run) == {"erase_apply_b1": "success", "erase_verify_b1": "success",
                            "erase_status": "failed", "fail_if_any_task_failed": "failed"}
    rows = {r["request_id"]: r for r in
            DeltaTable(state + "/erasure_requests").to_pyarrow_table().to_pylist()}
    assert (rows["good"]["status"], rows["bad"]["status"]) == ("verified", "failed")
    out = capfd.readouterr()
    lines = (out.out + out.err).splitlines()
    # the apply task's log: one line, the request and why
    (named,) = [m for m in lines if "[error" in m and "request bad failed: " in m]
    assert "topic 'acounts' has no partition" in named and "{" not in named  # words
    # the run's failure: the status task names it too
    failures = [m for m in lines if "erase_status: the job ended with exit code 1: " in m]
    assert failures and all("request bad failed: topic 'acounts'" in m for m in failures)
    assert not any("status None" in m for m in lines)


@pytest.mark.slow
def test_a_failed_verify_fails_the_run_until_retried_or_cancelled(
        settings: dict, airflow_db: str, tmp_path: Path) -> None:
    """A verify that finds the subject again (a backup restored over an erased log dir
    between apply and verify) fails the request; the run fails, and so does every later run's
    status, until the operator retries the request (the next run erases and verifies it) or cancels
    it with a
    reason. Both stand in the ledger's audit trail."""
    logs, state = settings["logs"], str(settings["state"])
    backup = tmp_path / "backup"
    shutil.copytree(logs, backup)
    for rid, key in (("restored", b"key-00000005"), ("withdrawn", b"key-00000007")):
        assert cli_main(["erase", "request", "--state-dir", state, "--topic", "accounts",
                         "--key-sha256", hashlib.sha256(key).hexdigest(), "--request-id", rid,
                         "--now-ms", str(NOW), "--reason", "art. 17"]) == EXIT_OK
    # applied, and before the verify a backup is restored: the subjects are back on disk
    assert cli_main(["erase", "apply", str(logs), "--state-dir", state, "--server-properties",
                     str(settings["server_properties"]), "--now-ms", str(NOW)]) == EXIT_OK
    shutil.rmtree(logs)
    shutil.copytree(backup, logs)
    erasure = _bag().dags["kafka_gdpr_erasure"]
    run = erasure.test(run_conf={"now_ms": str(NOW + 1)})
    assert run.state == "failed"
    # the verify did its work (the failed requests are its findings); the status fails
    assert _states(run) == {"erase_apply_b1": "success", "erase_verify_b1": "success",
                            "erase_status": "failed", "fail_if_any_task_failed": "failed"}
    (status,) = _xcom(run, "erase_status", "report")
    assert {f["request_id"] for f in status["failed"]} == {"restored", "withdrawn"}
    # nothing changes by itself: the next run fails again
    assert erasure.test(run_conf={"now_ms": str(NOW + 2)}).state == "failed"

    assert cli_main(["erase", "retry", "restored", "--state-dir", state, "--reason",
                     "backup of 1 Jan restored", "--now-ms", str(NOW + 3)]) == EXIT_OK
    assert cli_main(["erase", "cancel", "withdrawn", "--state-dir", state,
                     "--reason", "request withdrawn by the data subject",
                     "--now-ms", str(NOW + 3)]) == EXIT_OK
    run = erasure.test(run_conf={"now_ms": str(NOW + 4)})
    assert run.state == "success", _states(run)
    rows = {r["request_id"]: r for r in
            DeltaTable(state + "/erasure_requests").to_pyarrow_table().to_pylist()}
    assert (rows["restored"]["status"], rows["withdrawn"]["status"]) == ("verified", "cancelled")
    # the restored copy's key is gone again; the cancelled request's key stays
    keys = {r.key for r in records_of(segment_bytes(logs / "accounts-0")).values()}
    assert b"key-00000005" not in keys and b"key-00000007" in keys
    trail = [c for c in DeltaTable(state + "/erasure_requests").history()
             if c.get("action") in ("retry", "cancel")]
    assert sorted((c["action"], c["request_ids"], c["reason"]) for c in trail) == [
        ("cancel", "withdrawn", "request withdrawn by the data subject"),
        ("retry", "restored", "backup of 1 Jan restored")]


@pytest.mark.slow
def test_no_raw_subject_reaches_airflow(
        settings: dict, airflow_db: str, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    """Requests filed through the request DAG, by digest and by a keys file, then erased and
    verified by the erasure DAG: the raw keys appear in no byte of Airflow's database (its
    file and journal: dag_run conf, rendered fields, XCom, the log table), in no task log,
    and in nothing the tasks printed. A topic that does not exist is refused when filed."""
    keys_file = tmp_path / "ticket-9.keys"
    keys_file.write_text("key-00000008\nkey-00000009\n")
    raw = [SUBJECT, b"key-00000008", b"key-00000009"]
    request = _bag().dags["kafka_gdpr_request"]
    assert request.test(run_conf={"topic": "accounts", "key_sha256": DIGEST, "reason": "a",
                                  "request_id": "by-digest", "now_ms": str(NOW)}).state == "success"
    assert request.test(run_conf={"topic": "accounts", "keys_file": str(keys_file), "reason": "b",
                                  "request_id": "by-file", "now_ms": str(NOW)}).state == "success"
    typo = request.test(run_conf={"topic": "acounts", "key_sha256": DIGEST, "reason": "c",
                                  "now_ms": str(NOW)})
    assert typo.state == "failed"
    (refused,) = _xcom(typo, "erase_request", "report")
    assert refused["code"] == "CONFIG_ERROR" and "accounts" in refused["message"]
    assert _bag().dags["kafka_gdpr_erasure"].test(run_conf={"now_ms": str(NOW)}).state == \
        "success"
    rows = DeltaTable(str(settings["state"] / "erasure_requests")).to_pyarrow_table().to_pylist()
    assert {r["request_id"]: r["status"] for r in rows} == {
        "by-digest": "verified", "by-file-1": "verified", "by-file-2": "verified"}
    printed = capfd.readouterr()
    searched = {"task output": (printed.out + printed.err).encode()}
    for path in Path(airflow_db).rglob("*"):
        if path.is_file():
            searched[str(path)] = path.read_bytes()
    assert any(p.endswith("airflow.db") for p in searched)
    assert DIGEST.encode() in b"".join(searched.values())  # the search sees what Airflow kept
    leaks = [(where, key) for where, data in searched.items() for key in raw
             for form in (key, key.hex().encode()) if form in data]
    assert leaks == []


def _states(run) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def _retrying(settings: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              **more: Any) -> None:
    """The settings with two retries, at once (and ``more``)."""
    path = tmp_path / "retrying.yaml"
    path.write_text(yaml.safe_dump({**{k: v for k, v in settings.items()
                                       if k not in ("logs", "state", "server_properties")},
                                    "retries": 2, "retry_delay_minutes": 0, **more}))
    monkeypatch.setenv("KAFKA_COMPACTOR_DAGS_CONFIG", str(path))


def _temp_reports() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("kafka-compactor-*.json"))


def _xcom(run, task_id: str, key: str = "return_value"):  # type: ignore[no-untyped-def]
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id,
                                                  task_ids=task_id, key=key)).all()
        return [XComModel.deserialize_value(r) for r in rows]


@pytest.mark.slow
def test_failures_are_retried_only_when_a_retry_can_help(
        settings: dict, airflow_db: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 3 (a log dir that does not exist) fails at once; exit 4 (the log dir locked by
    another process) is retried, twice, then fails; the job's error reaches XCom. The job's
    report file of each try goes once read (from the temp dir; one in ``report_dir`` stays)."""
    _retrying(settings, tmp_path, monkeypatch)
    reports_before = _temp_reports()
    dag = _bag().dags["kafka_compaction_oneoff"]
    run = dag.test(run_conf={"log_dir": str(tmp_path / "missing"), "now_ms": str(NOW)})
    assert run.state == "failed"
    (ti,) = run.get_task_instances()
    assert (ti.state, ti.try_number) == ("failed", 1)
    (error,) = _xcom(run, "compact", "report")
    assert (error["type"], error["code"], error["exit_code"]) == ("error", "LOG_DIR_ERROR", 3)
    assert _temp_reports() <= reports_before

    _retrying(settings, tmp_path, monkeypatch, report_dir=str(tmp_path / "reports"))
    dag = _bag().dags["kafka_compaction_oneoff"]
    with lock_held_by_other_process(settings["logs"]):
        run = dag.test(run_conf={"log_dir": str(settings["logs"]), "now_ms": str(NOW)})
    assert run.state == "failed"
    (ti,) = run.get_task_instances()
    assert (ti.state, ti.try_number) == ("failed", 3)
    errors = _xcom(run, "compact", "report")
    assert errors and all(e["code"] == "LOG_DIR_LOCKED" and e["exit_code"] == 4 for e in errors)
    kept = sorted((tmp_path / "reports").glob("kafka-compactor-*.json"))
    assert [json.loads(p.read_text())["code"] for p in kept] == 3 * ["LOG_DIR_LOCKED"]


@pytest.mark.slow
def test_a_run_that_decided_nothing_fails_its_task_loudly(
        settings: dict, airflow_db: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A log dir given by a path the settings do not name brings no server.properties: every
    topic's configs are unknown, nothing is decided. Before the fix the job exited 0 and the
    task succeeded, for ever (issue 51.12); now it exits 3 (status ``unconfigured``) and fails
    at once, saying what the run needed."""
    _retrying(settings, tmp_path, monkeypatch)
    unnamed = tmp_path / "unnamed" / "logs"
    shutil.copytree(settings["logs"], unnamed)
    before = tree_digest(unnamed)
    run = _bag().dags["kafka_compaction_oneoff"].test(
        run_conf={"log_dir": str(unnamed), "now_ms": str(NOW)})
    assert run.state == "failed"
    (ti,) = run.get_task_instances()
    assert (ti.state, ti.try_number) == ("failed", 1)
    (report,) = _xcom(run, "compact", "report")
    assert report["status"] == "unconfigured" and "--server-properties" in report["unconfigured"]
    assert tree_digest(unnamed) == before


def test_retries_come_from_the_settings(settings: dict, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "retrying.yaml"
    path.write_text(yaml.safe_dump({**{k: v for k, v in settings.items()
                                       if k not in ("logs", "state", "server_properties")},
                                    "retries": 3, "retry_delay_minutes": 0.5}))
    monkeypatch.setenv("KAFKA_COMPACTOR_DAGS_CONFIG", str(path))
    bag = _bag()
    assert set(bag.dags) == DAG_IDS
    for dag in bag.dags.values():
        for task in dag.tasks:
            if dag.dag_id == "kafka_rolling_maintenance" or task.task_id in (
                    "fail_if_any_task_failed", "invalid_settings"):
                assert task.retries == 0  # a failed roll, a failed run's verdict: never
                continue
            assert task.retries == 3 and task.retry_delay.total_seconds() == 30


def test_the_one_off_dag_plans_only_when_asked(settings: dict) -> None:
    dag = _bag().dags["kafka_compaction_oneoff"]
    (task,) = dag.tasks
    job = importlib.import_module(f"jobs.{Path(task.application).stem}")
    for dry_run in (True, False):
        params = {k: v.value if hasattr(v, "value") else v for k, v in dag.params.items()}
        params.update(log_dir=str(settings["logs"]), dry_run=dry_run, now_ms=str(NOW))
        argv = task.render_template(task.application_args, {"params": params})
        assert job.build_parser().parse_args(argv).dry_run is dry_run
    # the bare flag stays a flag, before or after the log dir
    logs = str(settings["logs"])
    for argv in (["--dry-run", logs], [logs, "--dry-run"], [logs, "--dry-run=TRUE"]):
        args = job.build_parser().parse_args(argv)
        assert (args.dry_run, args.log_dir) == (True, [logs])
    with pytest.raises(SystemExit):
        job.build_parser().parse_args([logs, "--dry-run=maybe"])


def test_the_one_off_dag_takes_a_log_dir_by_name_with_its_settings(settings: dict,
                                                                   tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    """Named as in the settings, a log dir brings its configs, topic configs, metadata log dir
    and server.properties; the run's params override them."""
    topic_configs = tmp_path / "topics.yaml"
    topic_configs.write_text(yaml.safe_dump({"accounts": {"min.cleanable.dirty.ratio": 0.2}}))
    cfg = {k: v for k, v in settings.items() if k not in ("logs", "state", "server_properties")}
    cfg["maintenance"]["log_dirs"][0].update(config={"delete.retention.ms": 1000},
                                              topic_configs=str(topic_configs))
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("KAFKA_COMPACTOR_DAGS_CONFIG", str(path))
    dag = _bag().dags["kafka_compaction_oneoff"]
    (task,) = dag.tasks
    job = importlib.import_module(f"jobs.{Path(task.application).stem}")
    params = {k: v.value if hasattr(v, "value") else v for k, v in dag.params.items()}
    params.update(log_dir="b1", now_ms=str(NOW), configs={"min.compaction.lag.ms": 5})
    args = job.build_parser().parse_args(
        task.render_template(task.application_args, {"params": params}))
    opts = options_from_args(args)
    assert opts.log_dir == str(settings["logs"])
    assert opts.config_all == {"delete.retention.ms": "1000", "min.compaction.lag.ms": "5"}
    assert opts.config_topics == {"accounts": {"min.cleanable.dirty.ratio": "0.2"}}
    assert opts.metadata_log_dir == str(settings["logs"])
    assert opts.server_properties == str(settings["server_properties"])
    # a path that is not in the settings is taken as it is, with the params alone
    params.update(log_dir=str(tmp_path / "elsewhere"), configs={})
    opts = options_from_args(job.build_parser().parse_args(
        task.render_template(task.application_args, {"params": params})))
    assert (opts.log_dir, opts.config_all, opts.config_topics, opts.server_properties) == (
        str(tmp_path / "elsewhere"), {}, {}, None)


def test_wrong_settings_break_only_their_dags_and_say_why(
        settings: dict, tmp_path: Path, airflow_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28.9: a duplicate log-dir name was accepted (one dropped) and one bad field
    removed all four DAGs (an import error). Now each DAG is checked on its own: the DAGs
    the problem concerns get one failing task saying what is wrong, the others parse."""
    cfg = {k: v for k, v in settings.items() if k not in ("logs", "state", "server_properties")}
    first = cfg["maintenance"]["log_dirs"][0]
    cfg["maintenance"] = {**cfg["maintenance"], "log_dirs": [first, {**first, "path": "/x"}]}
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("KAFKA_COMPACTOR_DAGS_CONFIG", str(path))
    bag = _bag()
    assert bag.import_errors == {}
    assert set(bag.dags) == DAG_IDS
    for dag_id in ("kafka_log_maintenance", "kafka_gdpr_erasure"):
        assert set(bag.dags[dag_id].task_dict) == {"invalid_settings"}
        (message,) = bag.dags[dag_id].task_dict["invalid_settings"].op_args
        assert "'b1' is used twice" in message and str(path) in message
    assert set(bag.dags["kafka_compaction_oneoff"].task_dict) == {"compact"}
    assert set(bag.dags["kafka_gdpr_request"].task_dict) == {"erase_request"}
    run = bag.dags["kafka_log_maintenance"].test(run_conf={"now_ms": str(NOW)})
    assert run.state == "failed"
    (ti,) = run.get_task_instances()
    assert ti.state == "failed"
    # and a wrong retries value stops every DAG, each saying so
    path.write_text(yaml.safe_dump({**settings_of(cfg), "retries": "many"}))
    bag = _bag()
    assert bag.import_errors == {} and set(bag.dags) == DAG_IDS
    assert all(set(d.task_dict) == {"invalid_settings"} for d in bag.dags.values())
    # a rolling plan that cannot be read stops that DAG only
    path.write_text(yaml.safe_dump({**settings_of(cfg),
                                    "rolling": {"plan": str(tmp_path / "missing.yaml")}}))
    bag = _bag()
    assert set(bag.dags["kafka_rolling_maintenance"].task_dict) == {"invalid_settings"}
    assert set(bag.dags["kafka_log_maintenance"].task_dict) == {"recover_b1", "run_b1"}


def settings_of(cfg: dict) -> dict:
    first = cfg["maintenance"]["log_dirs"][0]
    return {**cfg, "maintenance": {**cfg["maintenance"], "log_dirs": [first]}}


@pytest.mark.slow
@pytest.mark.kafka_broker
def test_the_rolling_dag_rolls_a_real_broker(settings: dict, airflow_db: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``kafka_rolling_maintenance`` through ``dag.test()`` against a real broker: its task
    stops the broker with the plan's command, maintains it, starts it, waits until it is in
    sync; its consumers then read the compacted topic's latest value of every key."""
    import asyncio

    from tests.kafka.broker import control, running
    from tests.kafka.test_rolling import ACCOUNTS, _prepare, _read

    with running(tmp_path / "kafka") as broker:
        latest = asyncio.run(_prepare(broker.bootstrap))
        before, _ = asyncio.run(_read(broker.bootstrap, ACCOUNTS))
        plan = tmp_path / "live.yaml"
        plan.write_text(yaml.safe_dump({
            "bootstrap_servers": broker.bootstrap, "poll_s": 0.5,
            "state_dir": settings["state_dir"], "brokers": [{
                "name": "kafka-1", "node_id": 1,
                "server_properties": str(broker.properties_file),
                "stop": control("stop", broker.work_dir),
                "start": control("start", broker.work_dir)}]}))
        path = tmp_path / "live-settings.yaml"
        path.write_text(yaml.safe_dump({
            **{k: v for k, v in settings.items() if k not in ("logs", "state",
                                                              "server_properties")},
            "rolling": {"plan": str(plan)}}))
        monkeypatch.setenv("KAFKA_COMPACTOR_DAGS_CONFIG", str(path))
        run = _bag().dags["kafka_rolling_maintenance"].test(run_conf={})
        assert run.state == "success", _states(run)
        (report,) = _xcom(run, "roll_kafka-1")
        assert [(s["step"], s["status"]) for s in report["brokers"][0]["steps"]] == [
            ("check", "ok"), ("stop", "ok"), ("recover", "ok"), ("run", "ok"),
            ("start", "ok"), ("in_sync", "ok")]
        after, _ = asyncio.run(_read(broker.bootstrap, ACCOUNTS))
        assert len(after) < len(before) and dict(after) == latest


def test_a_spark_task_starts_its_job_as_the_command_line_does(
        settings: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53.7: a spark-submit task asks the settings' installation for its start-up
    arguments (``compactor.tools.ops.submit_args``, for the connection's master): the command
    line's classpath and class-data archive, the package's worker daemon; the settings'
    ``spark_conf`` goes over them, and an installation without its jars fails the task at once,
    saying how to fetch them."""
    from airflow.sdk.exceptions import AirflowFailException

    from compactor.spark import session

    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump({
        **{k: v for k, v in settings.items() if k not in ("logs", "state", "server_properties")},
        "spark_conf": {"spark.driver.memory": "3g", "spark.python.daemon.module": "mine"}}))
    monkeypatch.setenv("KAFKA_COMPACTOR_DAGS_CONFIG", str(path))
    (task,) = _bag().dags["kafka_compaction_oneoff"].tasks
    task._start_as_the_command_line()
    command = task._hook._build_spark_submit_command(task.application)
    assert command[command.index("--master") + 1] == "local[2]"
    confs = dict(command[i + 1].split("=", 1) for i, a in enumerate(command) if a == "--conf")
    java_options = confs["spark.driver.extraJavaOptions"].split()
    assert f"-XX:SharedArchiveFile={session.class_archive()}" in java_options
    quiet = REPO / "compactor" / "spark" / "log4j2-quiet.properties"
    assert f"-Dlog4j2.configurationFile=file:{quiet}" in java_options  # errors only
    assert confs["spark.ui.showConsoleProgress"] == "false"
    assert confs["spark.driver.extraClassPath"].endswith(".jar")
    assert confs["spark.driver.memory"] == "3g" and confs["spark.python.daemon.module"] == "mine"
    assert "--jars" not in command  # local mode: the jars are on the driver's classpath
    assert "-XX:TieredStopAtLevel=1" not in java_options  # the log dir's size is unknown
    task.log_dir = str(settings["logs"])  # rendered: a small log dir, C1 only as the command's
    task._start_as_the_command_line()
    command = task._hook._build_spark_submit_command(task.application)
    confs = dict(command[i + 1].split("=", 1) for i, a in enumerate(command) if a == "--conf")
    assert "-XX:TieredStopAtLevel=1" in confs["spark.driver.extraJavaOptions"].split()

    (task,) = _bag().dags["kafka_compaction_oneoff"].tasks
    monkeypatch.setenv("COMPACTOR_JARS_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(AirflowFailException, match="compactor.tools.build.jars"):
        task._start_as_the_command_line()
