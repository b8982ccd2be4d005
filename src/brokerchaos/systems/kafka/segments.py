"""One Kafka broker's own copy of the run's topic (`workload.read_replicas`): its log segments
(`<log dir>/<topic>-<partition>/<base offset>.log`) parsed batch by batch, record by record, in
offset order, each message at `<partition>:<offset>` as the end read names it. No broker is
asked: what a replica holds is what its files hold, the leader's and each follower's alike
(a follower truncated after an unclean election, a log that kept what the others gave away).

The format is Kafka's record batch (magic 2, big-endian): the base offset (8 bytes), the
batch's length after that field (4), the leader epoch (4), the magic (1), a CRC (4), the
attributes (2: the codec in the low 3 bits, bit 5 a control batch), the last offset delta
(4), two timestamps (8 + 8), the producer id, epoch and base sequence (8 + 2 + 4), and the
record count (4); then each record: its length (a zigzag varint), attributes (1), the
timestamp delta and the offset delta (varints), the key and the value (a varint length, -1
for none, then the bytes) and the headers. Control batches (a transaction's commit or abort
marker) hold no message; a compressed batch (the harness's producers do not compress) or an
older magic is not read, and the reader says so."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO, Iterator

from ..runtime import FileCopyReader, as_file, heads, zeroed_rest

BATCH = struct.Struct(">qiibIhiqqqhii")  # 61 bytes, base offset to record count
CONTROL, CODEC = 1 << 5, 0x7


class Unreadable(Exception):
    """A batch the parser cannot read: torn, compressed, or of an older format."""


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """A zigzag varint at `i`: (value, the index after it)."""
    shift = raw = 0
    while True:
        if i >= len(data):
            raise Unreadable("a varint past the end of its batch")
        b = data[i]
        raw |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), i
        shift += 7


def _bytes(data: bytes, i: int) -> tuple[bytes | None, int]:
    n, i = _varint(data, i)
    return (None, i) if n < 0 else (data[i:i + n], i + n)


def records(segment: bytes | BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(offset, value) of each message of one segment (its bytes, or the file open), control
    batches left out."""
    fh, at = as_file(segment), 0
    for head in heads(fh, BATCH.size, Unreadable):
        base, length, _, magic, _, attrs, _, _, _, _, _, _, count = BATCH.unpack(head)
        if length <= 0 and zeroed_rest(fh, head):
            return  # zeroed space after the last batch
        if magic != 2 or length < BATCH.size - 12:
            raise Unreadable(f"a batch of {length} bytes, magic {magic}, at byte {at}")
        if attrs & CODEC:
            raise Unreadable(f"a compressed batch (codec {attrs & CODEC}) at byte {at}")
        body = fh.read(length + 12 - BATCH.size)
        if len(body) < length + 12 - BATCH.size:
            raise Unreadable(f"a batch of {length} bytes at byte {at}, past the segment's end")
        if not attrs & CONTROL:
            yield from _batch(body, base, count)
        at += 12 + length


def _batch(body: bytes, base: int, count: int) -> Iterator[tuple[int, bytes | None]]:
    j = 0
    for _ in range(count):
        length, j = _varint(body, j)
        nxt = j + length
        _, k = _varint(body, j + 1)  # the timestamp delta, after the attributes byte
        delta, k = _varint(body, k)
        _, k = _bytes(body, k)  # the key
        value, _ = _bytes(body, k)
        yield base + delta, value
        j = nxt


class SegmentReader(FileCopyReader):
    """A broker's copy of the topic, from its segment files (module docstring)."""

    unreadable = (Unreadable,)

    def __init__(self, cluster, node: str, partitions: int) -> None:
        super().__init__(cluster, node)
        self.partitions = partitions

    def messages(self, path: Path, fh: BinaryIO):
        part = path.parent.name.rpartition("-")[2]
        if not part.isdigit():
            return  # a partition's directory being deleted (`…-delete`), not the topic's
        for offset, value in records(fh):
            yield value or b"", f"{part}:{offset}", part if self.partitions > 1 else None
