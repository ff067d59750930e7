package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/goruntime"
)

// switchTableOwners may name several of the Go runtime's stack-switching
// functions: internal/goruntime, their one table, and gostack, whose
// walk of its own goroutine imports nothing but the standard library
// (goshadow builds it into other programs) and whose tests check its
// list against goruntime.Switches.
var switchTableOwners = []string{"internal/goruntime/", "gostack/"}

// TestOneSwitchTable fails when a second table of Go stack-switch
// functions appears: a production file, outside switchTableOwners,
// whose string literals name two or more of goruntime.Switches'
// switching functions (systemstack, mcall, morestack, gogo).
func TestOneSwitchTable(t *testing.T) {
	names := map[string]bool{}
	for _, s := range goruntime.Switches {
		switch s.Kind {
		case goruntime.Systemstack, goruntime.Mcall, goruntime.Morestack:
			names[s.Name] = true
		}
	}
	names["runtime.gogo"] = true
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		for _, o := range switchTableOwners {
			if strings.HasPrefix(rel, o) {
				return nil
			}
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		found := map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && names[strings.TrimSuffix(s, ".abi0")] {
					found[strings.TrimSuffix(s, ".abi0")] = true
				}
			}
			return true
		})
		if len(found) >= 2 {
			t.Errorf("%s names Go stack-switch functions %v: take them from goruntime.Switches", rel, keys(found))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
