package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// TestGoNewThread: a Go thread that the clone system call has created
// but that has not run yet (on a loaded machine a capture finds such
// threads often) stops just past runtime.clone's SYSCALL with 0 in rax,
// on its new system stack, whose top holds nothing of its own. The walk
// is that one frame, ended as outermost, rather than a caller taken from
// the word above the stack (here a plausible return address into
// main.work, which the frame's CFI would find). The parent at the same
// instruction, with the child's id in rax, goes on to its caller. Later
// on, past the parent's return, the child is still on that stack: a PC
// there, or a return address into clone from a function the child
// called (runtime.stackcheck), ends the walk at clone too.
func TestGoNewThread(t *testing.T) {
	fns, maps := goFuncs(t, "runtime.clone", "main.work", "runtime.stackcheck")
	clone, work, stackcheck := fns[0], fns[1], fns[2]
	code := clone.code
	k := bytes.Index(code, []byte{0x0f, 0x05})
	if k < 0 {
		t.Fatalf("no SYSCALL in runtime.clone: % x", code)
	}
	after := clone.Value + uint64(k) + 2
	space := target.NewAddressSpace(maps, &target.Objects{})
	s := newFakeStack(0x7000, 0x1000)
	s.put(0x7f00, work.Value+0x10) // above the new stack: not a frame of the child
	mem := s.mem()
	mem.Regions = append(mem.Regions, target.Region{Addr: clone.Value, Data: code})
	at := func(ax uint64) regs.Regs {
		r := amd64Regs(after, 0x7f00, 0)
		r.Set(regs.AMD64RAX, ax)
		return r
	}
	for _, name := range []string{"auto", "dwarf"} {
		u, _ := ByName(name)
		st := u.Walk(at(0), mem, space)
		if got := pcs(st); len(got) != 1 || st.End != EndOutermost || !strings.Contains(st.Detail, "new thread") {
			t.Errorf("%s: child: frames %#x, end %s (%s); want runtime.clone alone, outermost, a new thread", name, got, st.End, st.Detail)
		}
		st = u.Walk(at(4321), mem, space)
		if got := pcs(st); len(got) < 2 || got[1] != work.Value+0x10 {
			t.Errorf("%s: parent: frames %#x, end %s (%s); want runtime.clone's caller next", name, got, st.End, st.Detail)
		}
		// The child's exit loop, at clone's end, with gettid's result
		// in rax.
		r := amd64Regs(clone.Value+clone.Size-2, 0x7f00, 0)
		r.Set(regs.AMD64RAX, 4321)
		st = u.Walk(r, mem, space)
		if got := pcs(st); len(got) != 1 || st.End != EndOutermost || !strings.Contains(st.Detail, "new thread") {
			t.Errorf("%s: child later: frames %#x, end %s (%s); want runtime.clone alone, outermost, a new thread", name, got, st.End, st.Detail)
		}
	}
	// runtime.stackcheck, called by the child, at its first instruction.
	ret := callTo(t, clone, stackcheck) + 5
	s.put(0x7e00, ret)
	mem = s.mem()
	mem.Regions = append(mem.Regions, target.Region{Addr: clone.Value, Data: code})
	for _, name := range []string{"auto", "dwarf"} {
		u, _ := ByName(name)
		st := u.Walk(amd64Regs(stackcheck.Value, 0x7e00, 0), mem, space)
		if got := pcs(st); len(got) != 2 || got[1] != ret || st.End != EndOutermost || !strings.Contains(st.Detail, "new thread") {
			t.Errorf("%s: stackcheck called by the child: frames %#x, end %s (%s); want stackcheck <- runtime.clone, outermost", name, got, st.End, st.Detail)
		}
	}
}

// TestGoMorestackOnG0: a thread stopped in runtime.morestack after it
// moved to g0's stack, at its call of runtime.newstack. morestack's
// unwind information describes the goroutine's stack, so a step reads
// the word at g0's stack pointer as the return address; a word that is
// not code (0x1af here, as a sample once found) ends the walk at the
// switch instead of becoming a frame.
func TestGoMorestackOnG0(t *testing.T) {
	fns, maps := goFuncs(t, "runtime.morestack", "runtime.newstack")
	call := callTo(t, fns[0], fns[1])
	space := target.NewAddressSpace(maps, &target.Objects{})
	s := newFakeStack(0x7000, 0x1000)
	s.put(0x7f00, 0x1af)
	for _, name := range []string{"auto", "dwarf"} {
		u, _ := ByName(name)
		st := u.Walk(amd64Regs(call, 0x7f00, 0x7f80), s.mem(), space)
		if got := pcs(st); len(got) != 1 || st.End != EndGoSwitch {
			t.Errorf("%s: frames %#x, end %s (%s); want runtime.morestack alone, go-stack-switch", name, got, st.End, st.Detail)
		}
	}
}

// goFunc is a function of the Go fixture and its code.
type goFunc struct {
	elf.Symbol
	code []byte
}

// goFuncs builds the Go fixture and returns the functions named (".abi0"
// dropped) and its text mapping; it skips off linux/amd64, the register
// sets built by these tests being amd64's.
func goFuncs(t *testing.T, names ...string) ([]goFunc, []target.Mapping) {
	t.Helper()
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		t.Skipf("the register set built here is amd64's; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	ef, maps := goText(t)
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	text := ef.Section(".text")
	if text == nil {
		t.Fatal("no .text")
	}
	data, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	fns := make([]goFunc, len(names))
	for _, s := range syms {
		for i, n := range names {
			if strings.TrimSuffix(s.Name, ".abi0") == n && s.Value >= text.Addr && s.Value+s.Size <= text.Addr+uint64(len(data)) {
				fns[i] = goFunc{s, data[s.Value-text.Addr : s.Value-text.Addr+s.Size]}
			}
		}
	}
	for i, f := range fns {
		if f.Size == 0 {
			t.Fatalf("no %s in the Go fixture", names[i])
		}
	}
	return fns, maps
}

// callTo returns the address of fn's direct call to callee.
func callTo(t *testing.T, fn, callee goFunc) uint64 {
	t.Helper()
	for i := 0; i+5 <= len(fn.code); i++ {
		if fn.code[i] == 0xe8 && fn.Value+uint64(i+5)+uint64(int64(int32(binary.LittleEndian.Uint32(fn.code[i+1:])))) == callee.Value {
			return fn.Value + uint64(i)
		}
	}
	t.Fatalf("%s does not call %s: % x", fn.Name, callee.Name, fn.code)
	return 0
}
