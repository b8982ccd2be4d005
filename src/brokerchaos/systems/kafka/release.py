"""Apache Kafka releases: what `cluster.version` names, resolved to a release of Maven Central.

- `4.4` (the default), `4.1` and `3.9` name the pinned poms (systems/maven: 4.4.0, the newest
  release when the default was last reviewed; 4.1.1; 3.9.1, the seeds' ZooKeeper mode, which
  their scenarios name);
- `X.Y.Z` names that release, 3.0.0 or later (3.0 is the first whose documentation names
  Java 17, the Java here);
- another `X.Y` names the newest patch of that minor that Maven Central lists.

A release's jars are resolved once into the cache (systems/releases.py) through a pom
written from what the release is (kafka_2.13 of that version and the logging bridge its
major logs through), the same way as the pinned ones (jvm.classpath). How a release runs is a rule, not a table:
before 4.0 a release runs on ZooKeeper unless `options.metadata` says kraft (3.3 on, when
KRaft became production-ready, KIP-833); from 4.0 on there is no ZooKeeper (KIP-500).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from ...errors import ScenarioError
from .. import releases
from ..releases import parse

PINNED = {"3.9": "3.9.1", "4.1": "4.1.1", "4.4": "4.4.0"}  # cluster.version -> the release of its pinned pom
DEFAULT = "4.4"
OLDEST = (3, 0, 0)  # the first release whose documentation names Java 17
KRAFT_FROM = (3, 3, 0)  # KIP-833: KRaft production-ready
ZOOKEEPER_UNTIL = (4, 0, 0)  # KIP-500: 4.0 has no ZooKeeper mode
LISTING = releases.Listing.maven("org.apache.kafka", "kafka_2.13")
CLIENTS = releases.Listing.maven("org.apache.kafka", "kafka-clients")
CLIENT_OLDEST = (2, 0)  # the Java bridge's API (KafkaProducer.close(Duration): 2.0)
# KIP-896: Kafka 4.0 brokers refuse the request versions of clients before 2.1
CLIENT_OLDEST_ON_4 = (2, 1)

POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Apache Kafka {version}, written by brokerchaos (systems/kafka/release.py): runtime jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.brokerchaos.servers</groupId>
  <artifactId>kafka-{version}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{version}</version></dependency>
{logging}  </dependencies>
</project>
"""
# 3.x logs through log4j 1 (reload4j, as its distribution), 4.x through log4j 2; both
# through slf4j 1.7 (4.4.0 still carries slf4j-api 1.7.36: the 2.x bridge, whose classes
# have the same names, would shadow the 1.x one on the classpath and fail at the first log)
LOG_3 = ('    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId>'
         '<version>1.7.36</version></dependency>\n')
LOG_4 = ('    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>'
         '<version>2.24.3</version></dependency>\n')


def form_error(version: Optional[str]) -> Optional[str]:
    """Why `cluster.version` cannot name a Kafka release here, by its form and range alone
    (whether Maven Central serves it is known when it is resolved)."""
    if version is None or version in PINNED:
        return None
    p = parse(version)
    if p is None:
        return (f"kafka runs a release such as 3.7.2 or 4.4.0, or a minor such as 4.3 (its newest patch), "
                f"not {version!r}")
    if (p[0], p[1]) < OLDEST[:2]:
        return f"kafka {version} is older than 3.0, the first release documented to run on Java 17 (the Java here)"
    return None


def minor_of(version: Optional[str]) -> tuple[int, int]:
    """The (major, minor) `cluster.version` names: what the mode follows, known offline
    ((0, 0) for a form that names no release: form_error says why)."""
    got = parse(PINNED.get(version or DEFAULT, version or DEFAULT))
    return (got[0], got[1]) if got else (0, 0)


def mode_error(version: Optional[str], metadata: Optional[str]) -> Optional[str]:
    """Why `options.metadata` cannot run on the release `cluster.version` names (None if it can)."""
    m = minor_of(version)
    if metadata == "zookeeper" and m >= ZOOKEEPER_UNTIL[:2]:
        return f"Kafka {version} has no ZooKeeper mode (removed in 4.0, KIP-500); give kraft"
    if metadata == "kraft" and m < KRAFT_FROM[:2]:
        return f"Kafka {version or DEFAULT} predates production KRaft (3.3, KIP-833); give zookeeper"
    return None


def kraft(version: Optional[str], metadata: Optional[str]) -> bool:
    """Whether the release runs on a KRaft controller: as asked, else ZooKeeper where it has it."""
    return metadata == "kraft" if metadata else minor_of(version) >= ZOOKEEPER_UNTIL[:2]


@dataclass(frozen=True)
class Release(releases.Release):
    """One Kafka release as the harness runs it."""

    prefix: ClassVar[str] = "kafka"
    pinned_names: ClassVar[dict[str, str]] = PINNED

    @property
    def parts(self) -> tuple[int, int, int]:
        major, minor, patch = parse(self.version)
        return major, minor, patch or 0

    def pom_text(self) -> str:
        return POM.format(version=self.version, logging=LOG_3 if self.parts < (4, 0, 0) else LOG_4)


def resolve(version: Optional[str], fetch: bool = True) -> Release:
    """The release `cluster.version` names (the default when None). A minor asks Maven
    Central's list; a full release is taken as named (Maven says if it does not exist)."""
    asked = version or DEFAULT
    why = form_error(asked)
    if why:
        raise ScenarioError(f"scenario field 'cluster.version': {why}")
    return Release.named(asked, LISTING, "Kafka", fetch)


CLIENT_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- kafka-clients {version}, written by brokerchaos (systems/kafka/release.py): the Java client's jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.brokerchaos.clients</groupId>
  <artifactId>kafka-clients-{version}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>{version}</version></dependency>
{logging}  </dependencies>
</project>
"""


def client_error(client_version: Optional[str], server_version: Optional[str]) -> Optional[str]:
    """Why kafka-clients `client_version` cannot run against the servers here (form and range)."""
    if client_version is None:
        return None
    p = parse(client_version)
    if p is None:
        return f"a kafka-clients release such as 2.0.0 or 3.9.1, or a minor such as 3.7, not {client_version!r}"
    if (p[0], p[1]) < CLIENT_OLDEST:
        return f"kafka-clients {client_version} predates the 2.0 API the Java bridge is written against"
    if (p[0], p[1]) < CLIENT_OLDEST_ON_4 and minor_of(server_version) >= ZOOKEEPER_UNTIL[:2]:
        return (f"Kafka {server_version or DEFAULT}'s brokers refuse the requests of kafka-clients before 2.1 "
                "(KIP-896); give a 3.x server (cluster.version) or a newer client")
    return None


def client_set(client_version: str, fetch: bool = True) -> str:
    """The set of kafka-clients `client_version` (its newest patch for a minor), its pom written."""
    version = CLIENTS.newest(client_version, "kafka-clients", fetch)
    name = f"kafka-clients-{version}"
    logging = LOG_3 if parse(version)[0] < 4 else LOG_4
    releases.write_pom(name, CLIENT_POM.format(version=version, logging=logging))
    return name


def cached() -> list[str]:
    """The releases whose jars are in the cache (the pinned sets by their release)."""
    return releases.cached("kafka", PINNED)
