"""An MQTT shared subscription's member (`workload.group`, kind `shared`), in a process of its
own (workload/group.py): a paho client subscribed to `$share/<group>-<run>/<topic>`, so the
broker hands each message to one member of the share group.

A member keeps the session of its slot: its client id is the run's and the slot's
(`<prefix>-<run>-g1-m1`), so a member killed and started again resumes the same session
(clean_session as `options.clean_session`, off by default) and gets what the broker kept for
it, as an application restarted with its client id does. Each message goes from paho's
network thread to a queue the member's worker processes in order (`process_ms`):

- `commit: after`: the PUBACK is sent (manual ack) once the worker has processed the
  message; what the member had not acked is the session's to deliver again;
- `auto`: paho's own PUBACK, sent as its callback returns, that is when the message is
  queued for the worker: a member killed with a queue of work has acked all of it;
- `before`: the same, said explicitly: each message acked as it arrives.

MQTT has no position: deliveries and acks carry none (partition `0`), and a broker cannot
be asked what a share group has still to deliver, so a member that is told to finish ends
`complete` once its queue is empty and nothing has come for QUIET_S seconds; at the end it
unsubscribes, so the session holds nothing for a later run.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Optional

from ..consumer import member_nodes, slot_of

PARTITION = "0"
QUIET_S = 3.0
CONNECT_TIMEOUT_S = 10.0


def _paho():
    import paho.mqtt.client as mqtt

    return mqtt


class MqttGroupMember:
    def __init__(self, client, name: str, spec, events) -> None:
        self.system = client
        self.name = name
        self.spec = spec
        self.events = events
        o = client.options
        self.qos = o.qos
        self.client_id = f"{client.ctx.prefix}-{client.ctx.run_id}-{slot_of(name)}"
        self.topic = f"$share/{spec.name}-{client.ctx.run_id}/{client.topic}"
        self.nodes = member_nodes(name, client.cluster.node_names)
        self.work: queue.Queue = queue.Queue()
        self.connected = threading.Event()
        self.last_error: Optional[str] = None
        self.last_delivery = time.monotonic()
        self.c = None

    def _client(self):
        mqtt = _paho()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id,
                        clean_session=self.system.options.clean_session, protocol=mqtt.MQTTv311,
                        manual_ack=self.spec.commit == "after")
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_message = self._on_message
        return c

    def _on_connect(self, c, _u, _flags, rc, _p=None) -> None:
        if rc == 0:
            c.subscribe(self.topic, qos=self.qos)
            self.connected.set()
        else:
            self.last_error = f"CONNACK {rc}"

    def _on_disconnect(self, _c, _u, _flags, rc, _p=None) -> None:
        self.connected.clear()
        self.last_error = f"disconnected: {rc}"

    def _on_message(self, _c, _u, msg) -> None:
        self.last_delivery = time.monotonic()
        self.work.put((msg.mid, msg.payload))
        if self.spec.commit != "after":  # paho's PUBACK goes as this returns
            self.events.commit(PARTITION, None, cumulative=False)

    def _connect(self, node: str) -> bool:
        c = self._client()
        host, port = self.system.mqtt_addr(node)
        try:
            c.connect(host, port, keepalive=self.system.options.keepalive)
        except OSError as e:
            self.last_error = f"{node}: {type(e).__name__}: {e}"[:200]
            return False
        c.loop_start()
        if self.connected.wait(CONNECT_TIMEOUT_S):
            self.c = c
            return True
        c.loop_stop()
        c.disconnect()
        return False

    def _ensure_connected(self) -> None:
        """Connected, to the first of its nodes that takes it (its paho loop gone when not)."""
        if self.c is not None and self.connected.is_set():
            return
        if self.c is not None:
            self.c.loop_stop()
            self.c = None
        for node in self.nodes:
            if self._connect(node):
                return
        time.sleep(0.5)

    def _process(self, mid: int, payload: bytes) -> None:
        self.events.process(payload, PARTITION, None, None)
        if self.spec.commit == "after":
            try:
                self.c.ack(mid, self.qos)
                self.events.commit(PARTITION, None, cumulative=False)
            except Exception as e:  # the connection went: the session delivers it again
                self.events.commit(PARTITION, None, f"{type(e).__name__}: {e}", cumulative=False)

    def run(self, finishing, idle: float) -> str:
        since = None
        while True:
            self._ensure_connected()
            try:
                mid, payload = self.work.get(timeout=0.2)
            except queue.Empty:
                mid = None
            if mid is not None:
                self._process(mid, payload)
                continue
            if not finishing.is_set():
                continue
            now = time.monotonic()
            since = since or now
            quiet = now - max(self.last_delivery, since)
            if self.c is not None and self.connected.is_set() and quiet > QUIET_S:
                return f"complete: nothing for {QUIET_S:.0f}s (MQTT cannot be asked what is left)"
            if now - since > idle + QUIET_S:
                return f"incomplete: not connected for {idle:.0f}s (last error {self.last_error})"

    def close(self) -> None:
        """Unsubscribe (the session keeps nothing for later runs) and disconnect."""
        if self.c is None:
            return
        try:
            if self.connected.is_set():
                done = threading.Event()
                self.c.on_unsubscribe = lambda *_a: done.set()
                self.c.unsubscribe(self.topic)
                done.wait(2.0)
            self.c.disconnect()
        finally:
            self.c.loop_stop()
