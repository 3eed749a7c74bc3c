"""Which Kafka release's rules a log dir follows: the release of the broker that serves it.

The metadata log records it twice. Every broker's registration (``RegisterBrokerRecord``)
lists, among its supported features, the highest ``metadata.version`` its software knows:
``MetadataVersion.latestProduction()`` of its release (``BrokerRegistrationRequest`` from
``BrokerLifecycleManager``), so the release itself. The cluster's finalized ``metadata.version``
(``FeatureLevelRecord``) is a lower bound: no broker older than it may join
(``QuorumController``'s registration check). Where only a lower bound is known, the tool takes
that release's rules: every rule that changed after 4.1 deletes more in the newer release, so
the lowest possible release deletes the least. ``--kafka-version`` states the release that
will serve the log dir next (an upgrade done while the broker is down); it may not be older
than the cluster's ``metadata.version``.

What differs by release (the only rules that do, checked against the jars of 4.1.2, 4.2.2,
4.3.1 and 4.4.0 in the Kafka differential):

- KAFKA-20452 (4.4): ``Cleaner.cleanSegments`` keeps a round's emptied last batch only when
  its next offset is the high watermark (4.1-4.3: the round's end, KAFKA-17076);
- ``max.decompressed.message.bytes`` (4.4): read by the broker and its cleaner; ignored
  before.

Pure: no files, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from compactor.errors import ConfigError

Version = tuple[int, int]

TARGET: Version = (4, 1)  # the release the tool's rules were written against
NEWEST: Version = (4, 4)  # the newest release whose rules the tool knows
KNOWN: tuple[Version, ...] = ((4, 1), (4, 2), (4, 3), (4, 4))
KAFKA_20452: Version = (4, 4)  # the release of KAFKA-20452 (the round's last empty batch)
DECOMPRESSED_LIMIT: Version = (4, 4)  # the release that reads max.decompressed.message.bytes

# The first metadata.version feature level of each release (MetadataVersion of 4.4.0:
# 22 = 4.0-IV0, 26 = 4.1-IV0, 28 = 4.2-IV0, 30 = 4.3-IV0, 31 = 4.4-IV0; 34 = 4.5-IV0, unreleased)
_FIRST_LEVEL: tuple[tuple[int, Version], ...] = (
    (34, (4, 5)), (31, (4, 4)), (30, (4, 3)), (28, (4, 2)), (26, (4, 1)), (22, (4, 0)))
METADATA_VERSION = "metadata.version"


def text(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def release_of_level(level: int) -> Version | None:
    """The release a ``metadata.version`` feature level belongs to (``None``: before 4.0)."""
    return next((v for first, v in _FIRST_LEVEL if level >= first), None)


@dataclass(frozen=True, slots=True)
class KafkaRelease:
    """The release whose rules a run follows.

    Attributes:
        version: that release (one of :data:`KNOWN`).
        source: where it came from, in words.
        exact: whether the release is known (a broker's registration, ``--kafka-version``),
            not a lower bound or an assumption.
        newer: a release the metadata names that is newer than :data:`NEWEST` (its rules
            are not known; the newest known ones are followed).
    """

    version: Version
    source: str
    exact: bool
    newer: Version | None = None

    def at_least(self, version: Version) -> bool:
        return self.version >= version

    def to_dict(self) -> dict[str, Any]:
        return {"release": text(self.version), "source": self.source, "exact": self.exact,
                **({"newer_than_known": text(self.newer)} if self.newer else {})}


def parse_version(value: str) -> Version:
    """``--kafka-version`` (``4.4`` or ``4.4.0``) as a known release.

    Raises:
        ConfigError: not a version, or a release whose rules the tool does not know.
    """
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", value.strip())
    version = (int(m[1]), int(m[2])) if m else (0, 0)
    if version not in KNOWN:
        raise ConfigError(
            f"--kafka-version {value!r} is not a release kafka-compactor knows the rules of",
            remedy=f"give one of {', '.join(text(v) for v in KNOWN)} (a patch number may "
                   "follow); nothing was changed")
    return version


def follow(*, finalized_level: int | None, registered_level: int | None,
           node_id: str | None, flag: str | None) -> KafkaRelease:
    """The release to follow, from the metadata (``finalized_level``: the cluster's
    ``metadata.version``; ``registered_level``: the highest one this broker's registration
    supports) and ``--kafka-version`` (``flag``).

    Raises:
        ConfigError: a ``--kafka-version`` the tool does not know, or older than the
            cluster's ``metadata.version`` (no such broker can serve the log dir).
    """
    floor = release_of_level(finalized_level) if finalized_level is not None else None
    if flag is not None:
        version = parse_version(flag)
        if floor is not None and floor > version:
            raise ConfigError(
                f"--kafka-version {flag} is older than the cluster's metadata.version "
                f"(feature level {finalized_level}, Kafka {text(floor)}): no broker of "
                f"{text(version)} can serve this log dir",
                remedy=f"give the release the broker runs ({text(floor)} or newer); nothing "
                       "was changed")
        return KafkaRelease(version, "--kafka-version", True)
    if registered_level is not None:
        registered = release_of_level(registered_level)
        where = (f"broker {node_id}'s registration in the metadata log (metadata.version up "
                 f"to feature level {registered_level})")
        if registered is not None and registered > NEWEST:
            return KafkaRelease(NEWEST, f"{where}: Kafka {text(registered)}, newer than the "
                                        f"rules the tool knows; {text(NEWEST)}'s followed",
                                False, newer=registered)
        if registered is not None and registered >= TARGET:
            return KafkaRelease(registered, where, True)
    if floor is not None and floor >= TARGET:
        version = min(floor, NEWEST)
        return KafkaRelease(version, f"the cluster's metadata.version (feature level "
                                     f"{finalized_level}): brokers run Kafka {text(floor)} "
                                     f"or newer; {text(version)}'s rules delete the least",
                            False, newer=floor if floor > NEWEST else None)
    why = "no metadata log" if finalized_level is None else "metadata.version before 4.1"
    return KafkaRelease(TARGET, f"not recorded ({why}); Kafka {text(TARGET)}'s rules, which "
                                "delete the least (--kafka-version names the release)", False)
