"""The Redis reader against a server that ends its connection mid-read (Sentinel's CLIENT KILL
TYPE normal when it reconfigures a node during a failover), without a server: the read goes
on from the entry it had reached, and only a kill is taken for one."""
import asyncio
from types import SimpleNamespace

import pytest

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from brokerchaos.systems.redis import read
from brokerchaos.systems.redis.conn import FIELD


class Server:
    def __init__(self, fail):
        self.fail, self.asked = list(fail), []
        self.entries = [(f"{i}-0".encode(), {FIELD: str(i).encode()}) for i in range(1, 25_001)]

    async def xrange(self, stream, min, max, count):
        self.asked.append(min)
        failure = self.fail.pop(0) if self.fail else None
        if failure is not None:
            raise failure
        first = 0 if min == "-" else int(min[1:].split("-")[0])
        return self.entries[first:first + count]

    async def aclose(self):
        pass


def _read(monkeypatch, fail, idle=5.0):
    server = Server(fail)
    monkeypatch.setattr(read, "client_for", lambda addr, timeout: server)
    cluster = SimpleNamespace(address=lambda node: ("198.18.0.12", 6379), node_at=lambda host, port: "n2")
    got = []
    reader = read.RedisReader(SimpleNamespace(cluster=cluster, stream_name="s"), "r1", "n2")
    status = asyncio.run(reader.read(lambda payload, eid, node: got.append(eid), idle))
    return status, got, server.asked


# how redis-py says a killed connection: closed when the kill found nothing unread, reset when
# it found the ask still unread in the server's buffer (CI, a replica read during a failover)
KILLS = ["Connection closed by server.",
         "Error while reading from 198.18.0.11:6379 : (104, 'Connection reset by peer')"]


@pytest.mark.parametrize("said", KILLS)
def test_a_connection_killed_mid_read_is_read_on_from_where_it_was(monkeypatch, said):
    status, got, asked = _read(monkeypatch, [RedisConnectionError(said)])  # the first ask is killed
    assert status == "complete" and len(got) == 25_000 and len(set(got)) == 25_000
    assert asked == ["-", "-", "(10000-0", "(20000-0"]
    status, got, asked = _read(monkeypatch, [None, RedisConnectionError(said)])  # the second
    assert status == "complete" and len(got) == 25_000 and len(set(got)) == 25_000
    assert asked == ["-", "(10000-0", "(10000-0", "(20000-0"]


def test_a_refused_command_or_a_kill_past_idle_is_an_incomplete_read(monkeypatch):
    status, got, _ = _read(monkeypatch, [ResponseError("WRONGTYPE")])
    assert status.startswith("incomplete: XRANGE on n2 failed: ResponseError") and got == []
    kill = RedisConnectionError("Connection closed by server.")
    status, _, _ = _read(monkeypatch, [kill], idle=0.0)
    assert status.startswith("incomplete: XRANGE on n2 failed: ConnectionError: Connection closed by server")
