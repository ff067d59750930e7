package cpython

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rewindstack/rewind/target"
)

// Where synthBig puts its forged location table (away from synth312's
// objects).
const bigTable = 0x1000_0000

// synthBig is synth312 with n frames (a straight chain) of its one code
// object, whose co_linetable claims claim bytes: the first written ones
// are "no location" entries of 8 code units each, and the code claims
// units code units. Frame i runs code unit at(i).
func synthBig(n, claim, written int, units uint64, at func(i int) uint64) fakeMem {
	l := &layout312
	m := synth312(n, func(i int) uint64 {
		if i == n-1 {
			return 0
		}
		return uint64(0x40000 + (i+1)*0x100)
	})
	const codeAddr = 0x8000
	m.u64(codeAddr+l.codeLinetable, bigTable)
	m.u64(codeAddr+l.bytesSize, units) // PyVarObject.ob_size: code units
	m.u64(bigTable+l.bytesSize, uint64(claim))
	lt := make([]byte, written)
	for i := range lt {
		lt[i] = 0x80 | 15<<3 | 7
	}
	m.put(bigTable+l.bytesData, lt)
	for i := range n {
		m.u64(uint64(0x40000+i*0x100)+l.frameInstr, codeAddr+l.codeAdaptive+2*at(i))
	}
	return m
}

// BenchmarkSharedTable: 16,384 frames of one code object whose
// co_linetable claims (and holds) 1 MiB, each frame near the table's end,
// so that decoding the whole table for each frame shows.
//
//	go test ./cpython -run '^$' -bench SharedTable -benchtime 3x
func BenchmarkSharedTable(b *testing.B) {
	const n, mib = 1 << 14, 1 << 20
	m := synthBig(n, mib, mib, 8*mib, func(i int) uint64 { return 8*mib - 1 - uint64(i) })
	rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
	for range b.N {
		s, err := rt.Read(m)
		if err != nil || len(s.Threads) != 1 || len(s.Threads[0].Frames) != n {
			b.Fatalf("%v %+v", err, s)
		}
	}
}

// countMem counts the reads of its memory: how many at each address,
// the bytes in all and the largest.
type countMem struct {
	m           fakeMem
	at          map[uint64]int
	bytes, most int
}

func newCountMem(m fakeMem) *countMem { return &countMem{m: m, at: map[uint64]int{}} }

func (c *countMem) ReadMemory(addr uint64, p []byte) error {
	c.at[addr]++
	c.bytes += len(p)
	c.most = max(c.most, len(p))
	return c.m.ReadMemory(addr, p)
}

// TestSharedTableReadOnce: 16,384 frames of one code object whose table
// claims 1 MiB read the table once, cut to maxLinetable with a note, and
// take well under a second (85 s when each frame decoded the table).
func TestSharedTableReadOnce(t *testing.T) {
	const n, mib = 1 << 14, 1 << 20
	// Each frame past the end of the part read: decoding the table for
	// each would go through all of it.
	m := newCountMem(synthBig(n, mib, mib, 8*mib, func(i int) uint64 { return 8*mib - 1 - uint64(i) }))
	rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
	start := time.Now()
	s, err := rt.Read(m)
	took := time.Since(start)
	if err != nil || len(s.Threads) != 1 || len(s.Threads[0].Frames) != n {
		t.Fatalf("%v %+v", err, s)
	}
	if got := m.at[bigTable+layout312.bytesData]; got != 1 {
		t.Errorf("table read %d times, want once", got)
	}
	if m.most > maxLinetable {
		t.Errorf("a read of %d bytes, more than maxLinetable", m.most)
	}
	if len(s.Notes) != 1 || !strings.Contains(s.Notes[0], "claims 1048576 bytes") {
		t.Errorf("notes %q, want one saying the table was cut", s.Notes)
	}
	for i, f := range s.Threads[0].Frames {
		if f.Line != -1 || f.Function != "f" {
			t.Fatalf("frame %d: %+v, want f with no line (a no-location entry)", i, f)
		}
	}
	t.Logf("%d frames in %v, %d bytes read", n, took, m.bytes)
	if took > time.Second {
		t.Errorf("took %v, want well under a second", took)
	}
}

// TestTableCutByUnits: a table claiming more than maxEntry bytes a code
// unit of its code is read only that far; the lines it holds are kept.
func TestTableCutByUnits(t *testing.T) {
	m := synth312(3, func(i int) uint64 { return uint64(0x40000+(i+1)*0x100) * uint64(min(2-i, 1)) })
	m.u64(0xb000+layout312.bytesSize, 1<<20) // the 64-entry table claims 1 MiB
	m.u64(0x8000+layout312.bytesSize, 2)     // for 2 code units
	c := newCountMem(m)
	rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
	s, err := rt.Read(c)
	if err != nil {
		t.Fatal(err)
	}
	fr := s.Threads[0].Frames
	// 50 bytes hold the first 16 entries: units 0, 1 and 2 keep lines.
	if len(fr) != 3 || fr[0].Line != 11 || fr[2].Line != 13 {
		t.Errorf("frames %+v, want 3 at lines 11-13", fr)
	}
	if len(s.Notes) != 1 || !strings.Contains(s.Notes[0], "for 2 code units: read the first 50") {
		t.Errorf("notes %q", s.Notes)
	}
	if c.most > 50+200 {
		t.Errorf("a read of %d bytes", c.most)
	}
}

// TestKnownCodeReused: a walk given the code objects of the dump's
// earlier one reads no table again while the objects are the same, and
// reads it again when the object at the address changed.
func TestKnownCodeReused(t *testing.T) {
	m := synth312(3, func(i int) uint64 { return uint64(0x40000+(i+1)*0x100) * uint64(min(2-i, 1)) })
	c := newCountMem(m)
	rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
	_, known, err := rt.read(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := rt.read(c, known)
	if err != nil || len(s.Threads[0].Frames) != 3 || s.Threads[0].Frames[2].Line != 13 {
		t.Fatalf("%v %+v", err, s)
	}
	if got := c.at[0xb000+layout312.bytesData]; got != 1 {
		t.Errorf("table read %d times in two walks, want once", got)
	}
	m.put(0x8000+layout312.codeFirstLine, []byte{20, 0, 0, 0}) // another object there
	s, _, _ = rt.read(c, known)
	if got := c.at[0xb000+layout312.bytesData]; got != 2 || s.Threads[0].Frames[0].Line != 21 {
		t.Errorf("table read %d times, line %d: want read again, line 21", got, s.Threads[0].Frames[0].Line)
	}
}

// putStr writes at addr a compact str of kind (1, 2 or 4 bytes a
// character; ascii for kind 1 when asked) whose length field is claim
// and whose characters are s.
func putStr(m fakeMem, addr uint64, kind int, ascii bool, claim int, s []rune) {
	l := &layout312
	m.u64(addr+l.obType, 0xc800)
	m.u64(addr+l.uniLength, uint64(claim))
	state := byte(kind<<2 | 1<<5)
	data := addr + l.compactSize
	if ascii {
		state |= 1 << 6
		data = addr + l.asciiSize
	}
	m.put(addr+l.uniState, []byte{state, 0, 0, 0})
	var b []byte
	for _, r := range s {
		for k := range kind {
			b = append(b, byte(r>>(8*k)))
		}
	}
	m.put(data, b)
}

// TestInvalidNames: a name that is not a printable str of at most
// maxString characters is left out; the frame keeps its file and line,
// and the walk goes on.
func TestInvalidNames(t *testing.T) {
	evil := []rune("\x1b[31mEVIL\x00\x07")
	for _, c := range []struct {
		why   string
		write func(m fakeMem)
		want  string
	}{
		{"terminal escape", func(m fakeMem) { putStr(m, 0xa000, 1, true, len(evil), evil) }, ""},
		{"4,000 characters claimed", func(m fakeMem) { putStr(m, 0xa000, 1, true, 4000, evil[1:5]) }, ""},
		{"1,025 characters", func(m fakeMem) { putStr(m, 0xa000, 1, true, 1025, []rune(strings.Repeat("a", 1025))) }, ""},
		{"not a str", func(m fakeMem) { m.u64(0xa000+layout312.obType, 0x9000) }, ""},
		{"ASCII flag on a byte past 127", func(m fakeMem) { putStr(m, 0xa000, 1, true, 2, []rune("a\xe9")) }, ""},
		{"C1 control", func(m fakeMem) { putStr(m, 0xa000, 1, false, 2, []rune{'a', 0x9b}) }, ""},
		{"bidirectional override", func(m fakeMem) { putStr(m, 0xa000, 2, false, 2, []rune{'a', 0x202e}) }, ""},
		{"surrogate", func(m fakeMem) { putStr(m, 0xa000, 2, false, 2, []rune{'a', 0xd800}) }, ""},
		{"past U+10FFFF", func(m fakeMem) { putStr(m, 0xa000, 4, false, 1, []rune{0x110000}) }, ""},
		{"unreadable", func(m fakeMem) { m.u64(0x8000+layout312.codeQualname, 0xdead0000) }, ""},
		{"1,024 characters", func(m fakeMem) { putStr(m, 0xa000, 1, true, 1024, []rune(strings.Repeat("a", 1024))) }, strings.Repeat("a", 1024)},
		{"Latin-1", func(m fakeMem) { putStr(m, 0xa000, 1, false, 5, []rune("naïve")) }, "naïve"},
		{"two bytes a character", func(m fakeMem) { putStr(m, 0xa000, 2, false, 3, []rune("f函数")) }, "f函数"},
		{"four bytes a character", func(m fakeMem) { putStr(m, 0xa000, 4, false, 2, []rune("f😀")) }, "f😀"},
	} {
		m := synth312(3, func(i int) uint64 { return uint64(0x40000+(i+1)*0x100) * uint64(min(2-i, 1)) })
		c.write(m)
		th := readSynth(t, m)
		if th.End != "" || len(th.Frames) != 3 {
			t.Errorf("%s: %d frames, end %q (%s); want 3, whole", c.why, len(th.Frames), th.End, th.Detail)
			continue
		}
		for i, f := range th.Frames {
			if f.Function != c.want || f.File != "m.py" || f.Line != 11+i {
				t.Errorf("%s: frame %d is %.20q (%q:%d), want %.20q (m.py:%d)", c.why, i, f.Function, f.File, f.Line, c.want, 11+i)
			}
		}
	}
}

// TestAttachInvalidName: a frame without a name shows InvalidName, and
// the walk's notes reach warn.
func TestAttachInvalidName(t *testing.T) {
	tg := &target.Target{Contexts: []target.Context{{Kind: target.KindThread, TID: 7}}}
	var warned []string
	Attach(tg, &Stacks{Threads: []Thread{{TID: 7, Frames: []Frame{{File: "m.py", Line: 3}}}}, Notes: []string{"cut"}},
		func(s string) { warned = append(warned, s) })
	if st := tg.Contexts[0].Interp; len(st) != 1 || st[0].Entry != EvalFunction || len(st[0].Frames) != 1 ||
		st[0].Frames[0].Function != InvalidName || st[0].Frames[0].File != "m.py" {
		t.Errorf("frames %+v, want one %s in m.py", st, InvalidName)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "cut") {
		t.Errorf("warned %q, want the note", warned)
	}
}

// TestBudget: a walk that would read more than its budget stops with
// one note, the frames read so far kept.
func TestBudget(t *testing.T) {
	m := synth312(100, func(i int) uint64 { return uint64(0x40000+(i+1)*0x100) * uint64(min(99-i, 1)) })
	w := newWalker(&layout312, newCountMem(m))
	w.budget = 2000
	s, err := w.read(0x1000)
	if err != nil || len(s.Threads) != 1 {
		t.Fatalf("%v %+v", err, s)
	}
	th := s.Threads[0]
	if th.End != "budget" || len(th.Frames) == 0 || len(th.Frames) > 25 {
		t.Errorf("%d frames, end %q (%s); want a few, budget", len(th.Frames), th.End, th.Detail)
	}
	if len(w.notes) != 1 || !strings.Contains(w.notes[0], "budget") || w.spent > 2000 {
		t.Errorf("notes %q, %d bytes read; want one note, at most 2000", w.notes, w.spent)
	}
}

// TestLineIndex: the index gives every code unit the line Line does, on
// tables of random entries.
func TestLineIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		table := make([]byte, r.IntN(400))
		for i := range table {
			table[i] = byte(r.Uint32())
			if r.IntN(3) == 0 {
				table[i] |= 0x80
			}
		}
		first := r.IntN(1000)
		x := newLineIndex(table, first)
		for u := -2; u < 8*len(table)+10; u++ {
			if got, want := x.line(u), Line(table, first, u); got != want {
				t.Fatalf("table %x, first %d, unit %d: index says %d, Line %d", table, first, u, got, want)
			}
		}
	}
}

// FuzzHeap: any damage to a small interpreter heap (each 4-byte record
// of data writes byte data[3] at offset data[1] | data[2]&15 << 8 of the
// data[0]-th page) never panics, reads no more than the walk's budget nor
// more than maxRead at once, and shows no name that is not printable and
// at most maxString characters.
func FuzzHeap(f *testing.F) {
	// Pages by index: 0 runtime, 1 interpreter, 2 thread state and
	// cframe, 3 code object, 4 code type, 5 qualname and file name,
	// 6 location table, 7 str type, 8 frames.
	f.Add([]byte{})
	f.Add([]byte{5, 0x10, 0, 0xa0, 5, 0x11, 0, 0x0f}) // a long qualname claim
	f.Add([]byte{5, 0x28, 0, 0x1b, 5, 0x29, 0, 0x07}) // control characters in it
	f.Add([]byte{6, 0x10, 0, 0xff, 6, 0x12, 0, 0xff}) // the table's claim
	f.Add([]byte{3, 0x10, 0, 0x01, 3, 0x80, 0, 0x00}) // the code's units, its qualname
	f.Add([]byte{5, 0x20, 8, 0x04, 5, 0x28, 8, 0xe9}) // a kind-1, non-ASCII file name
	f.Add([]byte{8, 0x00, 0, 0x80, 8, 0x38, 0, 0x90}) // a frame's code, its instruction
	f.Add([]byte{2, 0x00, 8, 0x00, 7, 0x18, 0, 0x30}) // the thread's frame, the str type
	f.Fuzz(func(t *testing.T, data []byte) {
		m := synth312(4, func(i int) uint64 { return uint64(0x40000+(i+1)*0x100) * uint64(min(3-i, 1)) })
		var pages []uint64
		for p := range m {
			pages = append(pages, p)
		}
		slices.Sort(pages)
		for i := 0; i+3 < len(data) && i < 400; i += 4 {
			m[pages[int(data[i])%len(pages)]][int(data[i+1])|int(data[i+2]&15)<<8] = data[i+3]
		}
		c := newCountMem(m)
		rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
		s, _ := rt.Read(c)
		if c.bytes > maxBudget || c.most > maxRead {
			t.Fatalf("%d bytes read, %d at once", c.bytes, c.most)
		}
		if s == nil {
			return
		}
		for _, th := range s.Threads {
			for _, fr := range th.Frames {
				for _, name := range []string{fr.Function, fr.File} {
					if utf8.RuneCountInString(name) > maxString || !utf8.ValidString(name) || strings.IndexFunc(name, func(r rune) bool { return !printable(r) }) >= 0 {
						t.Fatalf("name %q shown", name)
					}
				}
			}
		}
	})
}

// TestManyClaimedTables: 500 code objects each claiming a 1 MiB table
// (the case that took 1 GB) read at most maxLinetable bytes of each.
func TestManyClaimedTables(t *testing.T) {
	// (The bound tested is in bytes: a slow machine must not cut the walk.)
	defer func(d time.Duration) { walkTime = d }(walkTime)
	walkTime = time.Hour
	const n, mib = 500, 1 << 20
	l := &layout312
	m := synthBig(n, mib, mib, 8*mib, func(i int) uint64 { return uint64(i) })
	hdr := make([]byte, l.codeSize)
	if err := m.ReadMemory(0x8000, hdr); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		co := uint64(0x100_0000 + i*0x100)
		m.put(co, hdr)
		m.u64(uint64(0x40000+i*0x100)+l.frameCode, co)
		m.u64(uint64(0x40000+i*0x100)+l.frameInstr, co+l.codeAdaptive+2*uint64(i))
	}
	c := newCountMem(m)
	rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
	s, err := rt.Read(c)
	if err != nil || len(s.Threads[0].Frames) != n {
		t.Fatalf("%v %+v", err, s)
	}
	if c.bytes > n*(maxLinetable+4096) {
		t.Errorf("%d bytes read, want at most %d a code object", c.bytes, maxLinetable+4096)
	}
	if len(s.Notes) != maxNotes+1 || s.Notes[maxNotes] != fmt.Sprintf("and %d more notes", n-maxNotes) {
		t.Errorf("%d notes, last %q; want %d and a count", len(s.Notes), s.Notes[len(s.Notes)-1], maxNotes)
	}
	t.Logf("%d code objects: %d bytes read", n, c.bytes)
}
