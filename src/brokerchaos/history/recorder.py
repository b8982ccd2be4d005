"""Append-only Parquet recorder.

Each flush writes one complete Parquet file (written under a temporary name, then
renamed), so everything flushed survives a crash of the process and a reader never
sees a half-written file. Flushes happen when the buffer is full and at least every
`flush_interval` seconds while events keep coming, and on close.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq

from .schema import COLUMNS, EVENT_TYPES, SCHEMA

# the order of a buffered row's fields (run and client are the recorder's own)
_ROW_COLUMNS = ("seq", "t_ns", "type", "producer", "value", "offset", "node", "detail", "window", "intended_ns",
                "send_ns", "group", "partition", "position", "epoch", "txn", "topic")
# the rows as one struct array, converted by Arrow from the tuples: 0.3 µs a row, where
# transposing them into Python lists first cost 1.0-1.6 (two rows per message)
_ROW = pa.struct([SCHEMA.field(c) for c in _ROW_COLUMNS])
_KNOWN = frozenset(EVENT_TYPES)


class Recorder:
    """Records the events of one client of one run into `directory`.

    `seq` is assigned here, strictly increasing per client in the order events are
    recorded, which is the order the client observed them.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        run: str,
        client: str,
        clock_origin_ns: int,
        *,
        max_rows: int = 50_000,
        flush_interval: float = 1.0,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.run = run
        self.client = client
        self.origin = clock_origin_ns
        self.max_rows = max_rows
        self.flush_interval = flush_interval
        self._seq = 0
        self._part = 0
        self._rows: list[tuple] = []
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()
        self.rows_written = 0
        self.closed = False

    def now(self) -> int:
        return time.monotonic_ns() - self.origin

    def record(
        self,
        type_: str,
        producer: str | None = None,
        value: int | None = None,
        offset: str | None = None,
        node: str | None = None,
        detail: str | None = None,
        t_ns: int | None = None,
        window: int | None = None,
        intended: int | None = None,
        send_ns: int | None = None,
        group: str | None = None,
        partition: str | None = None,
        position: int | None = None,
        epoch: int | None = None,
        txn: int | None = None,
        topic: str | None = None,
    ) -> int:
        """Append one event; returns its t_ns. An unknown type is refused here, not found by
        the analysis later."""
        if type_ not in _KNOWN:
            raise ValueError(f"unknown history event type {type_!r} (known: {', '.join(EVENT_TYPES)})")
        t = time.monotonic_ns() - self.origin if t_ns is None else t_ns
        return self._append(t, (type_, producer, value, offset, node, detail, window, intended, send_ns, group,
                                partition, position, epoch, txn, topic))

    def _append(self, t: int, rest: tuple) -> int:
        """The row (seq, t, *rest), in _ROW_COLUMNS' order; returns t."""
        with self._lock:
            if self.closed:
                raise RuntimeError(f"recorder {self.client} of run {self.run} is closed")
            self._seq += 1
            # one tuple per row, turned into columns at the flush: a row costs one append
            # (the producer records two per message; at 80,000 msg/s that is the budget)
            rows = self._rows
            rows.append((self._seq, t, *rest))
            if len(rows) >= self.max_rows:
                self._flush_locked()
        return t

    def send_row(self, producer: str, value: int, node: Optional[str], detail: Optional[str],
                 intended: Optional[int]) -> int:
        """`record("send", ...)` for the producer's hottest row: its fields in place, no
        keywords (a message costs two rows; this and `outcome_row` are a third of its time)."""
        return self._append(time.monotonic_ns() - self.origin, ("send", producer, value, None, node, detail, None,
                                                                 intended, None, None, None, None, None, None, None))

    def outcome_row(self, kind: str, producer: str, value: int, offset: Optional[str], node: Optional[str],
                    detail: Optional[str], send_ns: Optional[int], txn: Optional[int]) -> int:
        """`record(kind, ...)` for a send's answer (ack, nack or unknown), as `send_row`."""
        if kind not in _KNOWN:
            raise ValueError(f"unknown history event type {kind!r} (known: {', '.join(EVENT_TYPES)})")
        return self._append(time.monotonic_ns() - self.origin, (kind, producer, value, offset, node, detail, None,
                                                                 None, send_ns, None, None, None, None, txn, None))

    def maybe_flush(self) -> None:
        """Called periodically by the owner's loop; flushes if the interval elapsed."""
        if time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        rows = self._rows
        n = len(rows)
        if n == 0:
            return
        batch = pa.RecordBatch.from_struct_array(pa.array(rows, type=_ROW))
        own = {"run": pa.repeat(pa.scalar(self.run, pa.string()), n),
               "client": pa.repeat(pa.scalar(self.client, pa.string()), n)}
        table = pa.Table.from_arrays([own[c] if c in own else batch.column(c) for c in COLUMNS], schema=SCHEMA)
        name = f"{self.client}-{self._part:05d}.parquet"
        tmp = self.directory / (name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, self.directory / name)
        self._part += 1
        self.rows_written += n
        self._rows = []

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self._flush_locked()
                self.closed = True

    def for_topic(self, topic: Optional[str]) -> "Recorder":
        """This recorder seen from one topic of `workload.topics`: its rows carry the topic,
        and their offsets are prefixed by it (`t3/17`: two topics' offsets never meet in a
        check of one run); the same client, files and sequence. None: this recorder."""
        return self if topic is None else TopicRecorder(self, topic)

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TopicRecorder:
    """Recorder.for_topic's view: records into its recorder with the topic set. Closing the
    view flushes; the recorder itself is closed by whoever made it."""

    def __init__(self, parent: Recorder, topic: str) -> None:
        self.parent, self.topic = parent, topic

    def record(self, type_: str, producer: str | None = None, value: int | None = None,
               offset: str | None = None, *args, **kw) -> int:
        if offset is not None:
            offset = f"{self.topic}/{offset}"
        return self.parent.record(type_, producer, value, offset, *args, topic=self.topic, **kw)

    def send_row(self, producer: str, value: int, node: Optional[str], detail: Optional[str],
                 intended: Optional[int]) -> int:
        return self.parent.record("send", producer, value, None, node, detail, intended=intended, topic=self.topic)

    def outcome_row(self, kind: str, producer: str, value: int, offset: Optional[str], node: Optional[str],
                    detail: Optional[str], send_ns: Optional[int], txn: Optional[int]) -> int:
        return self.record(kind, producer, value, offset, node, detail, send_ns=send_ns, txn=txn)

    def for_topic(self, topic: Optional[str]) -> "TopicRecorder":
        return self if topic is None else TopicRecorder(self.parent, topic)

    def close(self) -> None:
        self.parent.flush()

    def __getattr__(self, name: str):
        return getattr(self.parent, name)
