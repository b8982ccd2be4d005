"""The fault-action and target registries (`@FAULTS.register("kill")`, `@TARGETS.register("leader")`)."""
from ..registry import Registry

FAULTS: Registry = Registry("fault")
TARGETS: Registry = Registry("target")
