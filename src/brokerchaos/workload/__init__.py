from .accounting import Accounting
from .payload import decode, encode
from .producer import ProducerLoop
from .reader import read_all

__all__ = ["Accounting", "ProducerLoop", "read_all", "encode", "decode"]
