// Package goshadow generates a Go build overlay that adds software shadow
// stacks to the Go runtime installed on the machine: a per-goroutine cache of
// return addresses, a trampoline that keeps it in step as frames return, and
// the changes the runtime's own unwinders need to step through it.
//
// Generate reads GOROOT/src/runtime, applies small anchored edits and adds
// new files, and writes the patched copies plus an overlay.json for
// `go build -overlay`. Code built that way (with -tags rewind_shadow) can call
// gostack.ShadowCallers. An edit whose anchor is missing or ambiguous fails
// with an error naming the file and the anchor, so a Go release that changed
// the runtime is refused rather than mis-patched.
//
// # Design
//
// A capture walks frame pointers from its own frame. If it meets a return
// slot holding the trampoline's address, the rest of the stack is the cache:
// it is copied and the walk ends. Otherwise, at the root, the capture may
// cache every frame from its caller's frame up (return address, and the
// slot's distance from the stack top, which copystack preserves) and write
// the trampoline into the caller's return slot. Exactly one slot holds the
// trampoline at any time, the one of the innermost cached frame. When that
// frame returns, the trampoline (amd64 and arm64 assembly, using only
// registers that are dead at a return) pops the entry, writes itself into
// the next frame's slot (checking it against the cache) and jumps to the real
// address. A later capture deeper in the same call tree moves the patch down
// and caches the frames in between.
//
// The runtime's unwinder maps a return slot holding the trampoline to the
// top entry, and an unwind that starts inside the trampoline (a profiling
// signal) to the caller at its real return address; the execution tracer's
// and the block/mutex profiles' frame-pointer walks map it too. A panic that
// discards the patched frame leaves a stale cache but no trampoline on the
// stack; the next capture finds none and rebuilds. The cache is freed with
// the goroutine.
//
// gostack.ShadowCallers uses an adaptive policy. A return through the
// trampoline costs about as much as walking a dozen frames, so stacks under
// 12 frames are always walked plainly, and stacks of 12 to 31 frames are
// cached on probation (one capture in 256 tries, and the cache stays while
// no frame returns through the trampoline between captures). Deeper, a
// per-goroutine moving average of what the cache gains decides, with
// exponential back-off when it loses. The two common captures are short
// straight paths at the top of the capture: with nothing cached (so no slot
// can hold the trampoline) the walk is the plain loop, with no check for the
// trampoline, aligned to 32 bytes (the same loop runs up to 1.3x slower
// across a 64-byte line), and a capture while the policy backs off ends
// there too; in the steady state (the caller's return slot holds the
// trampoline and nothing returned through it since the last capture) the
// cache is copied as it is. On amd64 gostack.ShadowCallers is these two paths
// in assembly, with no frame of its own; it jumps to the same capture in Go
// for everything else, and copies the cache with stores aligned to 64 bytes
// (AVX-512F, the first and last lines masked) or 32 (AVX2), a store across a
// cache line costing two. A cache built afresh is placed so that its top
// entry is at 8 modulo 32 bytes, where pcs[1] is in a heap buffer of 32 words
// or more: the copy's loads are then aligned too. The steady state is a copy
// of the cached words, so its cost is the stores': they, not the walk, bound
// the best case.
// gostack.ShadowCallersEager always caches, as the source article's
// prototype did.
//
// gostack.ShadowStackID names a stack instead of copying it, for tracers and
// profilers that keep a table of stacks. Every stack is interned as (parent
// ID, innermost PC) in a process-wide table, and each cached entry carries
// the ID of the stack from it to the root (computed when first needed), so
// with the cache in place the ID costs a look-up per frame walked above it,
// and in the steady state a compare with the goroutine's last look-up. With
// nothing cached (shallow stacks, a policy backing off) the stack is walked
// and hashed in one loop and looked up whole in a second table, as the
// execution tracer does, but without a second pass over the PCs for
// memhash. The tables are read without locks and grow under one; nothing in
// them is freed. gostack.StackPCs follows the parents.
//
// # Testing
//
// `go test ./goshadow` generates the overlay once and runs gostack's shadow
// tests with it (plain and with REWIND_SHADOW_TORTURE=1, which makes
// runtime.Callers, runtime.Stack, runtime.GC, panics and deferred returns
// patch their caller's return slot), and for arm64 under qemu-aarch64.
// `go test ./goshadow -run RuntimeTests -runtimetests -v` also runs the Go
// runtime's own tests matching Traceback|Callers|Stack|Panic|Defer|Preempt|GC
// with the overlay, plain and tortured (about 3.5 minutes). The benchmark
// tables: go test -overlay=DIR/overlay.json -tags rewind_shadow ./gostack
// -run ShadowBenchTable -v -shadowtable -test.benchtime=200ms (-shadowid
// for stack IDs); scripts/shadowcheck measures the same independently.
package goshadow

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/rewindstack/rewind/internal/outfile"
)

//go:embed rt/*.txt rt/*.tmpl
var rtFS embed.FS

// Edit is one anchored change to a runtime source file.
type Edit struct {
	File    string // file name in GOROOT/src/runtime
	Anchor  string // text that must occur exactly once in File
	Text    string // text to insert
	Before  bool   // insert before the anchor instead of after it
	Replace bool   // Text replaces the anchor
}

// Apply applies e to src, the contents of e.File.
func (e Edit) Apply(src string) (string, error) {
	switch c := strings.Count(src, e.Anchor); {
	case e.Anchor == "":
		return "", fmt.Errorf("%s: empty anchor", e.File)
	case c == 0:
		return "", fmt.Errorf("%s: anchor %q not found: this Go release's runtime differs from the one goshadow supports", e.File, e.Anchor)
	case c > 1:
		return "", fmt.Errorf("%s: anchor %q found %d times, want exactly once", e.File, e.Anchor, c)
	}
	i := strings.Index(src, e.Anchor)
	switch {
	case e.Replace:
		return src[:i] + e.Text + src[i+len(e.Anchor):], nil
	case e.Before:
		return src[:i] + e.Text + src[i:], nil
	default:
		j := i + len(e.Anchor)
		return src[:j] + e.Text + src[j:], nil
	}
}

// Result describes a generated overlay.
type Result struct {
	Dir       string   // directory holding the patched files
	JSON      string   // path of overlay.json
	GOROOT    string   // the GOROOT that was patched
	GoVersion string   // first line of GOROOT/VERSION, if present
	Files     []string // runtime files replaced or added, by name
}

// Flag returns the go command flag that uses the overlay.
func (r *Result) Flag() string { return "-overlay=" + r.JSON }

// GOROOT returns the root of the Go installation that `go` on PATH uses.
func GOROOT() (string, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %w", err)
	}
	root := strings.TrimSpace(string(out))
	if root == "" {
		return "", errors.New("go env GOROOT printed nothing")
	}
	return root, nil
}

// Version returns the first line of goroot's VERSION file ("go1.26.8"), or
// "unknown".
func Version(goroot string) string {
	v, err := os.ReadFile(filepath.Join(goroot, "VERSION"))
	if err != nil {
		return "unknown"
	}
	if line := strings.TrimSpace(strings.SplitN(string(v), "\n", 2)[0]); line != "" {
		return line
	}
	return "unknown"
}

// Generate patches the runtime of goroot (GOROOT() if empty) into dir,
// which it creates, and writes dir/overlay.json.
func Generate(goroot, dir string) (*Result, error) {
	if goroot == "" {
		var err error
		if goroot, err = GOROOT(); err != nil {
			return nil, err
		}
	}
	rtDir := filepath.Join(goroot, "src", "runtime")
	if _, err := os.Stat(filepath.Join(rtDir, "runtime2.go")); err != nil {
		return nil, fmt.Errorf("%s is not a Go runtime source directory: %w", rtDir, err)
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(absDir, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Dir: absDir, JSON: filepath.Join(absDir, "overlay.json"), GOROOT: goroot, GoVersion: Version(goroot)}

	// Group the edits by file, keeping their order.
	patched := map[string]string{}
	var order []string
	for _, e := range append(runtimeEdits[:len(runtimeEdits):len(runtimeEdits)], tortureEdits...) {
		src, ok := patched[e.File]
		if !ok {
			b, err := os.ReadFile(filepath.Join(rtDir, e.File))
			if err != nil {
				return nil, err
			}
			src = string(b)
			order = append(order, e.File)
		}
		out, err := e.Apply(src)
		if err != nil {
			return nil, fmt.Errorf("patching %s: %w", rtDir, err)
		}
		patched[e.File] = out
	}
	replace := map[string]string{}
	for _, name := range order {
		if err := writeFile(absDir, name, patched[name], rtDir, replace); err != nil {
			return nil, err
		}
		res.Files = append(res.Files, name)
	}
	for _, f := range runtimeFiles {
		if _, err := os.Stat(filepath.Join(rtDir, f.name)); err == nil {
			return nil, fmt.Errorf("%s already exists in %s: is this GOROOT already patched?", f.name, rtDir)
		}
		b, err := rtFS.ReadFile(f.src)
		if err != nil {
			return nil, err
		}
		if err := writeFile(absDir, f.name, string(b), rtDir, replace); err != nil {
			return nil, err
		}
		res.Files = append(res.Files, f.name)
	}
	tmpl, err := rtFS.ReadFile("rt/callers.go.tmpl")
	if err != nil {
		return nil, err
	}
	for _, v := range captureVariants {
		src := strings.NewReplacer("$BUILD", v.build, "$DOC", v.doc, "$NAME", v.name, "$SELF", v.self,
			"$PARAMS", v.params, "$ADAPTIVE", v.adaptive).Replace(string(tmpl))
		if err := writeFile(absDir, v.file, src, rtDir, replace); err != nil {
			return nil, err
		}
		res.Files = append(res.Files, v.file)
	}
	js, err := json.MarshalIndent(struct{ Replace map[string]string }{replace}, "", "\t")
	if err != nil {
		return nil, err
	}
	if err := outfile.WriteFile(res.JSON, append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	return res, nil
}

func writeFile(dir, name, content, rtDir string, replace map[string]string) error {
	p := filepath.Join(dir, name)
	if err := outfile.WriteFile(p, []byte(content), 0o644); err != nil {
		return err
	}
	replace[filepath.Join(rtDir, name)] = p
	return nil
}
