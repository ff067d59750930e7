package stacks_test

import (
	"bytes"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// captureAndGdb captures pid with rewind (copied stacks, auto method,
// physical frames) and then asks gdb for the same threads.
func captureAndGdb(t *testing.T, pid int) (*output.Report, []fixture.Stack, *target.AddressSpace, *symbolize.Symbolizer) {
	t.Helper()
	snap, err := live.Capture(pid, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkRunning(t, pid)
	tg := snap.Target(&target.Objects{}, func(s string) { t.Log(s) })
	sym := &symbolize.Symbolizer{}
	u := unwind.NewAuto()
	u.MaxDepth = 100000
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, sym)
	ref, err := fixture.GdbPID(t, pid)
	if err != nil {
		t.Fatalf("gdb: %v", err)
	}
	checkRunning(t, pid)
	return rep, ref, tg.Space, sym
}

// TestLiveMatchesGdb compares live captures of C fixtures with gdb's
// physical frames (its inlined and tail-call frames dropped): the same
// return addresses, and the same function names or aliases of them (gdb
// prints DWARF names such as __GI___clock_nanosleep where the symbol
// table, which rewind and eu-stack print, says clock_nanosleep).
func TestLiveMatchesGdb(t *testing.T) {
	for _, p := range []program{{"threads", nil}, {"recurse", []string{"50"}}, {"signal", []string{"busy"}}, {"cxxthrow", nil}} {
		for _, v := range []fixture.Variant{fixture.Variants[2], fixture.Variants[3]} {
			p, v := p, v
			t.Run(p.String()+"/"+v.Name, func(t *testing.T) {
				t.Parallel()
				proc := fixture.Start(t, fixture.Build(t, p.name, v), p.args...)
				rep, ref, space, sym := captureAndGdb(t, proc.PID)
				synthetic := 0
				for _, st := range ref {
					want := st.Physical()
					synthetic += len(st.Frames) - len(want.Frames)
					got := findThread(rep, st.TID)
					if got == nil || !samePCs(got, want) {
						t.Errorf("thread %d differs from gdb's physical frames:\n%s", st.TID, sideBySide(got, want))
						continue
					}
					checkNames(t, "auto", got, want, space, sym)
				}
				t.Logf("%d threads agree; gdb's %d synthetic frames dropped", len(ref), synthetic)
			})
		}
	}
}

// goTopFrames are where the Go runtime's own traceback ends a thread's
// stack: a goroutine's entry, a thread's start, the switch to g0.
var goTopFrames = map[string]bool{"runtime.goexit": true, "runtime.mstart": true, "runtime.rt0_go": true,
	"runtime.mcall": true, "runtime.morestack": true}

// descheduledG0 returns, for a walk that went on from runtime.morestack
// on g0 whose goroutine the scheduler descheduled to g0's own frames
// (unwind/gojump.go: mstart0 through the label g0.sched, then mstart),
// how many frames lead to that morestack: gdb and Go's traceback end
// there, so only those are compared. It returns 0 for any other walk.
func descheduledG0(s *output.Thread) int {
	f := s.Frames
	for i := 1; i+1 < len(f); i++ {
		if strings.TrimSuffix(f[i-1].Function, ".abi0") == "runtime.morestack" && f[i].Method == "go-stack-switch" &&
			f[i].Function == "runtime.mstart0" && f[len(f)-1].Function == "runtime.mstart" {
			return i
		}
	}
	return 0
}

// TestLiveGoProgram captures a Go program whose goroutines, locked to
// their threads, block in system calls, and compares every thread with
// gdb: the same physical frames and names, from the top down to the
// frame where the Go runtime's traceback stops too (runtime.goexit,
// runtime.mstart), where rewind's walk must end as outermost (past a
// descheduled morestack, rewind goes on to mstart; gdb stops). rewind
// names Go frames from the pcln table, gdb from DWARF.
func TestLiveGoProgram(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "goprog")
	if out, err := exec.Command("go", "build", "-o", exe, "./testdata/goprog").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	proc := fixture.Start(t, exe)
	rep, ref, _, _ := captureAndGdb(t, proc.PID)
	seen := map[string]bool{}
	for _, st := range ref {
		want := st.Physical()
		got := findThread(rep, st.TID)
		if got == nil {
			t.Errorf("thread %d missing", st.TID)
			continue
		}
		// rewind ends the walk at the runtime's top frames (or where the
		// CFI says the return address is undefined, as for mcall); gdb goes
		// on past them into zeros and type data, so only its first frames
		// are compared.
		n, beyond := len(got.Frames), descheduledG0(got)
		if beyond > 0 {
			n = beyond
		}
		ok := n > 0 && n <= len(want.Frames) && got.End == "outermost"
		for i := 0; ok && i < n; i++ {
			g, w := got.Frames[i], want.Frames[i]
			ok = g.PC == w.PC && (w.Func == "" || g.Function == w.Func)
		}
		if !ok {
			t.Errorf("thread %d (end %s %s) differs from gdb's first frames:\n%s", st.TID, got.End, got.EndDetail, sideBySide(got, want))
			continue
		}
		if last := got.Frames[n-1].Function; got.EndDetail != "" && !goTopFrames[last] {
			t.Errorf("thread %d ends at %s, which is not a runtime top frame", st.TID, last)
		}
		for _, f := range got.Frames[:n] {
			seen[f.Function] = true
		}
	}
	for _, fn := range []string{"main.readPipe", "main.levelA", "main.main", "main.sleepLong", "main.main.func1", "runtime.goexit"} {
		if !seen[fn] {
			t.Errorf("no thread shows %s", fn)
		}
	}
}

// TestLiveStrippedGoProgram (issue 26 item 2) captures goprog built with
// -ldflags='-s -w', which has neither a symbol table nor DWARF, and
// compares every thread with gdb's walk of the same process through the
// same program built unstripped (its code laid out identically: the two
// builds' pcln tables are byte for byte the same): the same physical
// frames and names down to where the Go runtime's traceback ends. Frame
// pointers alone lose the callers of the frameless assembly leaves the
// threads sleep in (runtime.futexsleep under runtime.futex,
// syscall.RawSyscall6 under Syscall6); the pcln table's SP deltas find
// them, and those frames are marked gopclntab.
func TestLiveStrippedGoProgram(t *testing.T) {
	dir := t.TempDir()
	full, stripped := filepath.Join(dir, "goprog"), filepath.Join(dir, "goprog-stripped")
	for _, b := range []struct {
		exe   string
		flags []string
	}{{full, nil}, {stripped, []string{"-ldflags=-s -w"}}} {
		args := append(append([]string{"build", "-o", b.exe}, b.flags...), "./testdata/goprog")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	requireSameLayout(t, full, stripped)
	proc := fixture.Start(t, stripped)
	snap, err := live.Capture(proc.PID, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkRunning(t, proc.PID)
	tg := snap.Target(&target.Objects{}, func(s string) { t.Log(s) })
	sym := &symbolize.Symbolizer{}
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewAuto()}, sym)
	// A profiler's repeated walks reuse frames through a Memo: what it
	// keeps of a gopclntab step must give the same walk again.
	u := unwind.NewAuto()
	for _, c := range tg.Contexts {
		want := u.Walk(c.Regs, tg.Mem, tg.Space)
		var m unwind.Memo
		var st unwind.Stack
		for i := 0; i < 2; i++ {
			u.WalkMemo(&st, c.Regs, tg.Mem, tg.Space, &m)
			same := st.End == want.End && len(st.Frames) == len(want.Frames)
			for j := 0; same && j < len(st.Frames); j++ {
				a, b := st.Frames[j], want.Frames[j]
				same = a.PC == b.PC && a.SP == b.SP && a.Method == b.Method
			}
			if !same {
				t.Errorf("thread %d: memo walk %d differs: %d frames (end %s), want %d (end %s)", c.TID, i, len(st.Frames), st.End, len(want.Frames), want.End)
			}
		}
	}
	ref, err := fixture.GdbPIDExe(t, proc.PID, full)
	if err != nil {
		t.Fatalf("gdb: %v", err)
	}
	checkRunning(t, proc.PID)
	seen, leaves := map[string]bool{}, 0
	for _, st := range ref {
		want := st.Physical()
		got := findThread(rep, st.TID)
		if got == nil {
			t.Errorf("thread %d missing", st.TID)
			continue
		}
		n := len(got.Frames)
		ok := n > 1 && n <= len(want.Frames) && got.End == "outermost"
		for i := 0; ok && i < n; i++ {
			g, w := got.Frames[i], want.Frames[i]
			ok = g.PC == w.PC && w.Func != "" && g.Function == w.Func
		}
		if !ok {
			t.Errorf("thread %d (end %s %s) differs from gdb's first frames (unstripped build):\n%s", st.TID, got.End, got.EndDetail, sideBySide(got, want))
			continue
		}
		if last := got.Frames[n-1].Function; !goTopFrames[last] {
			t.Errorf("thread %d ends at %s, which is not a runtime top frame", st.TID, last)
		}
		switch got.Frames[0].Function {
		case "runtime.futex", "internal/runtime/syscall/linux.Syscall6":
			leaves++
			if m := got.Frames[1].Method; m != unwind.MethodGoPCLN.String() {
				t.Errorf("thread %d: %s's caller %s found by %s, want %s", st.TID, got.Frames[0].Function, got.Frames[1].Function, m, unwind.MethodGoPCLN)
			}
		}
		for _, f := range got.Frames[:n] {
			seen[f.Function] = true
		}
	}
	if leaves == 0 {
		t.Error("no thread sleeps in runtime.futex or Syscall6")
	}
	for _, fn := range []string{"main.readPipe", "main.levelA", "main.main", "main.sleepLong", "main.main.func1", "runtime.goexit"} {
		if !seen[fn] {
			t.Errorf("no thread shows %s", fn)
		}
	}
}

// requireSameLayout fails unless the two builds of a Go program have the
// same .text and byte-identical pcln tables: the same functions at the
// same addresses with the same SP deltas, so that one's symbols and DWARF
// describe the other's code.
func requireSameLayout(t *testing.T, a, b string) {
	t.Helper()
	var secs [2]struct {
		text, pcln *elf.Section
		data       []byte
	}
	for i, path := range []string{a, b} {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s := &secs[i]
		s.text, s.pcln = f.Section(".text"), f.Section(".gopclntab")
		if s.text == nil || s.pcln == nil {
			t.Fatalf("%s: no .text or .gopclntab", path)
		}
		if s.data, err = s.pcln.Data(); err != nil {
			t.Fatal(err)
		}
	}
	if secs[0].text.Addr != secs[1].text.Addr || secs[0].text.Size != secs[1].text.Size || !bytes.Equal(secs[0].data, secs[1].data) {
		t.Fatalf("%s and %s differ in code layout (.text %#x+%#x and %#x+%#x, pcln tables equal: %v)", a, b,
			secs[0].text.Addr, secs[0].text.Size, secs[1].text.Addr, secs[1].text.Size, bytes.Equal(secs[0].data, secs[1].data))
	}
}
