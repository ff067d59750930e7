package layers

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// testutil is where the packages only tests use live: seed corpora,
// decompression bombs, programs to unwind and perf availability checks.
const testutil = "internal/testutil/"

// testOnly reports whether the package at path (the module's prefix cut)
// is a test helper, or a command under one.
func testOnly(path string) bool {
	return strings.HasPrefix(path, testutil)
}

// listed is one package as go list -json describes it.
type listed struct {
	ImportPath   string
	Name         string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// listModule lists the module's packages with their production and
// test imports, the module's prefix cut off every path.
func listModule(t *testing.T) []listed {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-json", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		for _, l := range []*[]string{&p.Imports, &p.TestImports, &p.XTestImports} {
			var own []string
			for _, imp := range *l {
				if dep, ok := strings.CutPrefix(imp, module); ok {
					own = append(own, dep)
				}
			}
			*l = own
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestTestHelpersApart fails when a production file imports a package
// of internal/testutil (what builds and runs test programs has no place
// in rewind's binary or library), and when a package that only tests
// import lives outside internal/testutil (a new test helper goes there,
// apart from the plumbing production code shares).
func TestTestHelpersApart(t *testing.T) {
	pkgs := listModule(t)
	prod := map[string]bool{} // imported by a production file
	tests := map[string]bool{}
	for _, p := range pkgs {
		helper := testOnly(p.ImportPath)
		for _, dep := range p.Imports {
			if testOnly(dep) && !helper {
				t.Errorf("%s imports %s, a test helper, from a production file", p.ImportPath, dep)
			}
			// Test helpers importing each other do not make one
			// production code.
			if !helper {
				prod[dep] = true
			}
		}
		for _, dep := range append(p.TestImports, p.XTestImports...) {
			tests[dep] = true
		}
	}
	var misplaced []string
	for _, p := range pkgs {
		name := p.ImportPath
		if p.Name == "main" || testOnly(name) || prod[name] || !tests[name] {
			continue
		}
		misplaced = append(misplaced, name)
	}
	sort.Strings(misplaced)
	for _, name := range misplaced {
		t.Errorf("%s is imported by tests only: move it under %s", name, testutil)
	}
}
