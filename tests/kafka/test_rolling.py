"""Rolling maintenance against a real broker: ``compactor rolling`` stops it with the plan's
command, maintains its log dir offline, starts it and waits until it is back in sync; the
broker and its clients judge the result. A failure in the middle starts the broker again and
touches no further broker; a cluster that is not fully in sync is never stopped."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from compactor.cli import main as cli_main
from compactor.cluster import admin
from compactor.errors import EXIT_FAILURE, EXIT_OK
from tests.kafka.broker import KafkaBroker, control, running, running_cluster
from tests.kafka.test_broker_judged import SUSPICIOUS

pytestmark = [pytest.mark.kafka_broker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DAY = 86_400_000
ACCOUNTS, EVENTS = "accounts", "events"
KEYS = [f"account-{i}".encode() for i in range(20)]


async def _prepare(bootstrap: str, replicas: int = 1) -> dict[bytes, bytes]:
    """A compacted topic with many updates per key over several segments, and a delete
    topic whose first segments are older than the broker's 720 h retention."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([
            NewTopic(ACCOUNTS, 1, replicas, topic_configs={"cleanup.policy": "compact",
                                                           "segment.ms": "300"}),
            NewTopic(EVENTS, 1, replicas, topic_configs={"segment.ms": "300"})])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                acks="all")
    await producer.start()
    latest = {}
    try:
        now = int(time.time() * 1000)
        for burst, age in enumerate((45 * DAY, 40 * DAY, 0, 0, 0)):
            for key in KEYS:
                latest[key] = f"{key.decode()}@{burst}".encode()
                await producer.send(ACCOUNTS, latest[key], key=key)
                await producer.send(EVENTS, b"event", timestamp_ms=now - age)
            await producer.flush()
            await asyncio.sleep(0.35)  # the next burst rolls a new segment
    finally:
        await producer.stop()
    return latest


async def _read(bootstrap: str, topic: str) -> tuple[list[tuple[bytes, bytes]], int]:
    """Every record of ``topic`` from the start (read_committed), and its earliest offset."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        earliest = (await consumer.beginning_offsets([tp]))[tp]
        out = []
        while await consumer.position(tp) < end:
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                out += [(r.key, r.value) for r in records]
        return out, earliest
    finally:
        await consumer.stop()


def _plan(tmp_path: Path, broker: KafkaBroker, **extra: object) -> Path:
    plan = {"bootstrap_servers": broker.bootstrap, "poll_s": 0.5, "in_sync_timeout_s": 120,
            "stop_timeout_s": 120, "brokers": [
                {"name": "b1", "node_id": 1, "server_properties": str(broker.properties_file),
                 "stop": control("stop", broker.work_dir),
                 "start": control("start", broker.work_dir)}], **extra}
    path = tmp_path / "rolling.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def _readme_plan(broker: KafkaBroker, state_dir: Path) -> tuple[dict, list[list[str]]]:
    """The plan and the commands of "Running it on your cluster" (docs/operations.md), with this
    broker's address, node, files and control commands put in for the example's."""
    readme = (REPO / "docs" / "operations.md").read_text()
    section = readme[readme.index("## Running it on your cluster"):
                     readme.index("## Running on Spark clusters")]
    plan = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    commands = [line.split("#", 1)[0].split() for line in
                section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()]
    (example,) = plan["brokers"]
    assert set(example) == {"name", "node_id", "server_properties", "stop", "start"}
    # started as operators often do, `... && (helper &)`: a child that outlives the command
    # holds its output open for ten minutes, as `nohup kafka-server-start.sh ... &` does;
    # the start step must end when the command does (issue 53.1)
    example.update(node_id=1, server_properties=str(broker.properties_file),
                   stop=control("stop", broker.work_dir),
                   start=f"{shlex.join(control('start', broker.work_dir))} && "
                         f"({shlex.join(HOLDER)} &)")
    plan.update(bootstrap_servers=broker.bootstrap, state_dir=str(state_dir), poll_s=0.5,
                start_timeout_s=60)
    return plan, [c for c in commands if c]


# a process that keeps the output of the command that started it open for ten minutes; found
# again by its marker argument and stopped by the test
HOLDER_MARK = "kafka-compactor-rolling-test-holder"
HOLDER = [sys.executable, "-c", "import time; time.sleep(600)", HOLDER_MARK]


def _stop_holders() -> int:
    """Kill every :data:`HOLDER` still running; how many there were."""
    found = 0
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if proc.name.isdigit() and HOLDER_MARK.encode() in argv:
            os.kill(int(proc.name), signal.SIGKILL)
            found += 1
    return found


def _report(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_rolling_maintenance_of_a_live_broker_as_the_readme_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with running(tmp_path / "b1") as broker:
        run = asyncio.run
        latest = run(_prepare(broker.bootstrap))
        before, _ = run(_read(broker.bootstrap, ACCOUNTS))
        events_before, events_start = run(_read(broker.bootstrap, EVENTS))
        pid = broker.running_pid()
        plan, commands = _readme_plan(broker, tmp_path / "state")
        (tmp_path / "rolling.yaml").write_text(yaml.safe_dump(plan))
        monkeypatch.chdir(tmp_path)

        # what the README's first paragraph says: a running broker holds its log dir
        assert cli_main(["run", "--server-properties", str(broker.properties_file),
                         "--json"]) == 4
        assert f"locked by a running Kafka broker (pid {pid})" in _report(capsys)["message"]

        dry, real = commands  # as the README writes them
        assert dry[:1] == real[:1] == ["compactor"] and "--dry-run" in dry
        assert cli_main([*dry[1:], "--json"]) == EXIT_OK
        report = _report(capsys)
        assert [(s["step"], s["status"]) for s in report["brokers"][0]["steps"]] == [
            ("check", "ok"), ("stop", "would_run"), ("recover", "would_run"),
            ("run", "would_run"), ("start", "would_run")]
        assert report["brokers"][0]["steps"][3]["command"].startswith(
            f"compactor run {broker.log_dir} --server-properties {broker.properties_file}")
        assert broker.running_pid() == pid
        try:
            assert cli_main([*real[1:], "--json"]) == EXIT_OK
        finally:
            held = _stop_holders()
        report = _report(capsys)
        (line,) = report["brokers"]
        assert [(s["step"], s["status"]) for s in line["steps"]] == [
            ("check", "ok"), ("stop", "ok"), ("recover", "ok"), ("run", "ok"),
            ("start", "ok"), ("in_sync", "ok")], line["steps"]
        assert report["status"] == "ok" and report["exit_code"] == 0
        assert held == 1  # the start command's child was still holding its output

        # the broker judges: a new process, serving, with no recovery or corruption line
        assert broker.running_pid() not in (None, pid)
        suspicious = [entry for entry in broker.log_lines()
                      if any(s in entry for s in SUSPICIOUS)
                      and any(t in entry for t in (ACCOUNTS, EVENTS))]
        assert suspicious == [], suspicious
        after, _ = run(_read(broker.bootstrap, ACCOUNTS))
        assert len(after) < len(before)  # compacted
        assert {k: v for k, v in after} == latest  # the latest value of every key stays
        events_after, events_start_after = run(_read(broker.bootstrap, EVENTS))
        assert events_start_after > events_start  # the 40- and 45-day-old segments went
        assert events_after == events_before[events_start_after - events_start:]

        # the maintenance ran with the broker's own configs, and its history was recorded
        from deltalake import DeltaTable

        history = DeltaTable(str(tmp_path / "state" / "runs")).to_pyarrow_table().to_pylist()
        assert {(r["command"], r["topic"]) for r in history} >= {
            ("compact", ACCOUNTS), ("retain", EVENTS)}


def test_a_failure_in_the_middle_starts_the_broker_again_and_stops_the_roll(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plan whose second broker is not registered stops nothing at all (its stop command
    would leave a mark). Then the maintenance of the broker fails (here: a state dir inside
    its log dir, which the run refuses): the broker is started again and back in sync, and the
    roll exits 1. (The three-broker test shows the roll stopping before the next broker.)"""
    with running(tmp_path / "b1") as broker:
        asyncio.run(_prepare(broker.bootstrap))
        mark = tmp_path / "b2-stopped"
        second = {"name": "b2", "node_id": 2, "server_properties": str(broker.properties_file),
                  "stop": f"touch {mark}", "start": "true"}
        plan = yaml.safe_load(_plan(tmp_path, broker).read_text())
        plan["brokers"].append(second)
        (tmp_path / "rolling.yaml").write_text(yaml.safe_dump(plan))
        pid = broker.running_pid()

        # node 2 is not registered: stopping node 1 could take the only copy of something
        assert cli_main(["rolling", "--config", str(tmp_path / "rolling.yaml"),
                         "--json"]) == EXIT_FAILURE
        report = _report(capsys)
        (check,) = report["brokers"][0]["steps"]
        assert check["step"] == "check" and check["status"] == "failed"
        assert "broker 2 of the plan is not registered" in check["problems"]
        assert report["not_started"] == ["b2"]
        assert broker.running_pid() == pid and not mark.exists()

        # the run refuses the state dir: the broker it stopped is started and caught up
        plan["brokers"] = plan["brokers"][:1]
        plan["state_dir"] = str(broker.log_dir / "state")
        (tmp_path / "rolling.yaml").write_text(yaml.safe_dump(plan))
        assert cli_main(["rolling", "--config", str(tmp_path / "rolling.yaml"),
                         "--json"]) == EXIT_FAILURE
        report = _report(capsys)
        first = report["brokers"][0]
        assert [(s["step"], s["status"]) for s in first["steps"]] == [
            ("check", "ok"), ("stop", "ok"), ("recover", "ok"), ("run", "failed"),
            ("start", "ok"), ("in_sync", "ok")]
        failed = first["steps"][3]
        assert failed["exit_code"] == 3 and failed["reports"][0]["code"] == "CONFIG_ERROR"
        assert not mark.exists()
        assert broker.running_pid() not in (None, pid)
        records, _ = asyncio.run(_read(broker.bootstrap, ACCOUNTS))
        assert len(records) == 5 * len(KEYS)  # nothing was changed


def test_a_three_broker_cluster_rolls_one_broker_at_a_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three brokers, every partition on all three: the roll takes them in turn, and a
    watcher sampling the cluster all along never sees two of them missing. Then a roll whose
    maintenance fails on the second broker (a corrupt segment there: the run exits 6) starts
    it again and never touches the third."""
    with running_cluster(tmp_path) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        latest = asyncio.run(_prepare(bootstrap, replicas=3))
        plan = {"bootstrap_servers": bootstrap, "poll_s": 0.5, "in_sync_timeout_s": 120,
                "stop_timeout_s": 120, "brokers": [
                    {"name": f"b{b.node_id}", "node_id": b.node_id,
                     "server_properties": str(b.properties_file),
                     "stop": control("stop", b.work_dir),
                     "start": control("start", b.work_dir)} for b in brokers]}
        (tmp_path / "rolling.yaml").write_text(yaml.safe_dump(plan))
        pids = [b.running_pid() for b in brokers]

        missing: list[int] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                try:
                    state = admin.describe(bootstrap, timeout_s=5)
                    missing.append(len({1, 2, 3} - state.brokers))
                except Exception:  # noqa: BLE001 - a sample the cluster did not answer
                    pass
                time.sleep(0.3)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            code = cli_main(["rolling", "--config", str(tmp_path / "rolling.yaml"), "--json"])
        finally:
            done.set()
            watcher.join()
        report = _report(capsys)
        assert code == EXIT_OK, report
        assert [b["status"] for b in report["brokers"]] == ["ok"] * 3
        assert all(b.running_pid() not in (None, p) for b, p in zip(brokers, pids))
        assert max(missing) == 1 and len(missing) > 10  # each one down in turn, never two
        after, _ = asyncio.run(_read(bootstrap, ACCOUNTS))
        assert {k: v for k, v in after} == latest

        # the second broker's copy of accounts-0 gets a corrupt segment
        second = brokers[1]
        segment = sorted((second.log_dir / f"{ACCOUNTS}-0").glob("*.log"))[0]
        data = bytearray(segment.read_bytes())
        data[len(data) // 2] ^= 0xFF
        segment.write_bytes(bytes(data))
        pids = [b.running_pid() for b in brokers]
        assert cli_main(["rolling", "--config", str(tmp_path / "rolling.yaml"), "--json",
                         "--broker", "b2", "--broker", "b3"]) == EXIT_FAILURE
        report = _report(capsys)
        assert [b["status"] for b in report["brokers"]] == ["failed"]
        assert [(s["step"], s["status"]) for s in report["brokers"][0]["steps"]] == [
            ("check", "ok"), ("stop", "ok"), ("recover", "ok"), ("run", "failed"),
            ("start", "ok"), ("in_sync", "ok")]
        assert report["brokers"][0]["steps"][3]["exit_code"] == 6
        assert report["not_started"] == ["b3"]
        assert brokers[2].running_pid() == pids[2]  # never touched
        assert brokers[1].running_pid() not in (None, pids[1])
