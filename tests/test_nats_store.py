"""A NATS server's own copy of a stream, read from its message blocks (systems/nats/store.py)."""
import pytest


def _record(seq: int, payload: bytes, subject: bytes = b"bc-s.p1", headers: bytes = b"") -> bytes:
    """One message record as nats-server's filestore writes it (systems/nats/store.py)."""
    import struct

    from brokerchaos.systems.nats.store import HBIT

    hdr = struct.pack("<I", len(headers)) + headers if headers else b""
    rl = 22 + len(subject) + len(hdr) + len(payload) + 8
    return struct.pack("<IQqH", rl | (HBIT if headers else 0), seq, 0, len(subject)) + subject + hdr + payload + \
        b"\x00" * 8


def test_a_store_s_message_blocks_are_read_record_by_record_erased_ones_left_out():
    from brokerchaos.systems.nats.store import EBIT, Torn, records

    block = (_record(1, b"p1:1") + _record(2, b"p1:2", headers=b"NATS/1.0\r\nNats-Msg-Id: p1-2\r\n\r\n")
             + _record(3 | EBIT, b"p1:3") + _record(4, b"p1:4"))
    assert list(records(block + b"\x00" * 64)) == [(1, b"p1:1"), (2, b"p1:2"), (4, b"p1:4")]
    with pytest.raises(Torn, match="record of"):
        list(records(block + _record(5, b"p1:5")[:-3]))


def test_a_node_s_copy_is_read_file_by_file_and_a_torn_block_ends_it_incomplete(tmp_path):
    import asyncio
    from types import SimpleNamespace

    from brokerchaos.systems.nats.store import StoreReader

    (tmp_path / "1.blk").write_bytes(_record(1, b"p1:1") + _record(2, b"p1:2"))
    (tmp_path / "2.blk").write_bytes(_record(3, b"p1:3"))
    files = [tmp_path / "1.blk", tmp_path / "2.blk"]
    got = []

    def read(cluster):
        got.clear()
        return asyncio.run(StoreReader(cluster, "n2").read(lambda *a: got.append(a), 1.0))

    assert read(SimpleNamespace(data_files=lambda node: files)) == "complete"
    assert got == [(b"p1:1", "1", "n2", None), (b"p1:2", "2", "n2", None), (b"p1:3", "3", "n2", None)]
    (tmp_path / "2.blk").write_bytes(_record(3, b"p1:3")[:-1])
    assert read(SimpleNamespace(data_files=lambda node: files)).startswith("incomplete: ") and "2.blk on n2" in \
        read(SimpleNamespace(data_files=lambda node: files))
    assert len(got) == 2  # what the whole blocks hold, delivered before the torn one
    assert read(SimpleNamespace(data_files=lambda node: [])).startswith("complete: no file")
    assert read(SimpleNamespace()).startswith("incomplete: this cluster's files")
