"""Where the project keeps what it fetches or builds, outside the work tree: the Maven sets,
nats-server releases, VerneMQ unpacked, the power-off layer and the Go that builds it."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """`$BROKERCHAOS_CACHE/<kind>`, else `~/.cache/brokerchaos/<kind>`."""
    base = os.environ.get("BROKERCHAOS_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "brokerchaos") / kind
