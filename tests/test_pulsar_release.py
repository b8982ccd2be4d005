"""Pulsar releases by cluster.version (systems/pulsar/release.py): the form, a minor's newest
patch from Maven Central's list (a cached copy here), a release's pom importing its own
parent (the BookKeeper and ZooKeeper it was built with), and the Java client's release."""
import pytest

from brokerchaos import validation as sc
from brokerchaos.errors import ScenarioError
from brokerchaos.systems.pulsar import release

LISTED = "".join(f"<version>{v}</version>" for v in ("2.10.4", "2.10.5", "3.3.6", "4.0.7", "4.0.8", "4.2.4"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path))
    (tmp_path / "maven").mkdir()
    (tmp_path / "maven" / "pulsar-broker-metadata.xml").write_text(f"<versions>{LISTED}</versions>")
    return tmp_path


@pytest.mark.parametrize("version, why", [
    (None, None), ("4.0", None), ("2.10.5", None), ("4.2", None),
    ("2.9.1", "older than 2.10"), ("4", "a release such as"),
])
def test_the_form_of_a_pulsar_version(version, why):
    got = release.form_error(version)
    assert (got is None) if why is None else (why in got)


def test_the_pinned_name_keeps_its_pom_and_others_import_their_own_parent(cache):
    # the default is the newest pinned release; 4.0 keeps the release the seed pages were measured on
    default = release.resolve(None)
    assert (default.set_name, default.version, default.pom()) == ("pulsar-4.2", "4.2.4", None)
    assert release.resolve("4.0").version == "4.0.7" and release.resolve("4.0").pom() is None
    assert release.resolve("4.0.8").version == "4.0.8" and release.resolve("2.10").version == "2.10.5"
    pom = release.resolve("4.2.4").pom().read_text()
    assert "<artifactId>pulsar</artifactId><version>4.2.4</version><type>pom</type><scope>import</scope>" in pom
    assert "<artifactId>pulsar-broker</artifactId><version>4.2.4</version>" in pom
    with pytest.raises(ScenarioError, match="lists no Pulsar 3.1.x"):
        release.resolve("3.1")


@pytest.mark.parametrize("client_version, why", [
    (None, None), ("3.0.7", None), ("4.0", None), ("2.10.5", "predates the 3.0 API"), ("x", "such as 2.10.5"),
])
def test_the_java_clients_release(client_version, why):
    got = release.client_error(client_version)
    assert (got is None) if why is None else (why in got)
    doc = {"system": "pulsar", "options": {"client": "java", "client_version": client_version}}
    if why is None:
        sc.build(doc)
    else:
        with pytest.raises(ScenarioError, match="options.client_version"):
            sc.build(doc)
