"""A broker's remote tier (KIP-405), read through Kafka's own classes and the broker's own
RemoteStorageManager plugin: which remote segments its remote log metadata names, and their
bytes.

The work is done by one small JVM helper (``RemoteTier.java`` beside this file, compiled at
set-up against the ``tier`` jars of ``compactor/spark/pom.xml``: :func:`build_helper`; every
call names that folder, ``helper``: ``compactor.spark.delta.folder("tier")``):

- the segments: the records of the ``__remote_log_metadata`` partitions in a log dir, decoded
  by Kafka's ``RemoteLogMetadataSerde`` and folded by Kafka's ``RemotePartitionMetadataStore``,
  the store the topic-based RLMM fills from the same records (``ConsumerTask``), so a segment's
  state is the one the broker acts on: ``COPY_SEGMENT_STARTED``, ``COPY_SEGMENT_FINISHED``
  (served), ``DELETE_SEGMENT_STARTED``; finished deletions are gone;
- the bytes: ``RemoteStorageManager.fetchLogSegment(metadata, 0)`` of the plugin the broker's
  ``server.properties`` names (``remote.log.storage.manager.class.name``, ``.class.path``,
  its ``rsm.config.*`` settings), made and configured as Kafka's
  ``RemoteLogManager.createRemoteStorageManager`` and ``configureRSM`` make it: a
  ``ChildFirstClassLoader`` over the class path, ``broker.id`` added. No vendor's object layout
  is read here.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compactor.errors import RemoteTierError
from compactor.log import storage

#: the Kafka release whose storage classes the helper is built against (the pom's tier profile)
KAFKA_VERSION = "4.1.2"
HELPER_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RemoteTier.java")
HELPER_CLASS = "RemoteTier"
#: a broker's remote tier is on when this is true (``RemoteLogManagerConfig``)
SYSTEM_ENABLE = "remote.log.storage.system.enable"
#: the state of a remote segment the broker serves
SERVED = "COPY_SEGMENT_FINISHED"
#: the last step of a replacement (``RemoteTier.java``'s ``retire`` of the old segment)
LAST_STEP = "delete_finished"
HELPER_TIMEOUT_S = 600


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One remote segment as the broker's remote log metadata names it."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    state: str
    size_bytes: int
    max_timestamp_ms: int
    leader_epochs: Mapping[str, int]

    @property
    def partition_name(self) -> str:
        return f"{self.topic}-{self.partition}"


def enabled(properties: Mapping[str, str]) -> bool:
    """Whether a broker's ``server.properties`` turn its remote tier on."""
    return properties.get(SYSTEM_ENABLE, "false").strip().lower() == "true"


def build_helper(folder: str) -> str:
    """Compile the helper against the ``tier`` jars in ``folder`` (into ``folder/classes``);
    returns that folder.

    Raises:
        RuntimeError: javac is missing or failed.
    """
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is not installed "
                           "(Debian: apt-get install openjdk-17-jdk-headless)")
    out = os.path.join(folder, "classes")
    storage.make_dirs(out)
    done = subprocess.run([javac, "-d", out, "-cp", os.path.join(folder, "*"), HELPER_SOURCE],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"javac failed: {done.stderr.strip()[-2000:]}")
    return out


def helper_built(helper: str) -> bool:
    """Whether the helper is compiled in the ``tier`` jars' folder ``helper``."""
    return storage.exists(os.path.join(helper, "classes", f"{HELPER_CLASS}.class"))


def _run(helper: str, command: str, server_properties: str, log_dir: str,
         *extra: str) -> list[dict[str, Any]]:
    classes = os.path.join(helper, "classes")
    if not helper_built(helper):
        raise RemoteTierError(f"the remote tier's helper is not built in {classes}",
                              remedy="run `python -m compactor.tools.build.jars` once "
                                     "(`make` does)")
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get(
        "JAVA_HOME") else "java"
    argv = [java, "-Xmx512m", "-cp", os.pathsep.join([classes, os.path.join(helper, "*")]),
            HELPER_CLASS, command, "--server-properties", server_properties, "--log-dir", log_dir,
            *extra]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=HELPER_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RemoteTierError(f"the remote tier's helper could not run: {err}",
                              path=log_dir) from err
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    # exit 4: a fetch or a replacement failed, said on its own line (the caller reads it)
    if done.returncode not in ((0,) if command == "list" else (0, 4)):
        detail = next((x["error"] for x in lines if "error" in x), None) or (
            done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RemoteTierError(f"the broker's remote tier could not be read: {detail}",
                              path=log_dir)
    return lines


@dataclass(frozen=True, slots=True)
class RemoteListing:
    """What a log dir's remote log metadata says of some partitions: their remote segments,
    and the partitions whose metadata is not here (their remote segments are unknown)."""

    segments: list[RemoteSegment]
    unknown: dict[str, str]


def list_segments(helper: str, server_properties: str, log_dir: str,
                  partitions: Mapping[str, tuple[str, str, int]]) -> RemoteListing:
    """The remote segments (any state) of ``partitions`` (name -> topic id, topic, number)
    that the remote log metadata in ``log_dir`` names, by partition and start offset; a
    partition whose ``__remote_log_metadata`` partition (Kafka's
    ``RemoteLogMetadataTopicPartitioner``) is not in ``log_dir`` is ``unknown``, with why.

    Raises:
        RemoteTierError: the metadata cannot be read.
    """
    extra: list[str] = []
    for topic_id, topic, number in partitions.values():
        extra += ["--partition", f"{topic_id}:{topic}:{number}"]
    lines = _run(helper, "list", server_properties, log_dir, *extra)
    unknown = {x["metadata_of"]: (f"its remote log metadata (partition "
                                  f"__remote_log_metadata-{x['metadata_partition']}) is not in "
                                  f"this log dir: run the verify on a broker that holds it")
               for x in lines if "metadata_of" in x and not x["present"]}
    segments = [RemoteSegment(topic=x["topic"], topic_id=x["topic_id"], partition=x["partition"],
                              segment_id=x["segment_id"], start_offset=x["start_offset"],
                              end_offset=x["end_offset"], state=x["state"],
                              size_bytes=x["size_bytes"], max_timestamp_ms=x["max_timestamp_ms"],
                              leader_epochs=x["leader_epochs"])
                for x in lines if "segment_id" in x]
    wanted = {(t_id, n) for t_id, _, n in partitions.values()}
    return RemoteListing(
        segments=[x for x in segments if (x.topic_id, x.partition) in wanted
                  and x.partition_name not in unknown], unknown=unknown)


def fetch_segments(helper: str, server_properties: str, log_dir: str,
                   wanted: Sequence[tuple[str, str]]) -> dict[str, str | None]:
    """Each segment (id, path) fetched through the broker's RemoteStorageManager into its
    path; returns segment id -> ``None`` (fetched) or why it could not be.

    Raises:
        RemoteTierError: the helper could not run, or the metadata cannot be read.
    """
    if not wanted:
        return {}
    extra: list[str] = []
    for segment_id, path in wanted:
        extra += ["--segment", f"{segment_id}={path}"]
    lines = _run(helper, "fetch", server_properties, log_dir, *extra)
    out: dict[str, str | None] = {s: "the helper said nothing of it" for s, _ in wanted}
    for x in lines:
        if "segment_id" in x:
            out[x["segment_id"]] = x.get("error")
    return out


def new_segment_id() -> str:
    """A fresh remote segment id, as Kafka's ``Uuid.randomUuid`` makes one: 16 random bytes
    in URL-safe base64 without padding, never starting with ``-`` (Kafka rejects those as
    command-line arguments) and never Kafka's reserved zero id."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not text.startswith("-") and text != "AAAAAAAAAAAAAAAAAAAAAA":
            return text


def replace_segments(helper: str, server_properties: str, log_dir: str, bootstrap: str,
                     replacements: Sequence[tuple[str, str, str]]
                     ) -> dict[str, tuple[list[dict[str, Any]], str | None]]:
    """Replace served remote segments by their erased copies, each ``(segment id, new
    segment id, folder)`` with ``segment.log``, ``segment.index``, ``segment.timeindex`` and
    ``segment.txnindex`` when it has one, through the cluster's RLMM (reached at
    ``bootstrap``) and the broker's RSM, one after the other in one helper: the copy under the
    new id, then the old one retired (``RemoteTier.java``'s ``replace`` says the order and why
    it keeps one whole segment served at every step). Returns segment id -> the steps done
    and, when it did not end, why (a segment no longer served in the cluster's remote log
    metadata, a step that failed).

    Raises:
        RemoteTierError: the helper could not run or ended without a word on a segment (a
            kill: every segment without a last step may be half replaced).
    """
    if not replacements:
        return {}
    extra: list[str] = []
    for old, new, folder in replacements:
        extra += ["--replace", f"{old}={new}={folder}"]
    lines = _run(helper, "replace", server_properties, log_dir, "--bootstrap", bootstrap,
                 *extra)
    out: dict[str, tuple[list[dict[str, Any]], str | None]] = {}
    for old, _, _ in replacements:
        steps = [dict(x) for x in lines if x.get("segment_id") == old and "step" in x]
        error = next((x["error"] for x in lines if x.get("segment_id") == old
                      and "error" in x), None)
        if error is None and (not steps or steps[-1]["step"] != LAST_STEP):
            error = ("the helper ended without finishing it (steps done: "
                     f"{', '.join(x['step'] for x in steps) or 'none'})")
        out[old] = (steps, error)
    return out


def resolve_replacement(helper: str, server_properties: str, log_dir: str, bootstrap: str,
                        segment_id: str, new_segment_id: str,
                        partition: tuple[str, str, int]) -> list[dict[str, Any]]:
    """Settle the replacement of ``segment_id`` (of ``partition``: topic id, topic, number)
    by ``new_segment_id`` that a crash interrupted,
    by the cluster's remote log metadata now: a copy not yet finished is retired (the last
    step ``undone``), a finished one has the old segment retired (``finished``). Returns the
    steps done.

    Raises:
        RemoteTierError: the cluster could not be reached or a step failed.
    """
    lines = _run(helper, "resolve", server_properties, log_dir, "--bootstrap", bootstrap,
                 "--segment", segment_id, "--new-id", new_segment_id, "--partition",
                 ":".join(map(str, partition)))
    return _steps(lines, f"the interrupted replacement of remote segment {segment_id}")


def _steps(lines: Sequence[Mapping[str, Any]], what: str) -> list[dict[str, Any]]:
    steps = [dict(x) for x in lines if "step" in x]
    failed = next((x["error"] for x in lines if "error" in x), None)
    if failed is not None or not steps:
        done = ", ".join(x["step"] for x in steps) or "none"
        raise RemoteTierError(f"{what} failed: {failed or 'the helper ended without a word'} "
                              f"(steps done: {done})")
    return steps


def counted_twice(segment: RemoteSegment, listed: Sequence[RemoteSegment]) -> bool:
    """Whether, while an erased copy of ``segment`` and ``segment`` itself are both
    ``COPY_SEGMENT_FINISHED`` (between the copy's last event and the old one's first delete
    event), Kafka counts both in a topic's remote size: when ``segment`` is the last
    finished segment of one of its leader epochs. ``RemoteLogLeaderEpochState.
    handleSegmentWithCopySegmentFinishedState`` then moves the old id to the epoch's
    unreferenced ids, which ``listRemoteLogSegments(partition, epoch)`` returns, and
    ``RLMExpirationTask.buildRetentionSizeData`` adds every finished segment it lists (a
    segment in the middle of an epoch is simply replaced in the epoch's offset map and not
    listed). ``listed``: the partition's remote segments."""
    later = [x for x in listed if x.state == SERVED and x.start_offset > segment.end_offset]
    for epoch in segment.leader_epochs:
        if not any(epoch in x.leader_epochs for x in later):
            return True
    return False
