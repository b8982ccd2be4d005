"""Faults: an *action* (kill, isolate, delay, …) composed with a *target* (leader, …).

Adding a fault is one small class in a module here plus its `@FAULTS.register` line;
targets are resolved at injection time, so the history records who was really hit.
"""
from ..registry import Registry
from .base import Fault, FaultContext, Target

FAULTS: Registry[type[Fault]] = Registry("fault")
TARGETS: Registry = Registry("target")

from . import targets  # noqa: E402,F401
from . import process  # noqa: E402,F401
from . import network  # noqa: E402,F401

__all__ = ["FAULTS", "TARGETS", "Fault", "FaultContext", "Target"]
