"""The owner watch over recorded answer sequences: what it records as the cluster noticing
(`changed`), the topic served again (`serving`), and the owner-moved evidence (`moves`)."""
from brokerchaos.faults.owners import OwnerWatch
from brokerchaos.faults.window import Window


def _watch(answers_before, answers_after):
    """A watch over one topic (None), fed the owners answered before a window's inject and
    after it; returns (the rows it recorded as (owner, detail), its moves)."""
    rows = []
    watch = OwnerWatch({None: object()}, lambda _type, owner, detail, *a: rows.append((owner, detail)))
    for owner in answers_before:
        watch._seen(None, None, False, 0, 1_000_000, owner, None if owner else "timed out")
    w = Window(1, 0)
    watch.arm(w)
    w.injecting(100.0)
    for owner in answers_after:
        watch._seen(None, w, True, 0, 1_000_000, owner, None if owner else "no leader")
    return rows, watch.moves


def test_a_known_owner_lost_then_another_is_a_change_then_serving_and_a_move():
    rows, moves = _watch(["n3", "n3"], ["n3", None, None, "n1", "n1"])
    assert [(o, d.split(";")[0]) for o, d in rows] == [(None, "changed: n3 -> none (no leader)"), ("n1", "serving")]
    assert moves == {1: "n3 -> n1"}


def test_an_owner_unknown_before_the_fault_is_learned_not_counted_as_a_move():
    # the clean-clone run's sequence: the window armed before any owner was answered; the
    # old watch took "none -> n3" for the cluster noticing, stopped, and never saw n3 -> n1
    rows, moves = _watch([None], [None, "n3", "n3", "n1"])
    assert [(o, d.split(";")[0]) for o, d in rows] == [
        ("n1", "changed: n3 -> n1 (the base first seen after the inject)"), ("n1", "serving")]
    assert moves == {1: "n3 -> n1"}


def test_an_owner_unknown_before_the_fault_and_never_changing_records_nothing():
    rows, moves = _watch([], [None, "n2", "n2", "n2"])
    assert rows == [] and moves == {}


def test_the_same_owner_serving_after_a_gap_is_a_change_but_not_a_move():
    rows, moves = _watch(["n2"], [None, "n2"])
    assert [o for o, _ in rows] == [None, "n2"] and moves == {}
