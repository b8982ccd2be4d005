"""A data directory that forgets what was not fsynced, as a power cut would: a FUSE layer
over a backing directory, for the `power-off` fault.

Writes go through to the backing files at once (reads stay a plain pass-through), but until a
file is fsynced the layer keeps what each write overwrote and the size the file had: its
undo log. A write through a descriptor opened with O_SYNC or O_DSYNC is durable when it
returns: it is kept too, and put back after the rollback. SIGUSR1 is the power cut: every
file is put back as it was at its last fsync (files created and never synced are deleted,
or left empty where their directory was fsynced since),
a JSON account of what was dropped is written to REPORT, and the layer unmounts and exits.
SIGTERM unmounts without rollback.

Simplifications, said where the results are read: directory operations (unlink, rename,
mkdir) are durable at once, as on a file system with a journal that commits metadata first;
fsync of one file makes that file durable, whatever other files were written.

Run by Debian's python3 (python3-pyfuse3, python3-trio), not the project's virtualenv, and
imports nothing from brokerchaos:  python3 lazyfs.py BACKING MOUNTPOINT REPORT
"""
import errno
import json
import os
import signal
import stat
import sys

import pyfuse3
import trio
from pyfuse3 import FUSEError

TIMEOUT = 1.0  # kernel caches of names and attributes; a power cut unmounts, dropping them


def _backing_flags(flags):
    """How the layer opens a backing file: always readable (a write saves what it replaces),
    never O_APPEND (the kernel gives every write its offset)."""
    if flags & os.O_ACCMODE == os.O_WRONLY:
        flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
    return flags & ~os.O_APPEND


class Undo:
    """What a power cut restores in one file: its size at the last fsync (None: created
    since), the bytes each later write or truncate replaced below that size, and the
    writes made durable on their own (O_SYNC), to be written again after the rollback."""

    __slots__ = ("size", "saved", "pinned")

    def __init__(self, size):
        self.size = size
        self.saved = []
        self.pinned = []


class Lazy(pyfuse3.Operations):
    def __init__(self, root):
        super().__init__()
        self.paths = {pyfuse3.ROOT_INODE: root}
        self.open_fds = {}  # fh (= fd) -> inode
        self.sync_fds = set()  # opened with O_SYNC / O_DSYNC: every write durable
        self.undo = {}  # inode -> Undo
        self.synced = 0
        self.writes = 0
        self.dir_syncs = 0

    # -- names ---------------------------------------------------------------------------
    def _path(self, inode):
        try:
            return self.paths[inode]
        except KeyError:
            raise FUSEError(errno.ENOENT) from None

    def _child(self, parent, name):
        return os.path.join(self._path(parent), os.fsdecode(name))

    def _attr(self, path=None, fd=None):
        try:
            st = os.fstat(fd) if fd is not None else os.lstat(path)
        except OSError as e:
            raise FUSEError(e.errno) from None
        a = pyfuse3.EntryAttributes()
        for f in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_atime_ns", "st_mtime_ns",
                  "st_ctime_ns"):
            setattr(a, f, getattr(st, f))
        a.st_ino = pyfuse3.ROOT_INODE if path == self.paths[pyfuse3.ROOT_INODE] else st.st_ino
        a.generation = 0
        a.entry_timeout = a.attr_timeout = TIMEOUT
        a.st_blksize = 4096
        a.st_blocks = st.st_blocks
        if a.st_ino != pyfuse3.ROOT_INODE:
            self.paths[a.st_ino] = path if path is not None else self.paths.get(a.st_ino)
        return a

    async def lookup(self, parent_inode, name, ctx=None):
        return self._attr(self._child(parent_inode, name))

    async def getattr(self, inode, ctx=None):
        return self._attr(self._path(inode))

    async def forget(self, inode_list):
        pass  # paths stay known: a few thousand files at most

    async def setattr(self, inode, attr, fields, fh, ctx):
        path = self._path(inode)
        try:
            if fields.update_size:
                self._truncating(inode, path, attr.st_size)
                os.truncate(path, attr.st_size)
            if fields.update_mode:
                os.chmod(path, stat.S_IMODE(attr.st_mode))
            if fields.update_atime or fields.update_mtime:
                st = os.lstat(path)
                os.utime(path, ns=(attr.st_atime_ns if fields.update_atime else st.st_atime_ns,
                                   attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns))
        except OSError as e:
            raise FUSEError(e.errno) from None
        return self._attr(path)

    async def statfs(self, ctx):
        s = os.statvfs(self.paths[pyfuse3.ROOT_INODE])
        out = pyfuse3.StatvfsData()
        for f in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
            setattr(out, f, getattr(s, f))
        out.f_namemax = s.f_namemax
        return out

    # -- directories ---------------------------------------------------------------------
    async def opendir(self, inode, ctx):
        self._path(inode)
        return inode

    async def readdir(self, fh, start_id, token):
        path = self._path(fh)
        try:
            names = sorted(os.listdir(path))
        except OSError as e:
            raise FUSEError(e.errno) from None
        for i in range(start_id, len(names)):
            try:
                attr = self._attr(os.path.join(path, names[i]))
            except FUSEError:
                continue  # gone since the listing
            if not pyfuse3.readdir_reply(token, os.fsencode(names[i]), attr, i + 1):
                break

    async def releasedir(self, fh):
        pass

    async def fsyncdir(self, fh, datasync):
        """A directory's fsync makes its entries durable: a file created in it and never
        synced since comes back empty after a cut, not deleted (Redis fsyncs its AOF
        directory after creating an AOF file it never syncs with `appendfsync no`; deleted,
        the file its manifest names was missing and the server refused to start, which a
        real power cut does not do)."""
        d = self._path(fh)
        for ino, u in self.undo.items():
            if u.size is None and os.path.dirname(self.paths.get(ino, "")) == d:
                u.size = 0
        self.dir_syncs += 1

    async def mkdir(self, parent_inode, name, mode, ctx):
        path = self._child(parent_inode, name)
        try:
            os.mkdir(path, mode)
        except OSError as e:
            raise FUSEError(e.errno) from None
        return self._attr(path)

    async def rmdir(self, parent_inode, name, ctx):
        try:
            os.rmdir(self._child(parent_inode, name))
        except OSError as e:
            raise FUSEError(e.errno) from None

    async def unlink(self, parent_inode, name, ctx):
        path = self._child(parent_inode, name)
        try:
            ino = os.lstat(path).st_ino
            os.unlink(path)
        except OSError as e:
            raise FUSEError(e.errno) from None
        self.undo.pop(ino, None)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if flags:
            raise FUSEError(errno.EINVAL)
        old, new = self._child(parent_inode_old, name_old), self._child(parent_inode_new, name_new)
        try:
            replaced = os.lstat(new).st_ino if os.path.lexists(new) else None
            os.rename(old, new)
        except OSError as e:
            raise FUSEError(e.errno) from None
        if replaced is not None:
            self.undo.pop(replaced, None)
        prefix = old + os.sep
        for ino, p in list(self.paths.items()):
            if p == old:
                self.paths[ino] = new
            elif p.startswith(prefix):
                self.paths[ino] = new + p[len(old):]

    # -- files ---------------------------------------------------------------------------
    async def open(self, inode, flags, ctx):
        path = self._path(inode)
        try:
            if flags & os.O_TRUNC:
                self._truncating(inode, path, 0)
            fd = os.open(path, _backing_flags(flags) & ~os.O_CREAT)
        except OSError as e:
            raise FUSEError(e.errno) from None
        self.open_fds[fd] = inode
        if flags & (os.O_SYNC | os.O_DSYNC):
            self.sync_fds.add(fd)
        return pyfuse3.FileInfo(fh=fd)

    async def create(self, parent_inode, name, mode, flags, ctx):
        path = self._child(parent_inode, name)
        try:
            existed = os.path.lexists(path)
            if existed and flags & os.O_TRUNC:
                self._truncating(os.lstat(path).st_ino, path, 0)
            fd = os.open(path, _backing_flags(flags) | os.O_CREAT, mode)
        except OSError as e:
            raise FUSEError(e.errno) from None
        attr = self._attr(path)
        if not existed:
            self.undo[attr.st_ino] = Undo(None)
        self.open_fds[fd] = attr.st_ino
        if flags & (os.O_SYNC | os.O_DSYNC):
            self.sync_fds.add(fd)
        return pyfuse3.FileInfo(fh=fd), attr

    async def read(self, fh, off, size):
        return os.pread(fh, size, off)

    async def write(self, fh, off, buf):
        inode = self.open_fds[fh]
        try:
            u = self.undo.get(inode)
            if u is None:
                u = self.undo[inode] = Undo(os.fstat(fh).st_size)
            if u.size is not None and off < u.size:
                u.saved.append((off, os.pread(fh, min(len(buf), u.size - off), off)))
            n = os.pwrite(fh, buf, off)
        except OSError as e:
            raise FUSEError(e.errno) from None
        self.writes += 1
        if fh in self.sync_fds:
            u.pinned.append((off, bytes(buf[:n])))
        return n

    def _truncating(self, inode, path, size):
        u = self.undo.get(inode)
        if u is None:
            u = self.undo[inode] = Undo(os.lstat(path).st_size)
        if u.size is not None and size < u.size:
            with open(path, "rb") as f:
                f.seek(size)
                u.saved.append((size, f.read(u.size - size)))

    async def fsync(self, fh, datasync):
        os.fsync(fh)
        if self.undo.pop(self.open_fds[fh], None) is not None:
            self.synced += 1

    async def flush(self, fh):
        pass

    async def release(self, fh):
        self.open_fds.pop(fh, None)
        self.sync_fds.discard(fh)
        os.close(fh)

    # -- the power cut ---------------------------------------------------------------------
    def power_cut(self):
        """Every file back to its last fsync; what was dropped, file by file."""
        files = []
        for ino, u in self.undo.items():
            path = self.paths.get(ino)
            if path is None or not os.path.lexists(path):
                continue
            size = os.lstat(path).st_size
            rel = os.path.relpath(path, self.paths[pyfuse3.ROOT_INODE])
            if u.size is None and not u.pinned:
                os.unlink(path)
                files.append({"file": rel, "deleted": True, "bytes": size})
                continue
            restored = 0
            with open(path, "r+b") as f:
                f.truncate(u.size or 0)
                for off, data in reversed(u.saved):
                    f.seek(off)
                    f.write(data)
                    restored += len(data)
                for off, data in u.pinned:  # durable on their own: they stay
                    f.seek(off)
                    f.write(data)
                f.flush()
                os.fsync(f.fileno())
                now = os.fstat(f.fileno()).st_size
            if now != size or restored:
                files.append({"file": rel, "size_was": size, "size": now, "bytes_restored": restored,
                              **({"sync_writes_kept": len(u.pinned)} if u.pinned else {})})
        self.undo.clear()
        return {"files": sorted(files, key=lambda f: f["file"]), "fsyncs_seen": self.synced,
                "dir_fsyncs_seen": self.dir_syncs, "writes": self.writes}


async def serve(ops, report):
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pyfuse3.main)
        with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                if sig == signal.SIGUSR1:
                    account = ops.power_cut()
                    tmp = report + ".part"
                    with open(tmp, "w") as f:
                        json.dump(account, f)
                    os.rename(tmp, report)
                nursery.cancel_scope.cancel()
                return


def main(argv):
    backing, mountpoint, report = argv[1:4]
    ops = Lazy(os.path.abspath(backing))
    options = set(pyfuse3.default_options)
    options.add("fsname=bc-lazyfs")
    pyfuse3.init(ops, mountpoint, options)
    print(f"lazyfs: {backing} on {mountpoint}", flush=True)
    try:
        trio.run(serve, ops, report)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
