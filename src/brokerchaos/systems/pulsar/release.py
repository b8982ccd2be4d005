"""Apache Pulsar releases: what `cluster.version` names, resolved to a release of Maven Central.

- `4.2` (the default) and `4.0` name the pinned poms (systems/maven/pulsar-4.2.xml: 4.2.4,
  the newest release when the default was last reviewed; pulsar-4.0.xml: 4.0.7, the release
  the seed pages' and findings' figures up to 2026-12-03 were measured on);
- `X.Y.Z` names that release, 2.10.0 or later (2.10 is the first to support Java 17, the
  Java here);
- another `X.Y` names the newest patch of that minor that Maven Central lists.

A release runs with the BookKeeper and ZooKeeper it was built with: its pom imports the
release's own parent (`org.apache.pulsar:pulsar`, whose dependency management is what its
distribution was built from) and asks for pulsar-broker and log4j-core; the jars resolve
once into the cache (systems/releases.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

from ...errors import ScenarioError
from .. import jvm, releases
from ..releases import parse

PINNED = {"4.0": "4.0.7", "4.2": "4.2.4"}  # cluster.version -> the release of its pinned pom
DEFAULT = "4.2"
OLDEST = (2, 10)
LISTING = releases.Listing.maven("org.apache.pulsar", "pulsar-broker")
CLIENTS = releases.Listing.maven("org.apache.pulsar", "pulsar-client-original")
CLIENT_OLDEST = (3, 0)  # the Java bridge reads message ids through MessageIdAdv (3.0; 2.10.5 has none)

POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- {artifact} {version}, written by brokerchaos (systems/pulsar/release.py): runtime jars,
     versions as the release's own parent manages them. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.brokerchaos.{kind}</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
      <dependency><groupId>org.apache.pulsar</groupId><artifactId>pulsar</artifactId><version>{version}</version><type>pom</type><scope>import</scope></dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency><groupId>org.apache.pulsar</groupId><artifactId>{artifact}</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId></dependency>
{binding}  </dependencies>
</project>
"""


def form_error(version: Optional[str]) -> Optional[str]:
    """Why `cluster.version` cannot name a Pulsar release here, by its form and range alone."""
    if version is None or version in PINNED:
        return None
    p = parse(version)
    if p is None:
        return (f"pulsar runs a release such as 3.3.6 or 4.0.8, or a minor such as 3.3 (its newest patch), "
                f"not {version!r}")
    if (p[0], p[1]) < OLDEST:
        return f"pulsar {version} is older than 2.10, the first release to support Java 17 (the Java here)"
    return None


@dataclass(frozen=True)
class Release(releases.Release):
    """One Pulsar release as the harness runs it."""

    prefix: ClassVar[str] = "pulsar"
    pinned_names: ClassVar[dict[str, str]] = PINNED

    def pom_text(self) -> str:
        return POM.format(kind="servers", name=f"pulsar-{self.version}", version=self.version,
                          artifact="pulsar-broker", binding="")


BINDING = '    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>{}</artifactId></dependency>\n'


def client_error(client_version: Optional[str]) -> Optional[str]:
    """Why pulsar-client-original `client_version` cannot run here (form and range)."""
    if client_version is None:
        return None
    p = parse(client_version)
    if p is None:
        return f"a pulsar-client release such as 2.10.5 or 4.0.7, or a minor such as 3.3, not {client_version!r}"
    if (p[0], p[1]) < CLIENT_OLDEST:
        return f"pulsar-client {client_version} predates the 3.0 API (MessageIdAdv) the Java bridge reads ids with"
    return None


def client_set(client_version: str, fetch: bool = True) -> str:
    """The set of pulsar-client-original `client_version`, its pom written and its jars
    resolved: first without a logging bridge, then with the log4j bridge for the slf4j its
    release carries (1.7 or 2.x: the two bridges' classes have the same names, so only one
    may be on the classpath)."""
    version = CLIENTS.newest(client_version, "pulsar-client", fetch)
    name = f"pulsar-client-{version}"
    if not jvm.fetched(name):
        text = POM.format(kind="clients", name=name, version=version, artifact="pulsar-client-original", binding="{}")
        releases.write_pom(name, text.format(""))
        jars = jvm.classpath(name)
        two = any(Path(j).name.startswith("slf4j-api-2.") for j in Path(jars[:-2]).glob("*.jar"))
        bridge = "log4j-slf4j2-impl" if two else "log4j-slf4j-impl"
        releases.write_pom(name, text.format(BINDING.format(bridge)))
    return name


def resolve(version: Optional[str], fetch: bool = True) -> Release:
    asked = version or DEFAULT
    why = form_error(asked)
    if why:
        raise ScenarioError(f"scenario field 'cluster.version': {why}")
    return Release.named(asked, LISTING, "Pulsar", fetch)


def cached() -> list[str]:
    return releases.cached("pulsar", PINNED)
