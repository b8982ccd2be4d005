"""Brokers under test: one module (or package) per system, each a cluster, roles and a client
behind the small classes of base.py, registered by `@SYSTEMS.register` (registry.py).

Every module here that is not one of the shared ones below is a broker and is imported
(so that it registers itself): adding a broker is adding its module, nothing else.
"""
import importlib
import pkgutil

from .base import Client, Context, LiveReader, Producer, Reader, Roles, System, SystemError_
from .cluster import Cluster, ExternalCluster, LocalCluster
from .deployment import Deployment
from .registry import SYSTEMS

SHARED = frozenset({"base", "cluster", "consumer", "deployment", "external", "jvm", "registry", "runtime"})
BROKERS = tuple(importlib.import_module(f"{__name__}.{m.name}")
                for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name) if m.name not in SHARED)

__all__ = ["SYSTEMS", "BROKERS", "Deployment", "System", "Client", "Roles", "Cluster", "LocalCluster",
           "ExternalCluster", "Context", "Producer", "Reader", "LiveReader", "SystemError_"]
