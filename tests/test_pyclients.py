"""Python client releases by options.client_version (systems/pyclients.py): confluent-kafka
for librdkafka, pulsar-client for Pulsar's C++ client; the form, the floor, a minor resolved
to its newest patch from PyPI's list (a cached copy here: no network), a release PyPI does
not list refused before anything starts, and a release written unquoted in YAML refused
with how to write it. The child interpreter that loads another release runs for real in
tests/test_integration_kafka.py."""
import json

import pytest

from brokerchaos import validation as sc
from brokerchaos.errors import ScenarioError
from brokerchaos.runner import interpreter
from brokerchaos.systems import SYSTEMS, pyclients
from brokerchaos.systems.kafka import librdkafka
from brokerchaos.systems.pulsar import cpp_client

RELEASES = {"confluent-kafka": ["1.9.2", "2.4.0", "2.6.0", "2.6.2", "2.6.1", "2.16.1"],
            "pulsar-client": ["3.4.0", "3.5.0", "3.13.0"]}
# the releases this interpreter loaded are listed too: setup installs the newest, whatever day it runs
LOADED = {dist: v for dist in RELEASES if (v := pyclients.PyClient(dist, "", (0, 0), "").loaded())}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path))
    (tmp_path / "pypi").mkdir()
    for dist, versions in RELEASES.items():
        versions = versions + [LOADED[dist]] if dist in LOADED else versions
        doc = {"info": {"version": versions[-1], "requires_python": ">=3.8.0"},
               "releases": {v: [{"filename": f"{dist}-{v}.whl"}] for v in versions + ["2.5.0rc1"]}}
        (tmp_path / "pypi" / f"{dist}.json").write_text(json.dumps(doc))
    return tmp_path


@pytest.mark.parametrize("client, asked, why", [
    (librdkafka, "2.4.0", None), (librdkafka, "2.6", None), (librdkafka, "2.3.0", "older than 2.4"),
    (librdkafka, "1.9", "older than 2.4"), (librdkafka, "latest", "a confluent-kafka release such as 2.4.0"),
    (cpp_client, "3.5.0", None), (cpp_client, "3.4.0", "pulsar-client 3.4.0 is older than 3.5"),
    (cpp_client, "3", "a pulsar-client release such as 3.5.0"),
])
def test_the_form_and_floor_of_a_python_client_release(client, asked, why):
    got = client(asked).form_error()
    assert (got is None) if why is None else (why in got), got


def test_a_minor_is_its_newest_patch_in_pypis_list_and_an_unlisted_release_is_refused(cache):
    assert librdkafka("2.6").version() == "2.6.2"  # by number, not the list's order; no release candidate
    assert cpp_client("3.13.0").version() == "3.13.0"
    with pytest.raises(ScenarioError, match="'options.client_version': PyPI lists no confluent-kafka 2.6.9"):
        librdkafka("2.6.9").version()
    with pytest.raises(ScenarioError, match="'options.client_version': pypi.org lists no confluent-kafka 2.5.x"):
        librdkafka("2.5").version()


def _scenario(system, **options):
    return sc.build({"name": "x", "system": system, "runs": 1, "options": options, "workload": {"messages": 10}})


def test_a_scenario_names_its_python_client_and_a_session_goes_elsewhere_only_for_another_release(cache):
    s = _scenario("kafka", client_version="2.6")
    client = SYSTEMS.get("kafka").python_client(s)
    assert (client.dist, client.module, client.asked) == ("confluent-kafka", "confluent_kafka", "2.6")
    assert SYSTEMS.get("kafka").python_client(_scenario("kafka")) is None
    assert SYSTEMS.get("kafka").python_client(_scenario("kafka", client="java", client_version="3.7.0")) is None
    assert SYSTEMS.get("pulsar").python_client(_scenario("pulsar", client_version="3.5.0")).dist == "pulsar-client"

    class Session:
        def __init__(self, scenario):
            self.s = scenario

    assert interpreter.elsewhere(Session(s)) == (client, "2.6.2")
    loaded = librdkafka("2.4").loaded()
    assert interpreter.elsewhere(Session(_scenario("kafka", client_version=loaded))) is None
    assert interpreter.elsewhere(Session(_scenario("kafka"))) is None


@pytest.mark.parametrize("system, options, why", [
    ("kafka", {"client_version": "2.3.9"}, "confluent-kafka 2.3.9 is older than 2.4"),
    ("kafka", {"client_version": 2.6}, "a release in quotes, such as '2.6'"),
    ("pulsar", {"client_version": "x"}, "a pulsar-client release such as 3.5.0"),
    ("pulsar", {"client": "java", "client_version": "2.10.5"}, "predates the 3.0 API"),
])
def test_a_python_client_release_the_harness_cannot_run_is_one_line(system, options, why):
    with pytest.raises(ScenarioError, match="scenario field 'options.client_version'") as e:
        _scenario(system, **options)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_an_unquoted_release_is_refused_and_a_flag_keeps_it_as_written():
    with pytest.raises(ScenarioError, match="'cluster.version'.*a release in quotes, such as '2.1'"):
        sc.build({"name": "x", "system": "nats", "cluster": {"version": 2.10}})
    s = sc.build({"name": "x", "system": "kafka", "options": {}}, {"option": ["client_version=2.10"]})
    assert s.options["client_version"] == "2.10"
    s = sc.build({"name": "x", "system": "kafka", "options": {}}, {"option": ["linger_ms=2.5"]})
    assert s.options["linger_ms"] == 2.5


def test_the_cache_lists_what_pip_installed(cache):
    for name in ("confluent-kafka-2.4.0", "confluent-kafka-2.6.2", "pulsar-client-3.5.0"):
        (cache / "pypi" / name).mkdir()
        (cache / "pypi" / name / ".done").write_text(name)
    (cache / "pypi" / "confluent-kafka-2.5.0.partial").mkdir()  # cut short: not there
    assert pyclients.cached() == {"confluent-kafka": ["2.4.0", "2.6.2"], "pulsar-client": ["3.5.0"]}
