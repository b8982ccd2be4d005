"""Releases of a server as `cluster.version` names them: `X.Y.Z` a release as named, `X.Y`
the newest patch of that minor in its registry's list (Maven Central's `maven-metadata.xml`
of an artifact, the Go module proxy's `@v/list`, PyPI's JSON of a client library), kept in the cache a day so that a run
offline still resolves; and for a Java server a pom written for the release into the cache
(jvm.pom_of), resolved once like the pinned ones. Each system's release.py says what its
releases are made of; `bisect` walks a list in order."""
from __future__ import annotations

import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

from ..errors import ScenarioError
from . import jvm
from .base import SystemError_
from .runtime import cache_dir, retried

CENTRAL = "https://repo1.maven.org/maven2"
LIST_MAX_AGE_S = 86_400
RECHECK_AFTER_S = 600  # a release missing from a list older than this is asked for again
FETCH_TIMEOUT_S = 20
_FORM = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def parse(version: str) -> Optional[tuple[int, int, Optional[int]]]:
    """(major, minor, patch or None for a minor), or None for any other form."""
    m = _FORM.match(version)
    return (int(m[1]), int(m[2]), int(m[3]) if m[3] is not None else None) if m else None


class Listing:
    """The releases a registry lists for one server: X.Y.Z only (no release candidates)."""

    def __init__(self, name: str, url: str, pattern: str, kind: str, file: str) -> None:
        self.name, self.url, self.pattern, self.kind, self.file = name, url, pattern, kind, file

    @classmethod
    def maven(cls, group: str, artifact: str) -> "Listing":
        return cls(artifact, f"{CENTRAL}/{group.replace('.', '/')}/{artifact}/maven-metadata.xml",
                   r"<version>(\d+\.\d+\.\d+)</version>", "maven", f"{artifact}-metadata.xml")

    @classmethod
    def go(cls, module: str, kind: str) -> "Listing":
        return cls(module, f"https://proxy.golang.org/{module}/@v/list", r"(?m)^v(\d+\.\d+\.\d+)$", kind,
                   "releases.txt")

    @classmethod
    def pypi(cls, dist: str) -> "Listing":
        return cls(dist, f"https://pypi.org/pypi/{dist}/json", r'"(\d+\.\d+\.\d+)":\s*\[', "pypi", f"{dist}.json")

    @property
    def path(self) -> Path:
        """Where the list is kept (the cache as it is when asked: a test may move it)."""
        return cache_dir(self.kind) / self.file

    def versions(self, fetch: bool = True) -> list[str]:
        """X.Y.Z releases, oldest first: from the cache when under a day old, else asked
        again (a failed ask falls back on the cache)."""
        return self._read(fetch, LIST_MAX_AGE_S)

    def lists(self, version: str, fetch: bool = True) -> Optional[bool]:
        """Whether the registry lists `version` (None: no list to say). A cached list may be
        older than a release just out: one missing from a list over RECHECK_AFTER_S old is
        asked for again before it is called missing."""
        listed = self.versions(fetch)
        if listed and version not in listed and fetch:
            listed = self._read(fetch, RECHECK_AFTER_S)
        return (version in listed) if listed else None

    def _read(self, fetch: bool, max_age_s: float) -> list[str]:
        path = self.path
        fresh = path.exists() and time.time() - path.stat().st_mtime < max_age_s
        if fetch and not fresh:
            got, err = retried(lambda: self._ask(path), f"the list of {self.name} releases")
            if got != 0 and not path.exists():
                raise SystemError_(f"the list of {self.name} releases could not be read ({err}) and none is "
                                   "cached; name a full release (X.Y.Z)")
        if not path.exists():
            return []
        found = re.findall(self.pattern, path.read_text())
        return sorted(set(found), key=parse)

    def _ask(self, path: Path) -> tuple[int, str]:
        """The registry's list written to `path`: (0, "") or (1, why not)."""
        try:
            with urllib.request.urlopen(self.url, timeout=FETCH_TIMEOUT_S) as r:
                body = r.read()
        except OSError as e:
            return 1, str(e)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        return 0, ""

    def newest(self, asked: str, what: str, fetch: bool = True, field: str = "cluster.version") -> str:
        """The release a minor (`4.3`) names: its newest patch (a full release as named)."""
        major, minor, patch = parse(asked)
        if patch is not None:
            return asked
        patches = [v for v in self.versions(fetch) if parse(v)[:2] == (major, minor)]
        if not patches and fetch:  # a minor just out may be missing from a cached list
            patches = [v for v in self._read(fetch, RECHECK_AFTER_S) if parse(v)[:2] == (major, minor)]
        if not patches:
            raise ScenarioError(f"scenario field '{field}': {self.url.split('/')[2]} lists no {what} "
                                f"{asked}.x release")
        return patches[-1]


def write_pom(set_name: str, text: str) -> Path:
    """The pom of a release's server set, written into the cache where jvm finds it."""
    path = jvm.pom_of(set_name)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def cached(prefix: str, pinned: dict[str, str]) -> list[str]:
    """The releases of a system whose jars are in the cache (a pinned set by its release)."""
    out = set()
    for stamp in jvm.cache_root().glob(f"{prefix}-*/pom.sha256"):
        name = stamp.parent.name.removeprefix(f"{prefix}-")
        name = pinned.get(name, name)
        if parse(name) is not None:  # not another set under the same prefix (kafka-clients-2.0.0)
            out.add(name)
    return sorted(out, key=parse)


ANY = "any"  # doctor's row for the releases a system fetches by cluster.version (System.variants)


@dataclass(frozen=True)
class Release:
    """One release of a Java server as the harness runs it: what `cluster.version` asked
    and the release that is; a pinned name keeps its pom (systems/maven), any other has one
    written into the cache (`pom_text`, the system's)."""

    version: str  # "3.7.2"
    asked: str  # what cluster.version said ("3.9", "4.3", "3.7.2")
    prefix: ClassVar[str] = ""  # the sets' names: kafka-3.7.2
    pinned_names: ClassVar[dict[str, str]] = {}  # cluster.version -> the release of its pinned pom

    @classmethod
    def named(cls, asked: str, listing: Listing, what: str, fetch: bool = True) -> "Release":
        if asked in cls.pinned_names:
            return cls(cls.pinned_names[asked], asked)
        return cls(listing.newest(asked, what, fetch), asked)

    @property
    def pinned(self) -> bool:
        return self.asked in self.pinned_names

    @property
    def set_name(self) -> str:
        """The server set its jars are cached under (the pinned ones keep their names)."""
        return f"{self.prefix}-{self.asked}" if self.pinned else f"{self.prefix}-{self.version}"

    def pom_text(self) -> str:
        raise NotImplementedError

    def pom(self) -> Optional[Path]:
        """The pom its jars resolve from: None for a pinned set, else written into the cache."""
        return None if self.pinned else write_pom(self.set_name, self.pom_text())

    def classpath(self) -> str:
        """Its jars' classpath, resolved from Maven Central on first use."""
        self.pom()
        return jvm.classpath(self.set_name)

    def fetched(self) -> bool:
        self.pom()
        return jvm.fetched(self.set_name)


def machine_needs(asked: str, resolve) -> tuple[str, ...]:
    """What a release named by cluster.version needs of the machine: its pinned set, or
    Maven when its jars are not in the cache yet (`resolve(asked, fetch=False)`)."""
    if asked == ANY:
        return ("java", "mvn")
    try:
        r = resolve(asked, fetch=False)
    except Exception:  # a minor whose releases are not listed here yet: resolved online at the start
        return ("java", "mvn")
    if r.pinned:
        return ("java", r.set_name)
    return ("java",) if r.fetched() else ("java", "mvn")
