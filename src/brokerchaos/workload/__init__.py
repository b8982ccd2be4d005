from .accounting import Accounting
from .payload import decode, encode
from .producer import ProducerLoop
from .reader import LiveProgress, finish_live, read_all, start_live

__all__ = ["Accounting", "ProducerLoop", "read_all", "start_live", "finish_live", "LiveProgress", "encode", "decode"]
