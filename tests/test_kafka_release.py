"""Kafka releases by cluster.version (systems/kafka/release.py): the form, the mode each
release runs in, a minor resolved to its newest patch from Maven Central's list (a cached
copy here: no network), and the pom written for a release."""
import io
import os
import time

import pytest

from brokerchaos import validation as sc
from brokerchaos.errors import ScenarioError
from brokerchaos.systems import SYSTEMS, releases
from brokerchaos.systems.kafka import KafkaOptions, release
from brokerchaos.systems.kafka.apache import KRaftKafka, ZooKeeperKafka

LISTED = "".join(f"<version>{v}</version>" for v in ("3.7.0", "3.7.2", "3.7.1", "4.3.0", "4.3.2", "4.3.1", "4.4.0"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.delenv("BROKERCHAOS_NO_DOWNLOAD", raising=False)  # these test the downloads
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path))
    (tmp_path / "maven").mkdir()
    (tmp_path / "maven" / "kafka_2.13-metadata.xml").write_text(f"<metadata><versions>{LISTED}</versions></metadata>")
    return tmp_path


@pytest.mark.parametrize("version, why", [
    (None, None), ("3.9", None), ("4.1", None), ("3.7.2", None), ("4.3", None), ("3.0.0", None),
    ("2.8.2", "older than 3.0"), ("2.8", "older than 3.0"), ("4", "a release such as"), ("4.3.x", "a release such as"),
])
def test_the_form_of_a_kafka_version(version, why):
    got = release.form_error(version)
    assert (got is None) if why is None else (why in got)


def test_the_pinned_names_keep_their_releases_and_a_full_release_is_taken_as_named(cache):
    assert release.resolve(None) == release.Release("4.4.0", "4.4")  # the newest, pinned
    assert release.resolve("4.1").set_name == "kafka-4.1"  # the pinned pom's cache, as before
    r = release.resolve("3.7.2")
    assert (r.version, r.set_name, r.pinned) == ("3.7.2", "kafka-3.7.2", False)


def test_a_minor_is_its_newest_patch_in_maven_centrals_list(cache):
    assert release.resolve("4.3").version == "4.3.2"
    assert release.resolve("3.7").version == "3.7.2"  # by number, not by the list's order
    with pytest.raises(ScenarioError, match="lists no Kafka 3.5.x"):
        release.resolve("3.5")


def test_an_old_list_is_asked_again_and_kept_when_the_ask_fails(cache, monkeypatch):
    path = cache / "maven" / "kafka_2.13-metadata.xml"
    day_ago = time.time() - releases.LIST_MAX_AGE_S - 60
    os.utime(path, (day_ago, day_ago))
    asked = []

    def refused(url, timeout):
        asked.append(url)
        raise OSError("no network")

    monkeypatch.setattr(releases.urllib.request, "urlopen", refused)
    assert release.resolve("4.3").version == "4.3.2"
    assert asked == [release.LISTING.url]


def test_a_release_missing_from_a_list_an_hour_old_is_asked_for_again(cache, monkeypatch):
    path = cache / "maven" / "kafka_2.13-metadata.xml"
    hour_ago = time.time() - 3600
    os.utime(path, (hour_ago, hour_ago))
    newer = path.read_text().replace("<version>4.3.2</version>", "<version>4.3.2</version><version>4.5.0</version>")
    asked = []

    class Answer(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def answered(url, timeout):
        asked.append(url)
        return Answer(newer.encode())

    monkeypatch.setattr(releases.urllib.request, "urlopen", answered)
    assert release.resolve("4.3").version == "4.3.2" and asked == []  # found in the list: not asked
    assert release.LISTING.lists("4.3.2") and asked == []
    assert release.resolve("4.5").version == "4.5.0"  # a minor out within the hour: asked, found
    assert asked == [release.LISTING.url]
    assert release.LISTING.lists("4.5.1") is False and len(asked) == 1  # the list is now fresh: not asked again


@pytest.mark.parametrize("version, metadata, kraft, why", [
    ("3.9", None, False, None), ("3.7.2", None, False, None), ("4.1", None, True, None), ("4.4.0", None, True, None),
    ("3.3.2", "kraft", True, None), ("3.9", "kraft", True, None), ("3.2.3", "kraft", None, "predates production KRaft"),
    ("4.0.0", "zookeeper", None, "has no ZooKeeper mode"), ("3.0.2", "zookeeper", False, None),
])
def test_the_mode_follows_the_release_unless_asked(version, metadata, kraft, why):
    got = release.mode_error(version, metadata)
    assert (got is None) if why is None else (why in got)
    if why is None:
        assert release.kraft(version, metadata) is kraft
        s = sc.build({"system": "kafka", "cluster": {"version": version},
                      **({"options": {"metadata": metadata}} if metadata else {})})
        assert SYSTEMS.get("kafka").local_cluster(s) is (KRaftKafka if kraft else ZooKeeperKafka)


def test_a_releases_pom_names_it_and_the_bridge_its_major_logs_through(cache):
    three = release.resolve("3.7.2").pom().read_text()
    four = release.resolve("4.3").pom().read_text()
    assert "<version>3.7.2</version>" in three and "slf4j-reload4j" in three and "log4j-slf4j" not in three
    assert "<version>4.3.2</version>" in four and "log4j-slf4j-impl" in four
    assert "slf4j2" not in four and "reload4j" not in four
    assert release.resolve("3.9").pom() is None  # pinned: systems/maven/kafka-3.9.xml
    assert not release.resolve("3.7.2").fetched()  # nothing resolved into this empty cache


def test_the_java_client_runs_the_servers_release_and_kip848_needs_4x(cache):
    from types import SimpleNamespace

    from brokerchaos.systems.kafka.client import KafkaClient

    def java_set(s):
        client = SimpleNamespace(ctx=SimpleNamespace(scenario=s), options=KafkaOptions.model_validate(s.options))
        return KafkaClient.java_set.fget(client)

    s = sc.build({"system": "kafka", "cluster": {"version": "4.3"}, "options": {"client": "java"}})
    assert java_set(s) == "kafka-4.3.2"
    # options.client_version: the dedup seed's kafka-clients 2.0.0 against the 3.9 servers
    (cache / "maven" / "kafka-clients-metadata.xml").write_text("<versions><version>2.0.0</version>"
                                                                "<version>2.0.1</version></versions>")
    java_2_0 = {"client": "java", "client_version": "2.0"}
    s = sc.build({"system": "kafka", "cluster": {"version": "3.9"}, "options": java_2_0})
    assert java_set(s) == "kafka-clients-2.0.1"
    with pytest.raises(ScenarioError, match="Kafka 4.4's brokers refuse the requests of kafka-clients before 2.1"):
        sc.build({"system": "kafka", "options": java_2_0})  # on the default
    pom = (cache / "maven" / "poms" / "kafka-clients-2.0.1.xml").read_text()
    assert "<artifactId>kafka-clients</artifactId><version>2.0.1</version>" in pom and "slf4j-reload4j" in pom
    sc.build({"system": "kafka", "cluster": {"version": "4.3"}, "workload": {"group": {"kind": "consumer"}}})
    with pytest.raises(ScenarioError, match="workload.group.kind"):
        sc.build({"system": "kafka", "cluster": {"version": "3.9.2"}, "workload": {"group": {"kind": "consumer"}}})


@pytest.mark.parametrize("doc, why", [
    ({"options": {"client_version": "2.3.0"}}, "confluent-kafka 2.3.0 is older than 2.4"),
    ({"options": {"client": "java", "client_version": "1.1.1"}}, "predates the 2.0 API"),
    ({"options": {"client": "java", "client_version": "3.x"}}, "a kafka-clients release such as"),
    ({"options": {"client": "java", "client_version": "2.0.0"}, "cluster": {"version": "4.1"}}, "KIP-896"),
])
def test_a_client_release_the_servers_or_the_bridge_cannot_take_is_refused(doc, why):
    with pytest.raises(ScenarioError, match=f"options.client_version': .*{why}"):
        sc.build({"system": "kafka", **doc})
    sc.build({"system": "kafka", "options": {"client": "java", "client_version": "2.1.0"},
              "cluster": {"version": "4.1"}})


def test_doctor_and_version_say_what_is_cached_and_what_can_be_fetched(cache):
    from brokerchaos import doctor
    from brokerchaos.systems.kafka import Kafka

    (cache / "maven" / "kafka-3.7.2").mkdir()
    (cache / "maven" / "kafka-3.7.2" / "pom.sha256").write_text("x\n")
    (cache / "maven" / "kafka-clients-2.0.0").mkdir()  # a client's set: not a server release
    (cache / "maven" / "kafka-clients-2.0.0" / "pom.sha256").write_text("x\n")
    rows = {label: version for label, system, _, version in doctor.variants() if system == "kafka"}
    assert rows["kafka, any other release from 3.0 (cluster.version; cached: 3.7.2)"] == "any"
    assert doctor.system_needs("kafka", {}, "any") == ("java", "mvn")
    assert "cached: 3.7.2" in Kafka.server_versions()[0] and "any release from 3.0.0" in Kafka.server_versions()[0]

