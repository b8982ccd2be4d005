"""The power-off layer on its own (sandbox/lazyfs/, a Go FUSE program): what a cut keeps and
what it puts back, file by file, against the account it writes. No broker: a directory,
the layer over it, and writes made here."""
import os

import pytest

from brokerchaos.sandbox import mounts, process

NO_LAYER = mounts.available()
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for FUSE mounts"),
    pytest.mark.skipif(NO_LAYER is not None, reason=f"{NO_LAYER} (make setup)"),
]


@pytest.fixture
def disk(tmp_path):
    procs = []

    def spawn(name, argv):
        p = process.spawn(name, argv, None, tmp_path / f"{name}.log")
        procs.append(p)
        return p

    d = mounts.LazyDisk(tmp_path / "n1", tmp_path, spawn, lambda p: None)
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "provisioned").write_bytes(b"format")  # before the first mount: durable
    d.mount()
    yield d
    d.unmount()
    assert not os.path.ismount(d.mountpoint)
    for p in procs:
        assert not p.alive()


def _write(path, data, *, offset=None, sync=False, flags=0):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
    try:
        if offset is None:
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, data)
        else:
            os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_a_cut_keeps_what_was_synced_and_puts_back_what_was_not(disk):
    m = disk.mountpoint
    _write(m / "log", b"A" * 100, sync=True)
    _write(m / "log", b"B" * 50)  # appended, never synced: cut off
    _write(m / "log", b"C" * 10, offset=20)  # overwrote synced bytes: put back
    _write(m / "new", b"never synced")  # created, never synced: deleted
    os.mkdir(m / "d")
    _write(m / "d" / "entry", b"x" * 7)  # created, then its directory synced: comes back empty
    _fsync_dir(m / "d")
    _write(m / "sync", b"S" * 30, flags=os.O_DSYNC)  # durable on its own
    _write(m / "old", b"o" * 10, sync=True)
    os.rename(m / "old", m / "renamed")  # metadata durable at once
    assert (m / "provisioned").read_bytes() == b"format"

    account = disk.power_cut()

    b = disk.backing
    assert (b / "log").read_bytes() == b"A" * 100
    assert not (b / "new").exists()
    assert (b / "d" / "entry").read_bytes() == b""
    assert (b / "sync").read_bytes() == b"S" * 30
    assert (b / "renamed").read_bytes() == b"o" * 10
    assert (b / "provisioned").read_bytes() == b"format"
    files = {f["file"]: f for f in account["files"]}
    assert files["log"] == {"file": "log", "size_was": 150, "size": 100, "bytes_restored": 10}
    assert files["new"] == {"file": "new", "deleted": True, "bytes": 12}
    assert files["d/entry"]["size"] == 0 and files["d/entry"]["size_was"] == 7
    assert "renamed" not in files and "provisioned" not in files
    assert account["fsyncs_seen"] >= 2 and account["dir_fsyncs_seen"] >= 1
    assert not os.path.ismount(m)


def test_writes_made_after_an_fsync_are_the_only_ones_a_cut_drops(disk):
    m = disk.mountpoint
    for i in range(50):
        _write(m / "seg", bytes([i]) * 1000, sync=(i % 10 == 9))
    _write(m / "seg", b"z" * 500, offset=0)  # into the synced part
    with open(m / "seg", "r+b") as f:
        f.truncate(40_000)  # below the synced size: the cut grows it back
    account = disk.power_cut()
    data = (disk.backing / "seg").read_bytes()
    assert len(data) == 50_000
    assert data == b"".join(bytes([i]) * 1000 for i in range(50))
    assert [f["file"] for f in account["files"]] == ["seg"]


def test_what_was_written_before_a_settle_stays_and_only_what_came_after_goes(disk):
    """A run's write begins with a settle: the cluster's set-up counts as written back."""
    m = disk.mountpoint
    _write(m / "setup", b"feature flags")  # never synced
    _write(m / "log", b"A" * 100)
    disk.settle()
    _write(m / "log", b"B" * 100)
    _write(m / "later", b"gone")
    account = disk.power_cut()
    assert (disk.backing / "setup").read_bytes() == b"feature flags"
    assert (disk.backing / "log").read_bytes() == b"A" * 100
    assert not (disk.backing / "later").exists()
    assert account["settled_files"] == 2
    assert sorted(f["file"] for f in account["files"]) == ["later", "log"]


def test_a_truncate_through_a_file_renamed_since_it_was_opened_is_undone(disk):
    m = disk.mountpoint
    _write(m / "seg.log", b"D" * 4000, sync=True)
    fd = os.open(m / "seg.log", os.O_RDWR)
    try:
        os.rename(m / "seg.log", m / "seg.log.deleted")
        os.ftruncate(fd, 1000)  # through the descriptor: the name it was opened by is gone
    finally:
        os.close(fd)
    account = disk.power_cut()
    assert (disk.backing / "seg.log.deleted").read_bytes() == b"D" * 4000
    assert [f["file"] for f in account["files"]] == ["seg.log.deleted"]
