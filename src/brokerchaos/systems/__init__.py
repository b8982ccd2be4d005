"""Brokers under test: one module per system behind the small `System` interface."""
from ..registry import Registry
from .base import ProducerClient, ReaderClient, System, SystemError_

SYSTEMS: Registry[type[System]] = Registry("system")

from . import nats  # noqa: E402,F401  (registers itself)
from . import redis  # noqa: E402,F401
from . import rabbitmq  # noqa: E402,F401
from . import mqtt  # noqa: E402,F401
from . import kafka  # noqa: E402,F401
from . import pulsar  # noqa: E402,F401

__all__ = ["SYSTEMS", "System", "ProducerClient", "ReaderClient", "SystemError_"]
