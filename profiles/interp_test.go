package profiles

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// pyEval is the native function of CPython's evaluation loop: each of
// its frames runs one activation's Python frames.
const pyEval = "_PyEval_EvalFrameDefault"

// TestSpliceInterp: each activation's Python frames go just above its
// _PyEval_EvalFrameDefault frame (leaf first), as dump places them;
// activations the native stack has no frame for go above the outermost
// one; a stack without the evaluation loop is left alone, unless anchors
// and the walk's stack pointers place its frames.
func TestSpliceInterp(t *testing.T) {
	b := NewBuilder(NewCollector(regs.AMD64), Options{NoSymbols: true})
	native := func(names ...string) []*Location {
		var out []*Location
		for _, n := range names {
			out = append(out, &Location{Lines: []symbolize.Location{{Function: "inlined", Inlined: true}, {Function: n}}})
		}
		return out
	}
	py := func(specs ...string) []target.InterpFrame {
		var out []target.InterpFrame
		for _, s := range specs {
			name, act, _ := strings.Cut(s, "@")
			out = append(out, target.InterpFrame{Function: name, File: "x.py", Line: 1, Method: "python", Activation: int(act[0] - '0')})
		}
		return out
	}
	names := func(locs []*Location) string {
		var s []string
		for _, l := range locs {
			s = append(s, l.Lines[len(l.Lines)-1].Function)
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		native []string
		interp []target.InterpFrame
		want   string
	}{
		{[]string{"PyLong_FromLong", pyEval, "_PyFunction_Vectorcall", pyEval, "main"},
			py("leaf@0", "middle@0", "outer@1", "<module>@1"),
			"PyLong_FromLong leaf middle _PyEval_EvalFrameDefault _PyFunction_Vectorcall outer <module> _PyEval_EvalFrameDefault main"},
		{[]string{pyEval, "f", pyEval, "main"},
			py("a@0", "b@1", "c@2"),
			"a _PyEval_EvalFrameDefault f b c _PyEval_EvalFrameDefault main"},
		{[]string{"f", "main"}, py("a@0"), "f main"},
	} {
		got := names(b.spliceInterp(native(c.native...), nil, []target.InterpStack{{Entry: pyEval, Frames: c.interp}}))
		if got != c.want {
			t.Errorf("native %v, Python %v:\n got %s\nwant %s", c.native, c.interp, got, c.want)
		}
	}
	// Without the evaluation loop's symbol (Debian sid's 3.14), the
	// anchors (entry frames on the C stack, 3.12+) place each
	// activation above the native frame whose stack holds it, by the
	// walk's stack pointers.
	nat := native("PyLong_FromLong", "", "call", "", "main")
	sps := []uint64{0x1000, 0x1100, 0x1200, 0x1300, 0x1400}
	fs := py("leaf@0", "outer@1")
	fs[0].Anchor, fs[1].Anchor = 0x1180, 0x1350
	got := names(b.spliceInterp(nat, sps, []target.InterpStack{{Entry: pyEval, Frames: fs}}))
	if want := "PyLong_FromLong leaf  call outer  main"; got != want {
		t.Errorf("anchored:\n got %s\nwant %s", got, want)
	}
	if got := names(b.spliceInterp(nat, nil, []target.InterpStack{{Entry: pyEval, Frames: fs}})); got != "PyLong_FromLong  call  main" {
		t.Errorf("anchored, no stack pointers: got %s, want the native stack alone", got)
	}
	// One location per interpreted frame, shared by the samples.
	l1, l2 := b.interpLoc(&py("a@0")[0]), b.interpLoc(&py("a@1")[0])
	if l1 != l2 || l1.Lines[0].Module != "[python]" {
		t.Errorf("interpreted frame locations %p %p (module %q), want one, [python]", l1, l2, l1.Lines[0].Module)
	}
}

// TestPprofInterpretedNames: interpreted functions whose names pprof
// would take for C++ templates ("<module>", "<listcomp>") keep them in
// go tool pprof's output, which printed <unknown> for them when their
// system name was their name.
func TestPprofInterpretedNames(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command for go tool pprof")
	}
	b := NewBuilder(NewCollector(regs.AMD64), Options{NoSymbols: true})
	var locs []*Location
	for _, n := range []string{"<listcomp>", "outer.<locals>.inner", "<module>"} {
		locs = append(locs, b.interpLoc(&target.InterpFrame{Function: n, File: "app.py", Line: 3, Method: "python"}))
	}
	main := b.newLoc(0x1000, nil, false, []symbolize.Location{{Function: "main"}})
	p := &Profile{Stacks: []Stack{{PID: 1, TID: 1, Locations: append(locs, main), Value: 1, Count: 1}}, Locations: append(locs, main)}
	path := filepath.Join(t.TempDir(), "p.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WritePprof(f, 1e6); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command(gobin, "tool", "pprof", "-traces", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -traces: %v\n%s", err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && (strings.HasPrefix(f[len(f)-1], "<") || strings.Contains(l, "inner") || strings.HasSuffix(l, "main")) {
			got = append(got, f[len(f)-1])
		}
	}
	if want := "<listcomp> outer.<locals>.inner <module> main"; strings.Join(got, " ") != want {
		t.Errorf("go tool pprof -traces shows %q, want %q:\n%s", strings.Join(got, " "), want, out)
	}
}
