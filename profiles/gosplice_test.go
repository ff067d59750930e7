package profiles

import (
	"testing"

	"github.com/rewindstack/rewind/unwind"
)

func framesAt(pcs ...uint64) []unwind.Frame {
	out := make([]unwind.Frame, len(pcs))
	for i, pc := range pcs {
		out[i] = unwind.Frame{PC: pc, SP: 0x7000 + 16*uint64(i)}
	}
	return out
}

func pcsOf(st *unwind.Stack) []uint64 {
	var out []uint64
	for _, f := range st.Frames {
		out = append(out, f.PC)
	}
	return out
}

// TestSpliceKernelFP: the kernel's frame-pointer walk continues rewind's
// where both hold the same frame at nearly the same depth, and never
// where the same PC is another frame of a recursion: a walk cut at the
// end of the stack copy deep in a recursion gets no copies of the
// recursion's innermost frames appended to it.
func TestSpliceKernelFP(t *testing.T) {
	const rec, leaf = 0x1100, 0x1000
	deep := []uint64{leaf}
	for range 300 {
		deep = append(deep, rec)
	}
	kernel := []uint64{leaf}
	for range 126 {
		kernel = append(kernel, rec)
	}
	for _, tc := range []struct {
		name         string
		walk, kernel []uint64
		want         []uint64
	}{
		{"Go stack switch", []uint64{1, 2, 3}, []uint64{1, 2, 3, 4, 5}, []uint64{1, 2, 3, 4, 5}},
		{"kernel skipped a frameless leaf's caller", []uint64{1, 2, 3, 4}, []uint64{1, 3, 4, 5, 6}, []uint64{1, 2, 3, 4, 5, 6}},
		{"kernel skipped the frames up to the switch", []uint64{1, 2, 3, 4}, []uint64{1, 7, 8}, []uint64{1, 2, 3, 4, 7, 8}},
		{"recursion deeper than the kernel's walk", deep, kernel, deep},
		{"deep walk, only the sampled PC in common", []uint64{1, 2, 3, 4, 5, 6, 7}, []uint64{1, 9, 10}, []uint64{1, 2, 3, 4, 5, 6, 7}},
	} {
		st := &unwind.Stack{Frames: framesAt(tc.walk...), End: unwind.EndUnreadable}
		spliceKernelFP(st, tc.kernel, nil)
		got := pcsOf(st)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d frames after the splice, want %d", tc.name, len(got), len(tc.want))
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: frame %d is %#x, want %#x (got %#x)", tc.name, i, got[i], tc.want[i], got)
				break
			}
		}
	}
}

// TestAtCopyEdgeLargeFrame: a walk that cannot read the caller of a frame
// inside a full stack copy stopped at the copy's edge, however far below
// the edge that frame starts (a Go handler with a 16 KB array on its
// stack, copied 8 KB deep); with a copy that held the whole stack, it
// did not.
func TestAtCopyEdgeLargeFrame(t *testing.T) {
	const sp, size = 0x7000, 8192
	st := &unwind.Stack{Frames: []unwind.Frame{{PC: 1, SP: sp}, {PC: 2, SP: sp + 0x40}}, End: unwind.EndUnreadable}
	if !atCopyEdge(st, sp, size, true) {
		t.Error("a full copy: not counted at the copy's edge")
	}
	if atCopyEdge(st, sp, size, false) {
		t.Error("a copy that held the whole stack: counted at the copy's edge")
	}
	// A frame on another stack (the context a signal interrupted): not
	// the copy's edge.
	st.Frames[1].SP = 0x1000
	if atCopyEdge(st, sp, size, true) {
		t.Error("a frame outside the copy: counted at the copy's edge")
	}
}

// TestGoStackEnd: a stack ends where Go's traceback ends a g0 stack at
// runtime.mcall and runtime.morestack (named with ".abi0" or not, from
// the shared table of stack switches), not at the other switches.
func TestGoStackEnd(t *testing.T) {
	for name, want := range map[string]bool{
		"runtime.mcall": true, "runtime.mcall.abi0": true, "runtime.morestack": true, "runtime.morestack.abi0": true,
		"runtime.systemstack": false, "runtime.morestack_noctxt": false, "runtime.gogo": false, "main.main": false,
	} {
		if got := goStackEnd(name); got != want {
			t.Errorf("goStackEnd(%q) = %v, want %v", name, got, want)
		}
	}
}
