"""bisect (bisect.py): the search over releases with recorded outcomes (no cluster), the
releases a `--versions` names, the table and the page. The real one, over NATS releases
around the 2.10.22 -> 2.10.23 boundary, is in test_integration_nats.py."""
import json

import pytest

from browser import check_report

from brokerchaos import bisect as bs
from brokerchaos import validation as sc
from brokerchaos.errors import ScenarioError
from brokerchaos.report import bisect_html

RELEASES = ["2.10.20", "2.10.21", "2.10.22", "2.10.23", "2.10.24", "2.10.25", "2.10.26"]


def looker(fails: set, undecided: frozenset = frozenset()):
    """A probe per release from a recorded outcome; the releases asked, in order."""
    asked = []

    def look(v):
        asked.append(v)
        if v in undecided:
            return bs.Probe(v, runs=1, decided=0)
        return bs.Probe(v, runs=1, violated=1, decided=1) if v in fails else bs.Probe(v, runs=3, decided=3)
    return look, asked


def test_a_fix_is_found_between_the_last_release_that_fails_and_the_first_that_holds():
    look, asked = looker({"2.10.20", "2.10.21", "2.10.22"})
    found = bs.search(RELEASES, look)
    assert found["boundary"] == {"before": "2.10.22", "after": "2.10.23", "direction": "fixed"}
    assert asked[:2] == ["2.10.20", "2.10.26"] and len(asked) <= 2 + 3  # the ends, then log2 of the rest
    assert found["said"] == "fails on 2.10.22 and holds from 2.10.23 (fixed)"


def test_a_release_that_broke_it_is_found_the_other_way_round():
    look, _ = looker({"2.10.25", "2.10.26"})
    found = bs.search(RELEASES, look)
    assert found["boundary"] == {"before": "2.10.24", "after": "2.10.25", "direction": "broke"}


def test_ends_alike_are_no_boundary_and_an_undecided_release_stops_the_search():
    look, asked = looker(set())
    found = bs.search(RELEASES, look)
    assert found["boundary"] is None and "holds on both ends" in found["said"] and asked == ["2.10.20", "2.10.26"]
    look, _ = looker({"2.10.20", "2.10.21", "2.10.22"}, undecided=frozenset({"2.10.23"}))
    found = bs.search(RELEASES, look)
    assert found["boundary"] is None and "2.10.23: undecided" in found["said"], found["said"]


def test_a_probe_is_decided_only_by_decided_runs():
    assert bs.Probe("1.0.0", runs=3, violated=1, decided=1).outcome == "fails"  # one failure is enough
    assert bs.Probe("1.0.0", runs=3, violated=0, decided=3).outcome == "holds"
    assert bs.Probe("1.0.0", runs=3, violated=0, decided=2).outcome == "undecided"  # one run could not say
    # a run that could not say is replaced: 2 decided of the 2 wanted, in 3 runs
    assert bs.Probe("1.0.0", runs=3, violated=0, decided=2, wanted=2).outcome == "holds"
    assert bs.Probe("1.0.0", runs=4, violated=0, decided=1, wanted=2).outcome == "undecided"
    stop = bs.StopAtFailure(bs.check_of("no-loss"), "1.0.0", 2)
    unsure = {"acked_missing": 3, "read_complete": False, "cluster_whole": False}
    said = [stop({"acked_missing": 0, "read_complete": True}), stop(unsure),
            stop({"acked_missing": 0, "read_complete": True})]
    assert said[:2] == [None, None] and said[2] == "2 runs decided: 1.0.0 holds", said
    assert "fails" in bs.StopAtFailure(bs.check_of("no-loss"), "1.0.0", 2)({"acked_missing": 1, "read_complete": True})
    assert bs.Probe("1.0.0").outcome == "undecided"
    # runs that decide nothing, none decided before them: the probe gives up at the third
    stop = bs.StopAtFailure(bs.check_of("no-loss"), "1.0.0", 8)
    said = [stop(unsure) for _ in range(bs.NONE_DECIDED)]
    assert said[:-1] == [None] * (bs.NONE_DECIDED - 1) and said[-1].startswith("3 runs and none decided"), said
    assert said[-1].endswith(": 1.0.0 undecided")
    stop = bs.StopAtFailure(bs.check_of("no-loss"), "1.0.0", 8)  # one decided run first: it goes on
    assert [stop(v) for v in [{"acked_missing": 0, "read_complete": True}] + [unsure] * 4] == [None] * 5


def test_a_release_whose_cluster_never_served_is_undecided_with_why_not_an_error(tmp_path, monkeypatch):
    """A stand-in session that fails as a cluster that never started does (SystemError_)."""
    from brokerchaos import runner
    from brokerchaos.systems import SystemError_

    class NeverServes:
        def __init__(self, s, root, **kw):
            self.dir = root / f"{s.name}-x"

        def run(self):
            raise SystemError_("n1 never served: stream placement said 'no suitable peers'")

    monkeypatch.setattr(runner, "Session", NeverServes)
    p = bs.probe(_nats("2.10.23"), "2.10.23", bs.check_of("no-loss"), 2, tmp_path, None, None)
    assert p.outcome == "undecided" and p.dir == "b-2.10.23-x", p
    assert p.unsure == ["the session did not run: n1 never served: stream placement said 'no suitable peers'"]


def _nats(version):
    return sc.build({"name": "b", "system": "nats", "runs": 1, "cluster": {"version": version}})


def test_versions_are_a_list_or_a_range_of_what_the_registry_lists(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path))
    (tmp_path / "nats-server").mkdir()
    (tmp_path / "nats-server" / "releases.txt").write_text("\n".join(
        ["v2.10.22-RC.1", "v2.10.24", "v2.10.22", "v2.10.23", "v2.9.10", "v2.11.0"]) + "\n")
    assert bs.versions_of(_nats, "2.10.22..2.10.24") == ["2.10.22", "2.10.23", "2.10.24"]
    assert bs.versions_of(_nats, "2.10.24..2.10.22") == ["2.10.22", "2.10.23", "2.10.24"]
    assert bs.versions_of(_nats, "2.10.23,2.10.22") == ["2.10.22", "2.10.23"]
    for bad, why in [("2.10.22", "needs two"), ("2.10..2.11", "give two releases"), ("2.10.x,2.10.23", "X.Y.Z"),
                     ("2.10.25..2.10.26", "names 0")]:
        with pytest.raises(ScenarioError, match=why):
            bs.versions_of(_nats, bad)
    with pytest.raises(ScenarioError, match="cannot list"):  # Kafka's tansu: one release, from PyPI
        bs.versions_of(lambda v: sc.build({"name": "b", "system": "kafka", "options": {"broker": "tansu"}}),
                       "3.7.0..3.9.0")
    # each release is checked as the scenario it runs: 2.9.10 has no sync_interval
    sync = lambda v: sc.build({"name": "b", "system": "nats", "options": {"sync_interval": "always"},
                               "cluster": {"version": v}})
    assert bs.versions_of(sync, "2.10.22,2.10.23") == ["2.10.22", "2.10.23"]
    with pytest.raises(ScenarioError, match="--versions: 2.9.10: .*sync_interval"):
        bs.versions_of(sync, "2.9.10,2.10.23")


def test_the_check_is_one_expectation():
    assert bs.check_of("no-loss").name == "no-loss"
    with pytest.raises(ScenarioError, match="--check"):
        bs.check_of("no-such")
    with pytest.raises(ScenarioError, match="one check"):
        bs.check_of("no-loss,ordered")


def test_the_table_and_the_page_show_every_release_probed_or_not(tmp_path):
    look, _ = looker({"2.10.20", "2.10.21", "2.10.22"})
    found = bs.search(RELEASES, look)
    doc = {"scenario": "nats-x", "system": "nats", "check": "no-loss", "runs_per_release": 3, "versions": RELEASES,
           "command": "brokerchaos bisect x", "boundary": found["boundary"], "said": found["said"],
           "probes": [found["probes"][v].to_json() for v in RELEASES if v in found["probes"]]}
    text = bs.table(doc)
    assert "2.10.21" in text and "not probed" in text and text.endswith("no-loss: " + found["said"])
    assert "1/1" in text and "0/3" in text
    path = bisect_html.write(tmp_path, doc)
    page = path.read_text()
    assert "fails on 2.10.22 and holds from 2.10.23" in page and page.count("not probed") == 2
    assert json.dumps(doc)  # what bisect.json holds
    # in a real browser, offline: the plot of each release probed drawn, nothing logged
    got = check_report(path, "bisect")
    assert got.ids == ["bisect"] and got.title == "brokerchaos bisect nats-x"


def test_the_java_clients_releases_are_walked_with_over_client(tmp_path, monkeypatch):
    """--over client: the releases of kafka-clients from its own list, each put on the
    scenario as options.client_version (a release the servers refuse is one line)."""
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path))
    (tmp_path / "maven").mkdir()
    (tmp_path / "maven" / "kafka-clients-metadata.xml").write_text("".join(
        f"<version>{v}</version>" for v in ("1.1.1", "2.0.0", "2.0.1", "2.1.0", "2.2.0")))

    def on(version, server="3.9"):
        return sc.build({"name": "b", "system": "kafka", "options": {"client": "java"},
                         "cluster": {"version": server}}, bs.overrides(version, bs.CLIENT))

    assert bs.versions_of(on, "2.0.0..2.1.0", of=bs.CLIENT) == ["2.0.0", "2.0.1", "2.1.0"]
    with pytest.raises(ScenarioError, match="predates the 2.0 API"):  # an end is a release that runs too
        bs.versions_of(on, "1.1.1..2.1.0", of=bs.CLIENT)
    assert on("2.0.1").options["client_version"] == "2.0.1" and on("2.0.1").cluster.version == "3.9"
    with pytest.raises(ScenarioError, match="--versions: 2.0.0: .*KIP-896"):
        bs.versions_of(lambda v: on(v, "4.1"), "2.0.0,2.1.0", of=bs.CLIENT)
    assert bs.overrides("4.1.1") == {"server_version": "4.1.1"}


def test_nats_runs_its_default_release_unless_told_system(tmp_path, monkeypatch):
    """No cluster.version: the DEFAULT release from the cache (not Debian's 2.9.10), which
    has sync_interval; `system` is Debian's, which has not."""
    from brokerchaos.systems.nats import bin as natsbin

    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path))
    assert natsbin.release(None) == natsbin.release(natsbin.DEFAULT) >= (2, 15, 1)
    assert natsbin.release(natsbin.SYSTEM) is None
    cached = tmp_path / "nats-server" / natsbin.DEFAULT / "nats-server"
    cached.parent.mkdir(parents=True)
    cached.write_text("")
    assert natsbin.binary(None) == str(cached) == natsbin.binary(natsbin.DEFAULT)
    assert natsbin.cached(natsbin.DEFAULT) == "cached" and natsbin.cached("2.10.1") == "fetched on first use"
    sync = {"name": "b", "system": "nats", "options": {"sync_interval": "always"}}
    assert sc.build(sync).cluster.version is None
    with pytest.raises(ScenarioError, match="'options.sync_interval': nats-server system has no"):
        sc.build({**sync, "cluster": {"version": "system"}})
