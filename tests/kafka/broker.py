"""A real Apache Kafka broker for the tests: one combined broker and controller in KRaft mode on
127.0.0.1, run from Kafka's own jars (``tests/kafka/pom.xml``, fetched by ``make kafka``).

``KafkaBroker.start`` formats the log dir once (``kafka.tools.StorageTool format``) and starts
``kafka.Kafka``; ``stop`` shuts it down cleanly (SIGTERM: a clean shutdown marker, no log
recovery on the next start), ``kill`` with SIGKILL. The broker logs to ``server.log`` in its
work dir, which :meth:`KafkaBroker.log_lines` reads. Every broker a test starts is stopped by
that test (the context manager stops it whatever happens)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KAFKA_VERSION = os.environ.get("KAFKA_VERSION", "4.1.2")
#: the newer releases the broker-judged scenario also runs against (``make kafka`` fetches
#: them; the Makefile's KAFKA_NEWER says the same)
KAFKA_NEWER = tuple(os.environ.get("KAFKA_NEWER", "4.2.2 4.3.1 4.4.0").split())


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The folder of Kafka's jars that ``make kafka`` fills (``$KAFKA_LIBS`` overrides)."""
    if os.environ.get("KAFKA_LIBS"):
        return Path(os.environ["KAFKA_LIBS"])
    return REPO / ".venv" / "share" / "kafka-compactor" / f"kafka-{version}" / "libs"


def classpath(version: str = KAFKA_VERSION) -> str:
    libs = kafka_libs(version)
    if not (libs / f"kafka_2.13-{version}.jar").exists():
        raise FileNotFoundError(f"Kafka {version}'s jars are not in {libs}: run `make kafka`")
    return str(libs / "*")


def java(*args: str, version: str = KAFKA_VERSION, log_config: Path | None = None,
         timeout: float | None = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Run a Kafka main class (``args[0]``) to completion on Kafka's classpath."""
    cmd = ["java", "-Xmx512m", "-cp", classpath(version)]
    if log_config is not None:
        cmd.append(f"-Dlog4j2.configurationFile={log_config}")
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {proc.stderr[-3000:]}"
                           f"{proc.stdout[-2000:]}")
    return proc


def tiered_properties(remote: Path) -> dict[str, str]:
    """A broker's remote tier (KIP-405): Kafka's own ``LocalTieredStorage`` RSM (the
    kafka-storage test jar ``make kafka`` fetches beside the broker's libs) over ``remote``,
    the default topic-based RLMM with one metadata partition, tasks every half second."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name":
            "org.apache.kafka.server.log.remote.storage.LocalTieredStorage",
        "remote.log.storage.manager.class.path": f"{kafka_libs().parent / 'rsm'}/*",
        "rsm.config.dir": str(remote),
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The broker's static configs: non-default log.* values, so that the tool is judged on a
#: broker configured the way real ones are (the tool must read them from server.properties).
BROKER_LOG_CONFIGS = {
    "log.retention.hours": "720",
    "log.cleaner.delete.retention.ms": "7200000",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.segment.bytes": str(1 << 20),
    "log.cleaner.enable": "false",  # the broker must not clean: our tool does, offline
}

LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{path}" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.controller" level="WARN"/>
  </Loggers>
</Configuration>
"""


@dataclass
class KafkaBroker:
    """One KRaft broker+controller; ``log_dir`` holds its data (and the metadata log)."""

    work_dir: Path
    version: str = KAFKA_VERSION
    extra: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=_free_port)
    controller_port: int = field(default_factory=_free_port)
    cluster_id: str = ""
    node_id: int = 1
    voters: str = ""  # controller.quorum.voters of a cluster; empty: this node alone
    process: subprocess.Popen | None = None

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "logs"

    @property
    def properties_file(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller", "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters
            or f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir), "num.partitions": "1",
            "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "transaction.state.log.num.partitions": "2",
            "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false",
            **BROKER_LOG_CONFIGS, **self.extra,
        }

    def _write_config(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(
            "".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.work_dir / "log4j2.xml").write_text(LOG4J2.format(path=self.log_file))

    def format(self) -> None:
        """``kafka-storage format`` (once per log dir)."""
        self._write_config()
        self.cluster_id = self.cluster_id or _kafka_uuid()
        java("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c",
             str(self.properties_file), version=self.version,
             log_config=self.work_dir / "log4j2.xml")

    def start(self, timeout_s: float = 120) -> None:
        self.launch()
        self.wait_started(timeout_s)

    def launch(self) -> None:
        """Start the process (formatting the log dir first, once); :meth:`wait_started` waits
        until it serves (a cluster's nodes are all launched first: none serves before the
        controller quorum forms)."""
        if not (self.log_dir / "meta.properties").exists():
            self.format()
        else:
            self._write_config()
        self.log_mark = self.log_file.stat().st_size if self.log_file.exists() else 0
        self._save()
        self.process = subprocess.Popen(
            ["java", "-Xmx768m", "-XX:+UseSerialGC",
             f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.xml'}",
             "-cp", classpath(self.version), "kafka.Kafka", str(self.properties_file)],
            stdout=subprocess.DEVNULL, stderr=open(self.work_dir / "stderr.log", "ab"),
            start_new_session=True)
        self.pid_file.write_text(str(self.process.pid))

    def wait_started(self, timeout_s: float = 120) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the broker exited ({self.process.returncode}): "
                                   + "\n".join(self.log_lines()[-30:]))
            if any("Kafka Server started" in line for line in self.log_lines()):
                return
            time.sleep(0.2)
        self.kill()
        raise TimeoutError("the broker did not start: " + "\n".join(self.log_lines()[-30:]))

    def log_lines(self, *, since_start: bool = True) -> list[str]:
        """The broker's log lines (of its last start only, unless told otherwise)."""
        if not self.log_file.exists():
            return []
        with open(self.log_file, "rb") as handle:
            if since_start:
                handle.seek(getattr(self, "log_mark", 0))
            return handle.read().decode("utf-8", "replace").splitlines()

    @property
    def pid_file(self) -> Path:
        return self.work_dir / "broker.pid"

    def _save(self) -> None:
        """What ``python -m tests.kafka.broker start|stop WORK_DIR`` needs to control this
        broker from a shell command (the stop and start commands of a rolling plan)."""
        (self.work_dir / "broker.json").write_text(json.dumps({
            "work_dir": str(self.work_dir), "version": self.version, "extra": dict(self.extra),
            "port": self.port, "controller_port": self.controller_port,
            "cluster_id": self.cluster_id, "node_id": self.node_id, "voters": self.voters}))

    @classmethod
    def load(cls, work_dir: Path) -> KafkaBroker:
        data = json.loads((work_dir / "broker.json").read_text())
        return cls(**{**data, "work_dir": Path(data["work_dir"])})

    def running_pid(self) -> int | None:
        """The pid of this broker's process when one runs (started here or by a command)."""
        if self.process is not None and self.process.poll() is None:
            return self.process.pid
        try:
            pid = int(self.pid_file.read_text())
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            return None
        # the pid file's process, not another that took its pid since
        ours = b"kafka.Kafka" in command and str(self.properties_file).encode() in command
        return pid if ours and state != "Z" else None

    def stop(self, timeout_s: float = 60) -> None:
        """A clean shutdown (SIGTERM), then SIGKILL if it does not end in time: of the process
        this object started, and of one a command started on this work dir since (a rolling
        plan's start command)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self.kill()
            self.process = None
        pid = self.running_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while self.running_pid() is not None and time.monotonic() < deadline:
                time.sleep(0.2)
            if self.running_pid() is not None:
                os.killpg(pid, signal.SIGKILL)

    def kill(self) -> None:
        pid = self.running_pid()
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait()
            else:
                while self.running_pid() is not None:
                    time.sleep(0.05)
        self.process = None


def _kafka_uuid() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Uuid.toString),
    never starting with "-" (Uuid.randomUuid redraws those: a command line would take one
    for an option)."""
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@contextmanager
def running(work_dir: Path, **kwargs: object) -> Iterator[KafkaBroker]:
    """A started broker for the block, stopped at its end whatever happens."""
    broker = KafkaBroker(work_dir, **kwargs)  # type: ignore[arg-type]
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@contextmanager
def running_cluster(work_dir: Path, nodes: int = 3,
                    version: str = KAFKA_VERSION) -> Iterator[list[KafkaBroker]]:
    """A KRaft cluster of ``nodes`` combined broker+controller nodes (node ids 1..n, every one
    a voter) with replication factor ``nodes`` and ``min.insync.replicas`` 2, for the block;
    every node stopped at its end whatever happens."""
    ports = [(_free_port(), _free_port()) for _ in range(nodes)]
    voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports, start=1))
    replication = {"offsets.topic.replication.factor": str(nodes),
                   "transaction.state.log.replication.factor": str(nodes),
                   "transaction.state.log.min.isr": "2", "min.insync.replicas": "2",
                   "default.replication.factor": str(nodes)}
    cluster_id = _kafka_uuid()
    brokers = [KafkaBroker(work_dir / f"b{i}", version=version, extra=replication, port=p,
                           controller_port=c, cluster_id=cluster_id, node_id=i, voters=voters)
               for i, (p, c) in enumerate(ports, start=1)]
    try:
        for b in brokers:
            b.launch()
        for b in brokers:
            b.wait_started()
        yield brokers
    finally:
        for b in brokers:
            b.stop()


def dump_log_segments(files: list[Path], *args: str,
                      version: str = KAFKA_VERSION) -> list[str]:
    """Kafka's ``DumpLogSegments`` over ``files`` with ``args`` (``--deep-iteration``,
    ``--index-sanity-check``, ``--verify-index-only``); the problems it reports: what it
    prints on stderr (mismatches, non-consecutive offsets, a failed sanity check, the message
    of any exception while reading a file) and "invalid bytes" at a segment's end.

    Two of its reports describe what Kafka's own cleaner writes, and are not problems: the
    gaps of a compacted log ("Non-consecutive offsets"), and a time index entry at an emptied
    batch (:func:`_kafka_empty_batch_entry`)."""
    if not files:
        return []
    # kafka.tools.DumpLogSegments (Scala, core) until 4.2; org.apache.kafka.tools since 4.3
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    main_class = ("kafka.tools.DumpLogSegments" if major_minor < (4, 3)
                  else "org.apache.kafka.tools.DumpLogSegments")
    proc = java(main_class, "--files", ",".join(str(f) for f in files),
                *args, version=version, check=False)
    problems = []
    lines = proc.stderr.splitlines()
    skip = False  # the continuation lines of a report that is not a problem
    for i, line in enumerate(lines):
        if line.startswith("Non-consecutive offsets in "):
            skip = True
            continue
        if line.startswith("Found timestamp mismatch in :") and i + 1 < len(lines) \
                and _kafka_empty_batch_entry(Path(line.partition(":")[2]), lines[i + 1]):
            skip = True
            continue
        if skip and line.startswith("  "):
            continue
        skip = False
        if line.strip() and not line.startswith(("SLF4J", "WARNING")):
            problems.append(line)
    problems += [line for line in proc.stdout.splitlines() if "invalid bytes" in line]
    if proc.returncode != 0:
        problems.append(f"DumpLogSegments exited {proc.returncode}")
    return problems


_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # DefaultRecordBatch's v2 header, 61 bytes


def _kafka_empty_batch_entry(time_index: Path, detail: str) -> bool:
    """Whether a "timestamp mismatch" of ``--verify-index-only`` (``detail``: "Index
    timestamp: T, log timestamp: -1") is an entry at a batch the cleaner emptied.

    Kafka's cleaner keeps a producer's last batch as a header without records
    (``MemoryRecords.filterTo``, ``BatchRetention.RETAIN_EMPTY``) with its max timestamp, and
    indexes it by that timestamp when it is the segment's largest
    (``FilterResult.updateRetainedBatchMetadata``). DumpLogSegments takes a batch's timestamp
    from its records only, finds none and reports -1. Read here from the bytes by the v2
    header's layout (not by the tool's codec): the entry's offset must be the last offset of
    a record-less v2 batch whose header carries exactly that max timestamp."""
    prefix, _, logged = detail.strip().partition(", log timestamp: ")
    if logged != "-1" or not prefix.startswith("Index timestamp: "):
        return False
    timestamp = int(prefix.removeprefix("Index timestamp: "))
    base = int(time_index.name.split(".")[0])
    index = time_index.read_bytes()
    offsets = [base + struct.unpack_from(">qi", index, at)[1]
               for at in range(0, len(index) - 11, 12)
               if struct.unpack_from(">qi", index, at)[0] == timestamp]
    data = time_index.with_suffix(".log").read_bytes()
    at = 0
    while at + _BATCH_HEADER.size <= len(data):
        (base_offset, length, _epoch, magic, _crc, _attributes, last_delta, _first_ts, max_ts,
         _pid, _producer_epoch, _sequence, count) = _BATCH_HEADER.unpack_from(data, at)
        if magic == 2 and base_offset + last_delta in offsets:
            return count == 0 and max_ts == timestamp
        at += 12 + length
    return False


def control(action: str, work_dir: Path) -> list[str]:
    """The command line that stops or starts (``action``) the broker of ``work_dir`` from
    anywhere (a rolling plan's stop and start): this file run as a script, which needs
    nothing on the path."""
    import sys

    return [sys.executable, str(Path(__file__).resolve()), action, str(work_dir)]


def _control(argv: list[str]) -> int:
    """``python tests/kafka/broker.py start|stop WORK_DIR`` (:func:`control`): a rolling
    plan's stop and start commands for a broker of these tests (started detached; stop waits
    until it is gone)."""
    action, work_dir = argv
    broker = KafkaBroker.load(Path(work_dir))
    if action == "stop":
        broker.stop()
        return 0
    broker.start()
    broker.process = None  # detached: it outlives this command
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_control(sys.argv[1:]))
