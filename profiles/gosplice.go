package profiles

import (
	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// spliceKernelFP continues a walk that ended at a Go stack switch
// (unwind.EndGoSwitch) or in memory the sample did not copy
// (unwind.EndUnreadable: another stack, such as the context a signal
// interrupted when the handler runs on sigaltstack, or past the copy's
// end) with the kernel's frame-pointer walk of the same sample, which read
// the live memory: a sample's copy holds only the stack the thread was on
// (g0, the system stack), not the goroutine stack the frame pointers lead
// to. The walks meet at the switching frame: the kernel's walk is
// continued after the outermost of st's last three frames it also holds
// (or after the sampled PC when it holds none of them). The added frames
// are frame-pointer frames; the walk's end reason is left as it was, so
// the fidelity table still says why rewind's own walk stopped.
func spliceKernelFP(st *unwind.Stack, userFP []uint64, space *target.AddressSpace) {
	if len(userFP) < 2 {
		return
	}
	for i := len(st.Frames) - 1; i >= 0 && i >= len(st.Frames)-3; i-- {
		pc := st.Frames[i].PC
		// Both walks start at the sampled PC and the kernel's only ever
		// skips frames (a leaf or an assembly function that keeps no
		// frame record), a few at most: the same frame is at nearly the
		// same depth in both. A PC found far shallower in the kernel's
		// walk is another frame of a recursion, not the one st ends at.
		for j := max(0, i-maxKernelSkip); j <= i && j < len(userFP)-1; j++ {
			if userFP[j] != pc {
				continue
			}
			st.Frames = st.Frames[:i+1]
			for _, ra := range userFP[j+1:] {
				st.Frames = append(st.Frames, unwind.Frame{PC: ra, Method: unwind.MethodFP, Map: space.Find(ra - 1)})
			}
			return
		}
	}
	// No frame in common: the kernel's walk skipped the frames between
	// the sampled PC and the switch (a leaf without a frame record, such
	// as a vDSO function, before the frame pointer it left in place).
	if n := len(st.Frames); n > 0 && n <= maxKernelSkip+1 && st.Frames[0].PC == userFP[0] {
		for _, ra := range userFP[1:] {
			st.Frames = append(st.Frames, unwind.Frame{PC: ra, Method: unwind.MethodFP, Map: space.Find(ra - 1)})
		}
	}
}

// maxKernelSkip is how many more frames rewind's walk may hold than the
// kernel's frame-pointer walk of the same sample, up to a frame both
// hold, for the kernel's walk to continue rewind's there.
const maxKernelSkip = 3

// goStackEnd reports whether a stack ends where Go's own traceback ends a
// system stack: at runtime.mcall, and at runtime.morestack on g0 once the
// scheduler descheduled the goroutine that entered it (SPWRITE functions;
// the goroutine is no longer the thread's, and mcall cleared the frame
// pointer). Such a stack is complete. Given the thread's g, package
// unwind's walk (and the BPF walk) goes on from morestack, to the
// goroutine's frames or, descheduled, to g0's own (MethodGoSwitch); a
// sample's stack copy does not hold the g, and its walk ends at morestack
// with EndGoSwitch, which the fidelity table's ends show.
func goStackEnd(function string) bool {
	switch goruntime.SwitchOf(function) {
	case goruntime.Mcall, goruntime.Morestack:
		return true
	}
	return false
}

// walkSample walks a sample's copied stack with u into st and, where a Go
// stack switch or the end of the copy cut the walk, continues it with the
// kernel's frame-pointer walk of the same sample.
func walkSample(u *unwind.Unwinder, st *unwind.Stack, s *Sample, r *regs.Regs, mem target.Memory, space *target.AddressSpace, memo *unwind.Memo) {
	u.WalkMemo(st, *r, mem, space, memo)
	if st.End == unwind.EndGoSwitch || st.End == unwind.EndUnreadable {
		spliceKernelFP(st, s.UserFP, space)
	}
}
