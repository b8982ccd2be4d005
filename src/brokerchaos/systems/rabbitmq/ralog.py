"""One RabbitMQ node's own copy of the run's quorum queue (`workload.read_replicas`): its Ra
member's log, read from the node's files without asking any node, each message at its Raft
index. Read before the end read (`Client.replicas_before_read`): the end read settles the
messages, and a member whose messages are all settled snapshots and drops its log.

The files, as Ra (2.x, RabbitMQ 3.10+) writes them, under `<mnesia>/quorum/<node>/`:
- the write-ahead log (`*.wal`, every member on the node appends to it): `RAWA` and a
  version byte, then records: a truncate bit, a bit set when the record is the same
  member's as the one before, a 22-bit member reference, then (bit clear) the member's
  UId's length (16 bits) and its UId, a checksum (32), the entry's length (32), its index
  and term (64 + 64), and the entry; a record of zeros is a preallocated end. A truncating
  record drops the member's entries above its index (a new leader's log overwriting);
- each member's segments (`<UId>/*.segment`, entries the WAL handed on): `RASG`, a version
  (16 bits: 1 or 2) and the index's size (16), the index (index, term, offset: 32 bits in
  version 1 and 64 in 2, length, CRC), then the entries; an index going backwards drops the
  entries above it;
- the member's snapshot (`<UId>/snapshots/<term>_<index>/`): entries up to its index are
  compacted away (all settled), not read.
An entry is an Erlang term (term_to_binary); a message is rabbit_fifo's enqueue command,
`{'$usr', Meta, {enqueue, Pid, Seq, #basic_message{content = #content{payload_fragments_rev}}}, _}`.
The member is the directory whose `config` names the run's queue (`cluster_name`)."""
from __future__ import annotations

import asyncio
import re
import struct
from pathlib import Path
from typing import Iterator, Optional

from .etf import Unreadable, decode

WAL_MAGIC, SEGMENT_MAGIC = b"RAWA", b"RASG"


def wal_entries(data: bytes, uid: bytes) -> Iterator[tuple[int, bool, bytes]]:
    """(index, truncating, entry) of each of one member's records in a WAL file."""
    if data[:4] != WAL_MAGIC:
        raise Unreadable(f"not a Ra WAL: {data[:5]!r}")
    refs: dict[int, bytes] = {}
    i = 5
    while i + 24 <= len(data):
        head = struct.unpack_from(">I", data, i)[0] >> 8  # the first 24 bits
        trunc, same, ref = head >> 23, (head >> 22) & 1, head & 0x3FFFFF
        j = i + 3
        if not same:
            n = struct.unpack_from(">H", data, j)[0]
            refs[ref] = data[j + 2:j + 2 + n]
            j += 2 + n
        if j + 24 > len(data):
            return
        crc, length, idx, _ = struct.unpack_from(">IIQQ", data, j)
        if length == 0 and crc == 0:
            return  # a preallocated, unwritten end
        if j + 24 + length > len(data):
            return  # a record cut short: where the WAL was being written
        if refs.get(ref) == uid:
            yield idx, bool(trunc), data[j + 24:j + 24 + length]
        i = j + 24 + length


def segment_entries(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(index, entry) of each entry of a segment file, overwritten ones left out."""
    if len(data) < 8:
        return  # a new segment, its header not written yet
    if data[:4] != SEGMENT_MAGIC:
        raise Unreadable(f"not a Ra segment: {data[:4]!r}")
    version, count = struct.unpack_from(">HH", data, 4)
    rec = {1: struct.Struct(">QQIII"), 2: struct.Struct(">QQQII")}.get(version)
    if rec is None:
        raise Unreadable(f"Ra segment version {version}")
    index: dict[int, tuple[int, int]] = {}
    for k in range(count):
        at = 8 + k * rec.size
        if at + rec.size > len(data):
            break
        idx, term, offset, length, _ = rec.unpack_from(data, at)
        if idx == term == offset == length == 0:
            break  # the index's unwritten rest
        for later in [x for x in index if x > idx]:
            del index[later]
        index[idx] = (offset, length)
    for idx in sorted(index):
        offset, length = index[idx]
        if offset + length > len(data):
            raise Unreadable(f"entry {idx} past the segment's end")
        yield idx, data[offset:offset + length]


def payload(entry: bytes) -> Optional[bytes]:
    """The message body of an enqueue command; None for any other command."""
    cmd = decode(entry)
    if not (isinstance(cmd, tuple) and len(cmd) == 4 and cmd[0] == "$usr"):
        return None
    op = cmd[2]
    if not (isinstance(op, tuple) and len(op) == 4 and op[0] == "enqueue"):
        return None
    msg = op[3]
    content = msg[3] if isinstance(msg, tuple) and msg and msg[0] == "basic_message" else None
    if not (isinstance(content, tuple) and content and content[0] == "content"):
        raise Unreadable(f"an enqueued message this reader does not know: {str(msg)[:120]}")
    return b"".join(reversed(content[5]))


def member_dir(ra: Path, queue: str) -> Optional[Path]:
    """The node's member of `queue`: the directory whose config names it (the newest, should
    a deleted queue of the same name have left one behind)."""
    found = []
    for config in ra.glob("*/config"):
        name = re.search(r"cluster_name\s*=>\s*'([^']*)'", config.read_text(errors="replace"))
        if name and name.group(1).endswith("_" + queue):
            found.append((config.stat().st_mtime, config.parent))
    return max(found)[1] if found else None


def snapshot_index(member: Path) -> int:
    """The index of the member's latest snapshot (0: none)."""
    idx = [int(p.name.rpartition("_")[2], 16) for p in (member / "snapshots").glob("*_*")
           if re.fullmatch(r"[0-9A-F]+_[0-9A-F]+", p.name)]
    return max(idx, default=0)


def member_log(ra: Path, queue: str) -> dict[int, bytes]:
    """The member's entries by index: its segments, then the WAL's records (a later write of
    an index replaces an earlier one, a truncating one drops those above it), above its
    snapshot. KeyError when the node has no member of the queue."""
    member = member_dir(ra, queue)
    if member is None:
        raise KeyError(f"no member of {queue} in {ra}")
    log: dict[int, bytes] = {}
    for seg in sorted(member.glob("*.segment")):
        log.update(segment_entries(seg.read_bytes()))
    uid = member.name.encode()
    for wal in sorted(ra.glob("*.wal")):
        for idx, trunc, entry in wal_entries(wal.read_bytes(), uid):
            if trunc:
                for later in [x for x in log if x > idx]:
                    del log[later]
            log[idx] = entry
    snap = snapshot_index(member)
    return {i: e for i, e in log.items() if i > snap}


def last_index(ra: Path, queue: str) -> int:
    """The last index of the node's member's log (-1: unreadable, or no member)."""
    try:
        return max(member_log(ra, queue), default=0)
    except (OSError, KeyError, Unreadable, struct.error):
        return -1


class MemberReader:
    """A node's copy of the quorum queue, from its member's log (module docstring)."""

    unreadable = (Unreadable, KeyError, struct.error)

    def __init__(self, cluster, node: str, queue: str) -> None:
        self.cluster, self.node, self.queue = cluster, node, queue

    async def read(self, deliver, idle: float) -> str:
        ra = getattr(self.cluster, "ra_dir", None)
        if ra is None:
            return "incomplete: this cluster's files are not the harness's to read (an external cluster)"
        try:
            log = await asyncio.to_thread(member_log, ra(self.node), self.queue)
            for idx in sorted(log):
                body = payload(log[idx])
                if body is not None:
                    deliver(body, str(idx), self.node, None)
        except (OSError, *self.unreadable) as e:
            return f"incomplete: {self.node}'s member of {self.queue}: {type(e).__name__}: {e}"
        return "complete"
