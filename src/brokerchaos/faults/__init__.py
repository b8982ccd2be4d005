"""Faults: an *action* (kill, isolate, delay, …) composed with a *target* (leader, …).

Adding a fault is one small class in a module here with its `@FAULTS.register` line; it
declares the capabilities it needs (`needs`), and a deployment offers its own. Targets are
resolved at injection time, so the history records who was really hit.

Every module here that is not one of the shared ones below holds actions or targets and is
imported (so that they register themselves): adding a fault is adding its class, in a
module of its own or beside its kin, nothing else — as a broker is added to systems/.
"""
import importlib
import pkgutil

from .base import Fault, FaultContext, Target, needs_of, supported
from .registry import FAULTS, TARGETS

SHARED = frozenset({"base", "effect", "nemesis", "owners", "registry", "schedule", "trigger", "view", "window",
                    "windowbook"})
KINDS = tuple(importlib.import_module(f"{__name__}.{m.name}")
              for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name) if m.name not in SHARED)

__all__ = ["FAULTS", "TARGETS", "KINDS", "Fault", "FaultContext", "Target", "needs_of", "supported"]
