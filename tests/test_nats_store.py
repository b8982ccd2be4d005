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
