"""A Kafka 3.9 broker whose ZooKeeper session expired while it started (a 3 s session, a
loaded machine: a busy-core clean-clone run, 2026-11-29) is started once more at the
bring-up, and the run says so; any other exit while starting, or a second one, stays the
cluster's failure. The logs are a real broker's (tests/data/kafka-zk-startup)."""
import asyncio
from pathlib import Path
from types import SimpleNamespace

from brokerchaos.systems.kafka import apache

DATA = Path(__file__).parent / "data" / "kafka-zk-startup"


def test_the_fatal_start_up_error_for_an_expired_session_is_told_from_others(tmp_path):
    expired = DATA / "session-expired.log"
    assert apache._startup_session_expired(expired)
    other = tmp_path / "other.log"
    other.write_text(expired.read_text().replace("SessionExpiredException: KeeperErrorCode = Session expired",
                                                 "NodeExistsException: KeeperErrorCode = NodeExists"))
    assert not apache._startup_session_expired(other)  # its registration still there: not this cause
    assert not apache._startup_session_expired(DATA / "started.log")
    assert not apache._startup_session_expired(tmp_path / "none.log")


class _Cluster(apache.ZooKeeperKafka):
    def __init__(self, logs: dict):
        self.logs, self.started, self.start_notes, self.started_once = logs, [], {}, set()

    @property
    def options(self):
        return SimpleNamespace(zk_session_timeout_ms=3000)

    def log(self, name):
        return self.logs[name]

    def start_node(self, node):
        self.started.append(node)


def test_a_broker_whose_session_expired_while_starting_is_started_once_more():
    c = _Cluster({"n2": DATA / "session-expired.log", "n3": DATA / "started.log"})
    assert asyncio.run(c.started_again("n2")) is True and c.started == ["n2"]
    assert "ZooKeeper session (3000 ms) expired; started again" in c.start_notes["n2"]
    assert asyncio.run(c.started_again("n2")) is False and c.started == ["n2"]  # a second exit: the cluster's
    assert asyncio.run(c.started_again("n3")) is False  # exited for no such cause
    assert asyncio.run(c.started_again("zk")) is False
