// A data directory that forgets what was not fsynced, as a power cut would: a FUSE layer
// over a backing directory, for the `power-off` fault (go-fuse's loopback file system, with
// every write and fsync seen on its way through).
//
// Writes go through to the backing files at once (reads stay a plain pass-through), but
// until a file is fsynced the layer keeps what each write overwrote and the size the file
// had: its undo log. A write through a descriptor opened with O_SYNC or O_DSYNC is durable
// when it returns: it is kept too, and put back after the rollback. SIGUSR1 is the power
// cut: every file is put back as it was at its last fsync (files created and never synced
// are deleted, or left empty where their directory was fsynced since), a JSON account of
// what was dropped is written to REPORT, and the layer unmounts and exits. SIGTERM
// unmounts without rollback. SIGUSR2 makes everything written so far durable, as the OS
// writing back its dirty pages would (the harness sends it when a run's write begins), and
// writes REPORT.settled when done.
//
// Simplifications, said where the results are read: directory operations (unlink, rename,
// mkdir) are durable at once, as on a file system with a journal that commits metadata
// first; fsync of one file makes that file durable, whatever other files were written.
//
// For benchmarks/lazy_layer_ops.py only, a fourth argument: `passthrough` serves go-fuse's
// plain loopback (its files handed to the kernel's FUSE passthrough: reads and writes never
// reach this process), `bare` the layer seeing every write and fsync but keeping nothing
// (FUSE's round trips without the undo log): neither is a power-off layer, and the harness
// never passes one. LAZYFS_CPUPROFILE=FILE writes a pprof CPU profile until the exit.
//
//	lazyfs BACKING MOUNTPOINT REPORT [passthrough|bare]
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

const fsName = "bc-lazyfs" // the harness finds its mounts by this name (mounts.py)

func main() {
	mode := ""
	if len(os.Args) == 5 && (os.Args[4] == "passthrough" || os.Args[4] == "bare") {
		mode = os.Args[4]
	} else if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: lazyfs BACKING MOUNTPOINT REPORT [passthrough|bare]")
		os.Exit(2)
	}
	backing, _ := filepath.Abs(os.Args[1])
	mountpoint, report := os.Args[2], os.Args[3]
	l := newLayer(backing)
	l.bare = mode == "bare"
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		fmt.Fprintln(os.Stderr, "lazyfs:", err)
		os.Exit(1)
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, l: l}
	}
	if mode == "passthrough" {
		root.NewNode = nil // go-fuse's own loopback nodes
		root.RootNode = &fs.LoopbackNode{RootData: root}
	} else {
		root.RootNode = root.NewNode(root, nil, "", &st)
	}
	if prof := os.Getenv("LAZYFS_CPUPROFILE"); prof != "" {
		if f, err := os.Create(prof); err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile() // on every return; os.Exit below stops it first
		}
	}
	timeout := time.Second // the kernel's caches of names and attributes; a cut unmounts, dropping them
	opts := &fs.Options{EntryTimeout: &timeout, AttrTimeout: &timeout, MountOptions: fuse.MountOptions{
		FsName: fsName, Name: "lazyfs", DirectMount: true, MaxWrite: 1 << 20,
		// no extended attributes: else the kernel asks for security.capability before
		// every write (to drop privileges), a second round trip per write
		DisableXAttrs: true,
		Options:       []string{"default_permissions"},
	}}
	server, err := fs.Mount(mountpoint, root.RootNode, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lazyfs: mount:", err)
		os.Exit(1)
	}
	fmt.Printf("lazyfs: %s on %s\n", backing, mountpoint)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT)
	sig := <-signals
	for ; sig == syscall.SIGUSR2; sig = <-signals {
		l.settle(report + ".settled")
	}
	code := 0
	if sig == syscall.SIGUSR1 {
		if err := l.powerCut(report); err != nil {
			fmt.Fprintln(os.Stderr, "lazyfs: power cut:", err)
			code = 1
		}
	}
	// Detached, not unmounted and waited for (server.Unmount): the nodes' processes run in
	// mount namespaces of their own, each with a copy of this mount, which keeps the
	// connection open after the unmount here, and go-fuse would wait for it forever. The
	// exit closes the connection: what is left of the mount anywhere answers nothing.
	if err := syscall.Unmount(mountpoint, syscall.MNT_DETACH); err != nil {
		_ = exec.Command("fusermount3", "-u", "-z", mountpoint).Run()
	}
	_ = server // served until the exit
	pprof.StopCPUProfile()
	os.Exit(code)
}
