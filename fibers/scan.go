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
// coro_context) from one slab arena: a guard page below each stack splits
// the mapping, but nothing splits a stack from the slabs above it, so the
// last fiber made shares its mapping with the structures above (in the
// test app, fiber 108's struct lay 3.5 MiB above its stack). Requiring
// another mapping missed that fiber. This rule decides only which
// pointers are looked at: one mapping may also hold several stacks (the
// kernel merges adjacent anonymous mappings of equal flags), so a pointer
// stored on one fiber's stack to a record on its neighbour's is taken
// when a guard page splits them and not when they share a mapping; which
// records are stale is decided on walks (Phantoms), never by
// mappings.
const sameMappingGap = 1 << 20

// minFiberGap is the distance under which two saved stack pointers are
// taken for the same stack.
const minFiberGap = 16 << 10

// ScanInput is what a scan reads: the process's memory and mappings (with
// permissions), its pointer guard, and the fcontext record size of its
// jump_fcontext (0: none). Which stacks threads run on is not asked: one
// mapping may hold a running stack and parked ones; Phantoms tells
// them apart on the walks.
type ScanInput struct {
	Mem       target.Memory
	Maps      []target.Mapping
	Guard     uint64
	HaveGuard bool
	FcontextN uint64
}

type found struct {
	spec Spec
	sp   uint64
	// proven: a self-describing structure (ucontext_t, jmp_buf), or a
	// pointer to a record whose return address follows a call that
	// reaches the switch routine; not one whose call could not be
	// followed.
	proven bool
}

// Scan returns the saved contexts it finds and what it covered within
// lim: of those whose stack pointers are closer than minFiberGap (one
// stack), every proven one (distinct stack pointers), or when there is
// none, the unproven one with the lowest stack pointer.
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
	s.setWritable()
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
	return cluster(cands), st
}

// cluster keeps, of each run of candidates whose stack pointers are
// closer than minFiberGap (one stack), the proven ones, one per stack
// pointer (a ucontext_t or jmp_buf before a pointer to a record, then the
// lowest address), or the lowest unproven one when none is proven. Several
// proven ones on one stack are left for Phantoms, which tells the
// stale from the real once they are walked: a stale record below a real
// one's stack pointer (a switch made deeper, earlier) must not win just by
// being lowest.
func cluster(cands []found) []Spec {
	sort.Slice(cands, func(i, j int) bool {
		a, b := &cands[i], &cands[j]
		if a.sp != b.sp {
			return a.sp < b.sp
		}
		if sa, sb := a.spec.Kind == UContext || a.spec.Kind == JmpBuf, b.spec.Kind == UContext || b.spec.Kind == JmpBuf; sa != sb {
			return sa
		}
		return a.spec.Addr < b.spec.Addr
	})
	var out []Spec
	for i := 0; i < len(cands); {
		j := i + 1
		for j < len(cands) && cands[j].sp-cands[j-1].sp < minFiberGap {
			j++
		}
		n := len(out)
		var last uint64 // the stack pointer of the last proven one kept
		for k := i; k < j; k++ {
			if cands[k].proven && (len(out) == n || cands[k].sp != last) {
				out = append(out, cands[k].spec)
				last = cands[k].sp
			}
		}
		if len(out) == n {
			out = append(out, cands[i].spec)
		}
		i = j
	}
	return out
}

type scanner struct {
	in   ScanInput
	maps []target.Mapping
	// rw are the writable mappings, in address order, and last the one
	// stackAt found last: most words are no pointers into them, and
	// those that are come in runs.
	rw   []target.Mapping
	last int
	// calls remembers afterCall's answers: return addresses repeat.
	calls map[uint64]bool
	// switches remembers isSwitch's answers, reaches reaches'.
	switches, reaches map[switchKey]bool
	// pages caches pages read (nil: the page did not read whole).
	pages map[uint64][]byte
}

// maxCachedPages bounds the scanner's page cache (4 MiB).
const maxCachedPages = 1024

// setWritable fills rw from maps.
func (s *scanner) setWritable() {
	for i := range s.maps {
		if writable(&s.maps[i]) {
			s.rw = append(s.rw, s.maps[i])
		}
	}
	s.calls = map[uint64]bool{}
	s.switches = map[switchKey]bool{}
	s.reaches = map[switchKey]bool{}
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

// stackAt reports whether sp is in writable memory. Whether a thread runs
// on that stack is not asked here: mappings do not tell stacks apart (one
// mapping may hold a thread's running fiber and the parked ones beside
// it); Phantoms tells what lies in a running stack once the threads
// are walked.
func (s *scanner) stackAt(sp uint64) bool {
	f := s.rw
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
		if s.stackAt(sp) && (s.afterCall(pc) || s.executable(pc)) {
			return found{spec: Spec{Kind: UContext, Addr: a}, sp: sp, proven: true}, true
		}
	}
	// jmp_buf: rsp (slot 6) and pc (slot 7) mangled.
	if s.in.HaveGuard {
		msp, _ := word(48)
		mpc, ok := word(56)
		if ok {
			sp, pc := demangle(msp, s.in.Guard), demangle(mpc, s.in.Guard)
			if sp&7 == 0 && s.stackAt(sp) && s.afterCall(pc) {
				return found{spec: Spec{Kind: JmpBuf, Addr: a}, sp: sp, proven: true}, true
			}
		}
	}
	// A pointer to a saved record (libcoro, boost fcontext) stored away
	// from it: in another mapping, or further than sameMappingGap in the
	// same one.
	if w == 0 || w&7 != 0 || !s.stackAt(w) {
		return found{}, false
	}
	if ai := s.mapIndex(a); ai < 0 || (ai == s.mapIndex(w) && max(a, w)-min(a, w) < sameMappingGap) {
		return found{}, false
	}
	// The record's return address follows a call that reaches the
	// switch routine (see reachesSwitch): a record whose slot a later
	// call rewrote (the fiber went on in that frame), or return addresses
	// that are no record (backtrace()'s array), are not taken. A libcoro
	// record whose call cannot be followed is taken unproven; an
	// fcontext record must be shown (Phantoms trusts its PC as a
	// switch's), which boost's own calls to jump_fcontext always are.
	if s.in.FcontextN != 0 {
		if ra, ok := s.word(w + s.in.FcontextN); ok && s.afterCall(ra) {
			if reach, _ := s.reachesSwitch(ra, FContext); reach {
				return found{spec: Spec{Kind: FContext, Addr: a}, sp: w + s.in.FcontextN + 8, proven: true}, true
			}
		}
	}
	if ra, ok := s.word(w + 48); ok && s.afterCall(ra) {
		if reach, known := s.reachesSwitch(ra, Coro); reach || !known {
			return found{spec: Spec{Kind: Coro, Addr: a}, sp: w + 56, proven: reach}, true
		}
	}
	return found{}, false
}

// switchKey is a code address and the kind of switch routine asked about.
type switchKey struct {
	t    uint64
	kind string
}

// tailReach is how far into a function called a tail jump to the switch
// routine is looked for: Tarantool's fiber_yield ends with jmp
// coro_transfer, so the return address of its records follows a call to
// fiber_yield.
const tailReach = 512

// reachesSwitch reports whether the call before return address ra reaches
// the switch routine of kind (jump_fcontext's, coro_transfer's): the
// function it calls is that routine, or jumps to it (jmp rel32) within its
// first tailReach bytes. known is false when the call cannot be followed
// (through a register): the record is then taken, unproven.
func (s *scanner) reachesSwitch(ra uint64, kind string) (reach, known bool) {
	t, ok, alsoIndirect := s.callTarget(ra)
	if !ok {
		return false, false
	}
	key := switchKey{t, kind}
	if r, seen := s.reaches[key]; seen {
		return r, r || !alsoIndirect
	}
	reach = s.isSwitch(t, kind)
	if !reach {
		code := make([]byte, tailReach)
		n := 0
		for n < len(code) && s.read(t+uint64(n), code[n:n+64]) == nil {
			n += 64
		}
		le := binary.LittleEndian
		for i := 0; i+5 <= n && !reach; i++ {
			if code[i] == 0xe9 {
				u := t + uint64(i) + 5 + uint64(int64(int32(le.Uint32(code[i+1:]))))
				reach = s.isSwitch(s.pltTarget(u), kind)
			}
		}
	}
	if len(s.reaches) < 1<<12 {
		s.reaches[key] = reach
	}
	return reach, reach || !alsoIndirect
}

// isSwitch reports whether the code at t is the switch routine of kind:
// for fcontext, code that decodes as jump_fcontext (or ontop_fcontext,
// which saves the same record) with the process's record size; for coro,
// libcoro's x86-64 coro_transfer: (endbr64,) pushes of the callee-saved
// registers, then mov %rsp,(%rdi).
func (s *scanner) isSwitch(t uint64, kind string) bool {
	key := switchKey{t, kind}
	if ok, seen := s.switches[key]; seen {
		return ok
	}
	ok := false
	if kind == FContext {
		code := make([]byte, 96)
		if s.in.Mem.ReadMemory(t, code) == nil {
			n, _, err := decodeJumpFcontext(code)
			ok = err == nil && n == s.in.FcontextN
		}
	} else if b := make([]byte, 24); s.read(t, b) == nil {
		i, pushes := 0, 0
		if b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa {
			i = 4
		}
		for i < len(b)-3 {
			switch {
			case b[i] == 0x55 || b[i] == 0x53: // push %rbp, %rbx
				i++
			case b[i] == 0x41 && b[i+1] >= 0x54 && b[i+1] <= 0x57: // push %r12-%r15
				i += 2
			default:
				ok = pushes >= 4 && b[i] == 0x48 && b[i+1] == 0x89 && b[i+2] == 0x27 // mov %rsp,(%rdi)
				i = len(b)
				continue
			}
			pushes++
		}
	}
	if len(s.switches) < 1<<12 {
		s.switches[key] = ok
	}
	return ok
}

// callTarget is the function the call before return address ra calls: the
// target of a call rel32 or of a call *disp32(%rip) (read from the GOT),
// past a PLT entry. alsoIndirect: the bytes read as a call through a
// register too (afterCall's other forms), which cannot be followed.
func (s *scanner) callTarget(ra uint64) (t uint64, ok, alsoIndirect bool) {
	var b [6]byte
	if s.read(ra-6, b[:]) != nil {
		return 0, false, false
	}
	alsoIndirect = b[4] == 0xff && b[5]&0xf8 == 0xd0 || b[3] == 0xff && b[4]&0xf8 == 0x50 // call *%reg, *disp8(%reg)
	le := binary.LittleEndian
	switch {
	case b[1] == 0xe8:
		return s.pltTarget(ra + uint64(int64(int32(le.Uint32(b[2:]))))), true, alsoIndirect
	case b[0] == 0xff && b[1] == 0x15:
		g, ok := s.word(ra + uint64(int64(int32(le.Uint32(b[2:])))))
		return g, ok, alsoIndirect
	}
	return 0, false, false
}

// pltTarget is where the code at t jumps when it is a PLT entry ((endbr64,
// bnd,) jmp *disp32(%rip)), read from its GOT slot; t otherwise.
func (s *scanner) pltTarget(t uint64) uint64 {
	var p [16]byte
	if s.read(t, p[:]) != nil {
		return t
	}
	i := 0
	if p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa { // endbr64
		i = 4
	}
	if p[i] == 0xf2 { // bnd
		i++
	}
	if p[i] == 0xff && p[i+1] == 0x25 { // jmp *disp32(%rip)
		next := t + uint64(i) + 6
		if g, ok := s.word(next + uint64(int64(int32(binary.LittleEndian.Uint32(p[i+2:]))))); ok {
			return g
		}
	}
	return t
}
