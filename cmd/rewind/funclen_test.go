package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds every function of package main (tests excepted):
// cmd/rewind parses flags and calls packages, and a function longer than
// this is plumbing that belongs in a package (issue 26 item 9).
const maxFuncLines = 80

// TestFunctionLength fails when a function of cmd/rewind, from its func
// line to its closing brace, is longer than maxFuncLines.
func TestFunctionLength(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			checked++
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if lines > maxFuncLines {
				t.Errorf("%s: %s is %d lines long (at most %d): move its work into a package or split it", fset.Position(fn.Pos()), fn.Name.Name, lines, maxFuncLines)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no functions found")
	}
}
