"""The systems registry: `@SYSTEMS.register("name")` on a broker module's `System` class."""
from ..registry import Registry
from .system import System

SYSTEMS: Registry[type[System]] = Registry("system")
