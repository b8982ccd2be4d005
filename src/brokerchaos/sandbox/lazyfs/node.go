package main

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node whose files are opened through the layer.
type node struct {
	fs.LoopbackNode
	l *layer
}

func (n *node) path() string {
	return filepath.Join(n.RootData.Path, n.EmbeddedInode().Path(nil))
}

// backingFlags: how the layer opens a backing file: always readable (a write saves what it
// replaces), never O_APPEND (the kernel gives every write its offset).
func backingFlags(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags &^ syscall.O_APPEND
}

func (n *node) wrap(fh fs.FileHandle, flags uint32, path string, created bool) (fs.FileHandle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh, 0
	}
	fd, ok := lf.PassthroughFd()
	if !ok {
		return nil, syscall.EBADF
	}
	ino, _, errno := fdIno(fd)
	if errno != 0 {
		lf.Release(context.Background())
		return nil, errno
	}
	n.l.known(ino, path, created)
	return &file{lf: lf, fd: fd, ino: ino, pinned: flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0, l: n.l}, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p := n.path()
	if flags&syscall.O_TRUNC != 0 {
		if ino, _, ok := inoOf(p); ok {
			if errno := n.l.truncating(ino, p, 0); errno != 0 {
				return nil, 0, errno
			}
		}
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, backingFlags(flags))
	if errno != 0 {
		return nil, 0, errno
	}
	f, errno := n.wrap(fh, flags, p, false)
	return f, fuseFlags, errno
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32,
	out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	p := filepath.Join(n.path(), name)
	ino, _, existed := inoOf(p)
	if existed && flags&syscall.O_TRUNC != 0 {
		if errno := n.l.truncating(ino, p, 0); errno != 0 {
			return nil, nil, 0, errno
		}
	}
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, backingFlags(flags), mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	f, errno := n.wrap(fh, flags, p, !existed)
	return ch, f, fuseFlags, errno
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ours := f.(*file); !ours { // by path (truncate(2)); through a file, file.Setattr saves it
		if size, ok := in.GetSize(); ok {
			p := n.path()
			if ino, _, ok := inoOf(p); ok {
				if errno := n.l.truncating(ino, p, int64(size)); errno != 0 {
					return errno
				}
			}
		}
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	p := filepath.Join(n.path(), name)
	ino, _, ok := inoOf(p)
	if errno := n.LoopbackNode.Unlink(ctx, name); errno != 0 {
		return errno
	}
	if ok {
		n.l.removed(ino)
	}
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string,
	flags uint32) syscall.Errno {
	if flags != 0 {
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	old, dst := filepath.Join(n.path(), name), filepath.Join(np.path(), newName)
	replaced, _, had := inoOf(dst)
	if errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); errno != 0 {
		return errno
	}
	n.l.renamed(old, dst, replaced, had)
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dir{h: h, path: n.path(), l: n.l}, fuseFlags, 0
}

// Writes that would not pass through file.Write: refused, so the caller falls back to writes.
func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32,
	syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64,
	uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// file: a backing file's descriptor, its writes and fsyncs through the layer. It offers no
// passthrough descriptor, so the kernel sends every write here.
type file struct {
	lf     *fs.LoopbackFile
	fd     int
	ino    uint64
	pinned bool // opened O_SYNC / O_DSYNC: every write durable
	l      *layer
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}

func (f *file) Write(_ context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, errno := f.l.write(f.fd, f.ino, f.pinned, data, off)
	return uint32(n), errno
}

func (f *file) Fsync(context.Context, uint32) syscall.Errno { return f.l.fsync(f.fd, f.ino) }
func (f *file) Flush(ctx context.Context) syscall.Errno     { return f.lf.Flush(ctx) }
func (f *file) Release(ctx context.Context) syscall.Errno   { return f.lf.Release(ctx) }

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}

func (f *file) Statx(ctx context.Context, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return f.lf.Statx(ctx, flags, mask, out)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if errno := f.l.truncatingFd(f.ino, f.fd, int64(size)); errno != 0 {
			return errno
		}
	}
	return f.lf.Setattr(ctx, in, out)
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f.l.growing(f.ino, f.fd)
	return f.lf.Allocate(ctx, off, size, mode)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}

func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32,
	out *fuse.FileLock) syscall.Errno {
	return f.lf.Getlk(ctx, owner, lk, flags, out)
}

func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlk(ctx, owner, lk, flags)
}

func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlkw(ctx, owner, lk, flags)
}

// dir: a directory listing, whose fsync makes the files created in it durable (empty).
type dir struct {
	h    fs.FileHandle
	path string
	l    *layer
}

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.h.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.h.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dir) Releasedir(ctx context.Context, flags uint32) {
	d.h.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.l.dirSynced(d.path)
	if s, ok := d.h.(fs.FileFsyncdirer); ok {
		return s.Fsyncdir(ctx, flags)
	}
	return 0
}
