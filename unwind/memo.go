package unwind

import (
	"bytes"
	"encoding/binary"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// A profiler walks the same thread's stack again and again, and between
// two samples mostly the innermost frames change: a loop's leaf moves, its
// callers wait where they were. A walk is a pure function of the frame it
// starts from (registers, whether the PC is exact), the stack bytes its
// steps read and the address space's modules. So when a walk reaches a
// frame the previous walk also passed through, with the same registers,
// and the bytes every later step of the previous walk read are the same
// in this sample's memory (and what it could not read, this memory does
// not hold either), the rest of the walk is the previous walk's rest,
// frame for frame, ending the same way. WalkMemo checks exactly
// that and copies the rest instead of stepping through it.

// Memo remembers one walk for WalkMemo to reuse the outer frames of. Keep
// one per thread (the samples of one thread share their outer frames) and
// per unwinder; the zero value is ready to use. A Memo is not safe for
// concurrent use.
type Memo struct {
	u      *Unwinder
	space  *target.AddressSpace
	frames []Frame
	at     []memoFrame
	end    EndReason
	detail string
	// reads is every snapshot read of the walk's steps, in order, and
	// data the bytes they found, one after the other (none for a read
	// that failed); spare is the other buffer of reads, swapped in when a
	// walk is remembered.
	reads, spare []span
	data         []byte
	// scan is where match looks first: the frames below it lie below
	// the walk's current frame.
	scan int
	// Reused counts the frames walks took from the memo instead of
	// stepping to them.
	Reused int
}

// memoFrame is what the steps from one frame outwards depended on.
type memoFrame struct {
	regs  regs.Regs
	exact bool
	// read is the index of the step's first read (in Memo.reads, or in
	// the reader's log while walking); off, where its bytes start in
	// Memo.data.
	read, off int
	// miss: a step from this frame on read memory past the snapshot
	// (its Next); switched: one crossed a Go stack switch, whose check
	// looks at the walk's first frame. Either way the steps cannot be
	// reused.
	miss, switched bool
	// used and pass are the step's (see Cursor); need is the registers
	// of this frame the rest of the walk depends on: those the step read,
	// and those it passed to the caller that the caller's steps need.
	used, pass, need uint64
}

// WalkMemo is WalkInto reusing m's walk where it can, then remembering this
// one in m. The result is the one WalkInto gives. Only walks of a
// *target.Snapshot by the package's own steppers are remembered.
func (u *Unwinder) WalkMemo(st *Stack, r regs.Regs, mem target.Memory, space *target.AddressSpace, m *Memo) {
	u.walk(st, r, mem, space, m)
}

// memoable reports whether u's walks can be remembered: every stepper is
// one of this package's, whose steps read registers and memory only
// through the cursor.
func (u *Unwinder) memoable() bool {
	for _, s := range u.Steppers {
		switch s.(type) {
		case CFITable, SFrame, FramePointers, GoPCLN:
		default:
			return false
		}
	}
	return true
}

// match returns the index of m's frame that the walk at frame n (its
// registers cur, exact) can continue from, or -1. The caller has checked
// that m is of this unwinder and address space.
func (m *Memo) match(rd *reader, n int, pc, sp uint64, exact bool, cur *regs.Regs, max int) int {
	for j := m.scan; j < len(m.frames); j++ {
		f := &m.frames[j]
		if f.SP < sp {
			m.scan = j + 1
			continue
		}
		if f.SP > sp {
			return -1
		}
		a := &m.at[j]
		if f.PC != pc || a.exact != exact || a.miss || a.switched || !a.regs.EqualIn(cur, a.need) {
			continue
		}
		if n+len(m.frames)-j > max || (m.end == EndDepth && n != j) {
			return -1
		}
		// Every later read must find the same bytes in this memory, or
		// fail again.
		off := a.off
		for _, r := range m.reads[a.read:] {
			b := rd.snapBytes(r.addr, int(r.n))
			if r.missed {
				if b != nil {
					return -1
				}
				continue
			}
			if b == nil {
				return -1
			}
			if r.n == 8 {
				if binary.LittleEndian.Uint64(b) != binary.LittleEndian.Uint64(m.data[off:]) {
					return -1
				}
			} else if !bytes.Equal(b, m.data[off:off+int(r.n)]) {
				return -1
			}
			off += int(r.n)
		}
		return j
	}
	return -1
}

// splice ends the walk in st with m's frames from j on; frame n, already
// in st, keeps the method that found it.
func (m *Memo) splice(st *Stack, n, j int) {
	method := st.Frames[n].Method
	st.Frames = append(st.Frames[:n], m.frames[j:]...)
	st.Frames[n].Method = method
	st.End, st.Detail = m.end, m.detail
	m.Reused += len(m.frames) - j
}

// remember makes m the walk just made: st, whose first len(rec) frames'
// steps are described by rec and read what the reader logged; the rest,
// from m's frame j on, were m's own (j < 0: none were).
func (m *Memo) remember(u *Unwinder, space *target.AddressSpace, rd *reader, st *Stack, rec []memoFrame, j int) {
	n := len(rec)
	if j == n && m.samePrefix(rd.log, j) && m.rememberPrefix(rd, st, rec) {
		return
	}
	m.u, m.space = nil, nil
	// The reads: this walk's, then those of m's steps from frame j on.
	reads := append(m.spare[:0], rd.log...)
	shift := 0
	if j >= 0 {
		shift = len(reads) - m.at[j].read
		reads = append(reads, m.reads[m.at[j].read:]...)
		keep := len(m.at) - j
		m.at = grow(m.at, n+keep)
		copy(m.at[n:n+keep], m.at[j:j+keep])
		m.at = m.at[:n+keep]
		for i := n; i < len(m.at); i++ {
			m.at[i].read += shift
		}
	} else {
		m.at = grow(m.at[:0], n)[:n]
	}
	m.spare, m.reads = m.reads, reads
	copy(m.at[:n], rec)
	if len(m.at) != len(st.Frames) || len(m.at) == 0 {
		return
	}
	// The bytes read, from this walk's memory (the reused steps' reads
	// found the same bytes in it).
	m.data = m.data[:0]
	for _, r := range m.reads {
		if r.missed {
			continue
		}
		b := rd.snapBytes(r.addr, int(r.n))
		if b == nil {
			return
		}
		m.data = append(m.data, b...)
	}
	// Each frame's flags and needs cover every later step's (m's own
	// frames from n on were done when m was filled); every frame's
	// offset into data may have moved.
	m.fill(len(m.at))
	m.frames = append(m.frames[:0], st.Frames...)
	m.end, m.detail = st.End, st.Detail
	m.u, m.space = u, space
}

// samePrefix reports whether log, the reads of a walk's steps before
// frame j, has as many reads of as many bytes as m's steps before j.
func (m *Memo) samePrefix(log []span, j int) bool {
	if j >= len(m.at) || len(log) != m.at[j].read {
		return false
	}
	size := 0
	for _, r := range log {
		size += r.size()
	}
	return size == m.at[j].off
}

// rememberPrefix is remember when the walk reused m's frames from the same
// index on, with reads of the same sizes before it (see samePrefix): only
// the first frames, their reads and the bytes read change. It reports
// whether it could (the bytes were in the memory).
func (m *Memo) rememberPrefix(rd *reader, st *Stack, rec []memoFrame) bool {
	n := len(rec)
	off := 0
	for i, r := range rd.log {
		m.reads[i] = r
		if r.missed {
			continue
		}
		b := rd.snapBytes(r.addr, int(r.n))
		if b == nil {
			m.u, m.space = nil, nil
			return false
		}
		copy(m.data[off:], b)
		off += int(r.n)
	}
	copy(m.at[:n], rec)
	m.fill(n)
	copy(m.frames[:n+1], st.Frames[:n+1]) // (frame n's method may differ)
	return true
}

// fill computes the offsets, flags and needs of m's first n frames from
// their steps' and those of the frames after them.
func (m *Memo) fill(n int) {
	off := 0
	for i := range n {
		m.at[i].off = off
		end := len(m.reads)
		if i+1 < len(m.at) {
			end = m.at[i+1].read
		}
		for _, r := range m.reads[m.at[i].read:end] {
			off += r.size()
		}
	}
	for i := n - 1; i >= 0; i-- {
		a := &m.at[i]
		a.need = a.used | 1<<uint(a.regs.Arch.PC()) | 1<<uint(a.regs.Arch.SP())
		if i+1 < len(m.at) {
			b := &m.at[i+1]
			a.miss = a.miss || b.miss
			a.switched = a.switched || b.switched
			a.need |= a.pass & b.need
		}
	}
}

// grow returns s with room for n elements.
func grow(s []memoFrame, n int) []memoFrame {
	if cap(s) < n {
		t := make([]memoFrame, len(s), max(n, 2*cap(s)))
		copy(t, s)
		return t
	}
	return s
}
