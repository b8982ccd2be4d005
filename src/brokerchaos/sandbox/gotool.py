"""Go, for what the project builds from source: the power-off layer (lazyfs/) and a
nats-server release PyPI does not serve. The machine's own `go` when it is new enough
(go.mod asks for 1.22), else the Go toolchain as the Go module proxy serves it (the module
golang.org/toolchain, a zip of the whole distribution), fetched once into the cache by
`make setup` and checked against a pinned digest: Debian's golang-go is too old for
go-fuse, and a fresh Debian machine has no other Go.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import urllib.request
import zipfile
from pathlib import Path
from typing import Optional

from .cache import cache_dir

MIN_VERSION = (1, 22)
TOOLCHAIN = "go1.26.8"
ZIP = f"v0.0.1-{TOOLCHAIN}.linux-amd64"
URL = f"https://proxy.golang.org/golang.org/toolchain/@v/{ZIP}.zip"
ZIP_SHA256 = "30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7"
FETCH_TIMEOUT_S = 600


class GoError(RuntimeError):
    """No Go here, and the toolchain could not be fetched."""


def cache_root() -> Path:
    return cache_dir("go") / TOOLCHAIN


def _cached() -> Path:
    return cache_root() / f"golang.org/toolchain@{ZIP}" / "bin" / "go"


@functools.cache
def _version(go: str) -> Optional[tuple[int, int]]:
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.strip().removeprefix("go").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _machine_gos() -> list[str]:
    return [g for g in (shutil.which("go"), "/usr/local/go/bin/go") if g and os.path.exists(g)]


def find() -> Optional[str]:
    """A Go that builds the project's sources: the machine's, or the one fetched before."""
    for go in _machine_gos():
        if (_version(go) or (0, 0)) >= MIN_VERSION:
            return go
    return str(_cached()) if _cached().exists() else None


def machine_go() -> Optional[str]:
    """The machine's own go, whatever its version (doctor names it when it is too old)."""
    return next(iter(_machine_gos()), None)


def ensure() -> str:
    """find(), or the toolchain fetched from the Go module proxy first (72 MB, once)."""
    return find() or fetch()


def fetch() -> str:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    part = root / f"toolchain.{os.getpid()}.zip"
    try:
        digest = hashlib.sha256()
        try:
            with urllib.request.urlopen(URL, timeout=60) as r, open(part, "wb") as f:
                while chunk := r.read(1 << 20):
                    digest.update(chunk)
                    f.write(chunk)
        except OSError as e:
            raise GoError(f"fetching Go {TOOLCHAIN} from the Go module proxy failed ({URL}): {e}") from None
        if digest.hexdigest() != ZIP_SHA256:
            raise GoError(f"Go {TOOLCHAIN} from {URL}: sha256 {digest.hexdigest()}, pinned {ZIP_SHA256}")
        _unzip(part, root)
    finally:
        part.unlink(missing_ok=True)
    return str(_cached())


def _unzip(archive: Path, root: Path) -> None:
    """Extract with each file's mode (zipfile drops it), the go binary last: its presence
    says the toolchain is whole."""
    go = _cached()
    with zipfile.ZipFile(archive) as z:
        members = sorted(z.infolist(), key=lambda i: i.filename == str(go.relative_to(root)))
        for info in members:
            path = Path(z.extract(info, root))
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                path.chmod(mode)
