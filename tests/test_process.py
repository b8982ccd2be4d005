"""A process we started is signalled through a handle that cannot name another: once it has
exited and been reaped, its PID may run anything, and nothing we do reaches that."""
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerchaos.sandbox import Sandbox, process

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root to choose the next PID")]


def _take_pid(pid: int):
    """Start `sleep` with exactly this PID (root: /proc/sys/kernel/ns_last_pid), or None. Run
    in a PID namespace of our own, where nothing else takes PIDs: in the suite's, other workers
    and every JVM thread do, and a PID asked for there was taken first (CI: 50 tries lost)."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))
    p = subprocess.Popen(["sleep", "60"])
    if p.pid == pid:
        return p
    p.kill()
    p.wait()
    return None


def reuse_a_pid(tmp: str) -> None:
    """The body of the test below, run as PID 1 of a new PID namespace with its own /proc."""
    ours = process.spawn("victim", ["sleep", "60"], None, Path(tmp) / "victim.log")
    pid = ours.pid
    assert ours.alive()
    process.send_signal(ours, signal.SIGKILL)
    assert process.wait_exit(ours, 5)  # exited and reaped: the PID is free
    other = _take_pid(pid)
    assert other is not None, f"could not make the kernel reuse pid {pid}"
    try:
        assert not ours.alive()
        # every way the harness acts on a process: none may reach the new owner of the PID
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
            process.send_signal(ours, sig)
        process.send_signal(ours, signal.SIGSTOP, group=True)
        process.terminate(ours, grace=0.5)
        with Sandbox([], "loopback") as sb:
            sb.procs.append(ours)  # a teardown that still holds it
        time.sleep(0.2)
        assert other.poll() is None
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] in ("S", "R"), "the other process was stopped"
    finally:
        other.kill()
        other.wait()


def test_a_reused_pid_is_a_process_that_is_gone(tmp_path):
    here = Path(__file__).parent
    body = (f"import sys; sys.path.insert(0, {str(here)!r}); import test_process; "
            f"test_process.reuse_a_pid({str(tmp_path)!r})")
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", body],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]


def test_signals_reach_our_live_process(tmp_path):
    p = process.spawn("live", ["sleep", "60"], None, tmp_path / "live.log")
    try:
        process.send_signal(p, signal.SIGSTOP, group=True)
        deadline = time.monotonic() + 5
        while open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
            assert time.monotonic() < deadline, "not stopped"
            time.sleep(0.02)
        process.send_signal(p, signal.SIGCONT, group=True)
        process.terminate(p, grace=5)
        assert not p.alive() and p.popen.returncode == -signal.SIGTERM
    finally:
        if p.alive():
            p.popen.kill()
            p.popen.wait()


def test_an_exit_is_seen_on_the_event_loop_as_it_happens(tmp_path):
    import asyncio

    p = process.spawn("awaited", ["sleep", "60"], None, tmp_path / "awaited.log")
    q = process.spawn("survivor", ["sleep", "60"], None, tmp_path / "survivor.log")
    try:
        async def body():
            # a process that does not exit: False at the timeout, and it is left alone
            assert await process.exited(q, 0.2) is False
            ticks = 0

            async def tick():  # the loop stays free while it waits
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            t = asyncio.create_task(tick())
            await asyncio.sleep(0.1)
            process.send_signal(p, signal.SIGKILL)
            t0 = time.monotonic()
            assert await process.exited(p, 5)
            waited = time.monotonic() - t0
            t.cancel()
            return waited, ticks

        waited, ticks = asyncio.run(body())
        assert not p.alive() and p.popen.returncode == -signal.SIGKILL and p.pidfd is None
        assert q.alive() and ticks >= 5, ticks
        assert waited < 1.0, waited
    finally:
        for x in (p, q):
            if x.alive():
                x.popen.kill()
                x.popen.wait()


def test_what_holds_up_a_killed_process_is_read_from_proc(tmp_path):
    # a process SIGKILL has not reached (here: none sent) is not on its way out
    live = process.spawn("live", ["sleep", "60"], None, tmp_path / "live.log")
    # one that has exited and is not reaped yet is (a zombie's parent has not waited)
    gone = process.spawn("gone", ["true"], None, tmp_path / "gone.log")
    try:
        assert process.dying(live) is None
        deadline = time.monotonic() + 5
        while open(f"/proc/{gone.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "never a zombie"
            time.sleep(0.02)
        why = process.dying(gone)
        assert why is not None and why.startswith("state Z"), why
        assert process.wait_exit(gone, 5) and process.dying(gone) is None  # reaped: nothing to say
    finally:
        process.terminate(live, grace=1)
        process.terminate(gone, grace=1)


DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def test_a_stop_shares_its_grace_among_the_processes(tmp_path):
    # two that ignore SIGTERM and one that takes it: SIGKILLed together after the one grace,
    # not one grace each; the paused one is woken to take its SIGTERM
    deaf = [process.spawn(f"deaf{i}", [sys.executable, "-c", DEAF], None, tmp_path / f"d{i}.log") for i in range(2)]
    paused = process.spawn("paused", ["sleep", "60"], None, tmp_path / "paused.log")
    try:
        process.send_signal(paused, signal.SIGSTOP, group=True)
        for p in deaf:  # SIGTERM ignored from here on
            deadline = time.monotonic() + 10
            while "ready" not in p.log.read_text():
                assert time.monotonic() < deadline, "never ready"
                time.sleep(0.02)
        t0 = time.monotonic()
        process.terminate_all([*deaf, paused], grace=1.0)
        took = time.monotonic() - t0
        assert [p.popen.returncode for p in deaf] == [-signal.SIGKILL] * 2
        assert paused.popen.returncode == -signal.SIGTERM
        # one after the other, the two deaf ones would have taken a grace each
        assert 1.0 <= took < 1.9, took
    finally:
        for p in (*deaf, paused):
            if p.alive():
                p.popen.kill()
                p.popen.wait()


def test_a_bound_that_runs_out_says_where_the_client_waits():
    from brokerchaos.sandbox.sandbox import SandboxError

    async def stuck_inside():
        await asyncio.Event().wait()  # never set

    async def work():
        await stuck_inside()

    sb = Sandbox(["n1"], mode="loopback")
    with pytest.raises(SandboxError) as e:
        sb.run_client(work, timeout=0.5)
    msg = str(e.value)
    assert "did not finish within 0s" in msg or "did not finish within 1s" in msg
    assert "work > " in msg and "stuck_inside" in msg, msg


def test_a_pause_waits_until_every_thread_has_stopped(tmp_path):
    """SIGSTOP is not in effect when kill() returns: every thread stops as it is next
    scheduled. wait_stopped returns once each thread of the process is in state T, so a
    paused node takes no new work after the pause returns; SIGCONT runs them again."""
    busy = ("import threading\ndef spin():\n    while True:\n        pass\n"
            "for _ in range(8):\n    threading.Thread(target=spin).start()\n")
    p = process.spawn("busy", [sys.executable, "-c", busy], None, tmp_path / "busy.log")
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{p.pid}/task")) < 9 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not process.stopped(p.pid)
        process.send_signal(p, signal.SIGSTOP, group=True)
        assert process.wait_stopped(p, 2.0)
        states = {open(f"/proc/{p.pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
                  for t in os.listdir(f"/proc/{p.pid}/task")}
        assert states == {"T"}, states
        process.send_signal(p, signal.SIGCONT, group=True)
        time.sleep(0.2)
        assert not process.stopped(p.pid)
    finally:
        process.send_signal(p, signal.SIGKILL, group=True)
        process.wait_exit(p, 5)
