"""`brokerchaos clean` removes what dead sessions left and never what a running session uses,
whatever state root it runs with (a test's own, `BROKERCHAOS_STATE`: one such clean, in
`make test`, once deleted the namespaces of a soak running beside it)."""
import json
import os
import subprocess
import sys

import pytest

from brokerchaos.sandbox import netns
from brokerchaos.sandbox.sandbox import OWNERS, _proc_start_time

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces")]


def _clean(tmp_path) -> str:
    env = {**os.environ, "BROKERCHAOS_STATE": str(tmp_path / "another-state-root")}
    r = subprocess.run([sys.executable, "-m", "brokerchaos.cli", "clean"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_clean_with_another_state_root_leaves_a_running_sessions_namespaces(tmp_path):
    sid = f"t{os.getpid() % 0xffff:04x}c"
    ns = f"{netns.PREFIX}{sid}-n1"
    netns.add(ns)
    try:
        OWNERS.mkdir(parents=True, exist_ok=True)
        (OWNERS / sid).write_text(json.dumps({"pid": os.getpid(), "start": _proc_start_time(os.getpid())}))
        _clean(tmp_path)
        assert ns in netns.list_all(), "a running session's namespace was removed"
        # the same session once its owner is gone (another process's start time): a leftover
        (OWNERS / sid).write_text(json.dumps({"pid": os.getpid(), "start": "1"}))
        out = _clean(tmp_path)
        assert ns not in netns.list_all() and f"namespace {ns}" in out, out
        assert not (OWNERS / sid).exists()
    finally:
        if ns in netns.list_all():
            netns.delete(ns)
        (OWNERS / sid).unlink(missing_ok=True)


def test_a_namespace_of_ours_runs_linux_default_congestion_control(tmp_path):
    """Whatever the machine's (BBR on these), a namespace the harness makes runs cubic: BBR
    behind the delayer paced a broker's receipts at ~115 kbit/s (docs/seeds/dedup.md)."""
    ns = f"{netns.PREFIX}t{os.getpid() % 0xffff:04x}k-n1"
    netns.add(ns)
    try:
        assert netns.congestion(ns) == netns.CONGESTION == "cubic"
    finally:
        netns.delete(ns)
