"""Brokers under test: one package per system, each a cluster, roles and a client behind
the small classes of base.py, registered by `@SYSTEMS.register` (registry.py).

Every package here is a broker and is imported (so that it registers itself); the modules
beside them (base, cluster, jclient, jvm, transact, …) are what the brokers share. Adding a
broker is adding its package, nothing else.
"""
import importlib
import pkgutil

from .base import Client, Context, LiveReader, Producer, Reader, SystemError_
from .cluster import Cluster, ExternalCluster, LocalCluster
from .deployment import Deployment
from .registry import SYSTEMS
from .roles import Roles
from .system import System

BROKERS = tuple(importlib.import_module(f"{__name__}.{m.name}")
                for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name) if m.ispkg)

__all__ = ["SYSTEMS", "BROKERS", "Deployment", "System", "Client", "Roles", "Cluster", "LocalCluster",
           "ExternalCluster", "Context", "Producer", "Reader", "LiveReader", "SystemError_"]
