"""Faults: an *action* (kill, isolate, delay, …) composed with a *target* (leader, …).

Adding a fault is one small class in a module here with its `@FAULTS.register` line; it
declares the capabilities it needs (`needs`), and a deployment offers its own. Targets are
resolved at injection time, so the history records who was really hit.
"""
from . import disk, graceful, network, process, targets
from .base import Fault, FaultContext, Target, supported
from .registry import FAULTS, TARGETS

__all__ = ["FAULTS", "TARGETS", "Fault", "FaultContext", "Target", "supported", "disk", "graceful", "network",
           "process", "targets"]
