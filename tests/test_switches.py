"""The interpreter's switch interval during a write phase (workload/producer.py)."""
import sys

from brokerchaos.workload.producer import SWITCH_S, quick_switches


def test_shortened_for_the_block_and_restored_after_it_even_on_error():
    before = sys.getswitchinterval()
    try:
        with quick_switches():
            assert sys.getswitchinterval() == SWITCH_S < before
            raise KeyError("the write failed")
    except KeyError:
        pass
    assert sys.getswitchinterval() == before


def test_a_shorter_interval_already_set_is_kept():
    before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S / 5)
    shorter = sys.getswitchinterval()  # kept in whole microseconds: read back, not computed
    try:
        with quick_switches():
            assert sys.getswitchinterval() == shorter < SWITCH_S
        assert sys.getswitchinterval() == shorter
    finally:
        sys.setswitchinterval(before)
