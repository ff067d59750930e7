// Package tracefs finds the kernel's tracing file system, where
// tracepoints' ids and formats are read, and mounts it when it is not
// mounted and this process may, as perf does (a fresh Debian machine
// mounts neither /sys/kernel/tracing nor debugfs). It is the one place
// rewind looks for tracefs: perf events on tracepoints (off-CPU
// recording), sched_switch's format, and the BPF unwinder's tracepoints
// (which the ebpf library finds where Root left them).
package tracefs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Dir is where tracefs is mounted on current systems, and where Root
// mounts it.
const Dir = "/sys/kernel/tracing"

// debugDir is where older systems have it, under debugfs.
const debugDir = "/sys/kernel/debug/tracing"

// MountCommand is how an administrator mounts tracefs.
const MountCommand = "mount -t tracefs nodev " + Dir

// ErrNotMounted is wrapped by Root's error when tracefs is not mounted
// and could not be.
var ErrNotMounted = errors.New("tracefs is not mounted")

var (
	mu      sync.Mutex
	looked  bool
	root    string
	mounted bool
	rootErr error
)

// Root returns where tracefs is mounted: a tracefs mount this process
// sees (/proc/self/mountinfo), the tracing directory of a debugfs mount,
// or /sys/kernel/tracing or /sys/kernel/debug/tracing holding tracefs;
// when there is none it mounts tracefs on /sys/kernel/tracing (root, or
// CAP_SYS_ADMIN), as perf does, and leaves it mounted. It looks once per
// process: the error says in one line what is missing and how to mount
// it.
func Root() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if !looked {
		root, mounted, rootErr = find()
		looked = true
	}
	return root, rootErr
}

// Mounted returns the directory Root mounted tracefs on, "" when it found
// it mounted (or has not been called, or could not mount it): for
// --stats. It does not look itself.
func Mounted() string {
	mu.Lock()
	defer mu.Unlock()
	if mounted {
		return root
	}
	return ""
}

// Reset forgets what Root found (tests).
func Reset() {
	mu.Lock()
	defer mu.Unlock()
	looked, root, mounted, rootErr = false, "", false, nil
}

func find() (string, bool, error) {
	if dir := fromMountinfo("/proc/self/mountinfo"); dir != "" {
		return dir, false, nil
	}
	for _, dir := range []string{Dir, debugDir} {
		// A stat of debugfs's tracing directory mounts tracefs there
		// (an automount) when debugfs is mounted.
		if isTracefs(dir) {
			return dir, false, nil
		}
	}
	err := unix.Mount("nodev", Dir, "tracefs", 0, "")
	if err == nil || err == unix.EBUSY && isTracefs(Dir) {
		return Dir, err == nil, nil
	}
	switch err {
	case unix.EPERM, unix.EACCES:
		if os.Geteuid() == 0 {
			return "", false, fmt.Errorf("%w on %s, and mounting it needs CAP_SYS_ADMIN, which rewind lacks here: mount it where root has it: %s", ErrNotMounted, Dir, MountCommand)
		}
		return "", false, fmt.Errorf("%w on %s, and mounting it needs root (CAP_SYS_ADMIN): run rewind as root, or mount it as root: %s", ErrNotMounted, Dir, MountCommand)
	case unix.ENODEV:
		return "", false, fmt.Errorf("%w: this kernel has no tracefs (CONFIG_TRACING)", ErrNotMounted)
	}
	return "", false, fmt.Errorf("%w, and mounting it on %s failed (%v): mount it as root: %s", ErrNotMounted, Dir, err, MountCommand)
}

// fromMountinfo returns the first tracefs mount of a mountinfo file, or
// the tracing directory of its first debugfs mount that has one.
func fromMountinfo(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var debugfs []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 || f[3] != "/" {
			continue
		}
		dir := unescape(f[4])
		switch g[0] {
		case "tracefs":
			return dir
		case "debugfs":
			debugfs = append(debugfs, dir)
		}
	}
	for _, d := range debugfs {
		if dir := filepath.Join(d, "tracing"); isTracefs(dir) {
			return dir
		}
	}
	return ""
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// isTracefs reports whether dir holds tracefs (or, on old systems,
// debugfs's tracing directory).
func isTracefs(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return false
	}
	return st.Type == unix.TRACEFS_MAGIC || st.Type == unix.DEBUGFS_MAGIC && filepath.Base(dir) == "tracing"
}

// EventFile returns the path of a tracepoint's file (id, format) under
// Root.
func EventFile(group, name, file string) (string, error) {
	r, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(r, "events", group, name, file), nil
}

// ReadEventFile reads a tracepoint's file under Root, saying in the error
// what is missing: tracefs, the permission to read it (tracefs is root's,
// mode 0700, unless mounted otherwise), or the tracepoint in this kernel.
func ReadEventFile(group, name, file string) ([]byte, error) {
	p, err := EventFile(group, name, file)
	if err != nil {
		return nil, fmt.Errorf("tracepoint %s:%s: %w", group, name, err)
	}
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("tracepoint %s:%s: %s is readable by root only: run rewind as root (or remount tracefs with -o mode=755)", group, name, filepath.Dir(filepath.Dir(filepath.Dir(p))))
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("tracepoint %s:%s: this kernel has none (no %s)", group, name, p)
	}
	return nil, fmt.Errorf("tracepoint %s:%s: %w", group, name, err)
}

// unmappingNote is how package bpfunwind names a tracepoint it could not
// attach: "unmapping is not followed: no GROUP:NAME tracepoint".
const unmappingNote, tracepointSuffix = "unmapping is not followed: no ", " tracepoint"

// FoldNotes returns the BPF unwinder's notes (text to count) with its
// notes of missing tracepoints made one: why they are missing (tracefs,
// or the kernel) and the tracepoints, so that a run says it once.
func FoldNotes(notes map[string]int) map[string]int {
	var missing []string
	out := make(map[string]int, len(notes))
	for s, n := range notes {
		if tp, ok := strings.CutPrefix(s, unmappingNote); ok && strings.HasSuffix(tp, tracepointSuffix) {
			missing = append(missing, strings.TrimSuffix(tp, tracepointSuffix))
			continue
		}
		out[s] += n
	}
	if len(missing) == 0 {
		return out
	}
	out[MissingTracepoints(missing)]++
	return out
}

// MissingTracepoints says in one line that the BPF unwinder cannot follow
// unmapping (a library unmapped during the recording and something else
// mapped at its addresses is named after the old one) and why: tracefs,
// or a kernel without these tracepoints.
func MissingTracepoints(tps []string) string {
	sort.Strings(tps)
	what := "unmapping is not followed (code mapped over unmapped code may be misnamed)"
	r, err := Root()
	if err != nil {
		return what + ": " + err.Error()
	}
	if err := unix.Access(filepath.Join(r, "events"), unix.R_OK|unix.X_OK); err != nil {
		return fmt.Sprintf("%s: tracefs (%s) is readable by root only: run rewind as root (or remount tracefs with -o mode=755)", what, r)
	}
	s := "s"
	if len(tps) == 1 {
		s = ""
	}
	return fmt.Sprintf("%s: the kernel has no tracepoint%s %s", what, s, strings.Join(tps, ", "))
}
