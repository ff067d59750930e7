// Package locate finds the object files a core or a recording names when
// they are not (or no longer) at the paths it names: files and directories
// the user gives, a sysroot, debug directories, perf's build-id cache and
// debuginfod servers, in that order, every candidate checked against the
// build-id the core or recording saw.
package locate

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/debuginfod"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/fsafe"
)

// Resolver opens mapped objects and their debug files through the lookup
// chain. Set its fields, then call Expect for what the source recorded,
// then use Open (for target.Objects.Open), OpenReader (for a core's
// memory reads) and DebugFile (for the symbolizer). Safe for concurrent
// use after setup.
type Resolver struct {
	// Files are the user's files and directories (--exe): a file whose
	// build-id is a mapping's replaces it, and so does a file with the
	// mapping's base name or, for the executable, the only file given.
	Files []string
	// Exe is the path the source gives the main executable.
	Exe string
	// Sysroot, when set, is searched first for every mapped path.
	Sysroot string
	// DebugDirs hold separate debug files (.build-id/xx/rest.debug and
	// debuglink layouts), like gdb's debug-file-directory.
	DebugDirs []string
	// BuildIDDirs are perf build-id caches (~/.debug, $PERF_BUILDID_DIR):
	// DIR/.build-id/xx/rest/elf (or a plain file at .build-id/xx/rest).
	BuildIDDirs []string
	// Debuginfod, when not nil, is asked for what nothing local has.
	Debuginfod *debuginfod.Client
	// Force uses a user-given file even when its build-id differs from
	// the recorded one (with a warning), and so the file at the mapped
	// path itself when no place has one with the recorded build-id.
	Force bool
	// Warn receives warnings (each said once).
	Warn func(string)

	mu      sync.Mutex
	want    map[string]string // mapped path -> build-id hex
	chosen  map[string]string // mapped path -> file opened for it
	warned  map[string]bool
	index   []userFile
	fetched map[string]string // build-id/kind -> path (prefetched)
}

type userFile struct {
	path string
	id   string
}

// Expect records the build-id (hex) the source saw for a mapped path.
func (r *Resolver) Expect(path, buildID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.want == nil {
		r.want = map[string]string{}
	}
	if buildID != "" {
		r.want[path] = buildID
	}
}

// ExpectIDs records build-ids given as bytes, keyed by mapped path.
func (r *Resolver) ExpectIDs(ids map[string][]byte) {
	for p, id := range ids {
		r.Expect(p, hex.EncodeToString(id))
	}
}

func (r *Resolver) warn(key, msg string) {
	r.mu.Lock()
	first := !r.warned[key]
	if r.warned == nil {
		r.warned = map[string]bool{}
	}
	r.warned[key] = true
	r.mu.Unlock()
	if first && r.Warn != nil {
		r.Warn(msg)
	}
}

// userFiles lists the user's files (directories walked once, not
// following symlinks to directories), with their build-ids.
func (r *Resolver) userFiles() []userFile {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.index != nil {
		return r.index
	}
	r.index = []userFile{}
	add := func(p string) {
		id := ""
		if f, err := elfobj.Open(p); err == nil {
			id = f.BuildIDHex()
			f.Close()
		}
		r.index = append(r.index, userFile{p, id})
	}
	for _, f := range r.Files {
		st, err := os.Stat(f)
		if err != nil {
			continue
		}
		if !st.IsDir() {
			add(f)
			continue
		}
		n := 0
		filepath.WalkDir(f, func(p string, d os.DirEntry, err error) error {
			if err != nil || n > 10000 {
				return filepath.SkipDir
			}
			if d.Type().IsRegular() {
				n++
				add(p)
			}
			return nil
		})
	}
	return r.index
}

// UserFiles returns the regular files of Files, directories walked as
// for the lookups.
func (r *Resolver) UserFiles() []string {
	var out []string
	for _, u := range r.userFiles() {
		out = append(out, u.path)
	}
	return out
}

// regularFile reports whether path is a regular file (following links),
// so that FIFOs and devices named by untrusted data are never opened.
func regularFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// candidate is one place an object may be, and whether the user named it
// (a build-id mismatch there is worth a warning).
type candidate struct {
	path string
	user bool
	why  string
}

// candidates lists where the object mapped at path may be, best first.
func (r *Resolver) candidates(path, id string) []candidate {
	var out []candidate
	files := r.userFiles()
	// A user file with the recorded build-id.
	if id != "" {
		for _, u := range files {
			if u.id == id {
				out = append(out, candidate{u.path, true, "--exe"})
			}
		}
	}
	// A user file by name: the only one given for the executable, or one
	// with the mapping's base name.
	if path == r.Exe && len(r.Files) == 1 && len(files) == 1 {
		out = append(out, candidate{files[0].path, true, "--exe"})
	}
	for _, u := range files {
		if filepath.Base(u.path) == filepath.Base(path) {
			out = append(out, candidate{u.path, true, "--exe"})
		}
	}
	if r.Sysroot != "" && filepath.IsAbs(path) {
		out = append(out, candidate{filepath.Join(r.Sysroot, path), true, "--sysroot"})
	}
	out = append(out, candidate{path, false, "the mapped path"})
	if len(id) > 2 {
		for _, d := range r.BuildIDDirs {
			b := filepath.Join(d, ".build-id", id[:2], id[2:])
			out = append(out, candidate{filepath.Join(b, "elf"), false, "perf's build-id cache"}, candidate{b, false, "perf's build-id cache"})
		}
	}
	return out
}

// Open opens the object mapped at path (for target.Objects.Open). The
// error says where it looked and why each place was refused.
func (r *Resolver) Open(path string) (*elfobj.File, error) {
	r.mu.Lock()
	id := r.want[path]
	r.mu.Unlock()
	var tried []string
	var errs []error // the candidates' own errors, for errors.Is and As
	// passed says why the mapped path itself, which exists, was not used.
	passed := ""
	// forced is the mapped path's file when its build-id differs and
	// Force is set: used only when no other place has the recorded one.
	forced := ""
	seen := map[string]bool{}
	for _, c := range r.candidates(path, id) {
		if seen[c.path] {
			continue
		}
		seen[c.path] = true
		if !regularFile(c.path) {
			switch {
			case c.path == path:
				why := "no such file"
				var st unix.Stat_t
				if unix.Stat(path, &st) == nil {
					// The error begins with path: why does not repeat it.
					why = fmt.Sprintf("%v (%s)", fsafe.ErrNotRegular, fsafe.Kind(st.Mode))
					passed = path + ": " + why
				}
				tried = append(tried, why)
			case c.why == "--sysroot":
				tried = append(tried, "not at "+c.path+" (--sysroot)")
			}
			continue
		}
		f, err := elfobj.Open(c.path)
		if err != nil {
			tried = append(tried, err.Error())
			errs = append(errs, err)
			continue
		}
		got := f.BuildIDHex()
		if id != "" && got != "" && got != id {
			msg := fmt.Sprintf("%s (%s) has build-id %s, the recorded %s has %s", c.path, c.why, got, path, id)
			if c.user && r.Force {
				r.warn("mismatch:"+c.path, msg+": used anyway (--force)")
				r.choose(path, c.path)
				return f, nil
			}
			if c.user {
				r.warn("mismatch:"+c.path, msg+": not used for unwinding (--force uses it)")
			}
			if c.path == path {
				passed = fmt.Sprintf("%s changed since the recording: build-id %s, recorded %s", path, got, id)
				// The error begins with path: do not repeat it.
				tried = append(tried, fmt.Sprintf("build-id %s differs from the recorded %s (--force uses it)", got, id))
				if r.Force {
					forced = path
				}
			} else {
				tried = append(tried, fmt.Sprintf("%s: build-id %s differs", c.path, got))
			}
			f.Close()
			continue
		}
		if passed != "" && !c.user {
			// The mapped path is there but is not the object: say which
			// file stands for it (perf's copy, usually).
			r.warn("passed:"+path, fmt.Sprintf("%s; using %s %s", passed, c.why, c.path))
		}
		r.choose(path, c.path)
		return f, nil
	}
	if p := r.fetch(id, debuginfod.Executable); p != "" {
		if f, err := elfobj.Open(p); err == nil {
			r.choose(path, p)
			return f, nil
		}
	} else if r.Debuginfod != nil && id != "" {
		tried = append(tried, "debuginfod did not provide it")
	}
	if id == "" && r.Debuginfod != nil {
		tried = append(tried, "no build-id in the core to ask debuginfod with")
	}
	if forced != "" {
		if f, err := elfobj.Open(forced); err == nil {
			r.warn("mismatch:"+forced, passed+": used anyway (--force)")
			r.choose(path, forced)
			return f, nil
		}
	}
	if len(tried) == 0 {
		tried = append(tried, "not found")
	}
	return nil, &openError{msg: path + ": " + strings.Join(tried, "; "), errs: errs}
}

// openError says every place Open looked for a mapped path and why each
// did not serve; it wraps the errors of the files it could not read as
// ELF objects (an elfobj.FormatError says a file is no ELF object at all).
type openError struct {
	msg  string
	errs []error
}

func (e *openError) Error() string   { return e.msg }
func (e *openError) Unwrap() []error { return e.errs }

func (r *Resolver) choose(path, file string) {
	r.mu.Lock()
	if r.chosen == nil {
		r.chosen = map[string]string{}
	}
	r.chosen[path] = file
	r.mu.Unlock()
}

// Chosen returns the file Open used for the mapped path ("" when none).
func (r *Resolver) Chosen(path string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.chosen[path]
}

// OpenReader opens the file chosen for a mapped path for reading its
// bytes (a core's unmodified text), resolving it first when Open has not
// been asked about it. Non-regular files are refused.
func (r *Resolver) OpenReader(path string) (io.ReaderAt, error) {
	p := r.Chosen(path)
	if p == "" {
		f, err := r.Open(path)
		if err != nil {
			return nil, err
		}
		f.Close()
		p = r.Chosen(path)
	}
	fh, err := os.OpenFile(p, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, err
	}
	if st, err := fh.Stat(); err != nil || !st.Mode().IsRegular() {
		fh.Close()
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	return fh, nil
}

// fetch asks debuginfod (or the prefetched results) for an artifact.
func (r *Resolver) fetch(id, kind string) string {
	if r.Debuginfod == nil || id == "" {
		return ""
	}
	r.mu.Lock()
	p, ok := r.fetched[id+"/"+kind]
	r.mu.Unlock()
	if ok {
		return p
	}
	p, _ = r.Debuginfod.Fetch(context.Background(), id, kind)
	r.mu.Lock()
	if r.fetched == nil {
		r.fetched = map[string]string{}
	}
	r.fetched[id+"/"+kind] = p
	r.mu.Unlock()
	return p
}

// Prefetch fetches, in parallel, the executables of every expected
// mapping that nothing local has, and their debuginfo when withDebug,
// so that the servers' latency is paid once rather than per object.
func (r *Resolver) Prefetch(withDebug bool) {
	if r.Debuginfod == nil {
		return
	}
	r.mu.Lock()
	want := make(map[string]string, len(r.want))
	for p, id := range r.want {
		want[p] = id
	}
	r.mu.Unlock()
	var reqs []debuginfod.Request
	for path, id := range want {
		local := false
		for _, c := range r.candidates(path, id) {
			if regularFile(c.path) && fileID(c.path) == id {
				local = true
				break
			}
		}
		if local {
			continue
		}
		reqs = append(reqs, debuginfod.Request{ID: id, Kind: debuginfod.Executable})
		// Debug information too, unless installed here: an object that
		// is here was built or installed with its debug files, and
		// downloading them in advance could cost gigabytes.
		if withDebug && !r.localDebug(id) {
			reqs = append(reqs, debuginfod.Request{ID: id, Kind: debuginfod.DebugInfo})
		}
	}
	res := r.Debuginfod.FetchAll(context.Background(), reqs)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fetched == nil {
		r.fetched = map[string]string{}
	}
	for i, q := range reqs {
		r.fetched[q.ID+"/"+q.Kind] = res[i].Path
	}
}

// localDebug reports whether a debug file for id is installed in the
// system's or the user's debug directories.
func (r *Resolver) localDebug(id string) bool {
	if len(id) <= 2 {
		return false
	}
	for _, d := range append([]string{"/usr/lib/debug"}, r.DebugDirs...) {
		if regularFile(filepath.Join(d, ".build-id", id[:2], id[2:]+".debug")) {
			return true
		}
	}
	return false
}

func fileID(path string) string {
	f, err := elfobj.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return f.BuildIDHex()
}

// DebugFile returns the separate debug file for f found by build-id in
// the debug directories (under the sysroot too), perf's build-id cache or
// debuginfod, or nil. Candidates whose build-id differs are skipped.
func (r *Resolver) DebugFile(f *elfobj.File) *elfobj.File {
	id := f.BuildIDHex()
	if len(id) <= 2 {
		return nil
	}
	var cands []string
	dirs := r.DebugDirs
	if r.Sysroot != "" {
		dirs = append(append([]string(nil), dirs...), filepath.Join(r.Sysroot, "usr/lib/debug"))
	}
	for _, d := range dirs {
		cands = append(cands, filepath.Join(d, ".build-id", id[:2], id[2:]+".debug"))
		if f.DebugLink != "" {
			cands = append(cands, filepath.Join(d, filepath.Dir(f.Path), f.DebugLink))
		}
	}
	for _, d := range r.BuildIDDirs {
		cands = append(cands, filepath.Join(d, ".build-id", id[:2], id[2:], "debug"))
	}
	for _, c := range cands {
		if c == f.Path || !regularFile(c) {
			continue
		}
		if df, err := elfobj.Open(c); err == nil {
			if df.BuildIDHex() == id {
				return df
			}
			df.Close()
		}
	}
	if p := r.fetch(id, debuginfod.DebugInfo); p != "" {
		if df, err := elfobj.Open(p); err == nil {
			return df
		}
	}
	return nil
}

// PerfBuildIDDirs returns perf's build-id cache directories:
// $PERF_BUILDID_DIR, else ~/.debug.
func PerfBuildIDDirs() []string {
	if d := os.Getenv("PERF_BUILDID_DIR"); d != "" {
		return []string{d}
	}
	if home, err := os.UserHomeDir(); err == nil {
		return []string{filepath.Join(home, ".debug")}
	}
	return nil
}
