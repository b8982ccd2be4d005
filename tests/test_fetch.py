"""`brokerchaos fetch` of what scenarios need (System.install, as `run` does before it
starts), and `make test`'s rule that no test downloads: with BROKERCHAOS_NO_DOWNLOAD set, a
release not in the cache is one line naming it, and nothing is asked of a registry."""
import pytest

from brokerchaos.cli import main


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BROKERCHAOS_NO_DOWNLOAD", "the test's words")
    return tmp_path


def test_a_release_not_fetched_is_one_line_naming_it_and_nothing_is_downloaded(empty_cache, capsys):
    code = main(["fetch", "scenarios/kafka-kill-leader-briefly.yaml", "--option", "client=java",
                 "--option", "client_version=2.0.0"])
    err = capsys.readouterr().err
    assert code == 1, err
    line = next(ln for ln in err.splitlines() if ln.startswith("brokerchaos: fetching for"))
    # the scenario's servers come first (the default release's jars): not in this cache
    assert "client_version=2.0.0" in line and "resolving kafka-3.9" in line, line
    assert "BROKERCHAOS_NO_DOWNLOAD is set (the test's words)" in line, line
    assert not (empty_cache / "cache" / "maven" / "kafka-3.9").exists()


def test_a_bad_line_or_a_bad_scenario_is_exit_2_before_anything_is_fetched(empty_cache, capsys):
    listing = empty_cache / "releases.txt"
    listing.write_text("# a comment\nscenarios/kafka-kill-leader-briefly.yaml --server-versoin 4.0.2\n")
    assert main(["fetch", "--from", str(listing)]) == 2
    assert "--from" in capsys.readouterr().err
    listing.write_text("scenarios/kafka-kill-leader-briefly.yaml --server-version 2.8.2\n")
    assert main(["fetch", "--from", str(listing)]) == 2
    err = capsys.readouterr().err
    assert "scenario field 'cluster.version'" in err and "--server-version 2.8.2" in err, err


def test_every_line_of_the_suites_list_is_a_scenario_that_validates():
    from pathlib import Path
    import shlex

    from brokerchaos import validation as sc

    lines = [ln for ln in Path("tests/releases.txt").read_text().splitlines() if ln.split("#", 1)[0].strip()]
    assert len(lines) >= 7
    for line in lines:
        words = shlex.split(line, comments=True)
        options = [words[i + 1] for i, w in enumerate(words) if w == "--option"]
        version = next((words[i + 1] for i, w in enumerate(words) if w == "--server-version"), None)
        sc.load(words[0], {"option": options, "server_version": version})
