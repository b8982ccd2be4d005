"""What a system needs of the machine, declared by the system itself (`System.machine_setup`):
each need's name, what it is for, the command that supplies it and a probe (None: ready,
else what is missing). `brokerchaos doctor` lists them and `run` asks those of its scenario;
neither names a system. The helpers are the probes and version looks the systems share."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Optional

from . import jvm

APT = "make setup (or apt-get install {})"


@dataclass(frozen=True)
class Need:
    name: str
    what: str  # what it is for, in a few words
    fix: str
    probe: Callable[[], Optional[str]]  # None: ready; else what is missing


def program(name: str, *paths: str) -> Optional[str]:
    return shutil.which(name) or next((p for p in paths if os.path.exists(p)), None)


def absent(name: str, *paths: str) -> Optional[str]:
    return None if program(name, *paths) else f"no {name}"


def package(name: str, what: str, debian: str, *paths: str) -> Need:
    """A server program from a Debian package."""
    return Need(name, what, APT.format(debian), lambda: absent(name, *paths))


def server_set(name: str, what: str) -> Need:
    """A Java server set's jars, fetched from Maven Central through its pinned pom."""
    def probe() -> Optional[str]:
        if jvm.fetched(name):
            return None
        return None if shutil.which("mvn") else f"{name}'s jars are not in the cache, and there is no mvn to fetch them"
    return Need(name, what, f"brokerchaos fetch {name}", probe)


def pom_version(server_set: str, artifact: str) -> Optional[str]:
    """The version a pinned pom names for an artifact."""
    text = (jvm.POMS / f"{server_set}.xml").read_text()
    m = re.search(rf"<artifactId>{re.escape(artifact)}</artifactId>\s*<version>([^<]+)</version>", text)
    return m.group(1) if m else None


def debian(package: str) -> str:
    """A Debian package's installed version, or why there is none."""
    try:
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no dpkg-query)"
    if r.returncode != 0 or not r.stdout:
        return "not installed"
    return r.stdout.split(":")[-1].split("-")[0].split("+")[0]
