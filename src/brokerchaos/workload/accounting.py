"""Live per-producer counters, with the same precedence the analysis uses.

A message's state is the strongest outcome seen: ack > nack > unknown > sent. So a
message acked after an earlier timeout counts as positive, and a late nack never
undoes an ack. The analysis recomputes all of this from the history; these counters
only drive the progress lines and the fault trigger.
"""
from __future__ import annotations

SENT, UNKNOWN, NACK, ACK = 1, 2, 3, 4


class Accounting:
    def __init__(self, messages: int) -> None:
        self.state = bytearray(messages + 1)
        self.sent = 0
        self.pos = 0
        self.neg = 0
        self.unknown = 0

    @property
    def acked(self) -> int:
        """The seeds' "ack count": positive plus negative."""
        return self.pos + self.neg

    def _move(self, value: int, new: int) -> bool:
        old = self.state[value]
        if old == 0:
            raise ValueError(f"outcome for message {value} that was never sent")
        if new <= old:
            return False
        if old == UNKNOWN:
            self.unknown -= 1
        elif old == NACK:
            self.neg -= 1
        if new == UNKNOWN:
            self.unknown += 1
        elif new == NACK:
            self.neg += 1
        elif new == ACK:
            self.pos += 1
        self.state[value] = new
        return True

    def on_send(self, value: int) -> None:
        if self.state[value] == 0:
            self.state[value] = SENT
            self.sent += 1

    def on_ack(self, value: int) -> bool:
        """True when this is the message's first ack."""
        if self.state[value] == SENT:  # the common case, without _move's call
            self.state[value] = ACK
            self.pos += 1
            return True
        return self._move(value, ACK)

    def on_nack(self, value: int) -> bool:
        return self._move(value, NACK)

    def on_unknown(self, value: int) -> bool:
        return self._move(value, UNKNOWN)

    def in_doubt(self) -> int:
        """Sent messages with no outcome yet."""
        return self.sent - self.pos - self.neg - self.unknown
