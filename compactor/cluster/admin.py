"""The live cluster through Kafka's admin API: which brokers are registered, and which
partitions are not fully in sync (a Metadata request over aiokafka's admin client).

The rolling maintenance (:mod:`compactor.maintenance.rolling`) asks before it stops a broker
(never a second replica down) and until a restarted broker is back in every ISR it belongs to.
The readings are pure functions of a :class:`ClusterState`; only :func:`describe` talks to the
cluster."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass

from compactor.errors import ClusterNotReadyError


@dataclass(frozen=True, slots=True)
class PartitionReplicas:
    """One partition as the Metadata response has it (``MetadataResponseData``)."""

    topic: str
    partition: int
    leader: int  # -1: no leader (offline)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class ClusterState:
    """The registered brokers (node ids) and every partition, internal topics included."""

    brokers: frozenset[int]
    partitions: tuple[PartitionReplicas, ...]


def under_replicated(state: ClusterState) -> list[str]:
    """Partitions with a replica out of the ISR or no leader, each as "topic-p (replicas
    [..], in sync [..])": what ``kafka-topics.sh --describe --under-replicated-partitions``
    (``TopicCommand``: ISR smaller than the replica set) and ``--unavailable-partitions``
    list. Stopping any broker now could take a partition's last in-sync copy down."""
    return [f"{p.name} (replicas {list(p.replicas)}, in sync {list(p.isr)}"
            + (", no leader" if p.leader < 0 else "") + ")"
            for p in state.partitions
            if p.error_code or p.leader < 0 or set(p.isr) != set(p.replicas)]


def not_in_sync(state: ClusterState, node_id: int) -> list[str]:
    """What keeps ``node_id`` from counting as back: not registered, or a partition it is a
    replica of whose ISR does not hold it yet."""
    missing = [] if node_id in state.brokers else [f"broker {node_id} is not registered"]
    return missing + [f"{p.name} (in sync {list(p.isr)})" for p in state.partitions
                      if node_id in p.replicas and node_id not in p.isr]


def unregistered(state: ClusterState, node_ids: Iterable[int]) -> list[int]:
    return sorted(set(node_ids) - state.brokers)


def describe(bootstrap_servers: str, timeout_s: float = 30.0) -> ClusterState:
    """The cluster's brokers and partitions, from one Metadata request for every topic.

    Raises:
        ClusterNotReadyError: the cluster cannot be reached within ``timeout_s``.
    """
    try:
        return asyncio.run(asyncio.wait_for(_describe(bootstrap_servers, timeout_s), timeout_s))
    except (OSError, asyncio.TimeoutError, ConnectionError) as err:
        raise ClusterNotReadyError(f"the cluster's admin API at {bootstrap_servers} did not "
                                   f"answer ({_words(err)})") from err
    except Exception as err:  # aiokafka's own errors (KafkaConnectionError, ...)
        if type(err).__module__.startswith("aiokafka"):
            raise ClusterNotReadyError(f"the cluster's admin API at {bootstrap_servers} "
                                       f"refused ({_words(err)})") from err
        raise


# aiokafka names the addresses it tried as Python tuples: ('127.0.0.1', 9, <AddressFamily...>)
_ADDRESS = re.compile(r"\('([^']*)', (\d+), <AddressFamily\.\w+: \d+>\)")


def _words(err: BaseException) -> str:
    """An error of the admin client for a person: its message with addresses as host:port,
    or its kind when it has none."""
    text = _ADDRESS.sub(r"\1:\2", str(err)).strip()
    return text or type(err).__name__


async def _describe(bootstrap_servers: str, timeout_s: float) -> ClusterState:
    from aiokafka.admin import AIOKafkaAdminClient

    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers,
                                 request_timeout_ms=int(timeout_s * 1000))
    await client.start()
    try:
        cluster = await client.describe_cluster()
        topics = await client.describe_topics()
    finally:
        await client.close()
    return ClusterState(
        brokers=frozenset(b["node_id"] for b in cluster["brokers"]),
        partitions=tuple(
            PartitionReplicas(topic=t["topic"], partition=p["partition"], leader=p["leader"],
                              replicas=tuple(p["replicas"]), isr=tuple(p["isr"]),
                              error_code=p["error_code"])
            for t in topics for p in t["partitions"]))
