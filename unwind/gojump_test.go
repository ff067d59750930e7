package unwind

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// goG0 is a fake Go thread in memory: its g0 and m, the goroutine its m
// runs (curg) with the registers a stack switch saved in curg.sched, and
// both stacks, laid out with the Go fixture's runtime offsets.
type goG0 struct {
	s                *fakeStack
	lay              *goruntime.Layout
	g0, m, curg      uint64
	g0Stack          uint64 // top of the g0 stack used
	stackLo, stackHi uint64 // the goroutine's stack
}

func newGoG0(t *testing.T, exe string) *goG0 {
	t.Helper()
	lay, err := goruntime.OpenOffsets(exe)
	if err != nil {
		t.Fatal(err)
	}
	f := &goG0{s: newFakeStack(0x100000, 0x10000), lay: lay, g0: 0x10a000, m: 0x10b000, curg: 0x10c000,
		g0Stack: 0x101f00, stackLo: 0x104000, stackHi: 0x108000}
	f.s.put(f.g0+uint64(lay.G.M), f.m)
	f.s.put(f.m+uint64(lay.M.G0), f.g0)
	f.s.put(f.m+uint64(lay.M.CurG), f.curg)
	f.s.put(f.curg+uint64(lay.G.M), f.m)
	f.s.put(f.curg+uint64(lay.G.StackLo), f.stackLo)
	f.s.put(f.curg+uint64(lay.G.StackHi), f.stackHi)
	return f
}

// sched sets curg.sched.
func (f *goG0) sched(pc, sp, bp uint64) {
	f.s.put(f.curg+uint64(f.lay.G.SchedPC), pc)
	f.s.put(f.curg+uint64(f.lay.G.SchedSP), sp)
	f.s.put(f.curg+uint64(f.lay.G.SchedBP), bp)
}

// withG returns amd64 registers with r14, the Go ABI's g register, g.
func withG(r regs.Regs, g uint64) regs.Regs {
	r.Set(14, g)
	return r
}

// TestGoMorestackJump: a thread on g0 under runtime.morestack (its
// goroutine's stack being grown) continues at the goroutine's saved
// registers, curg.sched: the function whose stack check called morestack
// (main.work here), then its callers up to runtime.goexit, as Go's own
// traceback does (unwindJumpStack). The g comes from r14, which holds the
// goroutine in morestack itself and g0 in newstack. A g0 whose m no longer
// runs the goroutine (newstack descheduled it) goes on to its own frames
// at g0.sched when morestack's frame is there, and ends at morestack
// otherwise, as Go's traceback does; a g not in the memory (a perf
// sample's stack copy) ends the walk at the switch; saved registers that
// are not morestack's are not followed.
func TestGoMorestackJump(t *testing.T) {
	fns, maps := goFuncs(t, "runtime.morestack", "runtime.newstack", "main.work", "runtime.morestack_noctxt", "runtime.goexit",
		"runtime.mstart1")
	morestack, newstack, work, noctxt, goexit := fns[0], fns[1], fns[2], fns[3], fns[4]
	label := callOf(t, fns[5]) + 5 // g0.sched.pc: mstart0's return from mstart1
	callNewstack := callTo(t, morestack, newstack)
	retWork := callTo(t, work, noctxt) + 5
	space := target.NewAddressSpace(maps, &target.Objects{})
	f := newGoG0(t, maps[0].Path)
	// main.work called morestack_noctxt before making its frame: its
	// return address is at the SP morestack saved.
	f.sched(retWork, 0x107f00, 0x107f80)
	f.s.put(0x107f00, goexit.Value+1)
	f.s.put(f.g0Stack-8, callNewstack+5) // newstack's return address into morestack
	inMorestack := withG(amd64Regs(callNewstack, f.g0Stack, 0), f.curg)
	inNewstack := withG(amd64Regs(newstack.Value, f.g0Stack-8, 0), f.g0)
	for _, name := range []string{"auto", "dwarf"} {
		u, _ := ByName(name)
		for _, tc := range []struct {
			what string
			r    regs.Regs
			want []uint64
		}{
			{"in morestack on g0", inMorestack, []uint64{callNewstack, retWork, goexit.Value + 1}},
			{"in newstack", inNewstack, []uint64{newstack.Value, callNewstack + 5, retWork, goexit.Value + 1}},
		} {
			st := u.Walk(tc.r, f.s.mem(), space)
			got := pcs(st)
			if !equalU64(got, tc.want) || st.End != EndOutermost {
				t.Errorf("%s: %s: frames %#x, end %s (%s); want %#x, outermost", name, tc.what, got, st.End, st.Detail, tc.want)
				continue
			}
			if m := st.Frames[len(got)-2].Method; m != MethodGoSwitch {
				t.Errorf("%s: %s: main.work found by %s, want %s", name, tc.what, m, MethodGoSwitch)
			}
		}
	}
	u := NewAuto()
	// The m runs no goroutine any more (newstack descheduled it): on to
	// g0's own frames, mstart0's above morestack's, at the label g0.sched
	// where morestack's frame is.
	f.s.put(f.m+uint64(f.lay.M.CurG), 0)
	f.s.put(f.g0+uint64(f.lay.G.SchedPC), label)
	f.s.put(f.g0+uint64(f.lay.G.SchedSP), f.g0Stack)
	st := u.Walk(inNewstack, f.s.mem(), space)
	if got := pcs(st); len(got) < 3 || got[2] != label || st.Frames[2].Method != MethodGoSwitch {
		t.Errorf("descheduled: frames %#x, end %s (%s); want newstack <- morestack <- mstart0 (%#x), found by %s", got, st.End, st.Detail, label, MethodGoSwitch)
	}
	// A label elsewhere (morestack's frame is not at it): Go's
	// traceback's end.
	f.s.put(f.g0+uint64(f.lay.G.SchedSP), f.g0Stack+0x100)
	st = u.Walk(inNewstack, f.s.mem(), space)
	if got := pcs(st); len(got) != 2 || st.End != EndOutermost || !strings.Contains(st.Detail, "no longer this thread's") {
		t.Errorf("descheduled, label elsewhere: frames %#x, end %s (%s); want newstack <- morestack, outermost", got, st.End, st.Detail)
	}
	f.s.put(f.m+uint64(f.lay.M.CurG), f.curg)
	// Saved registers that are not morestack's (the goroutine went on
	// and switched again before they were read).
	f.sched(work.Value+0x10, 0x107f00, 0x107f80)
	st = u.Walk(inNewstack, f.s.mem(), space)
	if got := pcs(st); len(got) != 2 || st.End != EndGoSwitch {
		t.Errorf("not morestack's: frames %#x, end %s (%s); want newstack <- morestack, go-stack-switch", got, st.End, st.Detail)
	}
	f.sched(retWork, 0x107f00, 0x107f80)
	// A g outside the memory (a perf sample holds only the stack).
	cut := &target.Snapshot{Regions: []target.Region{{Addr: 0x101000, Data: f.s.data[0x1000:0x2000]}}}
	st = u.Walk(inNewstack, cut, space)
	if got := pcs(st); len(got) != 2 || st.End != EndGoSwitch || !strings.Contains(st.Detail, "not in the memory") {
		t.Errorf("no g in the memory: frames %#x, end %s (%s); want newstack <- morestack, go-stack-switch", got, st.End, st.Detail)
	}
	// r14 holding something that is not this thread's g: the walk
	// goes on as without one.
	st = u.Walk(withG(amd64Regs(newstack.Value, f.g0Stack-8, 0), 0x107f00), f.s.mem(), space)
	for _, fr := range st.Frames {
		if fr.Method == MethodGoSwitch {
			t.Errorf("r14 not a g: frames %#x crossed", pcs(st))
		}
	}
}

// TestGoSystemstackJump: a function that runtime.systemstack runs on g0
// continues on the goroutine's stack at the SP the switch saved in
// curg.sched (where systemstack's own frame is), with systemstack's
// caller next (runtime.gcStart here), as Go's traceback does; a
// curg.sched whose bp is not the one the switch kept is not used.
func TestGoSystemstackJump(t *testing.T) {
	fns, maps := goFuncs(t, "runtime.systemstack", "runtime.gcStart", "main.spin", "runtime.systemstack_switch")
	ss, caller, spin, sw := fns[0], fns[1], fns[2], fns[3]
	k := bytes.Index(ss.code, []byte{0xff, 0xd7}) // CALL DI: the function on g0
	if k < 0 {
		t.Fatalf("no CALL DI in runtime.systemstack: % x", ss.code)
	}
	retSS := ss.Value + uint64(k) + 2
	raF := callTo(t, caller, ss) + 5
	space := target.NewAddressSpace(maps, &target.Objects{})
	f := newGoG0(t, maps[0].Path)
	const frame = 0x107e00 // systemstack's frame record on the goroutine stack
	f.sched(sw.Value+8, frame, frame)
	f.s.put(frame, 0x107f80)
	f.s.put(frame+8, raF)
	f.s.put(f.g0Stack, retSS)
	// main.spin at its entry on g0, called by systemstack, the
	// goroutine's frame pointer still in rbp.
	r := withG(amd64Regs(spin.Value, f.g0Stack, frame), f.g0)
	for _, name := range []string{"auto", "dwarf"} {
		u, _ := ByName(name)
		st := u.Walk(r, f.s.mem(), space)
		got := pcs(st)
		if len(got) < 3 || got[1] != retSS || got[2] != raF || st.Frames[2].Method != MethodGoSwitch {
			t.Errorf("%s: frames %#x (end %s %s); want main.spin <- systemstack <- gcStart (%#x) found by %s", name, got, st.End, st.Detail, raF, MethodGoSwitch)
		}
	}
	// Another switch's registers: not this one's.
	f.sched(sw.Value+8, frame, frame+0x40)
	st := NewAuto().Walk(r, f.s.mem(), space)
	if len(st.Frames) > 2 && st.Frames[2].Method == MethodGoSwitch {
		t.Errorf("a stale curg.sched was used: frames %#x", pcs(st))
	}
}

// callOf returns the address of the Go fixture's one direct call of fn.
func callOf(t *testing.T, fn goFunc) uint64 {
	t.Helper()
	ef, _ := goText(t)
	text := ef.Section(".text")
	code, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	var at []uint64
	for i := 0; i+5 <= len(code); i++ {
		if code[i] == 0xe8 && text.Addr+uint64(i+5)+uint64(int64(int32(binary.LittleEndian.Uint32(code[i+1:])))) == fn.Value {
			at = append(at, text.Addr+uint64(i))
		}
	}
	if len(at) != 1 {
		t.Fatalf("%d direct calls of %s in the Go fixture, want 1", len(at), fn.Name)
	}
	return at[0]
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
