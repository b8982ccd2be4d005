"""A RabbitMQ node's own copy of a quorum queue, read from its Ra member's files
(systems/rabbitmq/ralog.py): the first records of a WAL RabbitMQ 3.10 wrote
(tests/data/rabbitmq-3.10-first.wal: the queue's setup, then its first 8 enqueues), and
segments and WAL records written by the format's rules."""
import struct
from pathlib import Path

import pytest

WAL = Path(__file__).parent / "data" / "rabbitmq-3.10-first.wal"
UID = b"2F_BC-8QV164UFBZXR"


def test_a_wal_written_by_rabbitmq_yields_its_member_s_enqueued_messages_at_their_indexes():
    from brokerchaos.systems.rabbitmq.ralog import payload, wal_entries

    got = [(idx, trunc, payload(e)) for idx, trunc, e in wal_entries(WAL.read_bytes(), UID)]
    assert [g[0] for g in got] == list(range(12)) and not any(g[1] for g in got)
    assert [g[2] for g in got] == [None] * 4 + [f"p1:{k}".encode() for k in range(1, 9)]
    assert list(wal_entries(WAL.read_bytes(), b"2F_OTHER-QUEUE")) == []  # another member's records
    # a record cut short is where the WAL was being written: the whole ones before it stand
    assert len(list(wal_entries(WAL.read_bytes()[:-5], UID))) == 11


def _term(payload: bytes) -> bytes:
    """term_to_binary of rabbit_fifo's enqueue command of a message (3.10's shape)."""
    def atom(a):
        return b"\x77" + bytes([len(a)]) + a

    def binary(b):
        return b"\x6d" + struct.pack(">I", len(b)) + b

    def tup(*xs):
        return b"\x68" + bytes([len(xs)]) + b"".join(xs)

    content = tup(atom(b"content"), b"\x61\x3c", atom(b"none"), binary(b""), atom(b"rabbit_framing_amqp_0_9_1"),
                  b"\x6c\x00\x00\x00\x01" + binary(payload) + b"\x6a")
    msg = tup(atom(b"basic_message"), atom(b"x"), b"\x6a", content, binary(b""), atom(b"true"))
    meta = b"\x74\x00\x00\x00\x01" + atom(b"ts") + b"\x62\x00\x00\x00\x07"
    return b"\x83" + tup(atom(b"$usr"), meta, tup(atom(b"enqueue"), atom(b"pid"), b"\x61\x01", msg), atom(b"ok"))


def _segment(entries: list[tuple[int, bytes]], version: int = 2, count: int = 8) -> bytes:
    rec = struct.Struct(">QQQII" if version == 2 else ">QQIII")
    data_at, index, data = 8 + count * rec.size, b"", b""
    for idx, e in entries:
        index += rec.pack(idx, 1, data_at + len(data), len(e), 0)
        data += e
    return b"RASG" + struct.pack(">HH", version, count) + index + b"\x00" * (count * rec.size - len(index)) + data


def _wal_record(idx: int, entry: bytes, uid: bytes = UID, trunc: bool = False) -> bytes:
    head = (int(trunc) << 23) | 7  # a new member reference, 7, its UId spelled out
    return struct.pack(">I", head << 8)[:3] + struct.pack(">H", len(uid)) + uid + struct.pack(
        ">IIQQ", 1, len(entry), idx, 1) + entry


@pytest.mark.parametrize("version", [1, 2])
def test_a_member_s_log_is_its_segments_then_the_wal_a_truncating_write_dropping_what_follows(tmp_path, version):
    from brokerchaos.systems.rabbitmq.ralog import member_log, payload, segment_entries

    ra = tmp_path / "quorum"
    member = ra / UID.decode()
    member.mkdir(parents=True)
    (member / "config").write_text("#{cluster_name => '%2F_bc-run-001', uid => <<\"x\">>}.")
    # index 3 written twice in the segment: the later write (an index going back) wins
    seg = _segment([(1, _term(b"p1:1")), (2, _term(b"p1:2")), (3, _term(b"p1:3")), (3, _term(b"p1:9"))], version)
    assert [payload(e) for _, e in segment_entries(seg)] == [b"p1:1", b"p1:2", b"p1:9"]
    (member / "00000001.segment").write_bytes(seg)
    # the WAL: 4 and 5, then a new leader's truncating write at 4, and another queue's record
    (ra / "00000001.wal").write_bytes(b"RAWA\x01" + _wal_record(4, _term(b"p1:4")) + _wal_record(5, _term(b"p1:5"))
                                      + _wal_record(4, _term(b"p2:1"), trunc=True)
                                      + _wal_record(9, _term(b"p3:1"), uid=b"2F_OTHER") + b"\x00" * 40)
    log = member_log(ra, "bc-run-001")
    assert {i: payload(e) for i, e in log.items()} == {1: b"p1:1", 2: b"p1:2", 3: b"p1:9", 4: b"p2:1"}
    # a snapshot at 2 compacted what it covers
    (member / "snapshots" / "0000000000000001_0000000000000002").mkdir(parents=True)
    assert sorted(member_log(ra, "bc-run-001")) == [3, 4]
    with pytest.raises(KeyError):
        member_log(ra, "bc-run-002")


def test_a_member_read_names_each_message_at_its_index_and_says_why_it_could_not():
    import asyncio
    from types import SimpleNamespace

    from brokerchaos.systems.rabbitmq.ralog import MemberReader

    ra = WAL.parent / "no-such-ra-dir"
    got = []
    end = asyncio.run(MemberReader(SimpleNamespace(ra_dir=lambda n: ra), "n2", "bc-run-001").read(
        lambda *a: got.append(a), 1.0))
    assert end.startswith("incomplete: n2's member of bc-run-001: KeyError") and got == []
    end = asyncio.run(MemberReader(SimpleNamespace(), "n2", "q").read(lambda *a: None, 1.0))
    assert end.startswith("incomplete: this cluster's files are not the harness's")


def test_external_terms_decode_as_python_values():
    from brokerchaos.systems.rabbitmq.etf import Unreadable, decode

    assert decode(b"\x83\x68\x03\x61\x05\x62\xff\xff\xff\xfe\x6e\x02\x00\x00\x01") == (5, -2, 256)
    assert decode(b"\x83\x74\x00\x00\x00\x01\x77\x01a\x6b\x00\x02hi") == {"a": [104, 105]}
    with pytest.raises(Unreadable):
        decode(b"\x83\x50\x00")  # a compressed term
