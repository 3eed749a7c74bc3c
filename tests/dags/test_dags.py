"""The Airflow DAGs: they parse through a DagBag with no import error and no connection or
Variable access; every task's rendered spark-submit arguments are accepted by the job's own
parser (the DAG and the job cannot drift); and real ``dag.test()`` runs (sqlite metadata DB,
local Spark through the venv's spark-submit) do what the commands do."""

from __future__ import annotations

import importlib
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag
from deltalake import DeltaTable

from compactor.cli import main as cli_main
from compactor.errors import EXIT_OK
from compactor.tools.generator import DEFAULT_START_MS, GeneratorConfig, generate
from compactor.cli.args import options_from_args
from tests.helpers import lock_held_by_other_process, records_of, segment_bytes, tree_digest

REPO = Path(__file__).resolve().parents[2]
DAG_IDS = {"kafka_log_maintenance", "kafka_gdpr_erasure", "kafka_compaction_oneoff",
           "kafka_gdpr_request"}
NOW = DEFAULT_START_MS + 2 * 3_600_000  # two hours after the first record
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
    cfg = {
        "spark_conn_id": "spark_default", "jobs_dir": str(REPO / "jobs"),
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
        "erase_apply_b1", "erase_verify_b1", "erase_status"}
    assert bag.dags["kafka_compaction_oneoff"].schedule is None


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
            params.update(topic="accounts", key="key-00000005", reason="ticket 7")
        for task in dag.tasks:
            argv = task.render_template(task.application_args, {"params": params})
            job = importlib.import_module(f"jobs.{Path(task.application).stem}")
            assert Path(task.application).parent == REPO / "jobs"
            args = job.build_parser().parse_args(argv)
            if isinstance(getattr(args, "log_dir", None), list):  # the broker's log dirs
                (args.log_dir,) = args.log_dir  # one per task here
            if hasattr(args, "config"):  # maintenance and compaction: validate the configs too
                opts = options_from_args(args)
                if dag.dag_id == "kafka_compaction_oneoff":
                    assert opts.topics == {"accounts"} and opts.now_ms == NOW
                    assert opts.config_all == {"cleanup.policy": "compact,delete",
                                               "retention.ms": "86400000"}
            if dag.dag_id == "kafka_gdpr_request":
                assert (args.action, args.topic, args.key, args.keys_file, args.reason,
                        args.deadline_days, args.request_id, args.now_ms) == (
                    "request", "accounts", "key-00000005", None, "ticket 7", 30, "", None)
            if getattr(args, "log_dir", None) and dag.dag_id != "kafka_compaction_oneoff":
                assert args.log_dir == str(settings["logs"])
                if hasattr(args, "metadata_log_dir"):  # the commands that read configs
                    assert args.metadata_log_dir == str(settings["logs"])
            if getattr(args, "server_properties", None) and dag.dag_id == "kafka_log_maintenance":
                assert args.server_properties == str(settings["server_properties"])
            if hasattr(args, "state_dir"):
                assert args.state_dir == settings["state_dir"]
            checked += 1
    assert checked == 7


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
    history = DeltaTable(str(settings["state"] / "runs")).to_pyarrow_table().to_pylist()
    assert {(r["command"], r["topic"]) for r in history} == {
        (command, topic) for command in ("compact", "retain")
        for topic in ("__cluster_metadata", "accounts", "events")}


@pytest.mark.slow
def test_gdpr_erasure_dag_erases_and_verifies_a_request(
        settings: dict, airflow_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    logs, state = settings["logs"], settings["state"]
    subject = b"key-00000005"
    assert any(r.key == subject for r in records_of(segment_bytes(logs / "accounts-0")).values())
    # filed through the request DAG, as an operator would from Airflow's UI
    filed = _bag().dags["kafka_gdpr_request"].test(run_conf={
        "topic": "*", "key": subject.decode(), "request_id": "ticket-1", "reason": "art. 17",
        "now_ms": str(NOW)})
    assert filed.state == "success"
    assert _xcom(filed, "erase_request") == [{"type": "requests", "added": ["ticket-1"],
                                              "existing": []}]
    run = _bag().dags["kafka_gdpr_erasure"].test(run_conf={"now_ms": str(NOW)})
    assert run.state == "success"
    for pdir in logs.glob("*-0"):
        assert not any(r.key == subject for r in records_of(segment_bytes(pdir)).values())
    (row,) = DeltaTable(str(state / "erasure_requests")).to_pyarrow_table().to_pylist()
    assert row["status"] == "verified" and row["records_erased"] > 0
    assert row["reason"] == "art. 17"
    # a corrupt segment blocks a new request (apply fails, the request stays pending); once
    # it is past its deadline the status task fails too, and so does the run
    segment = sorted((logs / "accounts-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[200] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", "accounts",
                     "--key", "key-00000006", "--request-id", "late", "--deadline-days", "0",
                     "--now-ms", str(NOW)]) == EXIT_OK
    run = _bag().dags["kafka_gdpr_erasure"].test(run_conf={"now_ms": str(NOW + 86_400_000)})
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"erase_apply_b1": "failed", "erase_verify_b1": "upstream_failed",
                      "erase_status": "failed"}


def _retrying(settings: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings with two retries, at once."""
    path = tmp_path / "retrying.yaml"
    path.write_text(yaml.safe_dump({**{k: v for k, v in settings.items()
                                       if k not in ("logs", "state", "server_properties")},
                                    "retries": 2, "retry_delay_minutes": 0}))
    monkeypatch.setenv("KAFKA_COMPACTOR_DAGS_CONFIG", str(path))


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
    another process) is retried, twice, then fails; the job's error reaches XCom."""
    _retrying(settings, tmp_path, monkeypatch)
    dag = _bag().dags["kafka_compaction_oneoff"]
    run = dag.test(run_conf={"log_dir": str(tmp_path / "missing"), "now_ms": str(NOW)})
    assert run.state == "failed"
    (ti,) = run.get_task_instances()
    assert (ti.state, ti.try_number) == ("failed", 1)
    (error,) = _xcom(run, "compact", "report")
    assert (error["type"], error["code"], error["exit_code"]) == ("error", "LOG_DIR_ERROR", 3)

    with lock_held_by_other_process(settings["logs"]):
        run = dag.test(run_conf={"log_dir": str(settings["logs"]), "now_ms": str(NOW)})
    assert run.state == "failed"
    (ti,) = run.get_task_instances()
    assert (ti.state, ti.try_number) == ("failed", 3)
    errors = _xcom(run, "compact", "report")
    assert errors and all(e["code"] == "LOG_DIR_LOCKED" and e["exit_code"] == 4 for e in errors)


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


def settings_of(cfg: dict) -> dict:
    first = cfg["maintenance"]["log_dirs"][0]
    return {**cfg, "maintenance": {**cfg["maintenance"], "log_dirs": [first]}}
