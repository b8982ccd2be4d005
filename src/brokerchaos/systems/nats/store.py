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
from typing import BinaryIO, Iterator

from ..runtime import FileCopyReader, as_file, heads, zeroed_rest

HBIT, EBIT, TBIT = 1 << 31, 1 << 63, 1 << 62
HEAD, HASH = struct.Struct("<IQqH"), 8


class Torn(Exception):
    """A record that does not fit its block: a torn or unreadable block."""


def records(block: bytes | BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(sequence, payload) of each message record of one block (its bytes, or the file open),
    erased ones and tombstones left out."""
    fh, at = as_file(block), 0
    for head in heads(fh, HEAD.size, Torn):
        rl, seq, _, slen = HEAD.unpack(head)
        headers, rl = rl & HBIT, rl & ~HBIT
        if rl == 0 and zeroed_rest(fh, head):
            return  # a block's unused, zeroed end
        if rl < HEAD.size + slen + HASH:
            raise Torn(f"a record of {rl} bytes at byte {at}")
        body = fh.read(rl - HEAD.size)
        if len(body) < rl - HEAD.size:
            raise Torn(f"a record of {rl} bytes at byte {at}, past the block's end")
        j = slen + (4 + struct.unpack_from("<I", body, slen)[0] if headers else 0)
        if j > len(body) - HASH:
            raise Torn(f"headers past their record at byte {at}")
        if seq and not seq & (EBIT | TBIT):
            yield seq, body[j:len(body) - HASH]
        at += rl


class StoreReader(FileCopyReader):
    """A node's copy of the stream, from its message blocks (module docstring)."""

    unreadable = (Torn,)

    def messages(self, path: Path, fh: BinaryIO):
        for seq, payload in records(fh):
            yield payload, str(seq), None
