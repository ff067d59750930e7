package ruby

import (
	"encoding/binary"
	"math/bits"
)

// The succinct bit-vector an iseq's line table is indexed by (iseq.c,
// VM_INSN_INFO_TABLE_IMPL 2): the ranks of the first immTable
// positions kept as 7-bit counts, nine to a word, then blocks of 512
// positions, each a rank, eight 9-bit ranks of its 64-bit words and the
// words.
const (
	immTable  = 54
	immWords  = immTable / 9
	blockSize = 4 + 4 + 8 + 64 // rank, padding, small ranks, bits
)

// line is the line of the frame of info whose pc is pc, as
// rb_vm_get_sourceline gives it (the instruction before pc: pc points
// past the one running), 0 when unknown.
func (w *walker) line(info *iseqInfo, pc uint64) int {
	key := [2]uint64{info.body, pc}
	if n, ok := w.c.lines[key]; ok {
		return n
	}
	n := w.lookupLine(info, pc)
	if !w.over {
		w.c.lines[key] = n
	}
	return n
}

func (w *walker) lookupLine(info *iseqInfo, pc uint64) int {
	if pc < info.encoded || (pc-info.encoded)%8 != 0 {
		return 0
	}
	pos := (pc - info.encoded) / 8
	if pos > info.size || info.n == 0 || info.n > 1<<24 {
		return 0
	}
	if pos > 0 {
		pos--
	}
	idx := uint64(1)
	if info.n > 1 {
		var ok bool
		switch {
		case info.succ != 0:
			idx, ok = w.succRank(info.succ, pos)
		case info.pos != 0:
			idx, ok = w.searchPositions(info.pos, info.n, pos)
		}
		if !ok || idx < 1 || idx > info.n {
			return 0
		}
	}
	var b [4]byte
	if w.get(info.insns+(idx-1)*w.l.insnEntry, b[:]) != nil {
		return 0
	}
	return max(int(int32(binary.LittleEndian.Uint32(b[:]))), 0)
}

// succRank is the rank of position x in the succinct table at sd: how
// many entries start at or before x.
func (w *walker) succRank(sd, x uint64) (uint64, bool) {
	if x < immTable {
		v, err := w.ptr(sd + x/9*8)
		return v >> (x % 9 * 7) & 0x7f, err == nil
	}
	x -= immTable
	b := make([]byte, blockSize)
	if w.get(sd+immWords*8+x/512*blockSize, b) != nil {
		return 0, false
	}
	bit := x % 512
	small := bit / 64
	rank := uint64(binary.LittleEndian.Uint32(b))
	if small > 0 {
		rank += le64(b, 8) >> ((small - 1) * 9) & 0x1ff
	}
	word := le64(b, 16+small*8)
	return rank + uint64(bits.OnesCount64(word<<(63-bit%64))), true
}

// searchPositions finds, in the n positions at p (an iseq whose table
// is not yet encoded), the last entry starting at or before x; it
// returns its 1-based index.
func (w *walker) searchPositions(p, n, x uint64) (uint64, bool) {
	lo, hi := uint64(0), n // positions[lo-1] <= x < positions[hi]
	var b [4]byte
	for lo < hi {
		mid := (lo + hi) / 2
		if w.get(p+mid*4, b[:]) != nil {
			return 0, false
		}
		if uint64(binary.LittleEndian.Uint32(b[:])) <= x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo > 0
}
