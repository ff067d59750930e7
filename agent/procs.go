package agent

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProcInfo describes a profiled process for the resource attributes.
type ProcInfo struct {
	PID int
	// Exe is the executable's path ("" once the process exited).
	Exe string
	// Comm is the process's command name.
	Comm string
	// BuildID is the executable's GNU build-id in hex, when a profiled
	// frame was in it.
	BuildID string
	// Cgroup is the process's cgroup v2 path ("/system.slice/x.service").
	Cgroup string
	// ContainerID is the 64-hex-digit container id in the cgroup path.
	ContainerID string
}

// procTable caches what --comm matching reads from /proc.
type procTable struct {
	mu    sync.Mutex
	match map[int]matchEntry
}

type matchEntry struct {
	ok bool
	at time.Time
}

func newProcTable() *procTable { return &procTable{match: map[int]matchEntry{}} }

// matchTTL is how long a --comm decision is kept (an exec may change it).
const matchTTL = 2 * time.Second

func (t *procTable) matches(pid, tid int, re *regexp.Regexp, threadComm string) bool {
	if threadComm != "" && re.MatchString(threadComm) {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.match[pid]; ok && time.Since(e.at) < matchTTL {
		return e.ok
	}
	if len(t.match) > 1<<16 {
		clear(t.match)
	}
	ok := false
	if c := readTrim("/proc/" + strconv.Itoa(pid) + "/comm"); c != "" {
		ok = re.MatchString(c)
	}
	if !ok && tid != pid {
		if c := readTrim("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/comm"); c != "" {
			ok = re.MatchString(c)
		}
	}
	t.match[pid] = matchEntry{ok, time.Now()}
	return ok
}

// anyCommMatches reports whether the command name of process pid or of
// one of its threads (the first 4,096) matches re.
func anyCommMatches(pid int, re *regexp.Regexp) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	if c := readTrim(dir + "/comm"); c != "" && re.MatchString(c) {
		return true
	}
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		return false
	}
	for i, e := range tasks {
		if i == 4096 {
			break
		}
		if c := readTrim(dir + "/task/" + e.Name() + "/comm"); c != "" && re.MatchString(c) {
			return true
		}
	}
	return false
}

func (t *procTable) info(pid int, comm string) *ProcInfo {
	p := &ProcInfo{PID: pid, Comm: comm}
	dir := "/proc/" + strconv.Itoa(pid)
	if c := readTrim(dir + "/comm"); c != "" {
		p.Comm = c
	}
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		p.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	p.Cgroup, p.ContainerID = parseCgroup(readTrim(dir + "/cgroup"))
	return p
}

// parseCgroup returns the cgroup v2 path of a /proc/PID/cgroup file (the
// "0::" line, else the first line's path) and a container id found in it.
func parseCgroup(s string) (path, container string) {
	for _, line := range strings.Split(s, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" || path == "" {
			path = parts[2]
		}
	}
	// Docker, containerd and podman name the container's 64-hex-digit
	// id in the last path element ("docker-ID.scope", "cri-containerd-ID.scope", "ID").
	for _, el := range strings.Split(path, "/") {
		el = strings.TrimSuffix(el, ".scope")
		if i := strings.LastIndexAny(el, "-:"); i >= 0 {
			el = el[i+1:]
		}
		if len(el) == 64 && isHex(el) {
			container = el
		}
	}
	return path, container
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
