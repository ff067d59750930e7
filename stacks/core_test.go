package stacks_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
	"github.com/rewindstack/rewind/unwindtable"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// objs is shared by every test: tables are compiled once per build-id, as
// in a long-running rewind process.
var objs = &target.Objects{}

type program struct {
	name string
	args []string
}

var programs = []program{
	{"threads", nil}, {"recurse", nil}, {"recurse", []string{"2000"}},
	{"signal", nil}, {"signal", []string{"busy"}}, {"plt", nil}, {"demo", nil}, {"cxxthrow", nil},
}

func (p program) String() string { return strings.Join(append([]string{p.name}, p.args...), "-") }

// TestCoreMatchesEuStack dumps every fixture program in every variant with
// gcore and checks, thread by thread, that the dwarf and auto walks give
// exactly eu-stack's physical frames, and that the frame-pointer walk
// agrees with eu-stack up to the first frame whose callee has no frame
// pointer (libc, or the program itself when built without them).
func TestCoreMatchesEuStack(t *testing.T) {
	for _, p := range programs {
		for _, v := range fixture.Variants {
			p, v := p, v
			t.Run(p.String()+"/"+v.Name, func(t *testing.T) {
				t.Parallel()
				exe := fixture.Build(t, p.name, v)
				proc := fixture.Start(t, exe, p.args...)
				core := fixture.Gcore(t, proc)
				compareCore(t, core, exe, v)
			})
		}
	}
}

// TestKernelCoreMatchesEuStack is the acceptance case: a core the
// kernel wrote of a -O2 multi-threaded program blocked in libc.
func TestKernelCoreMatchesEuStack(t *testing.T) {
	for _, v := range fixture.Variants {
		if !v.Optimized() {
			continue
		}
		v := v
		t.Run(v.Name, func(t *testing.T) {
			exe := fixture.Build(t, "threads", v)
			core := fixture.KernelCore(t, exe)
			compareCore(t, core, exe, v)
		})
	}
}

func compareCore(t *testing.T, core, exe string, v fixture.Variant) {
	ref, err := fixture.EuStackCore(t, core, exe)
	if err != nil {
		t.Fatalf("eu-stack: %v", err)
	}
	tg := openCore(t, core, exe, objs)
	if len(tg.Contexts) != len(ref) {
		t.Errorf("core has %d threads, eu-stack printed %d", len(tg.Contexts), len(ref))
	}
	sym := &symbolize.Symbolizer{}
	for _, method := range []string{"dwarf", "auto", "fp"} {
		u := must(unwind.ByName(method))
		u.MaxDepth = 100000 // eu-stack runs with -n 0 (no limit)
		rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, sym)
		for _, want := range ref {
			got := findThread(rep, want.TID)
			if got == nil {
				t.Errorf("%s: thread %d missing", method, want.TID)
				continue
			}
			if want.Err != "" {
				t.Logf("eu-stack reported for thread %d: %s", want.TID, want.Err)
			}
			if method != "fp" {
				if !samePCs(got, want) {
					t.Errorf("%s: thread %d differs from eu-stack (end %s %s):\n%s", method, want.TID,
						got.End, got.EndDetail, sideBySide(got, want))
					continue
				}
				checkNames(t, method, got, want, tg.Space, sym)
				continue
			}
			checkFPBreak(t, got, want, tg.Space)
		}
	}
}

// openCore opens a core file as a target; it is closed when the test ends.
func openCore(t testing.TB, core, exe string, objs *target.Objects) *target.Target {
	t.Helper()
	c, err := corefile.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tg, err := c.Target(objs, exe)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func findThread(r *output.Report, tid int) *output.Thread {
	for i := range r.Threads {
		if r.Threads[i].TID == tid {
			return &r.Threads[i]
		}
	}
	return nil
}

func samePCs(got *output.Thread, want fixture.Stack) bool {
	if len(got.Frames) != len(want.Frames) {
		return false
	}
	for i := range want.Frames {
		if got.Frames[i].PC != want.Frames[i].PC {
			return false
		}
	}
	return true
}

// checkNames compares function names where the reference (eu-stack, gdb)
// has one; different names for the same address (aliases in the symbol
// table, such as gdb's DWARF name __libc_start_main_impl for the symbol
// __libc_start_main@@GLIBC_2.34) are accepted.
func checkNames(t *testing.T, method string, got *output.Thread, want fixture.Stack, space *target.AddressSpace, sym *symbolize.Symbolizer) {
	t.Helper()
	for i, wf := range want.Frames {
		gf := got.Frames[i]
		if at := strings.IndexByte(gf.Function, '@'); at > 0 && gf.Function[at:] != "@plt" {
			t.Errorf("%s: thread %d frame %d (%#x): function %q keeps its symbol version", method, got.TID, i, gf.PC, gf.Function)
		}
		name, ours := fixture.BaseName(wf.Func), fixture.BaseName(gf.Function)
		if name == "" || name == ours || name == withoutParams(ours) {
			continue
		}
		m := space.Find(gf.PC)
		if f := sym.SymbolFile(m.Module); m != nil && f != nil {
			a, ok1 := f.SymbolByName(name)
			raw := gf.Function
			if gf.Symbol != "" {
				raw = gf.Symbol // versioned, as the symbol table has it
			}
			b, ok2 := f.SymbolByName(raw)
			if ok1 && ok2 && a == b {
				continue
			}
		}
		t.Errorf("%s: thread %d frame %d (%#x): function %q, the reference tool says %q", method, got.TID, i, gf.PC, gf.Function, name)
	}
}

// withoutParams strips what gdb's Python Frame.name() leaves out of a
// demangled C++ name: a " [clone .cold]" suffix, a trailing " const" and
// the parameter list ("Sleeper::~Sleeper()" -> "Sleeper::~Sleeper").
func withoutParams(name string) string {
	if i := strings.Index(name, " [clone "); i > 0 {
		name = name[:i]
	}
	name = strings.TrimSuffix(name, " const")
	if !strings.HasSuffix(name, ")") {
		return name
	}
	depth := 0
	for i := len(name) - 1; i >= 0; i-- {
		switch name[i] {
		case ')':
			depth++
		case '(':
			if depth--; depth == 0 {
				return name[:i]
			}
		}
	}
	return name
}

// checkFPBreak: the frame-pointer walk finds a subsequence of eu-stack's
// frames. A frame it loses right below a frame it found must be explained:
// at that callee's PC no frame record is established (its CFA is not
// rbp-based: libc, code built with -fomit-frame-pointer, a leaf or a
// function that never returns, a prologue). Losing the frame a signal
// interrupted is never excused: the walk must restore the signal context.
// Once the chain is lost, later frames are not blamed on their callees.
func checkFPBreak(t *testing.T, got *output.Thread, want fixture.Stack, space *target.AddressSpace) {
	t.Helper()
	if len(got.Frames) == 0 || got.Frames[0].PC != want.Frames[0].PC {
		t.Errorf("fp: thread %d: frame 0 differs", got.TID)
		return
	}
	j := 1
	prevFound := true
	for i := 1; i < len(want.Frames); i++ {
		if j < len(got.Frames) && got.Frames[j].PC == want.Frames[i].PC {
			j++
			prevFound = true
			continue
		}
		callee := want.Frames[i-1]
		if prevFound && (fixture.BaseName(callee.Func) == "__restore_rt" || hasFrameRecord(t, space, callee)) {
			t.Errorf("fp: thread %d lost frame %d below %s (%s), which has a frame record or is a signal frame:\n%s",
				got.TID, i, callee.Func, callee.Module, sideBySide(got, want))
			return
		}
		prevFound = false
	}
}

// hasFrameRecord reports whether, at frame f's PC, its function has pushed
// the caller's frame pointer and pointed rbp at it (CFA = rbp + 16).
func hasFrameRecord(t *testing.T, space *target.AddressSpace, f fixture.Frame) bool {
	pc := f.PC
	if !f.Activation {
		pc--
	}
	m := space.Find(pc)
	if m == nil || m.Module == nil {
		return false
	}
	tab, err := m.Module.Table()
	if err != nil {
		t.Fatal(err)
	}
	r, ok := tab.Lookup(pc - m.Bias)
	return ok && r.CFABase == unwindtable.CFAFP && r.CFAOffset == 16 &&
		r.FPKind == unwindtable.RegAtCFA && r.FPOffset == -16
}

func sideBySide(got *output.Thread, want fixture.Stack) string {
	if got == nil {
		got = &output.Thread{}
	}
	var b strings.Builder
	n := len(got.Frames)
	if len(want.Frames) > n {
		n = len(want.Frames)
	}
	for i := 0; i < n; i++ {
		g, w := "", ""
		if i < len(got.Frames) {
			f := got.Frames[i]
			g = fmt.Sprintf("%#x %s [%s]", f.PC, f.Name(), f.Method)
		}
		if i < len(want.Frames) {
			f := want.Frames[i]
			w = fmt.Sprintf("%#x %s", f.PC, f.Func)
		}
		mark := " "
		if g == "" || w == "" || !strings.HasPrefix(g, strings.Fields(w)[0]+" ") {
			mark = "≠"
		}
		fmt.Fprintf(&b, "  %s #%-2d %-60s %s\n", mark, i, g, w)
	}
	return b.String()
}

// TestCoreMatchesGdb uses gdb as the second reference: once gdb's synthetic
// frames (inlined functions, tail calls from DW_TAG_call_site) are dropped,
// its frames must be rewind's dwarf frames.
func TestCoreMatchesGdb(t *testing.T) {
	for _, p := range []program{{"threads", nil}, {"signal", []string{"busy"}}, {"plt", nil}} {
		v := fixture.Variants[2] // O2-fp: gdb adds tail-call frames here
		p := p
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			exe := fixture.Build(t, p.name, v)
			proc := fixture.Start(t, exe, p.args...)
			core := fixture.Gcore(t, proc)
			ref, err := fixture.GdbCore(t, core, exe)
			if err != nil {
				t.Fatalf("gdb: %v", err)
			}
			tg := openCore(t, core, exe, objs)
			rep := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewDWARF()}, &symbolize.Symbolizer{})
			synthetic := 0
			for _, st := range ref {
				want := st.Physical()
				synthetic += len(st.Frames) - len(want.Frames)
				got := findThread(rep, st.TID)
				if got == nil || !samePCs(got, want) {
					t.Errorf("thread %d differs from gdb's physical frames:\n%s", st.TID, sideBySide(got, want))
				}
			}
			t.Logf("gdb added %d synthetic (inlined or tail-call) frames, dropped for the comparison", synthetic)
		})
	}
}

// TestCoreWithMovedExe: --exe names the executable when it is no longer
// where the core says; the walk and the names must not change.
func TestCoreWithMovedExe(t *testing.T) {
	src := fixture.Build(t, "threads", fixture.Variants[3])
	dir := t.TempDir()
	exe := filepath.Join(dir, "threads")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	proc := fixture.Start(t, exe)
	core := fixture.Gcore(t, proc)
	ref, err := fixture.EuStackCore(t, core, exe)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Rename(exe, moved); err != nil {
		t.Fatal(err)
	}
	tg := openCore(t, core, moved, &target.Objects{})
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewDWARF()}, &symbolize.Symbolizer{})
	for _, want := range ref {
		got := findThread(rep, want.TID)
		if got == nil || !samePCs(got, want) {
			t.Fatalf("thread %d differs with --exe:\n%s", want.TID, sideBySide(got, want))
		}
	}
	if !strings.Contains(fmt.Sprint(rep.Threads), "t16_start") {
		t.Error("no frame named from the moved executable")
	}
}

// TestCoreVDSO: the vDSO image comes from the core's memory, with its CFI
// and symbols, as eu-stack reads it.
func TestCoreVDSO(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	proc := fixture.Start(t, exe)
	tg := openCore(t, fixture.Gcore(t, proc), exe, objs)
	var vdso *target.Mapping
	for _, m := range tg.Space.Mappings() {
		if m.Path == "[vdso]" {
			vdso = m
		}
	}
	if vdso == nil || vdso.Module == nil || vdso.Module.File == nil {
		t.Fatalf("no [vdso] module in the core's address space")
	}
	addr, ok := vdso.Module.File.SymbolByName("__vdso_clock_gettime")
	if !ok {
		t.Fatal("the vDSO image has no __vdso_clock_gettime")
	}
	loc := (&symbolize.Symbolizer{}).Addr(tg.Space, addr+vdso.Bias+1)
	if loc.Function != "__vdso_clock_gettime" && loc.Function != "clock_gettime" || loc.Module != "[vdso]" {
		t.Errorf("vDSO address symbolizes as %+v", loc)
	}
	tab, err := vdso.Module.Table()
	if err != nil || tab.Stats().FDEs == 0 {
		t.Fatalf("vDSO table: %v, %+v", err, tab)
	}
	if _, ok := tab.Lookup(addr + 1); !ok {
		t.Error("no unwind rule inside __vdso_clock_gettime")
	}
}

// must returns v or fails the program on err (for constant arguments).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
