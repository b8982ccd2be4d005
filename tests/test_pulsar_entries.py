"""A bookie's own copy of a Pulsar topic, read from its journal and entry logs
(systems/pulsar/entries.py), on entries written as BookKeeper and Pulsar write them."""
import struct

import pytest

META = ("LedgerMetadata{formatVersion=3, ensembleSize=3, writeQuorumSize=2, ackQuorumSize=2, state=OPEN, "
        "digestType=CRC32C, password=base64:, ensembles={0=[10.0.0.1:3181, 10.0.0.2:3181, 10.0.0.3:3181], "
        "4=[10.0.0.1:3181, 10.0.0.4:3181, 10.0.0.3:3181]}, customMetadata={}}")
BOOKIES = {"10.0.0.1:3181": "b1", "10.0.0.2:3181": "b2", "10.0.0.3:3181": "b3", "10.0.0.4:3181": "b4"}


def _proto(fields: dict[int, int], name: bytes = b"p1-run-001") -> bytes:
    out = b"\x0a" + bytes([len(name)]) + name  # producer_name, a length-delimited field skipped
    for k, v in fields.items():
        out += bytes([k << 3]) + _varint(v)
    return out


def _varint(v: int) -> bytes:
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def _pulsar(payloads: list[bytes], batch: bool = True, compression: int = 0) -> bytes:
    """A Pulsar entry: magic, checksum, metadata, then one payload or a batch of them."""
    fields = {2: 7, 3: 1_700_000_000_000} | ({11: len(payloads)} if batch else {}) | (
        {8: compression} if compression else {})
    meta = _proto(fields)
    if batch:
        body = b"".join(struct.pack(">I", 4) + b"\x18" + bytes([len(p)]) + b"\x40\x00" + p for p in payloads)
    else:
        body = payloads[0]
    return struct.pack(">HI", 0x0E01, 0) + struct.pack(">I", len(meta)) + meta + body


def _entry(lid: int, eid: int, pulsar: bytes) -> bytes:
    return struct.pack(">qqqq", lid, eid, -1, 0) + b"\x00" * 4 + pulsar  # CRC32C: a 4-byte digest


def _journal(entries: list[bytes], tail: bytes = b"") -> bytes:
    out = b"BKLG" + struct.pack(">i", 6) + b"\x00" * 504
    for i, e in enumerate(entries):
        out += struct.pack(">i", len(e)) + e
        if i == 0:  # a padding record after the first
            out += struct.pack(">ii", -256, 3) + b"\x00" * 3
    return out + tail


def test_a_ledger_s_write_set_is_striped_from_the_entry_id_in_its_fragment():
    from brokerchaos.systems.pulsar.entries import Ledger

    lg = Ledger.parse(-1, META, BOOKIES.get)
    assert (lg.write_quorum, lg.digest) == (2, 4)
    assert [lg.write_set(e) for e in (0, 1, 2, 3, 4, 5)] == [
        ("b1", "b2"), ("b2", "b3"), ("b3", "b1"), ("b1", "b2"), ("b4", "b3"), ("b3", "b1")]


def test_a_journal_s_entries_batches_and_messages_alone_are_read_up_to_where_it_was_written():
    from brokerchaos.systems.pulsar.entries import ENTRY_HEAD, journal_entries, messages

    es = [_entry(7, 0, _pulsar([b"p1:1", b"p1:2"])), _entry(7, -4096, b"key"), _entry(7, 1, _pulsar([b"p1:3"], False))]
    cut = struct.pack(">i", 100) + b"\x01" * 10  # a record cut short: where the bookie left off
    got = [(ENTRY_HEAD.unpack_from(e)[:2], list(messages(e[36:])) if ENTRY_HEAD.unpack_from(e)[1] >= 0 else None)
           for e in journal_entries(_journal(es, cut))]
    assert got == [((7, 0), [(0, b"p1:1"), (1, b"p1:2")]), ((7, -4096), None), ((7, 1), [(-1, b"p1:3")])]


def test_a_compressed_entry_or_a_file_that_is_no_entry_log_is_unreadable_not_skipped():
    from brokerchaos.systems.pulsar.entries import Unreadable, entry_log_entries, messages

    with pytest.raises(Unreadable, match="compressed"):
        list(messages(_pulsar([b"p1:1"], compression=1)))
    e = _entry(7, 0, _pulsar([b"p1:1"]))
    log = b"BKLO" + b"\x00" * 1020 + struct.pack(">i", len(e)) + e
    assert list(entry_log_entries(log + b"\x00" * 40)) == [e]
    assert list(entry_log_entries(b"")) == list(entry_log_entries(b"\x00" * 2048)) == []  # a new, empty log
    assert list(entry_log_entries(log + struct.pack(">i", 50) + b"\x01" * 5)) == [e]  # its end being written
    with pytest.raises(Unreadable, match="not an entry log"):
        list(entry_log_entries(b"BKLG" + b"\x00" * 1020))


def test_a_bookie_s_copy_names_each_message_s_position_and_write_set_once(tmp_path):
    import asyncio
    from types import SimpleNamespace

    from brokerchaos.systems.pulsar.entries import BookieReader, Ledger

    lg = Ledger.parse(-1, META.replace("state=OPEN", "state=CLOSED, length=900, lastEntryId=4"), BOOKIES.get)
    assert lg.last == 4 and Ledger.parse(-1, META, BOOKIES.get).last is None
    j = tmp_path / "1.txn"
    # entries 0-2 and 5 of the topic's ledger 7, entry 0 again (a retry), one of another ledger
    j.write_bytes(_journal([_entry(7, e, _pulsar([f"p1:{e}".encode()])) for e in (0, 1, 2, 5, 0)]
                           + [_entry(9, 0, _pulsar([b"x"]))]))

    async def layout():
        return {7: lg}

    got = []
    cluster = SimpleNamespace(data_files=lambda node: [j])
    end = asyncio.run(BookieReader(cluster, "b1", layout).read(lambda *a: got.append(a), 1.0))
    assert end == "complete"
    assert got == [(b"p1:0", "(7,0,-1,0)", "b1", "ledger 7 on b1 b2"),
                   (b"p1:1", "(7,1,-1,0)", "b1", "ledger 7 on b2 b3, a copy outside them on b1"),
                   (b"p1:2", "(7,2,-1,0)", "b1", "ledger 7 on b1 b3"),
                   (b"p1:5", "(7,5,-1,0)", "b1", "ledger 7 past its last entry 4, on b1")]

    async def no_layout():
        raise OSError("no broker answered")

    end = asyncio.run(BookieReader(cluster, "b1", no_layout).read(lambda *a: None, 1.0))
    assert end.startswith("incomplete: the topic's ledgers could not be named: OSError")
