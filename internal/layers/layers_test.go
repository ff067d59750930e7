// Package layers checks that rewind's imports point down its layers
// (ARCHITECTURE.md, "Layers"): a package may import packages of its own
// layer or of those below, never one above.
package layers

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/rewindstack/rewind/"

// layers ranks every package of the module, from the bottom. A new
// package gets a layer here, or the test fails.
var layers = [][]string{
	// plumbing: no knowledge of programs or stacks
	{"regs", "gostack", "internal/cachefile", "internal/demo", "internal/elfdata", "internal/elfedit", "internal/fileerr",
		"internal/fsafe", "internal/gcdefer", "internal/grpcunary", "internal/hugeheap", "internal/jitdump",
		"internal/outfile", "internal/perfmap", "internal/pprof", "internal/prefetch", "internal/readat", "internal/selfprof",
		"internal/textesc", "internal/tracefs"},
	// formats: files and records, read and written
	{"elfobj", "cfi", "sframe", "unwindtable", "perfdata", "debuginfod", "locate"},
	// the target and the sources that build one
	{"target", "internal/procmaps", "live", "corefile", "perfevent"},
	// the Go runtime's knowledge, and the unwinder
	{"internal/goruntime", "internal/goassist", "internal/taskiter", "unwind"},
	// runtimes: contexts and frames of language runtimes
	{"runtimes", "runtimes/cpython", "runtimes/luajit", "runtimes/ruby", "runtimes/builtin", "fibers", "goroutines"},
	{"symbolize"},
	// outputs: reports, profiles and their formats
	{"output", "stacks", "profiles", "flamegraph", "goroutines/traceback"},
	// pipelines: a dump, from a target to its report
	{"dump"},
	// recordings
	{"bpfunwind", "session"},
	// commands and test plumbing (internal/testutil: what only tests use)
	{"agent", "goshadow", "cmd/rewind", "cmd/rewind/clitest", "scripts/floor", "scripts/shadowcheck",
		"internal/testutil/fixture", "internal/testutil/fixture/cmd/otelcol", "internal/testutil/fixture/cmd/pychroots",
		"internal/testutil/perftest", "internal/testutil/fuzzcorpus", "internal/testutil/perfbomb",
		"internal/vminit", "internal/vminit/mkinitramfs", "internal/layers"},
}

// forbidden are imports that point down but should not exist.
var forbidden = map[string]bool{
	"unwind -> symbolize": true,
	"target -> cfi":       true, // unwindtable reads an object's CFI sections
}

// TestImportsPointDown lists the module's packages with their imports
// (go list -json, production files only) and checks each import against
// the layers.
func TestImportsPointDown(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-json", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rank := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			rank[p] = i
		}
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		r, ok := rank[name]
		if !ok {
			t.Errorf("package %s has no layer: add it to layers", name)
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			edge := name + " -> " + dep
			if forbidden[edge] {
				t.Errorf("%s: this import was undone (issue 39)", edge)
			}
			d, ok := rank[dep]
			if !ok || d <= r {
				continue
			}
			t.Errorf("%s imports a package above its layer", edge)
		}
	}
}
