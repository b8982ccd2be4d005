from .accounting import Accounting
from .payload import decode, encode
from .processes import ProducerProcesses
from .producer import ProducerLoop
from .reader import LiveProgress, finish_live, read_all, start_live

__all__ = ["Accounting", "ProducerLoop", "ProducerProcesses", "read_all", "start_live", "finish_live",
           "LiveProgress", "encode", "decode"]
