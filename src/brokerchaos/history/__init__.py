from .schema import EVENT_TYPES, SCHEMA, FORMAT_VERSION
from .recorder import Recorder

__all__ = ["EVENT_TYPES", "SCHEMA", "FORMAT_VERSION", "Recorder"]
