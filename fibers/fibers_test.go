package fibers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/internal/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// parked is what the fixture says of one fiber: its kind, the address of
// its context, and backtrace()'s return addresses taken just before it
// switched away (the callers of KIND_park).
type parked struct {
	kind string
	addr uint64
	ret  []uint64
}

// startFibers builds testdata/fibers.cc with extra flags and runs it.
func startFibers(t *testing.T, flags ...string) (*fixture.Proc, []parked) {
	t.Helper()
	if live.HostArch != regs.AMD64 {
		t.Skipf("the fixture's contexts are x86-64 (this is %s)", live.HostArch)
	}
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ not installed")
	}
	if _, err := os.Stat("/usr/include/boost/context/detail/fcontext.hpp"); err != nil {
		t.Skip("boost.context not installed (Debian: libboost-context-dev)")
	}
	exe := filepath.Join(t.TempDir(), "fibers")
	args := append([]string{"-g", "-o", exe, "testdata/fibers.cc", "-lboost_context"}, flags...)
	if out, err := exec.Command("g++", args...).CombinedOutput(); err != nil {
		t.Fatalf("g++ %v: %v\n%s", args, err, out)
	}
	p := fixture.Start(t, exe)
	var ps []parked
	for _, line := range strings.Split(p.Stderr(), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "fiber" {
			continue
		}
		pk := parked{kind: f[1], addr: hex(t, f[2])}
		for _, s := range f[3:] {
			pk.ret = append(pk.ret, hex(t, s))
		}
		ps = append(ps, pk)
	}
	if len(ps) != 4 {
		t.Fatalf("fixture printed %d fibers, want 4:\n%s", len(ps), p.Stderr())
	}
	return p, ps
}

func hex(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

func specs(ps []parked) []fibers.Spec {
	var out []fibers.Spec
	for _, p := range ps {
		out = append(out, fibers.Spec{Kind: p.kind, Addr: p.addr})
	}
	return out
}

// dumpLive captures the fixture with its fibers copied in the pause.
func dumpLive(t *testing.T, pid int, ps []parked, method string) (*target.Target, *output.Report) {
	t.Helper()
	fc := &fibers.Copier{Specs: specs(ps), Arch: live.HostArch}
	snap, err := live.Capture(pid, live.Options{During: fc.During})
	if err != nil {
		t.Fatal(err)
	}
	tg := snap.Target(nil, nil)
	tg.Contexts = append(tg.Contexts, fibers.Explicit(tg, fc.Specs, fc.Memory(tg.Mem))...)
	return tg, unwindAll(t, tg, method)
}

func unwindAll(t *testing.T, tg *target.Target, method string) *output.Report {
	u, err := unwind.ByName(method)
	if err != nil {
		t.Fatal(err)
	}
	return stacks.Report(tg, stacks.Walk(tg, stacks.Options{Unwinder: u}), &symbolize.Symbolizer{})
}

// checkBacktrace: the frames above #0 are the return addresses backtrace()
// saw just before the switch, all of them, and #0 is in KIND_park.
func checkBacktrace(t *testing.T, rep *output.Report, ps []parked) {
	t.Helper()
	if len(rep.Fibers) != len(ps) {
		t.Fatalf("%d fibers in the report, want %d", len(rep.Fibers), len(ps))
	}
	for i, f := range rep.Fibers {
		p := ps[i]
		if f.Kind != p.kind || f.Context != p.addr || f.Thread != nil {
			t.Errorf("fiber %d: kind %q context %#x thread %v, want %q %#x null", i, f.Kind, f.Context, f.Thread, p.kind, p.addr)
		}
		var got []uint64
		for _, fr := range f.Frames[min(1, len(f.Frames)):] {
			got = append(got, fr.PC)
		}
		park := map[string]string{"ucontext": "uc_park", "jmpbuf": "jb_park", "coro": "coro_park", "fcontext": "fc_park"}[p.kind]
		if len(f.Frames) == 0 || f.Frames[0].Function != park || fmt.Sprint(got) != fmt.Sprint(p.ret) {
			t.Errorf("%s fiber: frames %s (end %s %s)\nbacktrace() in %s: %x", p.kind, names(f.Frames), f.End, f.EndDetail, park, p.ret)
		}
		if f.End != "outermost" {
			t.Errorf("%s fiber: walk ended %s (%s), want outermost at the fiber's entry", p.kind, f.End, f.EndDetail)
		}
	}
}

func names(fs []output.Frame) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, " %#x %s [%s]", f.PC, f.Name(), f.Method)
	}
	return b.String()
}

// TestExplicitLive: every kind of saved context, read from a live process
// in the pause, unwinds to exactly the return addresses backtrace()
// recorded before the switch, with every method that can (frame pointers
// with -fno-omit-frame-pointer, SFrame with the assembler's .sframe
// sections, CFI and the default chain always).
func TestExplicitLive(t *testing.T) {
	for _, c := range []struct {
		flags   []string
		methods []string
	}{
		{[]string{"-O1", "-fno-omit-frame-pointer"}, []string{"auto", "dwarf", "fp"}},
		{[]string{"-O2", "-fomit-frame-pointer"}, []string{"auto", "dwarf"}},
		{[]string{"-O1", "-Wa,--gsframe"}, []string{"sframe"}},
	} {
		t.Run(strings.Join(c.flags, ""), func(t *testing.T) {
			p, ps := startFibers(t, c.flags...)
			for _, m := range c.methods {
				_, rep := dumpLive(t, p.PID, ps, m)
				checkBacktrace(t, rep, ps)
			}
		})
	}
}

// TestExplicitCore: the same contexts from a gcore core file, read from
// the core (no live process involved), give the same frames.
func TestExplicitCore(t *testing.T) {
	p, ps := startFibers(t, "-O1", "-fno-omit-frame-pointer")
	tg := explicitCore(t, p, ps)
	checkBacktrace(t, unwindAll(t, tg, "auto"), ps)
}

// explicitCore takes a gcore core of p and returns its target with the
// fiber contexts of ps; the core stays open until the test ends.
func explicitCore(t *testing.T, p *fixture.Proc, ps []parked) *target.Target {
	t.Helper()
	c, err := corefile.Open(fixture.Gcore(t, p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tg, err := c.Target(nil, p.Exe)
	if err != nil {
		t.Fatal(err)
	}
	tg.Contexts = append(tg.Contexts, fibers.Explicit(tg, specs(ps), nil)...)
	return tg
}

// TestExplicitMatchesGdb: gdb, given each fiber's registers as rewind read
// them (set, bt, restored before it detaches), shows the same functions
// at the same return addresses, for contexts read live and from a gcore
// core of the parked process (gdb cannot set a core's registers, so it
// walks the same saved context in the process the core was taken of).
func TestExplicitMatchesGdb(t *testing.T) {
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb not installed")
	}
	p, ps := startFibers(t, "-O1", "-fno-omit-frame-pointer")
	tg, rep := dumpLive(t, p.PID, ps, "auto")
	t.Run("live", func(t *testing.T) { compareFibersWithGdb(t, p.PID, tg, rep) })
	t.Run("core", func(t *testing.T) {
		ctg := explicitCore(t, p, ps)
		compareFibersWithGdb(t, p.PID, ctg, unwindAll(t, ctg, "auto"))
	})
	// The process still runs its main thread where it was: nothing was
	// left modified.
	_, after := dumpLive(t, p.PID, ps, "auto")
	if fmt.Sprint(after.Threads[0].Frames) != fmt.Sprint(rep.Threads[0].Frames) {
		t.Errorf("main thread changed after gdb restored it:\n%s\n%s", names2(rep.Threads[0].Frames), names2(after.Threads[0].Frames))
	}
}

// compareFibersWithGdb has gdb walk each fiber context of tg (from rep)
// in process pid and compares the functions.
func compareFibersWithGdb(t *testing.T, pid int, tg *target.Target, rep *output.Report) {
	t.Helper()
	var fiberCtx []*target.Context
	for i := range tg.Contexts {
		if tg.Contexts[i].Kind == target.KindFiber {
			fiberCtx = append(fiberCtx, &tg.Contexts[i])
		}
	}
	if len(fiberCtx) != len(rep.Fibers) || len(fiberCtx) < 4 {
		t.Fatalf("%d fiber contexts, %d fibers in the report, want the fixture's 4 or more", len(fiberCtx), len(rep.Fibers))
	}
	for i, c := range fiberCtx {
		want, out := gdbBacktrace(t, pid, c.Regs)
		f := rep.Fibers[i]
		got := functions(f.Frames)
		// rewind ends at the entry trampoline of a context library
		// (makecontext's __start_context, boost's make_fcontext); gdb may
		// go on through what lies above it on the stack.
		if n := len(got); n > 0 && len(want) > n && f.End == "outermost" {
			want = want[:n]
		}
		if len(want) < 4 || !sameFunctions(got, want) {
			t.Errorf("%s fiber: rewind %v\ngdb %v\n%s", f.Kind, got, want, out)
		}
	}
}

func names2(fs []output.Frame) string { return names(fs) }

// gdbPy prints gdb's frames of the selected thread, one "@F PC NAME" line
// each, leaving out the tail-call frames gdb synthesizes from
// DW_TAG_call_site information (no return address of theirs is on the
// stack: rewind, eu-stack and backtrace() do not show them).
const gdbPy = `import gdb
f = gdb.newest_frame()
while f is not None and f.pc() != 0:
    if f.type() != gdb.TAILCALL_FRAME:
        gdb.write("@F %x %s\n" % (f.pc(), f.name() or "??"))
    f = f.older()
`

// gdbBacktrace runs gdb on process pid with the registers of the current
// thread set to r for one walk of its frames, restored before it
// detaches, and returns the functions of the frames and gdb's output.
func gdbBacktrace(t *testing.T, pid int, r regs.Regs) ([]string, string) {
	t.Helper()
	return gdbBacktraceWith(t, pid, r, gdbPy)
}

// gdbBacktraceWith is gdbBacktrace with another script printing "@F"
// lines.
func gdbBacktraceWith(t *testing.T, pid int, r regs.Regs, script string) ([]string, string) {
	t.Helper()
	py := filepath.Join(t.TempDir(), "frames.py")
	if err := os.WriteFile(py, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	names := map[int]string{regs.AMD64RSP: "rsp", regs.AMD64RIP: "rip", regs.AMD64RBP: "rbp", regs.AMD64RBX: "rbx",
		12: "r12", 13: "r13", 14: "r14", 15: "r15"}
	args := []string{"-nx", "-batch", "-p", strconv.Itoa(pid)}
	var restore []string
	for n := 0; n < regs.MaxRegs; n++ {
		name, ok := names[n]
		v, known := r.Get(n)
		if !ok || !known {
			continue
		}
		args = append(args, "-ex", fmt.Sprintf("set $o_%s=$%s", name, name), "-ex", fmt.Sprintf("set $%s=%#x", name, v))
		restore = append(restore, "-ex", fmt.Sprintf("set $%s=$o_%s", name, name))
	}
	args = append(append(args, "-x", py), restore...)
	out, err := exec.Command("gdb", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	var want []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.SplitN(line, " ", 3); len(f) == 3 && f[0] == "@F" {
			want = append(want, f[2])
		}
	}
	return want, string(out)
}

// functions lists the native frames' functions (gdb has no Lua frames).
func functions(fs []output.Frame) []string {
	var out []string
	for _, f := range fs {
		if f.Method != "lua" {
			out = append(out, f.Function)
		}
	}
	return out
}

// sameFunctions compares function names as rewind prints them (symbol
// names, C++ with parameters) with gdb's (no parameters; "??" unknown).
func sameFunctions(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if j := strings.IndexByte(g, '('); j > 0 {
			g = g[:j]
		}
		if j := strings.IndexByte(w, '('); j > 0 {
			w = w[:j]
		}
		if g == "" {
			g = "??"
		}
		if g != w {
			return false
		}
	}
	return true
}

// TestJSON: the report's "fibers" list has the field names, with
// null thread, id and name for explicit contexts.
func TestJSON(t *testing.T) {
	p, ps := startFibers(t, "-O1")
	_, rep := dumpLive(t, p.PID, ps, "auto")
	var buf bytes.Buffer
	if err := output.WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Fibers []map[string]json.RawMessage `json:"fibers"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Fibers) != 4 {
		t.Fatalf("%d fibers in JSON", len(doc.Fibers))
	}
	for _, f := range doc.Fibers {
		for _, k := range []string{"thread", "kind", "id", "name", "context", "end", "frames"} {
			if _, ok := f[k]; !ok {
				t.Errorf("fiber object lacks %q: %v", k, f)
			}
		}
		if string(f["thread"]) != "null" || string(f["id"]) != "null" || string(f["name"]) != "null" {
			t.Errorf("explicit fiber: thread %s id %s name %s, want null", f["thread"], f["id"], f["name"])
		}
	}
}

// TestScanLive: --fiber-scan finds exactly the fixture's four parked
// contexts (and none of the stale ones main saved on its own stack), and
// they unwind as the explicit ones do.
func TestScanLive(t *testing.T) {
	for _, flags := range [][]string{{"-O1"}, {"-O2", "-fomit-frame-pointer"}} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			p, ps := startFibers(t, flags...)
			got, err := fibers.ScanLive(p.PID)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{}
			for _, sp := range specs(ps) {
				want[sp.String()] = true
			}
			gotSet := map[string]bool{}
			for _, sp := range got {
				gotSet[sp.String()] = true
			}
			if fmt.Sprint(gotSet) != fmt.Sprint(want) {
				t.Fatalf("scan found %v, want %v", got, specs(ps))
			}
			// In the fixture's order, then as explicit contexts.
			byAddr := map[uint64]fibers.Spec{}
			for _, sp := range got {
				byAddr[sp.Addr] = sp
			}
			var ordered []parked
			for _, pk := range ps {
				if sp := byAddr[pk.addr]; sp.Kind == pk.kind {
					ordered = append(ordered, pk)
				}
			}
			_, rep := dumpLive(t, p.PID, ordered, "auto")
			checkBacktrace(t, rep, ordered)
		})
	}
}

// TestScanCore: --fiber-scan over a gcore core finds the fixture's four
// parked contexts, as the live scan does, and they unwind to backtrace()'s
// return addresses.
func TestScanCore(t *testing.T) {
	p, ps := startFibers(t, "-O1")
	core := fixture.Gcore(t, p)
	c, err := corefile.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, p.Exe)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fibers.ScanCore(tg, c.AnonymousSegments())
	if err != nil {
		t.Fatal(err)
	}
	byAddr := map[uint64]fibers.Spec{}
	for _, sp := range got {
		byAddr[sp.Addr] = sp
	}
	if len(got) != len(ps) {
		t.Errorf("scan of the core found %v, want %v", got, specs(ps))
	}
	var ordered []parked
	for _, pk := range ps {
		if sp := byAddr[pk.addr]; sp.Kind == pk.kind {
			ordered = append(ordered, pk)
		} else {
			t.Errorf("%s context at %#x not found", pk.kind, pk.addr)
		}
	}
	tg.Contexts = append(tg.Contexts, fibers.FromCore(tg, specs(ordered), false, func(s string) { t.Error(s) })...)
	checkBacktrace(t, unwindAll(t, tg, "auto"), ordered)
}

// TestARM64Core: aarch64 layouts, from the core qemu-user writes of a
// static aarch64 program: a glibc ucontext_t and a jmp_buf (its LR and SP
// demangled with the guard variable of a static program) unwind to the
// functions that parked them.
func TestARM64Core(t *testing.T) {
	src, err := os.ReadFile("testdata/fibers_arm64.c")
	if err != nil {
		t.Fatal(err)
	}
	exe, core, out := fixture.QemuARM64Core(t, string(src), "-O1")
	var sps []fibers.Spec
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "fiber" {
			sp, err := fibers.ParseSpec(f[1] + "@" + f[2])
			if err != nil {
				t.Fatal(err)
			}
			sps = append(sps, sp)
		}
	}
	if len(sps) != 2 {
		t.Fatalf("program printed %q", out)
	}
	c, err := corefile.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, exe)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Arch != regs.ARM64 {
		t.Fatalf("core of %s", tg.Arch)
	}
	tg.Contexts = append(tg.Contexts, fibers.FromCore(tg, sps, false, func(s string) { t.Error(s) })...)
	rep := unwindAll(t, tg, "auto")
	want := map[string][]string{"ucontext": {"uc_park", "uc_b", "uc_a"}, "jmpbuf": {"jb_park", "jb_b", "jb_a"}}
	for _, f := range rep.Fibers {
		got := functions(f.Frames)
		if len(got) > 0 && got[0] == "__swapcontext" {
			got = got[1:] // the switch routine itself may come first
		}
		w := want[f.Kind]
		if len(got) < len(w) || fmt.Sprint(got[:len(w)]) != fmt.Sprint(w) {
			t.Errorf("%s fiber: %v (end %s %s), want %v first", f.Kind, got, f.End, f.EndDetail, w)
		}
	}
}
