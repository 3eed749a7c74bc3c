"""Spark's fixed cost on a small log dir: ``compactor compact`` on the demo's log dir (``make
demo``: 6 partitions of 20,000 records, legacy entries, an open transaction), each run a new
process that starts its own Spark session, as an operator's command does.

Usage: python bench/small_round.py [--runs 3] [--records 20000] [--partitions 2]

Prints each run's stage times from the report (``stages_s``: session_start and worker_start
apart from the work) and the share of the wall time spent outside the session's start, the
figure issue 18 tracks (target < 30%), with the best and median over the runs. The baseline in
the same run is the session's start itself.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMPACTOR = str(Path(sys.executable).parent / "compactor")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=20_000, help="records per partition")
    ap.add_argument("--partitions", type=int, default=2, help="partitions per topic")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-small-"))
    template = root / "template"
    now_s = int(time.time())
    subprocess.run([COMPACTOR, "generate", str(template), "--partitions", str(args.partitions),
                    "--records", str(args.records), "--legacy-records", "50",
                    "--open-transaction", "--seed", "42",
                    "--start-ms", str(now_s * 1000 - 3_600_000),
                    "--topic-config", "user-profiles:cleanup.policy=compact",
                    "--topic-config", "orders-v2:cleanup.policy=compact,delete"],
                   check=True, capture_output=True)
    size = sum(f.stat().st_size for f in template.glob("*/*.log"))
    print(f"log dir: {size / 1e6:.1f} MB of segments in "
          f"{len(list(template.glob('*-[0-9]*')))} partition directories")
    outside: list[float] = []
    for run in range(args.runs):
        work = root / f"run-{run}"
        shutil.copytree(template, work)
        started = time.perf_counter()
        res = subprocess.run([COMPACTOR, "compact", str(work), "--json", "--progress", "off",
                              "--now-ms", str(now_s * 1000)],
                             capture_output=True, text=True)
        wall = time.perf_counter() - started
        if res.returncode != 0:
            print(res.stderr, file=sys.stderr)
            return res.returncode
        stages = json.loads(res.stdout.splitlines()[-1])["stages_s"]
        session = stages.get("session_start", 0.0)
        measured = sum(stages.values())
        share = (measured - session) / measured
        outside.append(share)
        print(f"run {run + 1}: process {wall:.1f} s, stages {measured:.1f} s, of which outside "
              f"the session's start {measured - session:.1f} s = {share:.0%} "
              f"({', '.join(f'{k} {v:.2f}' for k, v in stages.items())})")
    print(f"outside the session's start: best {min(outside):.0%}, median "
          f"{statistics.median(outside):.0%} (target < 30%)")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
