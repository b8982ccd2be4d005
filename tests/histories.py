"""Small recorded histories, built event by event."""
from __future__ import annotations


class H:
    def __init__(self, run: str = "r1") -> None:
        self.run = run
        self.rows: list[dict] = []
        self.seq: dict[str, int] = {}
        self.t = 0

    def ev(self, client, type_, producer=None, value=None, offset=None, node=None, detail=None, dt=1000, **group):
        """One row; `group`: a consumer group's columns (format 1.6: group, partition, position, epoch)."""
        self.t += dt
        self.seq[client] = self.seq.get(client, 0) + 1
        self.rows.append(dict(run=self.run, client=client, seq=self.seq[client], t_ns=self.t, type=type_,
                              producer=producer, value=value, offset=offset, node=node, detail=detail, **group))
        return self

    def member(self, client, group="g1"):
        """A consumer group's member from here on (its subscribe row)."""
        return self.ev(client, "subscribe", detail="kafka classic", group=group)

    def processed(self, client, values, partition="0", group="g1", producer="p1", position=None):
        """A member's deliveries of `values`, stored at position = value - 1 of `partition`."""
        for v in values:
            pos = v - 1 if position is None else position
            self.ev(client, "recv", producer, v, offset=f"{partition}:{pos}", group=group, partition=partition,
                    position=pos)
        return self

    def commit(self, client, position, partition="0", group="g1", detail="ok"):
        return self.ev(client, "commit", detail=detail, group=group, partition=partition, position=position)

    def sent_acked(self, values, producer="p1"):
        for v in values:
            self.ev(producer, "send", producer, v)
            self.ev(producer, "ack", producer, v, offset=str(v))
        return self

    def read(self, values, consumer="c1", producer="p1", end="complete", partition=None):
        """A checking read of `values`; `partition`: the partition it names (format 1.11)."""
        where = {} if partition is None else {"partition": partition}
        for v in values:
            self.ev(consumer, "recv", producer, v, offset=str(v) if partition is None else f"{partition}:{v}", **where)
        if end:
            self.ev(consumer, "read_end", detail=end)
        return self


SEED_SEQUENCE = (
    list(range(1, 11)) + list(range(30, 41)) + list(range(15, 30)) + list(range(11, 15))
    + list(range(5, 11)) + list(range(2, 5)) + list(range(41, 45))
)
