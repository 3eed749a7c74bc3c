"""A report's figures in Prometheus' text format, for node_exporter's textfile collector
(``--metrics-file FILE``; the CLI replaces the file atomically, as that collector requires).

Series are per command and topic (never per partition: a log dir can hold thousands), with
the run's outcome, its stages and its partitions by status. Metric names follow Prometheus'
conventions (``_bytes``, ``_seconds``, ``_total`` for counts of this run).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest

PREFIX = "kafka_compactor"


def _reports(report: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The report and, for ``run``, its compaction and retention parts."""
    parts = [report.get(k) for k in ("compaction", "retention")]
    if any(isinstance(p, Mapping) for p in parts):
        yield from (p for p in parts if isinstance(p, Mapping))
    else:
        yield report


def registry_of(report: Mapping[str, Any], *, finished_at_s: float) -> CollectorRegistry:
    """The metrics of one JSON report (``compact``, ``plan``, ``retain``, ``run``, ``erase``)."""
    registry = CollectorRegistry()

    def gauge(name: str, doc: str, labels: tuple[str, ...]) -> Gauge:
        return Gauge(f"{PREFIX}_{name}", doc, labels, registry=registry)

    # every series carries the log dir: one broker's several dirs (and several brokers'
    # textfiles on one host) are told apart
    last_run = gauge("last_run_timestamp_seconds", "when the run ended (epoch seconds)",
                     ("log_dir", "command"))
    ok = gauge("last_run_ok", "1 when every partition was done, 0 when some were not",
               ("log_dir", "command"))
    partitions = gauge("partitions", "partitions by status", ("log_dir", "command", "status"))
    stage = gauge("stage_seconds", "time spent per stage of the run",
                  ("log_dir", "command", "stage"))
    flows = {key: gauge(f"{key}", doc, ("log_dir", "command", "topic")) for key, doc in (
        ("bytes_in", "bytes read from the segments the run processed"),
        ("bytes_out", "bytes of the segments the run wrote or kept"),
        ("records_in", "records read"),
        ("records_out", "records kept"),
        ("segments_deleted", "segments deleted by retention"),
        ("records_erased", "records erased"))}
    dropped = gauge("records_dropped", "records dropped by compaction, by reason",
                    ("log_dir", "command", "topic", "reason"))
    log_dir = str(report.get("log_dir", ""))
    for part in _reports(report):
        command = str(part.get("command", report.get("command", "")))
        last_run.labels(log_dir, command).set(finished_at_s)
        ok.labels(log_dir, command).set(1 if part.get("status") == "ok" else 0)
        for name, seconds in (part.get("stages_s") or {}).items():
            stage.labels(log_dir, command, name).set(seconds)
        by_status: dict[str, int] = defaultdict(int)
        sums: dict[tuple[str, str], float] = defaultdict(float)
        drops: dict[tuple[str, str], float] = defaultdict(float)
        for line in part.get("partitions", ()):
            by_status[str(line.get("status"))] += 1
            topic = str(line.get("topic", ""))
            for key in ("bytes_in", "bytes_out", "records_in", "records_out",
                        "records_erased"):
                if isinstance(line.get(key), int | float):
                    sums[(key, topic)] += line[key]
            if isinstance(line.get("deleted_segments"), list):
                sums[("segments_deleted", topic)] += len(line["deleted_segments"])
            for reason, n in (line.get("dropped") or {}).items():
                drops[(topic, reason)] += n
        for status, n in by_status.items():
            partitions.labels(log_dir, command, status).set(n)
        for (key, topic), value in sums.items():
            flows[key].labels(log_dir, command, topic).set(value)
        for (topic, reason), n in drops.items():
            dropped.labels(log_dir, command, topic, reason).set(n)
    return registry


def overdue_registry(overdue: int, total: int, failed: int = 0) -> CollectorRegistry:
    """``erase status``: requests past their deadline and not verified, failed requests."""
    registry = CollectorRegistry()
    Gauge(f"{PREFIX}_erasure_requests_overdue", "erasure requests past their deadline and "
          "not verified", registry=registry).set(overdue)
    Gauge(f"{PREFIX}_erasure_requests_failed", "erasure requests failed (until retried or "
          "cancelled)", registry=registry).set(failed)
    Gauge(f"{PREFIX}_erasure_requests", "erasure requests in the ledger",
          registry=registry).set(total)
    return registry


def text(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text exposition format."""
    return bytes(generate_latest(registry))
