package fibers_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
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
	out := gdbWalk(t, pid, r, script)
	var want []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.SplitN(line, " ", 3); len(f) == 3 && f[0] == "@F" {
			want = append(want, f[2])
		}
	}
	return want, out
}

// gdbWalk runs gdb on process pid with the registers of the current
// thread set to r, runs the Python script py, restores the registers
// before it detaches, and returns gdb's output.
func gdbWalk(t *testing.T, pid int, r regs.Regs, script string) string {
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
	return string(out)
}

// functions lists the native frames' functions (gdb has no Lua frames).
func functions(fs []output.Frame) []string {
	var out []string
	for _, f := range fs {
		if !f.Interpreted {
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

// keptLive captures process pid with the contexts a scan found copied in
// the pause, as dump does, walks it, and returns the contexts
// Phantoms keeps.
func keptLive(t *testing.T, pid int, found []fibers.Spec) []fibers.Spec {
	t.Helper()
	fc := fibers.NewCopier(pid, found, false, func(s string) { t.Error(s) })
	var opt live.Options
	fc.Apply(&opt)
	snap, err := live.Capture(pid, opt)
	if err != nil {
		t.Fatal(err)
	}
	tg := snap.Target(nil, nil)
	tg.Contexts = append(tg.Contexts, fc.Contexts(tg, func(s string) { t.Error(s) })...)
	return walkedSpecs(dropPhantoms(stacks.Walk(tg, stacks.Options{Unwinder: unwind.NewAuto()}), found))
}

// keptCore is keptLive for a core's target tg (its contexts are left as
// they were).
func keptCore(t *testing.T, tg *target.Target, found []fibers.Spec) []fibers.Spec {
	t.Helper()
	saved := tg.Contexts
	defer func() { tg.Contexts = saved }()
	tg.Contexts = append(slices.Clip(tg.Contexts), fibers.FromCore(tg, found, false, func(s string) { t.Error(s) })...)
	return walkedSpecs(dropPhantoms(stacks.Walk(tg, stacks.Options{Unwinder: unwind.NewAuto()}), found))
}

// TestScanLive: --fiber-scan's contexts, once walked and past
// Phantoms, are exactly the fixture's four parked contexts (none of
// the stale ones main saved on its own stack, which the scan finds: no
// mapping says a thread runs there), and they unwind as the explicit ones
// do.
func TestScanLive(t *testing.T) {
	for _, flags := range [][]string{{"-O1"}, {"-O2", "-fomit-frame-pointer"}} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			p, ps := startFibers(t, flags...)
			found, _, err := fibers.ScanLive(p.PID, fibers.ScanLimits{})
			if err != nil {
				t.Fatal(err)
			}
			got := keptLive(t, p.PID, found)
			if specSet(got) != specSet(specs(ps)) {
				t.Fatalf("scan found %v, kept %v, want %v", found, got, specs(ps))
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
// parked contexts (past Phantoms), as the live scan does, and they
// unwind to backtrace()'s return addresses.
func TestScanCore(t *testing.T) {
	p, ps := startFibers(t, "-O1")
	core := fixture.Gcore(t, p)
	c, tg := coreTarget(t, core, p.Exe)
	found, _, err := fibers.ScanCore(tg, c.AnonymousSegments(), fibers.ScanLimits{})
	if err != nil {
		t.Fatal(err)
	}
	got := keptCore(t, tg, found)
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
	_, tg := coreTarget(t, core, exe)
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

// startStale builds testdata/stale.cc with flags and runs it: the fibers
// parked, and the stale records it names.
func startStale(t *testing.T, flags ...string) (p *fixture.Proc, real, stale []fibers.Spec) {
	t.Helper()
	p, _ = startProgram(t, "testdata/stale.cc", flags...)
	for _, line := range strings.Split(p.Stderr(), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || (f[0] != "fiber" && f[0] != "stale") {
			continue
		}
		sp := fibers.Spec{Kind: f[1], Addr: hex(t, f[2])}
		if f[0] == "fiber" {
			real = append(real, sp)
		} else {
			stale = append(stale, sp)
		}
	}
	if len(real) != 6 || len(stale) != 2 {
		t.Fatalf("fixture printed %d fibers and %d stale records, want 6 and 2:\n%s", len(real), len(stale), p.Stderr())
	}
	return p, real, stale
}

// startProgram builds the C++ source src with flags (and boost.context)
// and runs it.
func startProgram(t *testing.T, src string, flags ...string) (*fixture.Proc, string) {
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
	exe := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	args := append([]string{"-g", "-o", exe, src, "-lboost_context"}, flags...)
	if out, err := exec.Command("g++", args...).CombinedOutput(); err != nil {
		t.Fatalf("g++ %v: %v\n%s", args, err, out)
	}
	return fixture.Start(t, exe), exe
}

// dropPhantoms removes from walks the stale fibers of the contexts a scan
// found, as dump does.
func dropPhantoms(walks []stacks.Walked, found []fibers.Spec) []stacks.Walked {
	in := make([]fibers.Walk, len(walks))
	for i := range walks {
		in[i] = fibers.Walk{Fiber: walks[i].Fiber, Stack: &walks[i].Stack}
	}
	drop := fibers.Phantoms(in, found)
	var out []stacks.Walked
	for i := range walks {
		if drop == nil || !drop[i] {
			out = append(out, walks[i])
		}
	}
	return out
}

// walkedSpecs lists the fibers of walks as specs.
func walkedSpecs(walks []stacks.Walked) []fibers.Spec {
	var out []fibers.Spec
	for _, w := range walks {
		if w.Fiber != nil {
			out = append(out, fibers.Spec{Kind: w.Fiber.Runtime, Addr: w.Fiber.Saved})
		}
	}
	return out
}

// TestScanDropsStale: a ucontext_t and a boost fcontext record a fiber
// left in its live stack (see testdata/stale.cc): the ucontext_t is found
// by the scan, as it looks parked, and dropped once the fibers are
// walked, because its stack pointer lies in the live part of another
// fiber's stack; the fcontext record is found and dropped so too, or not
// taken by the scan at all (its return address no longer follows a call
// to jump_fcontext); the six parked fibers stay. Live (at -O1 and -O2)
// and from a gcore core.
// gdb, walking the fiber each stale record lies in from its saved
// registers, has a frame at the record's stack pointer: the record
// resumes into a frame that fiber still has.
func TestScanDropsStale(t *testing.T) {
	for _, flags := range [][]string{{"-O1"}, {"-O2", "-fomit-frame-pointer"}} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			p, real, stale := startStale(t, flags...)
			found, _, err := fibers.ScanLive(p.PID, fibers.ScanLimits{})
			if err != nil {
				t.Fatal(err)
			}
			for _, sp := range append(slices.Clone(real), stale[0]) {
				if !slices.Contains(found, sp) {
					t.Fatalf("scan found %s\nwant the parked and the stale ucontext_t: %s %v", specSet(found), specSet(real), stale[0])
				}
			}
			fc := fibers.NewCopier(p.PID, found, false, func(s string) { t.Error(s) })
			var opt live.Options
			fc.Apply(&opt)
			snap, err := live.Capture(p.PID, opt)
			if err != nil {
				t.Fatal(err)
			}
			tg := snap.Target(nil, nil)
			tg.Contexts = append(tg.Contexts, fc.Contexts(tg, func(s string) { t.Error(s) })...)
			walks := dropPhantoms(stacks.Walk(tg, stacks.Options{Unwinder: unwind.NewAuto()}), found)
			if got, want := specSet(walkedSpecs(walks)), specSet(real); got != want {
				t.Errorf("after Phantoms: %s\nwant the parked fibers: %s", got, want)
			}
			if flags[0] == "-O1" {
				staleInGdb(t, p.PID, tg, real, stale)
				t.Run("core", func(t *testing.T) {
					c, ctg := coreTarget(t, fixture.Gcore(t, p), p.Exe)
					found, _, err := fibers.ScanCore(ctg, c.AnonymousSegments(), fibers.ScanLimits{})
					if err != nil {
						t.Fatal(err)
					}
					ctg.Contexts = append(ctg.Contexts, fibers.FromCore(ctg, found, false, func(s string) { t.Error(s) })...)
					walks := dropPhantoms(stacks.Walk(ctg, stacks.Options{Unwinder: unwind.NewAuto()}), found)
					if got, want := specSet(walkedSpecs(walks)), specSet(real); got != want {
						t.Errorf("core: after Phantoms: %s\nwant the parked fibers: %s", got, want)
					}
				})
			}
		})
	}
}

// gdbStalePy, given FIBERS (register sets) and PCS, walks each register
// set in gdb from the current thread, printing "@S I PC SP NAME" per
// frame of set I, then "@Y PC NAME" with gdb's symbol at each of PCS; it
// restores the thread's registers before it ends.
const gdbStalePy = `
import gdb
names = ("rip", "rsp", "rbp", "rbx", "r12", "r13", "r14", "r15")
saved = dict((r, int(gdb.parse_and_eval("$" + r))) for r in names)
try:
    for i, regs in enumerate(FIBERS):
        for r, v in regs.items():
            gdb.execute("set $%s=%#x" % (r, v))
        f = gdb.newest_frame()
        while f is not None and f.pc() != 0:
            gdb.write("@S %d %x %x %s\n" % (i, f.pc(), int(f.read_register("rsp")), f.name() or "??"))
            f = f.older()
    for pc in PCS:
        gdb.write("@Y %x %s\n" % (pc, gdb.execute("info symbol %#x" % pc, to_string=True).strip()))
finally:
    for r, v in saved.items():
        gdb.execute("set $%s=%#x" % (r, v))
`

// staleInGdb checks, with gdb, that each stale record's stack pointer is
// the stack pointer of a frame of one of the parked fibers real (walked by
// gdb from the registers rewind read), and that gdb names the same
// function at that frame's PC and at the record's: the record is a frame
// that fiber still has.
func staleInGdb(t *testing.T, pid int, tg *target.Target, real, stale []fibers.Spec) {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb not installed")
	}
	names := map[int]string{regs.AMD64RSP: "rsp", regs.AMD64RIP: "rip", regs.AMD64RBP: "rbp", regs.AMD64RBX: "rbx",
		12: "r12", 13: "r13", 14: "r14", 15: "r15"}
	var sets, pcs []string
	for _, sp := range real {
		r, err := fibers.Read(tg, tg.Mem, sp)
		if err != nil {
			t.Fatal(err)
		}
		var kv []string
		for n, name := range names {
			if v, ok := r.Get(n); ok {
				kv = append(kv, fmt.Sprintf("%q: %#x", name, v))
			}
		}
		sets = append(sets, "{"+strings.Join(kv, ", ")+"}")
	}
	type rec struct{ sp, pc uint64 }
	var recs []rec
	for _, sp := range stale {
		r, err := fibers.Read(tg, tg.Mem, sp)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := r.SP()
		pc, _ := r.PC()
		recs = append(recs, rec{s, pc})
		pcs = append(pcs, fmt.Sprintf("%#x", pc))
	}
	script := fmt.Sprintf("FIBERS = [%s]\nPCS = [%s]\n%s", strings.Join(sets, ", "), strings.Join(pcs, ", "), gdbStalePy)
	py := filepath.Join(t.TempDir(), "stale.py")
	if err := os.WriteFile(py, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gdb", "-nx", "-batch", "-p", strconv.Itoa(pid), "-x", py).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	frameAt := map[uint64]string{} // gdb's function of the frame at an SP
	symbol := map[uint64]string{}  // gdb's function at a stale PC
	base := func(name string) string {
		name, _, _ = strings.Cut(fixture.BaseName(name), "(")
		name, _, _ = strings.Cut(name, " + ")
		return name
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && f[0] == "@S":
			frameAt[hex(t, f[3])] = base(strings.Join(f[4:], " "))
		case len(f) >= 3 && f[0] == "@Y":
			symbol[hex(t, f[1])] = base(strings.Join(f[2:], " "))
		}
	}
	for i, r := range recs {
		fn, ok := frameAt[r.sp]
		if !ok || fn != symbol[r.pc] {
			t.Errorf("stale %v (sp %#x, pc %#x in %q): gdb's frame at that sp: %q (found %v)\n%s", stale[i], r.sp, r.pc, symbol[r.pc], fn, ok, out)
		}
	}
}

// startHuge builds testdata/huge_mappings.c and runs it with args; it
// returns the process and the spec of its parked fiber.
func startHuge(t *testing.T, args ...string) (*fixture.Proc, fibers.Spec) {
	t.Helper()
	exe := buildHuge(t)
	p := fixture.Start(t, exe, args...)
	return p, hugeFiber(t, p.Stderr())
}

func buildHuge(t *testing.T) string {
	t.Helper()
	if live.HostArch != regs.AMD64 {
		t.Skipf("the scan reads x86-64 contexts (this is %s)", live.HostArch)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	exe := filepath.Join(t.TempDir(), "huge")
	if out, err := exec.Command("gcc", "-O1", "-g", "-o", exe, "testdata/huge_mappings.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

func hugeFiber(t *testing.T, stderr string) fibers.Spec {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "fiber" {
			return fibers.Spec{Kind: f[1], Addr: hex(t, f[2])}
		}
	}
	t.Fatalf("fixture printed no fiber:\n%s", stderr)
	return fibers.Spec{}
}

// specSet renders specs as a sorted set, for comparisons.
func specSet(specs []fibers.Spec) string {
	var s []string
	for _, sp := range specs {
		s = append(s, sp.String())
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// checkBudget: the scan found want (when given), charged no more than its
// byte budget, said in one line what it left, and took less than ten
// times its time limit (generous: the limit is checked between reads of
// at most a megabyte; the machine may be loaded).
func checkBudget(t *testing.T, got []fibers.Spec, want fibers.Spec, st fibers.ScanStats, took time.Duration) {
	t.Helper()
	if want != (fibers.Spec{}) && specSet(got) != specSet([]fibers.Spec{want}) {
		t.Errorf("scan found %v, want %v", got, want)
	}
	if st.Read+st.Unreadable > st.Limits.MaxBytes {
		t.Errorf("charged %d bytes (read %d, unreadable %d), budget %d", st.Read+st.Unreadable, st.Read, st.Unreadable, st.Limits.MaxBytes)
	}
	if n := st.Note(); n == "" || strings.Contains(n, "\n") {
		t.Errorf("note %q, want one line saying what was left", n)
	}
	if took > 10*st.Limits.MaxTime {
		t.Errorf("scan took %v, limit %v", took, st.Limits.MaxTime)
	}
	t.Logf("%v: %s", took.Round(time.Millisecond), st.Note())
}

// TestScanBudgetLive: a live process with 8 TB of shared file mapping past
// its one-page file (reads fail) or a 64 TB MAP_NORESERVE reservation
// (reads give zeros): the scan keeps its budget and limit, says what it
// left, and still finds the parked fiber (small mappings are read first).
func TestScanBudgetLive(t *testing.T) {
	for _, c := range []struct {
		name string
		args func(dir string) []string
	}{
		{"file", func(dir string) []string { return []string{"file", filepath.Join(dir, "one-page")} }},
		{"anon", func(string) []string { return []string{"anon"} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, want := startHuge(t, c.args(t.TempDir())...)
			lim := fibers.ScanLimits{MaxTime: 500 * time.Millisecond}
			start := time.Now()
			found, st, err := fibers.ScanLive(p.PID, lim)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			got := keptLive(t, p.PID, found)
			if c.name == "anon" && st.LeftMappings > 1 {
				// The limit came before the small mappings were
				// all read (a loaded machine): the fiber may be
				// in one of them.
				want = fibers.Spec{}
			}
			checkBudget(t, got, want, st, took)
			if c.name == "file" && (st.Unreadable == 0 || st.Abandoned == 0) {
				t.Errorf("file mapping past its end: stats %+v", st)
			}
			if c.name == "anon" && (st.Stop == "" || st.Left == 0) {
				t.Errorf("64 TB reservation: stats %+v", st)
			}
		})
	}
}

// TestScanBudgetKernelCore: a kernel core of a process with a 64 TB
// MAP_NORESERVE+MADV_DONTDUMP mapping holds a segment of 64 TB and no
// bytes: the scan of the core gives it up after a run of failed reads and
// finds the fiber.
func TestScanBudgetKernelCore(t *testing.T) {
	exe := buildHuge(t)
	c, tg := coreTarget(t, fixture.KernelCore(t, exe, "anon"), exe)
	start := time.Now()
	found, st, err := fibers.ScanCore(tg, c.AnonymousSegments(), fibers.ScanLimits{})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	got := keptCore(t, tg, found)
	checkBudget(t, got, fibers.Spec{}, st, took)
	if len(got) != 1 || st.Abandoned == 0 {
		t.Errorf("found %v; stats %+v", got, st)
	}
}

// TestScanBudgetEditedCore: a gcore core whose writable segment's
// p_memsz says 64 TB (its bytes end where p_filesz does): the scan reads
// what the core holds, gives the rest up after a run of failed reads, and
// finds the fiber.
func TestScanBudgetEditedCore(t *testing.T) {
	p, want := startHuge(t)
	core := fixture.Gcore(t, p)
	editLastWritableMemsz(t, core, 64<<40)
	c, tg := coreTarget(t, core, p.Exe)
	start := time.Now()
	found, st, err := fibers.ScanCore(tg, c.AnonymousSegments(), fibers.ScanLimits{})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	checkBudget(t, keptCore(t, tg, found), want, st, took)
	if st.Writable < 64<<40 || st.Abandoned == 0 {
		t.Errorf("stats %+v: the edited segment was not scanned as 64 TB", st)
	}
}

// editLastWritableMemsz sets p_memsz of the core's writable PT_LOAD of
// highest address to n.
func editLastWritableMemsz(t *testing.T, path string, n uint64) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for i, ph := range ef.Progs {
		if ph.Type == elf.PT_LOAD && ph.Flags&elf.PF_W != 0 && ph.Filesz > 0 && (last < 0 || ph.Vaddr > ef.Progs[last].Vaddr) {
			last = i
		}
	}
	ef.Close()
	if last < 0 {
		t.Fatal("core has no writable segment")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hdr [64]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		t.Fatal(err)
	}
	phoff := binary.LittleEndian.Uint64(hdr[32:])
	phentsize := uint64(binary.LittleEndian.Uint16(hdr[54:]))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	if _, err := f.WriteAt(b[:], int64(phoff+uint64(last)*phentsize+40)); err != nil {
		t.Fatal(err)
	}
}

// coreTarget opens the core at path (closed when t ends) and its target,
// with exe for the executable.
func coreTarget(t *testing.T, path, exe string) (*corefile.Core, *target.Target) {
	t.Helper()
	c, err := corefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tg, err := c.Target(nil, exe)
	if err != nil {
		t.Fatal(err)
	}
	return c, tg
}
