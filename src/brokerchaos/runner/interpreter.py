"""A session in a child interpreter: when its scenario names a release of a Python client
library (`options.client_version` of confluent-kafka or pulsar-client) other than the one
this interpreter loaded, the session runs in a fresh Python (multiprocessing's spawn) that
puts that release first on its path before anything imports it (systems/pyclients.py); two
releases of one extension module cannot share a process. The child is the same Session,
with the same arguments (no cluster pool: a cluster kept here stays for this interpreter's
next session), its console lines on the same output; its result comes back over
a pipe, and its death (the harness's SIGTERM reaches it: PDEATHSIG) ends nothing silently."""
from __future__ import annotations

import ctypes
import multiprocessing
import pickle
import signal
from typing import Any, Optional

from ..systems import SYSTEMS
from ..systems.base import SystemError_
from ..systems.pyclients import PyClient

_PR_SET_PDEATHSIG = 1
POLL_S = 1.0


def elsewhere(session: Any) -> Optional[tuple[PyClient, str]]:
    """The client and release the session needs a child interpreter for (None: this one
    loads what it asks, or it asks for nothing)."""
    client = SYSTEMS.get(session.s.system).python_client(session.s)
    if client is None:
        return None
    version = client.version()
    return None if client.loaded() == version else (client, version)


def run(session: Any, client: PyClient, version: str) -> Any:
    """The session (a runner Session), run by a child interpreter that loads `client`
    `version`: its SessionResult."""
    client.install(version)  # here: a release pip cannot install is one line before anything starts
    session.obs.line(f"Client: {client.dist} {version} (this interpreter has {client.loaded() or 'none'}): "
                     "the session runs in a child interpreter that loads it")
    args = dict(session.args, pool=None)
    try:
        blob = pickle.dumps(args)
    except (pickle.PicklingError, TypeError, AttributeError):  # an observer of the caller's own making
        blob = pickle.dumps(dict(args, observer=None))
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(type(session), client, version, blob, there),
                       name=f"session-{client.dist}-{version}")
    proc.start()
    there.close()
    try:
        while True:
            if here.poll(POLL_S):
                try:
                    ok, value = here.recv()
                except EOFError:  # it ended without a word: below
                    ok, value = False, None
                break
            if not proc.is_alive():
                ok, value = False, None
                break
        proc.join(60)
    finally:
        if proc.is_alive():
            proc.terminate()  # its SIGTERM heals and stops what it started
            proc.join(120)
        here.close()
    if ok:
        return value
    raise SystemError_(f"the session's child interpreter ({client.dist} {version}) failed: "
                       f"{value or f'it ended with exit code {proc.exitcode} and no result'}")


def _child(session_class: type, client: PyClient, version: str, blob: bytes, conn) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    try:
        client.activate(version)
        result = session_class(**pickle.loads(blob)).run()
    except BaseException as e:  # the parent says it: one line, the session's own words
        conn.send((False, f"{type(e).__name__}: {e}"))
        raise
    conn.send((True, result))
