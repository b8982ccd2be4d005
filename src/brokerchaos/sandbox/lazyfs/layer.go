package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
)

// span is a piece of a file: what a write replaced, or a write durable on its own.
type span struct {
	off  int64
	data []byte
}

// undo is what a power cut restores in one file: its size at the last fsync (-1: created
// since), the bytes each later write or truncate replaced below that size, and the writes
// made durable on their own (O_SYNC), to be written again after the rollback.
type undo struct {
	size   int64
	saved  []span
	pinned []span
}

// layer holds every file's undo log, by backing inode number, and where each file is now.
// One lock: a write saves what it replaces and writes under it, so overlapping writes are
// put back in the reverse of the order they were made; an fsync runs outside it.
type layer struct {
	mu                       sync.Mutex
	root                     string
	undo                     map[uint64]*undo
	paths                    map[uint64]string
	synced, dirSyncs, writes int
	settled                  int // files whose unsynced writes a settle made durable
	cut                      bool
	bare                     bool // benchmarks only: every write and fsync seen, nothing kept (no undo log)
}

func newLayer(root string) *layer {
	return &layer{root: root, undo: map[uint64]*undo{}, paths: map[uint64]string{}}
}

func inoOf(path string) (uint64, int64, bool) {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) != nil {
		return 0, 0, false
	}
	return st.Ino, st.Size, true
}

func fdIno(fd int) (uint64, int64, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, 0, err.(syscall.Errno)
	}
	return st.Ino, st.Size, 0
}

// known notes where a file is (a lookup, an open, a create).
func (l *layer) known(ino uint64, path string, created bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paths[ino] = path
	if created {
		l.undo[ino] = &undo{size: -1}
	}
}

func (l *layer) logOf(ino uint64, size int64) *undo {
	u := l.undo[ino]
	if u == nil {
		u = &undo{size: size}
		l.undo[ino] = u
	}
	return u
}

// write saves what the write replaces below the synced size, then writes.
func (l *layer) write(fd int, ino uint64, pinned bool, data []byte, off int64) (int, syscall.Errno) {
	if l.bare {
		n, err := syscall.Pwrite(fd, data, off)
		if err != nil {
			return n, err.(syscall.Errno)
		}
		return n, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return 0, syscall.EIO
	}
	u := l.undo[ino]
	if u == nil {
		_, size, errno := fdIno(fd)
		if errno != 0 {
			return 0, errno
		}
		u = l.logOf(ino, size)
	}
	if u.size >= 0 && off < u.size {
		old := make([]byte, min(int64(len(data)), u.size-off))
		n, err := syscall.Pread(fd, old, off)
		if err != nil {
			return 0, err.(syscall.Errno)
		}
		u.saved = append(u.saved, span{off, old[:n]})
	}
	n, err := syscall.Pwrite(fd, data, off)
	if err != nil {
		return n, err.(syscall.Errno)
	}
	l.writes++
	if pinned {
		u.pinned = append(u.pinned, span{off, append([]byte(nil), data[:n]...)})
	}
	return n, 0
}

// truncating saves what a truncate to `size` cuts off below the synced size, by path (a
// truncate(2), an open with O_TRUNC: the path is the file's now).
func (l *layer) truncating(ino uint64, path string, size int64) syscall.Errno {
	fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
	if err != nil {
		return err.(syscall.Errno)
	}
	defer syscall.Close(fd)
	return l.truncatingFd(ino, fd, size)
}

// truncatingFd: the same through an open descriptor (an ftruncate), whatever the file has
// been renamed to since it was opened.
func (l *layer) truncatingFd(ino uint64, fd int, size int64) syscall.Errno {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, now, errno := fdIno(fd)
	if errno != 0 {
		return errno
	}
	u := l.logOf(ino, now)
	if u.size >= 0 && size < u.size {
		old := make([]byte, u.size-size)
		n, err := syscall.Pread(fd, old, size)
		if err != nil {
			return err.(syscall.Errno)
		}
		u.saved = append(u.saved, span{size, old[:n]})
	}
	return 0
}

// growing makes sure a file that grows without a write (fallocate) is cut back.
func (l *layer) growing(ino uint64, fd int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.undo[ino] == nil {
		if _, size, errno := fdIno(fd); errno == 0 {
			l.logOf(ino, size)
		}
	}
}

// fsync: the undo log goes before the fsync starts, so writes made meanwhile start a new
// one (not covered by this fsync); a cut during the fsync keeps what it was syncing, which
// a disk may do too.
func (l *layer) fsync(fd int, ino uint64) syscall.Errno {
	l.mu.Lock()
	if _, ok := l.undo[ino]; ok && !l.bare {
		delete(l.undo, ino)
		l.synced++
	}
	l.mu.Unlock()
	if err := syscall.Fsync(fd); err != nil {
		return err.(syscall.Errno)
	}
	return 0
}

// dirSynced: a directory's fsync makes its entries durable: a file created in it and never
// synced since comes back empty after a cut, not deleted (Redis fsyncs its AOF directory
// after creating an AOF file it never syncs with `appendfsync no`).
func (l *layer) dirSynced(dir string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ino, u := range l.undo {
		if u.size < 0 && filepath.Dir(l.paths[ino]) == dir {
			u.size = 0
		}
	}
	l.dirSyncs++
}

func (l *layer) removed(ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.undo, ino)
	delete(l.paths, ino)
}

// renamed moves every known path under `old` to `new`; a file it replaced is gone.
func (l *layer) renamed(old, new string, replaced uint64, hadReplaced bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hadReplaced {
		delete(l.undo, replaced)
		delete(l.paths, replaced)
	}
	prefix := old + string(filepath.Separator)
	for ino, p := range l.paths {
		if p == old {
			l.paths[ino] = new
		} else if len(p) > len(prefix) && p[:len(prefix)] == prefix {
			l.paths[ino] = new + p[len(old):]
		}
	}
}

// settle: everything written so far counts as written back; `done` says when.
func (l *layer) settle(done string) {
	l.mu.Lock()
	n := len(l.undo)
	l.undo = map[uint64]*undo{}
	l.settled += n
	l.mu.Unlock()
	_ = os.WriteFile(done, []byte(fmt.Sprintf("%d\n", n)), 0o644)
}

// powerCut puts every file back to its last fsync and writes what was dropped to report.
func (l *layer) powerCut(report string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	files := []map[string]any{}
	for ino, u := range l.undo {
		path, ok := l.paths[ino]
		if !ok {
			continue
		}
		if f := l.rollback(path, u); f != nil {
			files = append(files, f)
		}
	}
	l.undo = map[uint64]*undo{}
	sort.Slice(files, func(i, j int) bool { return files[i]["file"].(string) < files[j]["file"].(string) })
	out, err := json.Marshal(map[string]any{"files": files, "fsyncs_seen": l.synced,
		"dir_fsyncs_seen": l.dirSyncs, "writes": l.writes, "settled_files": l.settled})
	if err != nil {
		return err
	}
	if err := os.WriteFile(report+".part", out, 0o644); err != nil {
		return err
	}
	return os.Rename(report+".part", report)
}

// rollback puts one file back; what changed, or nil.
func (l *layer) rollback(path string, u *undo) map[string]any {
	_, size, ok := inoOf(path)
	if !ok {
		return nil
	}
	rel, _ := filepath.Rel(l.root, path)
	if u.size < 0 && len(u.pinned) == 0 {
		if os.Remove(path) != nil {
			return nil
		}
		return map[string]any{"file": rel, "deleted": true, "bytes": size}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return map[string]any{"file": rel, "error": err.Error()}
	}
	defer f.Close()
	_ = f.Truncate(max(u.size, 0))
	restored := 0
	for i := len(u.saved) - 1; i >= 0; i-- {
		n, _ := f.WriteAt(u.saved[i].data, u.saved[i].off)
		restored += n
	}
	for _, p := range u.pinned { // durable on their own: they stay
		_, _ = f.WriteAt(p.data, p.off)
	}
	_ = f.Sync()
	st, _ := f.Stat()
	if st.Size() == size && restored == 0 {
		return nil
	}
	out := map[string]any{"file": rel, "size_was": size, "size": st.Size(), "bytes_restored": restored}
	if len(u.pinned) > 0 {
		out["sync_writes_kept"] = len(u.pinned)
	}
	return out
}
