package fibers

import (
	"encoding/binary"
	"sort"
	"strings"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// The rules of a scan and its guards are in the package documentation.

// maxScan bounds the writable memory a scan reads.
const maxScan = 512 << 20

// ucSP and ucPC are where an x86-64 ucontext_t keeps the SP and the PC.
var (
	ucSP, _ = regs.AMD64UContextOffset(regs.AMD64RSP)
	ucPC, _ = regs.AMD64UContextOffset(regs.AMD64RIP)
)

// minFiberGap is the distance under which two saved stack pointers are
// taken for the same stack.
const minFiberGap = 16 << 10

// ScanInput is what a scan reads: the process's memory and mappings (with
// permissions), its threads (their stack pointers mark stacks in use), its
// pointer guard, and the fcontext record size of its jump_fcontext (0:
// none).
type ScanInput struct {
	Mem       target.Memory
	Maps      []target.Mapping
	ThreadSPs []uint64
	Guard     uint64
	HaveGuard bool
	FcontextN uint64
}

type found struct {
	spec Spec
	sp   uint64
	weak bool // a pointer to a record, not a self-describing structure
}

// Scan returns the saved contexts it finds, one per stack.
func Scan(in ScanInput) []Spec {
	maps := append([]target.Mapping(nil), in.Maps...)
	sort.Slice(maps, func(i, j int) bool { return maps[i].Start < maps[j].Start })
	s := &scanner{in: in, maps: maps}
	busy := map[int]bool{}
	for _, sp := range in.ThreadSPs {
		if i := s.mapIndex(sp); i >= 0 {
			busy[i] = true
		}
	}
	s.busy = busy
	var cands []found
	budget := maxScan
	chunk := make([]byte, 1<<20)
	for mi := range maps {
		m := &maps[mi]
		if !writable(m) || budget <= 0 {
			continue
		}
		for lo := m.Start; lo < m.End && budget > 0; {
			n := min(uint64(len(chunk)), m.End-lo)
			buf := chunk[:n]
			if in.Mem.ReadMemory(lo, buf) != nil {
				lo += n
				continue
			}
			budget -= int(n)
			for off := uint64(0); off+8 <= n; off += 8 {
				if f, ok := s.at(lo+off, buf, off); ok {
					cands = append(cands, f)
				}
			}
			lo += n
		}
	}
	// One context per stack (a cluster of close stack pointers).
	sort.Slice(cands, func(i, j int) bool { return cands[i].sp < cands[j].sp })
	var out []Spec
	for i := 0; i < len(cands); {
		j := i + 1
		for j < len(cands) && cands[j].sp-cands[j-1].sp < minFiberGap {
			j++
		}
		best := i
		for k := i; k < j; k++ {
			if cands[best].weak && !cands[k].weak {
				best = k
			}
		}
		out = append(out, cands[best].spec)
		i = j
	}
	return out
}

type scanner struct {
	in   ScanInput
	maps []target.Mapping
	busy map[int]bool
}

func writable(m *target.Mapping) bool {
	return len(m.Perms) >= 2 && m.Perms[0] == 'r' && m.Perms[1] == 'w' && !strings.HasPrefix(m.Path, "[v")
}

// mapIndex is the index of the mapping holding addr, -1 if none.
func (s *scanner) mapIndex(addr uint64) int {
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].End > addr })
	if i < len(s.maps) && s.maps[i].Start <= addr {
		return i
	}
	return -1
}

// freeStack reports whether sp is in writable memory no thread runs on.
func (s *scanner) freeStack(sp uint64) bool {
	i := s.mapIndex(sp)
	return i >= 0 && writable(&s.maps[i]) && !s.busy[i]
}

// afterCall reports whether pc follows a call instruction in executable
// memory.
func (s *scanner) afterCall(pc uint64) bool {
	i := s.mapIndex(pc)
	if i < 0 || !s.maps[i].Executable() || pc < s.maps[i].Start+6 {
		return false
	}
	var b [6]byte
	if s.in.Mem.ReadMemory(pc-6, b[:]) != nil {
		return false
	}
	switch {
	case b[1] == 0xe8: // call rel32
		return true
	case b[4] == 0xff && b[5]&0xf8 == 0xd0: // call *%reg
		return true
	case b[3] == 0x41 && b[4] == 0xff && b[5]&0xf8 == 0xd0: // call *%r8-15
		return true
	case b[0] == 0xff && b[1] == 0x15: // call *disp32(%rip)
		return true
	case b[3] == 0xff && b[4]&0xf8 == 0x50: // call *disp8(%reg)
		return true
	}
	return false
}

// word reads the 8 bytes at addr.
func (s *scanner) word(addr uint64) (uint64, bool) {
	v, err := readU64(s.in.Mem, addr)
	return v, err == nil
}

// executable reports whether pc is in executable memory.
func (s *scanner) executable(pc uint64) bool {
	i := s.mapIndex(pc)
	return i >= 0 && s.maps[i].Executable()
}

// at tries every context kind at address a, whose bytes from buf[off:]
// are at hand (up to the chunk's end).
func (s *scanner) at(a uint64, buf []byte, off uint64) (found, bool) {
	le := binary.LittleEndian
	word := func(o uint64) (uint64, bool) {
		if off+o+8 <= uint64(len(buf)) {
			return le.Uint64(buf[off+o:]), true
		}
		var b [8]byte
		if s.in.Mem.ReadMemory(a+o, b[:]) != nil {
			return 0, false
		}
		return le.Uint64(b[:]), true
	}
	w, _ := word(0)
	// ucontext_t: fpregs points at __fpregs_mem, as getcontext leaves it.
	if fp, ok := word(regs.AMD64UContextFPRegs); ok && fp == a+regs.AMD64UContextFPRegsMem {
		sp, _ := word(ucSP)
		pc, _ := word(ucPC)
		if s.freeStack(sp) && (s.afterCall(pc) || s.executable(pc)) {
			return found{spec: Spec{Kind: UContext, Addr: a}, sp: sp}, true
		}
	}
	// jmp_buf: rsp (slot 6) and pc (slot 7) mangled.
	if s.in.HaveGuard {
		msp, _ := word(48)
		mpc, ok := word(56)
		if ok {
			sp, pc := demangle(msp, s.in.Guard), demangle(mpc, s.in.Guard)
			if sp&7 == 0 && s.freeStack(sp) && s.afterCall(pc) {
				return found{spec: Spec{Kind: JmpBuf, Addr: a}, sp: sp}, true
			}
		}
	}
	// A pointer to a saved record (libcoro, boost fcontext) on a free
	// stack, stored elsewhere.
	if w == 0 || w&7 != 0 || !s.freeStack(w) {
		return found{}, false
	}
	if ai := s.mapIndex(a); ai < 0 || ai == s.mapIndex(w) || s.busy[ai] {
		return found{}, false
	}
	try := func(kind string, n uint64) (found, bool) {
		if ra, ok := s.word(w + n); ok && s.afterCall(ra) {
			return found{spec: Spec{Kind: kind, Addr: a}, sp: w + n + 8, weak: true}, true
		}
		return found{}, false
	}
	if s.in.FcontextN != 0 {
		if f, ok := try(FContext, s.in.FcontextN); ok {
			return f, true
		}
	}
	return try(Coro, 48)
}
