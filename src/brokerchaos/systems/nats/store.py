"""One NATS server's own copy of the run's stream, read from its store (`workload.read_replicas`):
the message blocks (`<store>/jetstream/<account>/streams/<stream>/msgs/N.blk`) parsed record
by record, in block order, each message at its stream sequence. No server is asked: what a
node holds is what its files hold, whichever node leads and whatever the others say (the
restarted leader that kept a tail the others gave away, docs/findings/nats.md).

A record, as nats-server's filestore writes it (little-endian): its length (4 bytes, the top
bit set when it has headers), the sequence (8; the top bit set on an erased message, the
next on a tombstone), the time (8), the subject's length (2) and the subject, then with
headers their length (4) and the headers, the payload, and an 8-byte hash. Compressed or
encrypted blocks (stream `compression`, server encryption: not used by the harness) are not
read: the reader says so."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator

from ..runtime import FileCopyReader

HBIT, EBIT, TBIT = 1 << 31, 1 << 63, 1 << 62
HEAD, HASH = struct.Struct("<IQqH"), 8


class Torn(Exception):
    """A record that does not fit its block: a torn or unreadable block."""


def records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(sequence, payload) of each message record of one block, erased ones and tombstones left out."""
    i = 0
    while i + HEAD.size <= len(data):
        rl, seq, _, slen = HEAD.unpack_from(data, i)
        headers, rl = rl & HBIT, rl & ~HBIT
        if rl == 0 and not any(data[i:]):
            return  # a block's unused, zeroed end
        if rl < HEAD.size + slen + HASH or i + rl > len(data):
            raise Torn(f"a record of {rl} bytes at byte {i} of {len(data)}")
        j = i + HEAD.size + slen
        if headers:
            j += 4 + struct.unpack_from("<I", data, j)[0]
        if j > i + rl - HASH:
            raise Torn(f"headers past their record at byte {i}")
        if seq and not seq & (EBIT | TBIT):
            yield seq, data[j:i + rl - HASH]
        i += rl
    if i != len(data):
        raise Torn(f"{len(data) - i} bytes after the last whole record")


class StoreReader(FileCopyReader):
    """A node's copy of the stream, from its message blocks (module docstring)."""

    unreadable = (Torn,)

    def messages(self, path: Path, data: bytes):
        for seq, payload in records(data):
            yield payload, str(seq), None
