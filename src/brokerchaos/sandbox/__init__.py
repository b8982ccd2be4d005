from .sandbox import Host, Sandbox, SandboxError
from .process import Proc

__all__ = ["Host", "Sandbox", "SandboxError", "Proc"]
