package live

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/target"
)

// Go threads run runtime code on their system stack (g0) on behalf of a
// goroutine whose frames are on another stack, in the Go heap; the frame
// pointers lead there (see unwind's Go stack switches). A stack copy from
// SP covers only g0, and reading the goroutine stack after the thread
// resumes gives whatever the goroutine does by then. copySwitched follows
// each stopped thread's frame-pointer chain through its copied stack and,
// where a saved frame pointer leaves it, copies a window of the other
// stack in the same pause: switchBelow bytes below that frame record (where
// the caller of runtime.systemstack keeps its frame) and switchAbove above
// (the goroutine's frames up to its entry), with one more process_vm_readv.

const (
	switchBelow  = 4 << 10
	switchAbove  = 60 << 10
	switchChains = 256 // frame records followed per thread
)

func (s *session) copySwitched() {
	type job struct {
		th         *tstate
		start, end uint64
	}
	var jobs []job
	memTID := 0
	for _, th := range s.threads {
		if !th.stopped || th.err != nil || th.released || th.followed || len(th.stack.Data) == 0 {
			continue
		}
		th.followed = true
		if memTID == 0 || th.tid == s.pid {
			memTID = th.tid
		}
		bp, ok := th.regs.FP()
		if !ok {
			continue
		}
		st := &th.stack
		for i := 0; i < switchChains && bp != 0 && bp&7 == 0; i++ {
			if st.Contains(bp, 16) {
				bp = binary.LittleEndian.Uint64(st.Data[bp-st.Addr:])
				continue
			}
			// bp leaves the copied stack: another stack, or the end of
			// the copy (then the window is the copy's continuation).
			m, ok := procmaps.FindRange(s.ranges, bp)
			if !ok {
				break
			}
			start, end := max(m.Start, bp-min(bp, switchBelow)), min(m.End, bp+switchAbove)
			if start < end {
				jobs = append(jobs, job{th, start, end})
			}
			break
		}
	}
	if len(jobs) == 0 {
		return
	}
	local := make([]unix.Iovec, len(jobs))
	remote := make([]unix.RemoteIovec, len(jobs))
	bufs := make([][]byte, len(jobs))
	for i, j := range jobs {
		bufs[i] = make([]byte, j.end-j.start)
		local[i].Base = &bufs[i][0]
		local[i].SetLen(len(bufs[i]))
		remote[i] = unix.RemoteIovec{Base: uintptr(j.start), Len: len(bufs[i])}
	}
	for i := 0; i < len(jobs); {
		hi := min(len(jobs), i+iovMax)
		got, _ := processVMReadv(memTID, local[i:hi], remote[i:hi])
		k := i
		for ; k < hi; k++ {
			take := min(got, len(bufs[k]))
			got -= take
			if take > 0 {
				jobs[k].th.switched = append(jobs[k].th.switched, target.Region{Addr: jobs[k].start, Data: bufs[k][:take:take]})
			}
			if take < len(bufs[k]) {
				break
			}
		}
		i = min(k+1, hi) // past the read that stopped short, or the whole chunk
	}
}
