from .recorder import Recorder
from .schema import EVENT_TYPES, FORMAT_VERSION, SCHEMA, VERSION_KEY

__all__ = ["EVENT_TYPES", "SCHEMA", "FORMAT_VERSION", "VERSION_KEY", "Recorder"]
