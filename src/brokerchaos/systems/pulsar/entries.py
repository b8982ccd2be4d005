"""One bookie's own copy of the run's topic (`workload.read_replicas`): the entries of the
topic's ledgers in its journal and entry-log files, parsed without asking any server, each
message at the position the end read names it, `(ledger,entry,partition,batch index)`.

The files, as BookKeeper writes them (big-endian): a journal (`<journal>/current/<id>.txn`)
is a 512-byte header (`BKLG`, the format version), then records, each its length (4 bytes)
and an entry; a length of -256 starts padding (its own length, then that many bytes to
skip), and 0, or a record cut short, is where the journal was last written to (as the
bookie's own replay reads it). An entry log (`<ledgers>/current/<id>.log`) is a 1,024-byte
header (`BKLO`), then entries, each its length (4 bytes) and the entry, up to an entry cut
short (the end a live bookie is flushing to: what it flushes is still in its journal). An entry is its
ledger id and entry id (8 + 8), the last add confirmed and the ledger's length (8 + 8), the
digest (CRC32C: 4 bytes; CRC32: 8; the ledger's metadata says which), then what the broker
wrote: Pulsar's entry (a broker-entry-metadata prefix, magic 0x0e02, when configured; magic
0x0e01 and a checksum; the message metadata's length and the metadata, protobuf; the
payload, or for a batch each message's metadata length, metadata and payload). Entries with
a negative id (a bookie's own records: fencing, keys, the entry log's ledger map) and
entries of other ledgers (other topics, cursors) are not the topic's.

Which copies should agree: BookKeeper writes an entry to `write_quorum` bookies of its
fragment's ensemble, striped from the entry id (entry e of an ensemble of E on bookies
e mod E, e+1 mod E, ...). A row's `partition` names that write set, so copies are compared
with the bookies meant to hold them (docs/history-format.md, "Replicas"); a copy on a bookie
outside its entry's write set (written there before the ensemble changed) is named as such,
alone in its group, as is an entry past the last one of a ledger the client closed (written
to some bookies, failed, and written again in the next ledger: not part of this one).
Compressed or encrypted messages are not read: the reader says so."""
from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

from ..base import SystemError_
from ..runtime import FileCopyReader, as_file, zeroed_rest

JOURNAL_HEADER, ENTRY_LOG_HEADER, PADDING = 512, 1024, -256
ENTRY_HEAD = struct.Struct(">qqqq")  # ledger id, entry id, last add confirmed, length
MAGIC, BROKER_MAGIC = 0x0E01, 0x0E02
DIGEST_LENGTH = {"CRC32C": 4, "CRC32": 8, "HMAC": 20, "DUMMY": 0}
# a ledger's metadata as the broker prints it in the topic's internal stats
_ENSEMBLE = re.compile(r"(?<=[{ ])(\d+)=\[([^\]]*)\]")


class Unreadable(Exception):
    """An entry or a file the parser cannot read: torn, compressed, encrypted, unknown."""


@dataclass(frozen=True)
class Ledger:
    """One of the topic's ledgers as its metadata says: the topic partition (-1: none), the
    write quorum, the digest's length, and each fragment's first entry and ensemble."""

    partition: int
    write_quorum: int
    digest: int
    fragments: tuple[tuple[int, tuple[str, ...]], ...]
    last: Optional[int] = None  # a closed ledger's last entry (None: open)

    @classmethod
    def parse(cls, partition: int, metadata: str, node_of) -> "Ledger":
        qw = re.search(r"writeQuorumSize=(\d+)", metadata)
        digest = re.search(r"digestType=(\w+)", metadata)
        frags = tuple(sorted((int(first), tuple(node_of(a.strip()) for a in ens.split(",")))
                             for first, ens in _ENSEMBLE.findall(metadata)))
        if not qw or not frags:
            raise Unreadable(f"no write quorum or ensemble in the ledger's metadata: {metadata[:200]!r}")
        kind = digest.group(1) if digest else "CRC32C"
        if kind not in DIGEST_LENGTH:
            raise Unreadable(f"digest type {kind} is not one this reader knows")
        last = re.search(r"lastEntryId=(-?\d+)", metadata) if "state=CLOSED" in metadata else None
        return cls(partition, int(qw.group(1)), DIGEST_LENGTH[kind], frags, int(last.group(1)) if last else None)

    def write_set(self, entry: int) -> tuple[str, ...]:
        """The bookies BookKeeper writes `entry` to."""
        ens = [e for first, e in self.fragments if first <= entry][-1]
        return tuple(ens[(entry + i) % len(ens)] for i in range(self.write_quorum))


def journal_entries(journal: bytes | BinaryIO) -> Iterator[bytes]:
    """Each entry of a journal file, in the order written, up to where it was last written."""
    fh = as_file(journal)
    head = fh.read(JOURNAL_HEADER)
    if head[:4] != b"BKLG" or struct.unpack(">i", head[4:8])[0] < 5:
        raise Unreadable(f"not a journal of format 5 or later: {head[:8]!r}")
    while len(raw := fh.read(4)) == 4:
        n = struct.unpack(">i", raw)[0]
        if n == PADDING:  # its length, then that many bytes to skip
            raw = fh.read(4)
            pad = struct.unpack(">i", raw)[0] if len(raw) == 4 else -1
            if pad < 0 or len(fh.read(pad)) < pad:
                return
            continue
        if n <= 0:
            return  # 0: never written past here
        entry = fh.read(n)
        if len(entry) < n:
            return  # a record cut short: where the bookie left off writing
        yield entry


def entry_log_entries(log: bytes | BinaryIO) -> Iterator[bytes]:
    """Each entry of an entry-log file, in the order written."""
    fh = as_file(log)
    head = fh.read(ENTRY_LOG_HEADER)
    if zeroed_rest(fh, head):
        return  # a new entry log whose buffered header is not written yet: nothing in it
    if head[:4] != b"BKLO":
        raise Unreadable(f"not an entry log: {head[:4]!r}")
    while raw := fh.read(4):
        n = struct.unpack(">i", raw)[0] if len(raw) == 4 else 0
        if n <= 0:
            if zeroed_rest(fh, raw):
                return
            raise Unreadable(f"an entry of {n} bytes in an entry log")
        entry = fh.read(n)
        if len(entry) < n:
            return  # the log's end being written (a live bookie flushing): still in its journal
        yield entry


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = out = 0
    while True:
        if i >= len(b):
            raise Unreadable("a protobuf varint past its message")
        out |= (b[i] & 0x7F) << shift
        i += 1
        if not b[i - 1] & 0x80:
            return out, i
        shift += 7


def _fields(b: bytes) -> dict[int, int]:
    """The varint fields of a protobuf message by number (the others skipped)."""
    out, i = {}, 0
    while i < len(b):
        key, i = _varint(b, i)
        kind = key & 7
        if kind == 0:
            out[key >> 3], i = _varint(b, i)
        elif kind == 2:
            n, i = _varint(b, i)
            i += n
        elif kind in (1, 5):
            i += 8 if kind == 1 else 4
        else:
            raise Unreadable(f"protobuf wire type {kind}")
    return out


def messages(payload: bytes) -> Iterator[tuple[int, bytes]]:
    """(batch index, -1 for a message alone; its payload) of each message of one Pulsar entry."""
    i = 0
    if struct.unpack_from(">H", payload, 0)[0] == BROKER_MAGIC:
        i = 6 + struct.unpack_from(">I", payload, 2)[0]
    if struct.unpack_from(">H", payload, i)[0] == MAGIC:
        i += 6  # the magic, a CRC32C of what follows
    n = struct.unpack_from(">I", payload, i)[0]
    meta = _fields(payload[i + 4:i + 4 + n])
    body = payload[i + 4 + n:]
    if meta.get(8, 0):  # compression
        raise Unreadable(f"a compressed entry (codec {meta[8]})")
    if 20 in meta:  # a marker (a transaction's, a replicated subscription's): no message
        return
    if 11 not in meta:  # num_messages_in_batch: absent for a message alone
        yield -1, body
        return
    j = 0
    for k in range(meta[11]):
        m = struct.unpack_from(">I", body, j)[0]
        size = _fields(body[j + 4:j + 4 + m]).get(3, 0)
        yield k, body[j + 4 + m:j + 4 + m + size]
        j += 4 + m + size


class BookieReader(FileCopyReader):
    """A bookie's copy of the topic's entries (module docstring). `ledgers`: the topic's
    ledgers by id, read from the topic's metadata before the files (`layout`)."""

    unreadable = (Unreadable, struct.error)

    def __init__(self, cluster, node: str, layout) -> None:
        super().__init__(cluster, node)
        self.layout, self.ledgers, self.seen = layout, {}, set()

    async def read(self, deliver, idle: float) -> str:
        try:
            self.ledgers = await self.layout()
        except Exception as e:
            return f"incomplete: the topic's ledgers could not be named: {type(e).__name__}: {e}"
        return await super().read(deliver, idle)

    def messages(self, path: Path, fh: BinaryIO):
        entries = journal_entries(fh) if path.suffix == ".txn" else entry_log_entries(fh)
        for entry in entries:
            lid, eid, _, _ = ENTRY_HEAD.unpack_from(entry, 0)
            ledger = self.ledgers.get(lid)
            if ledger is None or eid < 0 or (lid, eid) in self.seen:
                continue
            self.seen.add((lid, eid))
            group = _group(lid, ledger, eid, self.node)
            for k, body in messages(entry[ENTRY_HEAD.size + ledger.digest:]):
                yield body, f"({lid},{eid},{ledger.partition},{k})", group


async def layout(client) -> dict[int, Ledger]:
    """The topic's ledgers (each partition's), from the topic's internal stats with metadata."""
    parts = client.options.partitions
    ns, name = client.options.namespace, client.stream_name
    out = {}
    for p in range(parts) if parts > 1 else (-1,):
        topic = name if p < 0 else f"{name}-partition-{p}"
        stats = json.loads(await client.admin_get(f"/admin/v2/persistent/{ns}/{topic}/internalStats?metadata=true",
                                                  10.0))
        for lg in stats.get("ledgers", []):
            out[int(lg["ledgerId"])] = Ledger.parse(p, lg.get("metadata") or "", client.bookie_at)
    return out


def _group(lid: int, ledger: Ledger, eid: int, node: str) -> str:
    """The copies meant to agree: the entry's ledger and write set (a copy outside it, or
    past the end the ledger was closed at, alone)."""
    if ledger.last is not None and eid > ledger.last:
        return f"ledger {lid} past its last entry {ledger.last}, on {node}"
    write_set = ledger.write_set(eid)
    name = f"ledger {lid} on {' '.join(sorted(write_set))}"
    return name if node in write_set else f"{name}, a copy outside them on {node}"


class BookieCopies:
    """The Pulsar client's replica reads (workload.read_replicas): every bookie's copy."""

    replica_reads = True  # each bookie's entries (options.broker apache: Pulsar.check)

    async def replica_nodes(self) -> list[str]:
        """Every bookie: which of them hold which entries is the ledgers' metadata's to say
        (entries.py), read with their files."""
        bookies = getattr(self.cluster, "bookies", None)
        if not bookies:
            raise SystemError_("this cluster's bookies are not the harness's to read (pulsar-lite, or external)")
        return list(bookies)

    def replica_reader(self, name: str, node: str) -> BookieReader:
        return BookieReader(self.cluster, node, lambda: layout(self))

    def bookie_at(self, addr: str) -> str:
        """The bookie at `ip:port` as the ledgers' metadata names it (the address, if none of ours)."""
        host, _, port = addr.rpartition(":")
        return (self.cluster.node_at(host, int(port), "bookie") if port.isdigit() else None) or addr
