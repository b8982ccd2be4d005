"""Which of a Pulsar cluster's files hold what (the `corrupt` and `truncate` faults): a
bookie's journal and entry logs hold the entries, its cookies say who it is, ZooKeeper
holds the ledgers' metadata; the brokers keep none."""
from __future__ import annotations

from pathlib import Path

from .. import jvm
from ..cluster import files_by_age


def bookie_data(d: Path) -> list[Path]:
    """A bookie's journal files (each entry fsynced there before the bookie acks it) and its
    entry logs (where the ledger storage flushes entries later), oldest write first: the
    newest is the journal being written. Every topic's entries share them."""
    return files_by_age([*(d / "journal" / "current").glob("*.txn"), *(d / "ledgers" / "current").glob("*.log")])


def bookie_metadata(d: Path) -> list[Path]:
    """A bookie's cookies (VERSION in its journal and ledger directories: who it is, which
    cluster it belongs to; a bookie whose cookie does not match refuses to start) and its
    last journal mark (where replay begins)."""
    return files_by_age([d / "journal" / "current" / "VERSION", d / "ledgers" / "current" / "VERSION",
                         d / "ledgers" / "current" / "lastMark"])


def preallocated(path: Path) -> bool:
    """BookKeeper preallocates its journal files (journalPreAllocSizeMB, 16 MB at a time),
    ZooKeeper its transaction logs."""
    return path.suffix == ".txn" or (path.parent.name == "version-2" and jvm.zookeeper_preallocates(path))
