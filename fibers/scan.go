package fibers

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// The rules of a scan and its guards are in the package documentation.

// DefaultScanBytes and DefaultScanTime bound a scan (ScanLimits' zero
// values): the bytes of writable memory it considers, read or not (a read
// that fails is charged as if it had succeeded), and its wall time.
const (
	DefaultScanBytes = 512 << 20
	DefaultScanTime  = 2 * time.Second
)

// scanChunk is what a scan reads at once; unreadableRun, the consecutive
// bytes of one mapping whose reads failed after which the rest of that
// mapping is left (unconsidered, uncharged, reported): a 64 TB reservation
// that was never dumped, or a file mapping far past its file's end, costs
// 16 failed reads and not the whole budget.
const (
	scanChunk     = 1 << 20
	scanPage      = 4 << 10
	unreadableRun = 16 * scanChunk
)

// ScanLimits bound a scan; a zero field takes its default.
type ScanLimits struct {
	// MaxBytes is the writable memory considered (DefaultScanBytes).
	MaxBytes uint64
	// MaxTime is the scan's wall time (DefaultScanTime).
	MaxTime time.Duration
}

// ScanStats says what a scan covered of the writable memory it was given.
type ScanStats struct {
	// Writable is the size of the writable mappings; Read, what was read
	// of them; Unreadable, what was considered but failed to read. Read
	// plus Unreadable is what was charged to ScanLimits.MaxBytes.
	Writable, Read, Unreadable uint64
	// Abandoned is what was left of mappings after unreadableRun bytes in
	// a row failed to read; Left, what the limits left unconsidered, in
	// LeftMappings mappings, the largest of them [LeftStart, LeftEnd).
	Abandoned, Left    uint64
	LeftMappings       int
	LeftStart, LeftEnd uint64
	// Stop names the limit that ended the scan early: "bytes", "time",
	// or "" when it went through.
	Stop string
	// Limits are the limits the scan ran with (defaults filled in).
	Limits ScanLimits
	// Elapsed is the scan's wall time.
	Elapsed time.Duration
}

// Note is one line saying what the scan left unscanned ("" when it left
// nothing), for stderr.
func (st ScanStats) Note() string {
	if st.Left == 0 && st.Unreadable == 0 && st.Abandoned == 0 {
		return ""
	}
	var parts []string
	if st.Left > 0 {
		why := fmt.Sprintf("the byte budget (%s) was spent", sizeString(st.Limits.MaxBytes))
		if st.Stop == "time" {
			why = fmt.Sprintf("the time limit (%v, --fiber-scan-time) was reached", st.Limits.MaxTime)
		}
		maps := "mappings"
		if st.LeftMappings == 1 {
			maps = "mapping"
		}
		parts = append(parts, fmt.Sprintf("%s in %d %s not scanned (the largest %#x-%#x): %s",
			sizeString(st.Left), st.LeftMappings, maps, st.LeftStart, st.LeftEnd, why))
	}
	if st.Unreadable > 0 || st.Abandoned > 0 {
		parts = append(parts, fmt.Sprintf("%s unreadable (%s of it charged, the rest of its mappings skipped)",
			sizeString(st.Unreadable+st.Abandoned), sizeString(st.Unreadable)))
	}
	return fmt.Sprintf("fibers: --fiber-scan read %s of %s writable in %v; %s",
		sizeString(st.Read), sizeString(st.Writable), st.Elapsed.Round(time.Millisecond), strings.Join(parts, "; "))
}

// sizeString renders n bytes in the largest binary unit that keeps one
// decimal.
func sizeString(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}

// ucSP and ucPC are where an x86-64 ucontext_t keeps the SP and the PC.
var (
	ucSP, _ = regs.AMD64UContextOffset(regs.AMD64RSP)
	ucPC, _ = regs.AMD64UContextOffset(regs.AMD64RIP)
)

// sameMappingGap is how far from the record it points at a pointer to a
// saved record must be stored when both lie in one mapping: further than
// a fiber's stack spans (Tarantool's are 512 KiB, boost's 128 KiB), so
// that the stack's own pointers into itself are not taken. Tarantool
// carves its fibers' stacks and its struct fiber (which holds the
// coro_context) from one slab arena; a guard page below each stack splits
// the mapping, but nothing splits a stack from the slabs above it, so the
// last fiber made shares its mapping with the structures above (in the
// test app, fiber 108's struct lay 3.5 MiB above its stack). Requiring
// another mapping, as the scan did, missed that fiber.
const sameMappingGap = 1 << 20

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

// Scan returns the saved contexts it finds, one per stack, and what it
// covered within lim.
func Scan(in ScanInput, lim ScanLimits) ([]Spec, ScanStats) {
	start := time.Now()
	if lim.MaxBytes == 0 {
		lim.MaxBytes = DefaultScanBytes
	}
	if lim.MaxTime <= 0 {
		lim.MaxTime = DefaultScanTime
	}
	st := ScanStats{Limits: lim}
	deadline := start.Add(lim.MaxTime)
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
	s.setFree()
	// Smaller mappings first (the data, the heap, the stacks), so that a
	// huge reservation does not spend the budget before them.
	var order []int
	for mi := range maps {
		if m := &maps[mi]; writable(m) && m.End > m.Start {
			order = append(order, mi)
			st.Writable += m.End - m.Start
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return maps[order[a]].End-maps[order[a]].Start < maps[order[b]].End-maps[order[b]].Start
	})
	leave := func(m *target.Mapping, n uint64) {
		st.Left += n
		st.LeftMappings++
		if m.End-m.Start > st.LeftEnd-st.LeftStart {
			st.LeftStart, st.LeftEnd = m.Start, m.End
		}
	}
	var cands []found
	// look takes the candidates in buf, read at addr; past the deadline
	// it returns the first address it did not look at.
	look := func(addr uint64, buf []byte) uint64 {
		n := uint64(len(buf))
		for off := uint64(0); off+8 <= n; off += 8 {
			if f, ok := s.at(addr+off, buf, off); ok {
				cands = append(cands, f)
			}
			// A chunk full of near-candidates costs reads of their
			// targets: look at the clock within it too.
			if off&0xffff == 0xfff8 && off+8 < n && !time.Now().Before(deadline) {
				return addr + off + 8
			}
		}
		return 0
	}
	chunk := make([]byte, scanChunk)
	for _, mi := range order {
		m := &maps[mi]
		failed := uint64(0) // consecutive bytes whose reads failed
		for lo := m.Start; lo < m.End; {
			if st.Stop != "" {
				leave(m, m.End-lo)
				break
			}
			charged := st.Read + st.Unreadable
			if charged >= lim.MaxBytes || !time.Now().Before(deadline) {
				st.Stop = "bytes"
				if charged < lim.MaxBytes {
					st.Stop = "time"
				}
				continue
			}
			if failed >= unreadableRun {
				st.Abandoned += m.End - lo
				break
			}
			// Every byte considered is charged, read or not. A chunk
			// that does not read is retried a page at a time: its
			// readable pages (the dumped part of a segment whose
			// p_memsz goes on) are scanned, the others charged.
			n := min(uint64(len(chunk)), m.End-lo, lim.MaxBytes-charged)
			buf := chunk[:n]
			var stopAt uint64
			switch {
			case in.Mem.ReadMemory(lo, buf) == nil:
				st.Read += n
				failed = 0
				stopAt = look(lo, buf)
			case failed >= scanChunk:
				// A whole chunk before failed page by page: this
				// one is taken as unreadable as a whole.
				st.Unreadable += n
				failed += n
			default:
				for p := uint64(0); p < n && stopAt == 0; p += scanPage {
					pn := min(scanPage, n-p)
					if in.Mem.ReadMemory(lo+p, buf[p:p+pn]) != nil {
						st.Unreadable += pn
						failed += pn
						continue
					}
					st.Read += pn
					failed = 0
					stopAt = look(lo+p, buf[p:p+pn])
				}
			}
			if stopAt != 0 {
				// Read and charged, but not looked at.
				st.Stop = "time"
				lo = stopAt
				continue
			}
			lo += n
		}
	}
	st.Elapsed = time.Since(start)
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
	return out, st
}

type scanner struct {
	in   ScanInput
	maps []target.Mapping
	busy map[int]bool
	// free are the writable mappings no thread runs on, in address
	// order, and last the one freeStack found last: most words are no
	// pointers into them, and those that are come in runs.
	free []target.Mapping
	last int
	// calls remembers afterCall's answers: return addresses repeat.
	calls map[uint64]bool
	// pages caches pages read (nil: the page did not read whole).
	pages map[uint64][]byte
}

// maxCachedPages bounds the scanner's page cache (4 MiB).
const maxCachedPages = 1024

// setFree fills free from maps and busy.
func (s *scanner) setFree() {
	for i := range s.maps {
		if writable(&s.maps[i]) && !s.busy[i] {
			s.free = append(s.free, s.maps[i])
		}
	}
	s.calls = map[uint64]bool{}
	s.pages = map[uint64][]byte{}
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
	f := s.free
	if len(f) == 0 || sp < f[0].Start || sp >= f[len(f)-1].End {
		return false
	}
	if m := &f[s.last]; m.Start <= sp && sp < m.End {
		return true
	}
	i := sort.Search(len(f), func(i int) bool { return f[i].End > sp })
	if i < len(f) && f[i].Start <= sp {
		s.last = i
		return true
	}
	return false
}

// afterCall reports whether pc follows a call instruction in executable
// memory.
func (s *scanner) afterCall(pc uint64) bool {
	if ok, seen := s.calls[pc]; seen {
		return ok
	}
	ok := s.callBefore(pc)
	if len(s.calls) < 1<<16 {
		s.calls[pc] = ok
	}
	return ok
}

// callBefore is afterCall without the memory of answers.
func (s *scanner) callBefore(pc uint64) bool {
	i := s.mapIndex(pc)
	if i < 0 || !s.maps[i].Executable() || pc < s.maps[i].Start+6 {
		return false
	}
	var b [6]byte
	if s.read(pc-6, b[:]) != nil {
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
	var b [8]byte
	if s.read(addr, b[:]) != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

// read reads the few bytes of p at addr through a cache of whole pages:
// the scan's checks read words pointed at (records, code before return
// addresses), many in the same pages, and a read of the target's memory
// is a system call.
func (s *scanner) read(addr uint64, p []byte) error {
	page := addr &^ (scanPage - 1)
	if addr+uint64(len(p)) > page+scanPage {
		return s.in.Mem.ReadMemory(addr, p)
	}
	b, ok := s.pages[page]
	if !ok {
		if len(s.pages) >= maxCachedPages {
			clear(s.pages)
		}
		b = make([]byte, scanPage)
		if s.in.Mem.ReadMemory(page, b) != nil {
			b = nil // no whole page: read what is asked each time
		}
		s.pages[page] = b
	}
	if b == nil {
		return s.in.Mem.ReadMemory(addr, p)
	}
	copy(p, b[addr-page:])
	return nil
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
		if s.read(a+o, b[:]) != nil {
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
	// stack, stored elsewhere: in another mapping, or in the same one
	// but further from the record than a fiber's stack spans.
	if w == 0 || w&7 != 0 || !s.freeStack(w) {
		return found{}, false
	}
	if ai := s.mapIndex(a); ai < 0 || s.busy[ai] || (ai == s.mapIndex(w) && max(a, w)-min(a, w) < sameMappingGap) {
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
