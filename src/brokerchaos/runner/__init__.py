"""Sessions of runs (session.py), each run as phases (run.py, phases.py) recorded in a typed
record (record.py), and the one step from an analysis to a session's files (finish.py)."""
from .finish import Finished, backoff_schedules, finish
from .pool import ClusterPool
from .observe import Observer, Terminated, _on_sigterm
from .record import RunRecord
from .run import RunRefused
from .session import Session, SessionResult

__all__ = ["ClusterPool", "Finished", "Observer", "RunRecord", "RunRefused", "Session", "SessionResult", "Terminated",
           "_on_sigterm", "backoff_schedules", "finish"]
