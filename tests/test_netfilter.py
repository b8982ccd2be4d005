"""A fault's commands in the namespaces run ahead of every ordinary thread (real-time
policy), and the harness's thread that started them is ordinary again afterwards, also when
a command overran its time."""
import os

import pytest

from brokerchaos.sandbox import Sandbox, netfilter
from brokerchaos.sandbox.netns import NetnsError

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")]

POLICY = ["sh", "-c", "chrt -p $$"]


def test_fault_commands_run_real_time_and_the_caller_is_ordinary_again():
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    with Sandbox(["n1", "n2"], "netns") as sb:
        nss = [sb.ns_name("n1"), sb.ns_name("n2")]
        out = netfilter.run_many([(ns, POLICY, None) for ns in nss])
        assert [rc for rc, _, _ in out] == [0, 0], out
        assert all("SCHED_FIFO" in so for _, so, _ in out), out
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
        assert "SCHED_FIFO" in netfilter.run_sync(nss[0], POLICY).stdout
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
        (rc, _, err), = netfilter.run_many([(nss[0], ["sleep", "5"], None)], timeout=0.2)
        assert rc == -1 and "did not finish" in err
        with pytest.raises(NetnsError, match="did not finish"):
            netfilter.run_sync(nss[1], ["sleep", "5"], timeout=0.2)
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
    # the ordinary commands of the machine: untouched
    assert "SCHED_OTHER" in os.popen("sh -c 'chrt -p $$'").read()
