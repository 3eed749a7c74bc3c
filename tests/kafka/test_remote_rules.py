"""The remote tier's rules judged by Kafka's own classes: which remote segment Kafka's
size-based retention would count twice while an erased copy replaces it
(:func:`compactor.remote.tier.counted_twice`), against ``RemoteLogMetadataCache`` (the cache
the topic-based RLMM answers the broker from) fed the same segments and the copy, and asked
what ``RLMExpirationTask.buildRetentionSizeData`` asks it: the finished segments of each
leader epoch."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

from compactor.remote import tier
from compactor.spark import delta

#: the judge, in Java against Kafka's classes (it says what it reads and prints)
JUDGE = Path(__file__).with_name("CountedTwice.java")


def _scenario(rng: random.Random) -> tuple[int, list[tier.RemoteSegment]]:
    """Contiguous remote segments over offsets 0.., leader epochs starting at random offsets
    (an epoch may start inside a segment or span several), and which one is replaced."""
    n = rng.randint(1, 5)
    bounds = sorted(rng.sample(range(1, 10 * n), rng.randint(0, 3)))
    starts = [0, *bounds]  # epoch i starts at starts[i]
    segments = []
    for k in range(n):
        first, last = 10 * k, 10 * k + 9
        epochs = {str(e): max(s, first) for e, s in enumerate(starts)
                  if s <= last and (e + 1 == len(starts) or starts[e + 1] > first)}
        segments.append(tier.RemoteSegment(
            topic="t", topic_id="x", partition=0, segment_id=f"s{k}", start_offset=first,
            end_offset=last, state=tier.SERVED, size_bytes=100, max_timestamp_ms=0,
            leader_epochs=epochs))
    return rng.randrange(n), segments


def test_the_segments_counted_twice_are_those_kafkas_cache_lists_twice(tmp_path: Path) -> None:
    jars = delta.folder("tier")
    cp = os.path.join(jars, "*")
    subprocess.run(["javac", "-d", str(tmp_path), "-cp", cp, str(JUDGE)], check=True,
                   capture_output=True)
    rng = random.Random(405)
    scenarios = [_scenario(rng) for _ in range(400)]
    lines = "".join(
        f"{target};" + "|".join(f"{s.start_offset}-{s.end_offset}:" + ",".join(
            f"{e}@{o}" for e, o in s.leader_epochs.items()) for s in segments) + "\n"
        for target, segments in scenarios)
    done = subprocess.run(["java", "-cp", os.pathsep.join([str(tmp_path), cp]),
                           "org.apache.kafka.server.log.remote.metadata.storage.CountedTwice"],
                          input=lines, capture_output=True, text=True, check=True)
    kafka = [x == "true" for x in done.stdout.split()]
    ours = [tier.counted_twice(segments[target], segments) for target, segments in scenarios]
    assert len(kafka) == len(scenarios)
    assert ours == kafka
    assert 0 < sum(kafka) < len(kafka)  # both answers occur
