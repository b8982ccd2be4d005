"""Releases of the Python client libraries the producers and readers run in the harness's own
process (confluent-kafka with its librdkafka, pulsar-client with its C++ core), as
`options.client_version` names them: `X.Y.Z` as named, `X.Y` its newest patch in PyPI's
list. Each is installed once into the cache by pip (its wheel carries the C library), and a
session on a release other than the one this interpreter loaded runs in a child interpreter
that loads it first (runner/interpreter.py): two releases of one extension module cannot
share a process."""
from __future__ import annotations

import importlib
import importlib.metadata
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ScenarioError
from .base import SystemError_
from .releases import Listing, parse
from .runtime import cache_dir, retried

INSTALL_TIMEOUT_S = 300
FIELD = "options.client_version"


@dataclass(frozen=True)
class PyClient:
    """One release of a Python client library: its distribution, the module it is imported
    as, and the oldest minor the harness's calls run on (its own requirement's floor)."""

    dist: str  # confluent-kafka
    module: str  # confluent_kafka
    oldest: tuple[int, int]
    asked: str  # what options.client_version said: 2.4.0, or 2.6 for its newest patch

    def form_error(self) -> Optional[str]:
        """Why `asked` cannot be a release here (its form, or older than the harness runs on)."""
        p = parse(self.asked)
        if p is None:
            return f"a {self.dist} release such as {'.'.join(map(str, self.oldest))}.0, or a minor, not {self.asked!r}"
        if (p[0], p[1]) < self.oldest:
            return (f"{self.dist} {self.asked} is older than {'.'.join(map(str, self.oldest))}, the oldest whose "
                    "API the harness's producers and readers are written against")
        return None

    def listing(self) -> Listing:
        return Listing.pypi(self.dist)

    def version(self, fetch: bool = True) -> str:
        """The release `asked` names (a minor's newest patch), one PyPI lists."""
        listing = self.listing()
        version = listing.newest(self.asked, self.dist, fetch, FIELD)
        if listing.lists(version, fetch) is False:
            raise ScenarioError(f"scenario field '{FIELD}': PyPI lists no {self.dist} {version}")
        return version

    def loaded(self) -> Optional[str]:
        """The release this interpreter imports (None: not installed)."""
        try:
            return importlib.metadata.version(self.dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    def home(self, version: str) -> Path:
        return cache_dir("pypi") / f"{self.dist}-{version}"

    def install(self, version: str) -> Path:
        """The release in the cache, installed by pip once (a binary wheel: no build here)."""
        home = self.home(version)
        if (home / ".done").exists():
            return home
        tmp = home.with_name(home.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:",
                "--target", str(tmp), f"{self.dist}=={version}"]
        rc, err = retried(lambda: _pip(argv), f"installing {self.dist} {version}")
        if rc == "timeout":
            raise SystemError_(f"pip did not install {self.dist} {version} within {INSTALL_TIMEOUT_S} s")
        if rc != 0:
            first = next((x for x in err.splitlines() if x.startswith("ERROR")), err.strip()[-300:])
            raise SystemError_(f"pip could not install {self.dist} {version}: {first}")
        (tmp / ".done").write_text(version)
        shutil.rmtree(home, ignore_errors=True)
        tmp.rename(home)
        return home

    def activate(self, version: str) -> None:
        """This interpreter imports `version` from the cache from now on: called in a child
        interpreter before anything imported the module."""
        if self.module in sys.modules:
            raise SystemError_(f"{self.module} was imported before {self.dist} {version} could be put first")
        sys.path.insert(0, str(self.install(version)))
        importlib.invalidate_caches()
        if self.loaded() != version:
            raise SystemError_(f"{self.dist} {version} was installed into the cache but {self.loaded()} is loaded")


def ensure(client: Optional[PyClient]) -> None:
    """The release a scenario names, in the cache before anything starts (System.install)."""
    if client is not None:
        client.install(client.version())


def cached() -> dict[str, list[str]]:
    """The Python client releases in the cache, by distribution."""
    out: dict[str, list[str]] = {}
    root = cache_dir("pypi")
    for done in root.glob("*/.done") if root.exists() else []:
        dist, _, version = done.parent.name.rpartition("-")
        out.setdefault(dist, []).append(version)
    return {d: sorted(v, key=parse) for d, v in sorted(out.items())}


def _pip(argv: list[str]) -> tuple[int | str, str]:
    """pip's exit code (or "timeout") and what it said on stderr."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        return p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", ""
