package fibers

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

func TestParseSpec(t *testing.T) {
	for in, want := range map[string]Spec{
		"ucontext@0x7ffd1000":        {Kind: UContext, Addr: 0x7ffd1000},
		"fcontext@4096":              {Kind: FContext, Addr: 4096},
		"coro@0x10":                  {Kind: Coro, Addr: 0x10},
		"jmpbuf@0xabc":               {Kind: JmpBuf, Addr: 0xabc},
		"regs@pc=0x401000,sp=0x7ff0": {Kind: Regs, PC: 0x401000, SP: 0x7ff0},
		"regs@pc=0x1,sp=0x2,fp=0x3":  {Kind: Regs, PC: 1, SP: 2, FP: 3},
	} {
		got, err := ParseSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, err := ParseSpec(got.String()); err != nil || back != got {
			t.Errorf("%q: String() %q parses to %+v, %v", in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "ucontext", "ucontext@", "ucontext@zz", "ucontext@0", "tls@0x10",
		"regs@pc=1", "regs@sp=1", "regs@pc=1,sp=2,xx=3", "regs@pc"} {
		if sp, err := ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) = %+v, want an error", bad, sp)
		}
	}
}

// jumpFcontext174 is the start of boost 1.74's x86-64 jump_fcontext, as
// Debian bookworm's libboost_context.so.1.74.0 has it.
var jumpFcontext174 = []byte{
	0x48, 0x8d, 0x64, 0x24, 0xc8, // lea -0x38(%rsp),%rsp
	0x0f, 0xae, 0x1c, 0x24, // stmxcsr (%rsp)
	0xd9, 0x7c, 0x24, 0x04, // fnstcw 0x4(%rsp)
	0x4c, 0x89, 0x64, 0x24, 0x08, // mov %r12,0x8(%rsp)
	0x4c, 0x89, 0x6c, 0x24, 0x10, // mov %r13,0x10(%rsp)
	0x4c, 0x89, 0x74, 0x24, 0x18, // mov %r14,0x18(%rsp)
	0x4c, 0x89, 0x7c, 0x24, 0x20, // mov %r15,0x20(%rsp)
	0x48, 0x89, 0x5c, 0x24, 0x28, // mov %rbx,0x28(%rsp)
	0x48, 0x89, 0x6c, 0x24, 0x30, // mov %rbp,0x30(%rsp)
	0x48, 0x89, 0xe0, // mov %rsp,%rax
	0x48, 0x89, 0xfc, // mov %rdi,%rsp
}

// jumpFcontext181 is the layout with the stack-guard slot (boost 1.81 and
// later): endbr64, a 0x40-byte record, every register 8 bytes higher.
var jumpFcontext181 = []byte{
	0xf3, 0x0f, 0x1e, 0xfa, // endbr64
	0x48, 0x8d, 0x64, 0x24, 0xc0, // lea -0x40(%rsp),%rsp
	0x0f, 0xae, 0x1c, 0x24, // stmxcsr (%rsp)
	0xd9, 0x7c, 0x24, 0x04, // fnstcw 0x4(%rsp)
	0x64, 0x48, 0x8b, 0x0c, 0x25, 0x28, 0x00, 0x00, 0x00, // mov %fs:0x28,%rcx
	0x48, 0x89, 0x4c, 0x24, 0x08, // mov %rcx,0x8(%rsp): the guard
	0x4c, 0x89, 0x64, 0x24, 0x10,
	0x4c, 0x89, 0x6c, 0x24, 0x18,
	0x4c, 0x89, 0x74, 0x24, 0x20,
	0x4c, 0x89, 0x7c, 0x24, 0x28,
	0x48, 0x89, 0x5c, 0x24, 0x30,
	0x48, 0x89, 0x6c, 0x24, 0x38,
	0x48, 0x89, 0xe0,
}

func TestDecodeJumpFcontext(t *testing.T) {
	for _, c := range []struct {
		name     string
		code     []byte
		n        uint64
		rbp, r12 uint64
	}{
		{"1.74", jumpFcontext174, 0x38, 0x30, 0x08},
		{"1.81", jumpFcontext181, 0x40, 0x38, 0x10},
	} {
		n, stores, err := decodeJumpFcontext(c.code)
		if err != nil || n != c.n || stores[regs.AMD64RBP] != c.rbp || stores[12] != c.r12 {
			t.Errorf("%s: n %#x stores %v err %v; want n %#x rbp %#x r12 %#x", c.name, n, stores, err, c.n, c.rbp, c.r12)
		}
		if _, ok := stores[1]; ok {
			t.Errorf("%s: the guard's store (rcx) taken as a callee-saved register", c.name)
		}
	}
	if _, _, err := decodeJumpFcontext([]byte{0xc3}); err == nil {
		t.Errorf("a bare ret decoded")
	}
}

func TestDemangle(t *testing.T) {
	const guard = 0x1234_5678_9abc_def0
	for _, v := range []uint64{0, 0x7ffd_0000_1000, 0x5555_5555_4000} {
		mangled := bits.RotateLeft64(v^guard, 0x11) // glibc's PTR_MANGLE
		if got := demangle(mangled, guard); got != v {
			t.Errorf("demangle(mangle(%#x)) = %#x", v, got)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"ucontext@0x1000", "regs@pc=1,sp=2,fp=3", "coro@", "@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sp, err := ParseSpec(s); err == nil {
			if back, err := ParseSpec(sp.String()); err != nil || back != sp {
				t.Errorf("%q: %+v does not round-trip: %+v %v", s, sp, back, err)
			}
		}
	})
}

func FuzzDecodeJumpFcontext(f *testing.F) {
	f.Add(jumpFcontext174)
	f.Add(jumpFcontext181)
	f.Fuzz(func(t *testing.T, code []byte) {
		n, stores, err := decodeJumpFcontext(code)
		if err == nil && (n == 0 || len(stores) == 0) {
			t.Errorf("decoded n %d stores %v without an error", n, stores)
		}
	})
}

// FuzzTarantoolFind: cords and fiber lists in hostile memory (loops that
// miss the head, null and wild pointers) end with an error or a list,
// never a hang or a panic.
func FuzzTarantoolFind(f *testing.F) {
	// A cord at 0x1000 whose list holds one fiber at 0x2000 (link at
	// +0x10), then back to the head.
	seed := make([]byte, 0x2000)
	le := binary.LittleEndian
	le.PutUint64(seed[0x18:], 0x2010)   // cord.alive.next -> fiber.link
	le.PutUint64(seed[0x1018:], 0x1010) // fiber.link.next -> cord.alive
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := &Tarantool{mainCord: 0x1000, fiberSize: 0x40, fCtx: 0, fFid: 8, fCsw: 12, fLink: 0x10, fName: 0x20,
			nameLen: 16, cordSize: 0x40, cFiber: 0, cID: 8, cAlive: 0x10, cSched: 0x20}
		mem := &target.Snapshot{Regions: []target.Region{{Addr: 0x1000, Data: data}}}
		tr.Find(mem, 0, nil)
	})
}

// FuzzScan: a scan of hostile memory ends, without panicking, and finds
// nothing outside writable memory.
func FuzzScan(f *testing.F) {
	seed := make([]byte, 4096)
	binary.LittleEndian.PutUint64(seed[224:], 0x10000+424) // a ucontext_t signature
	binary.LittleEndian.PutUint64(seed[160:], 0x10800)
	binary.LittleEndian.PutUint64(seed[168:], 0x20005)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		code := make([]byte, 0x1000)
		code[0] = 0xe8 // a call whose return address is 0x20005
		mem := &target.Snapshot{Regions: []target.Region{{Addr: 0x10000, Data: data}, {Addr: 0x20000, Data: code}}}
		in := ScanInput{Mem: mem, Maps: []target.Mapping{
			{Start: 0x10000, End: 0x10000 + uint64(len(data)), Perms: "rw-p"},
			{Start: 0x20000, End: 0x21000, Perms: "r-xp", Path: "/x"},
		}, Guard: 0x1234, HaveGuard: true, FcontextN: 0x38}
		specs, _ := Scan(in, ScanLimits{})
		for _, sp := range specs {
			if sp.Addr < 0x10000 || sp.Addr >= 0x10000+uint64(len(data)) {
				t.Errorf("context %v outside the writable region", sp)
			}
		}
	})
}

// scanMem is memory for scan tests: the snapshot's regions, zeros over
// [zeroLo, zeroHi), an error elsewhere; it counts the reads.
type scanMem struct {
	snap           *target.Snapshot
	zeroLo, zeroHi uint64
	reads, failed  int
}

func (m *scanMem) ReadMemory(addr uint64, p []byte) error {
	m.reads++
	if addr >= m.zeroLo && addr+uint64(len(p)) <= m.zeroHi {
		clear(p)
		return nil
	}
	err := m.snap.ReadMemory(addr, p)
	if err != nil {
		m.failed++
	}
	return err
}

// scanWorld is a process image with one parked ucontext_t at 0x10000
// (its stack at 0x30000, its PC after a call at 0x20005) and one huge
// writable mapping at 1<<40 of size n, whose reads fail unless zero.
func scanWorld(n uint64, zero bool) (*scanMem, ScanInput) {
	data := make([]byte, 4096)
	binary.LittleEndian.PutUint64(data[regs.AMD64UContextFPRegs:], 0x10000+regs.AMD64UContextFPRegsMem)
	binary.LittleEndian.PutUint64(data[ucSP:], 0x30800)
	binary.LittleEndian.PutUint64(data[ucPC:], 0x20005)
	code := make([]byte, 0x1000)
	code[0] = 0xe8
	mem := &scanMem{snap: &target.Snapshot{Regions: []target.Region{{Addr: 0x10000, Data: data}, {Addr: 0x20000, Data: code},
		{Addr: 0x30000, Data: make([]byte, 0x1000)}}}}
	huge := target.Mapping{Start: 1 << 40, End: 1<<40 + n, Perms: "rw-p"}
	if zero {
		mem.zeroLo, mem.zeroHi = huge.Start, huge.End
	}
	return mem, ScanInput{Mem: mem, Maps: []target.Mapping{
		{Start: 0x10000, End: 0x11000, Perms: "rw-p"},
		{Start: 0x20000, End: 0x21000, Perms: "r-xp", Path: "/x"},
		{Start: 0x30000, End: 0x31000, Perms: "rw-p"},
		huge,
	}}
}

// TestScanUnreadable: a 64 TB writable mapping that does not read (a
// reservation a core left out, a file mapping past its file's end) is
// charged as it is considered, read or not, and left after a run of
// failed reads: the scan ends after a bounded number of reads, and the
// context in the small mappings is found.
func TestScanUnreadable(t *testing.T) {
	mem, in := scanWorld(64<<40, false)
	specs, st := Scan(in, ScanLimits{})
	if len(specs) != 1 || specs[0] != (Spec{Kind: UContext, Addr: 0x10000}) {
		t.Errorf("found %v, want the ucontext at 0x10000", specs)
	}
	if mem.reads > 10000 || st.Unreadable == 0 || st.Unreadable > unreadableRun+scanChunk || st.Abandoned == 0 ||
		st.Read+st.Unreadable > DefaultScanBytes || st.Stop != "" {
		t.Errorf("%d reads (%d failed); stats %+v", mem.reads, mem.failed, st)
	}
	if n := st.Note(); !strings.Contains(n, "unreadable") || strings.Contains(n, "\n") {
		t.Errorf("note %q", n)
	}
}

// TestScanBudget: a huge mapping that reads (zeros: a MAP_NORESERVE
// reservation of a live process) is read up to the byte budget, or until
// the time limit, never beyond; smaller mappings come first, so the
// context is found; the note says what was left.
func TestScanBudget(t *testing.T) {
	_, in := scanWorld(1<<40, true)
	specs, st := Scan(in, ScanLimits{MaxBytes: 32 << 20, MaxTime: time.Hour})
	if len(specs) != 1 || st.Stop != "bytes" || st.Read+st.Unreadable != 32<<20 || st.Left != st.Writable-st.Read || st.LeftMappings != 1 {
		t.Errorf("bytes: found %v; stats %+v", specs, st)
	}
	if n := st.Note(); !strings.Contains(n, "not scanned") || !strings.Contains(n, "byte budget (32.0 MiB)") {
		t.Errorf("note %q", n)
	}
	// 1 TB does not read in a millisecond (on a loaded machine, nothing
	// may have been read by then).
	_, st = Scan(in, ScanLimits{MaxBytes: 1 << 40, MaxTime: time.Millisecond})
	if st.Stop != "time" || st.Left == 0 || st.Read+st.Unreadable >= 1<<40 {
		t.Errorf("time: stats %+v", st)
	}
	if n := st.Note(); !strings.Contains(n, "time limit (1ms, --fiber-scan-time)") {
		t.Errorf("note %q", n)
	}
	// Within the limits: nothing to say.
	_, in = scanWorld(1<<20, true)
	if _, st := Scan(in, ScanLimits{}); st.Stop != "" || st.Left != 0 || st.Note() != "" {
		t.Errorf("small: stats %+v, note %q", st, st.Note())
	}
}

// TestPhantoms: a scanned context is dropped when a frame of its walk
// lies in the live part of a thread's stack or an explicit fiber's (its
// first frame, or a later one: a record left below the running stack
// pointer), when a later frame of its walk is the first frame of another
// scanned ucontext, jmpbuf or fcontext context (it passes through that
// switch), or when its stack pointer lies in the live part of a kept
// scanned fiber's stack (a walk that ended cleanly) or within minFiberGap
// above a kept one's; one just above such a stack's outermost frame, or
// under a walk that ended badly further than minFiberGap, is kept, and
// so are contexts the scan did not find. A walk that ended badly is
// dropped within minFiberGap under a thread's or a kept fiber's stack
// pointer, or above another kept one that ended badly. Of two on one
// stack that nothing tells apart but their stack pointers, the deeper is
// kept.
func TestPhantoms(t *testing.T) {
	type fr struct{ sp, pc uint64 }
	walk := func(kind string, addr uint64, end unwind.EndReason, frames ...fr) Walk {
		w := Walk{Stack: &unwind.Stack{End: end}}
		if kind != "" {
			w.Fiber = &target.Context{Kind: target.KindFiber, Runtime: kind, Saved: addr}
		}
		for _, f := range frames {
			w.Stack.Frames = append(w.Stack.Frames, unwind.Frame{SP: f.sp, PC: f.pc})
		}
		return w
	}
	walks := []Walk{
		walk("", 0, unwind.EndRAUndefined, fr{0x70000, 0x501}, fr{0x70100, 0x502}, fr{0x7f000, 0x503}),        // a thread
		walk(UContext, 0x10, unwind.EndOutermost, fr{0x10000, 0x601}, fr{0x10100, 0x602}, fr{0x19000, 0x603}), // real, scanned
		walk(UContext, 0x20, unwind.EndOutermost, fr{0x10100, 0x611}, fr{0x19000, 0x603}),                     // stale in it
		walk(FContext, 0x30, unwind.EndOutermost, fr{0x19008, 0x621}),                                         // just above its outermost frame
		walk(Coro, 0x40, unwind.EndNoProgress, fr{0x30000, 0x701}, fr{0x30100, 0x702}, fr{0x38000, 0x703}),    // walk ended badly
		walk(Coro, 0x50, unwind.EndOutermost, fr{0x36000, 0x711}),                                             // so this one stays
		walk(Coro, 0x58, unwind.EndOutermost, fr{0x31000, 0x721}),                                             // and this one, which drops 0x40
		walk(Coro, 0x5c, unwind.EndNoProgress, fr{0x6d000, 0x731}),                                            // ended badly, under the thread
		walk(Coro, 0xc0, unwind.EndNoProgress, fr{0xc0000, 0xc01}, fr{0xc0100, 0xc02}),                        // ended badly, alone: kept
		walk(Coro, 0xc8, unwind.EndNoProgress, fr{0xc1000, 0xc11}),                                            // too close above it
		walk(UContext, 0x60, unwind.EndOutermost, fr{0x70100, 0x511}),                                         // in the thread's stack
		walk(UContext, 0x68, unwind.EndOutermost, fr{0x6f000, 0x521}, fr{0x70100, 0x502}, fr{0x7f000, 0x503}), // below it, climbing in
		walk(JmpBuf, 0x70, unwind.EndOutermost, fr{0x50000, 0x801}, fr{0x54000, 0x802}),                       // explicit
		walk(UContext, 0x80, unwind.EndOutermost, fr{0x52000, 0x811}),                                         // in the explicit one's
		walk(UContext, 0x90, unwind.EndOutermost),                                                             // no frames: kept
		walk(FContext, 0xa0, unwind.EndOutermost, fr{0x90000, 0x901}, fr{0x90200, 0x902}),                     // real
		walk(FContext, 0xa8, unwind.EndOutermost, fr{0x8ff00, 0x911}, fr{0x90000, 0x901}, fr{0x90200, 0x902}), // through 0xa0's switch
		walk(Coro, 0xb0, unwind.EndOutermost, fr{0xa0000, 0xa01}, fr{0xa0100, 0xa02}),                         // a coro: proves no switch
		walk(UContext, 0xb8, unwind.EndOutermost, fr{0x9ff00, 0xa11}, fr{0xa0000, 0xa01}, fr{0xa0100, 0xa02}), // so the deeper stays
	}
	var scanned []Spec
	for _, w := range walks {
		if w.Fiber != nil && w.Fiber.Saved != 0x70 {
			scanned = append(scanned, Spec{Kind: w.Fiber.Runtime, Addr: w.Fiber.Saved})
		}
	}
	var got []uint64
	drop := Phantoms(walks, scanned)
	if len(drop) != len(walks) {
		t.Fatalf("%d drop marks for %d walks", len(drop), len(walks))
	}
	for i, w := range walks {
		if w.Fiber != nil && !drop[i] {
			got = append(got, w.Fiber.Saved)
		}
	}
	if want := []uint64{0x10, 0x30, 0x50, 0x58, 0xc0, 0x70, 0x90, 0xa0, 0xb8}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kept %#x, want %#x", got, want)
	}
	if drop := Phantoms(walks, nil); drop != nil {
		t.Errorf("nothing scanned: drop marks %v", drop)
	}
}

// TestScanRecordCalls: a pointer to a libcoro or fcontext record is taken
// when the call before the record's return address reaches the switch
// routine: it calls it (directly, or through a PLT entry and its GOT
// slot), or calls a function that jumps to it (Tarantool's fiber_yield);
// a record whose call calls anything else (a slot a later call rewrote,
// backtrace()'s array) is not; a libcoro record whose call goes through a
// register is taken, unproven. Of proven contexts closer than minFiberGap,
// all are kept, and of unproven ones only the lowest.
func TestScanRecordCalls(t *testing.T) {
	le := binary.LittleEndian
	code := make([]byte, 0x1000) // at 0x20000
	put := func(at int, b ...byte) { copy(code[at:], b) }
	call := func(at, target int) uint64 { // call rel32 at code+at; its return address
		put(at, 0xe8)
		le.PutUint32(code[at+1:], uint32(int32(target-(at+5))))
		return uint64(0x20000 + at + 5)
	}
	put(0x100, 0x55, 0x53, 0x41, 0x54, 0x41, 0x55, 0x41, 0x56, 0x41, 0x57, 0x48, 0x89, 0x27) // coro_transfer
	put(0x200, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xe9)                                           // fiber_yield: ... jmp coro_transfer
	back := int32(0x100 - 0x20a)
	le.PutUint32(code[0x206:], uint32(back))
	put(0x300, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3) // any function
	put(0x500, jumpFcontext174...)
	put(0x600, 0xff, 0x25) // PLT entry: jmp *GOT(%rip), GOT at 0x401000
	le.PutUint32(code[0x602:], uint32(0x401000-0x20606))
	ras := []uint64{
		call(0x400, 0x100), // coro: calls coro_transfer
		call(0x410, 0x200), // coro: calls fiber_yield
		call(0x420, 0x300), // coro: calls another function
		0x20432,            // coro: call *%rax
		call(0x440, 0x600), // fcontext: calls jump_fcontext@plt
		0x20425,            // fcontext: calls another function
	}
	put(0x430, 0xff, 0xd0)
	stack := make([]byte, 0x80000) // at 0x100000: one record every 0x10000
	data := make([]byte, 0x2000)   // at 0x400000: the pointers to them; the GOT
	for i, ra := range ras {
		w := 0x100100 + uint64(i)*0x10000
		off := uint64(48)
		if i >= 4 {
			off = 0x38
		}
		le.PutUint64(stack[w-0x100000+off:], ra)
		le.PutUint64(data[8*i:], w)
	}
	le.PutUint64(data[0x1000:], 0x20500)
	// Two ucontext_t 8 KiB apart on the stack at 0x200000, and two
	// pointers to coro records 8 KiB apart whose calls go through a
	// register.
	ucs := make([]byte, 0x1000) // at 0x300000
	for i := range 2 {
		u := uint64(0x300000 + i*0x800)
		le.PutUint64(ucs[u-0x300000+regs.AMD64UContextFPRegs:], u+regs.AMD64UContextFPRegsMem)
		le.PutUint64(ucs[u-0x300000+ucSP:], 0x200800+uint64(i)*0x2000)
		le.PutUint64(ucs[u-0x300000+ucPC:], ras[0])
		w := 0x100100 + 0x60000 + uint64(i)*0x2000
		le.PutUint64(stack[w-0x100000+48:], 0x20432)
		le.PutUint64(data[0x40+8*i:], w)
	}
	mem := &target.Snapshot{Regions: []target.Region{{Addr: 0x20000, Data: code}, {Addr: 0x100000, Data: stack},
		{Addr: 0x200000, Data: make([]byte, 0x8000)}, {Addr: 0x300000, Data: ucs}, {Addr: 0x400000, Data: data}}}
	in := ScanInput{Mem: mem, Maps: []target.Mapping{
		{Start: 0x20000, End: 0x21000, Perms: "r-xp", Path: "/x"},
		{Start: 0x100000, End: 0x180000, Perms: "rw-p"},
		{Start: 0x200000, End: 0x208000, Perms: "rw-p"},
		{Start: 0x300000, End: 0x301000, Perms: "rw-p"},
		{Start: 0x400000, End: 0x402000, Perms: "rw-p", Path: "/x"},
	}, FcontextN: 0x38}
	specs, _ := Scan(in, ScanLimits{})
	want := []Spec{{Kind: Coro, Addr: 0x400000}, {Kind: Coro, Addr: 0x400008}, {Kind: Coro, Addr: 0x400018},
		{Kind: FContext, Addr: 0x400020}, {Kind: Coro, Addr: 0x400040},
		{Kind: UContext, Addr: 0x300000}, {Kind: UContext, Addr: 0x300800}}
	if fmt.Sprint(specs) != fmt.Sprint(want) {
		t.Errorf("found %v\nwant %v", specs, want)
	}
}
