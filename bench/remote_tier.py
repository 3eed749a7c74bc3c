"""Erasure in a broker's remote tier (KIP-405), timed beside Kafka reading the same bytes.

A real Kafka 4.1.2 broker with Kafka's own ``LocalTieredStorage`` RSM (``make kafka``) takes
``--mb`` MB of keyed records on a delete-policy topic with ``remote.storage.enable`` and small
segments; once every segment but the active one is served from remote, this prints, from one
run:

- the baseline: Kafka's own ``ConsumerPerformance`` reading the whole topic from offset 0
  through the broker (so from the remote tier), MB/s;
- ``erase apply --remote`` (the cluster running) of one subject whose records sit in a few
  segments: the remote segments listed, fetched through the RSM and scanned, then those holding
  the subject replaced (fetched again, rebuilt, copied, the old one deleted);
- ``erase verify`` (the broker stopped): every remote segment fetched and scanned again;
- seconds per GB fetched for both, and the ERROR lines the broker logged meanwhile.

Usage: python bench/remote_tier.py [--mb 256] [--segment-mb 16] [--subject-segments 3]
[--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compactor.cli import main as cli_main  # noqa: E402
from compactor.state import tables as state_tables
from tests.kafka.broker import java, running, tiered_properties  # noqa: E402

TOPIC = "tiered"
SUBJECT = b"subject-0001"


async def _produce(bootstrap: str, mb: int, segment_mb: int, subject_segments: int) -> int:
    """``mb`` MB of 1 KiB records under 100,000 keys; the subject's key once in each of the
    first ``subject_segments`` segments' worth of records. Returns the records sent."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={
            "cleanup.policy": "delete", "remote.storage.enable": "true",
            "local.retention.ms": "1000", "segment.bytes": str(segment_mb << 20),
            "file.delete.delay.ms": "100"})])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=512 << 10, acks=1)
    await producer.start()
    value = os.urandom(1024)
    total = (mb << 20) // (len(value) + 24)
    per_segment = (segment_mb << 20) // (len(value) + 24)
    try:
        for i in range(total):
            key = (SUBJECT if i % per_segment == per_segment // 2
                   and i // per_segment < subject_segments else f"key-{i % 100_000:06d}".encode())
            await producer.send(TOPIC, value, key=key)
        # one record more, after a pause, so the last full segment rolls
        await producer.flush()
        await asyncio.sleep(1.5)
        await producer.send_and_wait(TOPIC, b"last", key=b"last")
    finally:
        await producer.stop()
    return total + 1


def _run(argv: list[str], profile: bool = False) -> tuple[int, dict[str, Any], float]:
    out = io.StringIO()
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    with redirect_stdout(out):
        if profiler is not None:
            profiler.enable()
        code = cli_main([*argv, "--json"])
        if profiler is not None:
            profiler.disable()
    seconds = time.perf_counter() - started
    if profiler is not None:  # where the step's time went, for the next change
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(
            r"compactor/(maintenance|remote|spark|erasure)", 25)
    lines = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
    return code, (lines[-1] if lines else {}), seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--segment-mb", type=int, default=16)
    ap.add_argument("--subject-segments", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="print where erase apply --remote spent its time (cProfile)")
    args = ap.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    remote, state = work / "remote", work / "state"
    remote.mkdir()
    state_tables.init(str(state))
    with running(work / "broker", extra=tiered_properties(remote)) as broker:
        started = time.perf_counter()
        records = asyncio.run(_produce(broker.bootstrap, args.mb, args.segment_mb,
                                       args.subject_segments))
        print(f"produced {records:,} records ({args.mb} MB) in "
              f"{time.perf_counter() - started:.1f} s")
        partition = broker.log_dir / f"{TOPIC}-0"
        expected = args.mb // args.segment_mb - 1
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if (len(list(partition.glob("*.log"))) == 1
                    and len(list(remote.rglob("*.log"))) >= expected):
                break
            time.sleep(1)
        remote_bytes = sum(p.stat().st_size for p in remote.rglob("*.log"))
        segments = len(list(remote.rglob("*.log")))
        print(f"remote tier: {segments} segments, {remote_bytes / 1e6:.0f} MB "
              f"(local: {len(list(partition.glob('*.log')))} segment)")

        # the baseline: Kafka's own consumer reading all of it through the broker
        started = time.perf_counter()
        java("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
             broker.bootstrap, "--topic", TOPIC, "--messages", str(records), "--timeout",
             "120000")
        kafka_s = time.perf_counter() - started
        print(f"Kafka ConsumerPerformance, the whole topic from offset 0: {kafka_s:.1f} s "
              f"({remote_bytes / 1e6 / kafka_s:.0f} MB/s, JVM start included)")

        code, _, _ = _run(["erase", "request", "--state-dir", str(state), "--topic", TOPIC,
                           "--key", SUBJECT.decode(), "--reason", "bench"])
        assert code == 0
        props, log_dir = str(broker.properties_file), str(broker.log_dir)
        code, report, apply_s = _run(["erase", "apply", log_dir, "--remote",
                                      "--bootstrap-server", broker.bootstrap,
                                      "--state-dir", str(state), "--server-properties", props],
                                     profile=args.profile)
        (line,) = [p for p in report.get("partitions", []) if p["copy"] == "remote"] or [{}]
        rewritten = line.get("remote_segments_rewritten", [])
        print(f"erase apply --remote: exit {code}, {apply_s:.1f} s: "
              f"{line.get('segments_scanned')} remote segments scanned, "
              f"{len(rewritten)} replaced, {line.get('records_erased')} records erased; "
              f"{apply_s / (remote_bytes / 1e9):.1f} s per GB in the remote tier "
              f"({apply_s / kafka_s:.2f}x Kafka's read)")
        errors = [x for x in broker.log_lines() if "ERROR" in x]
        print(f"broker ERROR lines while it ran: {len(errors)}")
        for x in errors[:5]:
            print(f"  {x}")
    code, report, verify_s = _run(["erase", "verify", log_dir, "--state-dir", str(state),
                                   "--server-properties", props])
    (line,) = [p for p in report.get("partitions", []) if p["copy"] == "remote"] or [{}]
    statuses = sorted({r["status"] for r in report.get("requests", [])})
    print(f"erase verify (broker stopped): exit {code}, {verify_s:.1f} s: "
          f"{line.get('segments_scanned')} remote segments fetched and scanned, "
          f"{line.get('records_scanned')} records, requests {statuses}; "
          f"{verify_s / (remote_bytes / 1e9):.1f} s per GB fetched "
          f"({verify_s / kafka_s:.2f}x Kafka's read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
