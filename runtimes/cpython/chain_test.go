package cpython

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// fakeMem is sparse memory: pages written by the test, the rest
// unreadable.
type fakeMem map[uint64][]byte // page address → 4 KiB

func (m fakeMem) put(addr uint64, b []byte) {
	for i, c := range b {
		a := addr + uint64(i)
		p := m[a&^4095]
		if p == nil {
			p = make([]byte, 4096)
			m[a&^4095] = p
		}
		p[a&4095] = c
	}
}

func (m fakeMem) u64(addr, v uint64) { m.put(addr, binary.LittleEndian.AppendUint64(nil, v)) }

func (m fakeMem) ReadMemory(addr uint64, p []byte) error {
	for i := range p {
		pg := m[(addr+uint64(i))&^4095]
		if pg == nil {
			return fmt.Errorf("unmapped %#x", addr+uint64(i))
		}
		p[i] = pg[(addr+uint64(i))&4095]
	}
	return nil
}

// synth312 lays out, with 3.12's layout, one interpreter with one thread
// state (tid 42) whose chain is n frames of one code object "f" in
// "m.py" (first line 10, each code unit one line further; 64 code units), frame i at
// 0x40000+i*0x100 and at code unit i; link(i) gives frame i's previous.
func synth312(n int, link func(i int) uint64) fakeMem {
	l := &layout312
	m := fakeMem{}
	const rt, interp, ts, cframe, codeAddr, typ, qual, file, table, strType = 0x1000, 0x2000, 0x3000, 0x3800, 0x8000, 0x9000, 0xa000, 0xa800, 0xb000, 0xc800
	m.u64(rt+l.runtimeInterps, interp)
	m.u64(interp+l.interpThreads, ts)
	m.u64(interp+l.interpNext, 0)
	m.u64(ts+l.tsNext, 0)
	m.u64(ts+l.tsNativeTID, 42)
	m.u64(ts+l.tsFrame, cframe)
	m.u64(cframe+l.cframeCurrent, 0x40000)
	m.u64(typ+l.tpName, 0x9800)
	m.put(0x9800, []byte("code\x00"))
	m.u64(codeAddr+l.obType, typ)
	m.u64(codeAddr+l.codeQualname, qual)
	m.u64(codeAddr+l.codeFile, file)
	m.u64(codeAddr+l.codeLinetable, table)
	m.put(codeAddr+l.codeFirstLine, []byte{10, 0, 0, 0})
	m.put(codeAddr+uint64(l.codeFirstTraceable), []byte{0, 0, 0, 0})
	m.u64(codeAddr+l.bytesSize, 64) // ob_size: code units
	m.u64(strType+l.tpName, strType+0x400)
	m.put(strType+0x400, []byte("str\x00\x00"))
	for addr, s := range map[uint64]string{qual: "f", file: "m.py"} {
		m.u64(addr+l.obType, strType)
		m.u64(addr+l.uniLength, uint64(len(s)))
		m.put(addr+l.uniState, []byte{1<<2 | 1<<5 | 1<<6, 0, 0, 0}) // kind 1, compact, ascii
		m.put(addr+l.asciiSize, []byte(s))
	}
	// One entry a code unit, each a line further (one-line form, delta 1).
	var lt []byte
	for range 64 {
		lt = append(lt, 0x80|11<<3, 1, 2)
	}
	m.u64(table+l.bytesSize, uint64(len(lt)))
	m.put(table+l.bytesData, lt)
	for i := range n {
		fr := uint64(0x40000 + i*0x100)
		m.u64(fr+l.frameCode, codeAddr)
		m.u64(fr+l.framePrev, link(i))
		m.u64(fr+l.frameInstr, codeAddr+l.codeAdaptive+uint64(2*i))
		m.put(fr+l.frameOwner, []byte{0})
	}
	return m
}

func readSynth(t *testing.T, m fakeMem) Thread {
	t.Helper()
	rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
	s, err := rt.Read(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Threads) != 1 || s.Threads[0].TID != 42 {
		t.Fatalf("threads %+v, want one, tid 42", s.Threads)
	}
	return s.Threads[0]
}

func TestChainWhole(t *testing.T) {
	th := readSynth(t, synth312(3, func(i int) uint64 {
		if i == 2 {
			return 0
		}
		return uint64(0x40000 + (i+1)*0x100)
	}))
	if th.End != "" || len(th.Frames) != 3 {
		t.Fatalf("got %+v, want 3 frames, whole", th)
	}
	for i, f := range th.Frames {
		// Code unit i is in the i-th entry: line 10 + (i+1).
		if f.Function != "f" || f.File != "m.py" || f.Line != 11+i {
			t.Errorf("frame %d: %+v, want f (m.py:%d)", i, f, 11+i)
		}
	}
}

// TestChainLoops: a chain whose last frame leads back to its first is
// cut there, its frames kept once.
func TestChainLoops(t *testing.T) {
	th := readSynth(t, synth312(4, func(i int) uint64 { return uint64(0x40000 + (i+1)%4*0x100) }))
	if th.End != "loop" || len(th.Frames) != 4 || !strings.Contains(th.Detail, "0x40000") {
		t.Fatalf("got %d frames, end %q (%s); want 4, loop at 0x40000", len(th.Frames), th.End, th.Detail)
	}
}

// TestChainTorn: a chain leading to unmapped memory (a frame freed and
// unmapped, a torn read) is cut there.
func TestChainTorn(t *testing.T) {
	th := readSynth(t, synth312(2, func(i int) uint64 {
		if i == 1 {
			return 0xdead0000
		}
		return 0x40100
	}))
	if th.End != "unreadable" || len(th.Frames) != 2 || !strings.Contains(th.Detail, "0xdead0000") {
		t.Fatalf("got %d frames, end %q (%s); want 2, unreadable at 0xdead0000", len(th.Frames), th.End, th.Detail)
	}
}

// TestChainNotCode: a frame whose code pointer leads to an object of
// another type (memory reused) ends the chain: no made-up frame.
func TestChainNotCode(t *testing.T) {
	m := synth312(2, func(i int) uint64 { return uint64(0x40000+(i+1)*0x100) * uint64(1-i) })
	m.u64(0x40100+layout312.frameCode, 0xc000)
	m.u64(0xc000+layout312.obType, 0xd000)
	m.u64(0xd000+layout312.tpName, 0xd800)
	m.put(0xd800, []byte("int\x00"))
	th := readSynth(t, m)
	if th.End != "not-code" || len(th.Frames) != 1 {
		t.Fatalf("got %d frames, end %q (%s); want 1, not-code", len(th.Frames), th.End, th.Detail)
	}
}

// TestChainEndless: a chain longer than maxFrames (a corrupted one
// through distinct addresses) is cut at the bound.
func TestChainEndless(t *testing.T) {
	th := readSynth(t, synth312(maxFrames+10, func(i int) uint64 { return uint64(0x40000 + (i+1)*0x100) }))
	if th.End != "depth-limit" || len(th.Frames) != maxFrames {
		t.Fatalf("got %d frames, end %q; want %d, depth-limit", len(th.Frames), th.End, maxFrames)
	}
}

// FuzzChain: damage anywhere in a runtime's structures (each 3-byte
// record of data writes byte data[2] at page offset data[1] of the
// data[0]-th page written) never panics, hangs or makes the walk exceed
// its bounds.
func FuzzChain(f *testing.F) {
	f.Add([]byte{0, 8, 0xff})
	f.Add([]byte{3, 0x46, 3, 5, 0x10, 0})
	f.Add([]byte{1, 0x48, 0x30, 2, 0x20, 0xff, 4, 0x88, 0x40})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := synth312(4, func(i int) uint64 { return uint64(0x40000+(i+1)*0x100) * uint64(min(3-i, 1)) })
		var pages []uint64
		for p := range m {
			pages = append(pages, p)
		}
		slices.Sort(pages)
		for i := 0; i+2 < len(data) && i < 300; i += 3 {
			m[pages[int(data[i])%len(pages)]][data[i+1]] = data[i+2]
		}
		rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
		s, _ := rt.Read(m)
		if s != nil {
			for _, th := range s.Threads {
				if len(th.Frames) > maxFrames {
					t.Fatalf("%d frames", len(th.Frames))
				}
			}
		}
	})
}

// FuzzDebugOffsets: any _Py_DebugOffsets is taken or refused, without
// panicking; a taken one passes check.
func FuzzDebugOffsets(f *testing.F) {
	good := make([]byte, debugOffsetsSize)
	copy(good, debugCookie)
	binary.LittleEndian.PutUint64(good[8:], 0x030d00f0)
	v := map[string]uint64{"pyobject.size": 16, "pyobject.ob_type": 8, "bytes_object.ob_size": 16, "bytes_object.ob_sval": 32,
		"unicode_object.length": 16, "unicode_object.state": 32, "code_object.size": 200, "unicode_object.asciiobject_size": 40}
	off := 24
	for _, st := range schemas()[13][0] {
		for _, f := range st {
			binary.LittleEndian.PutUint64(good[off:], v[f])
			off += 8
		}
	}
	f.Add(good)
	f.Add(good[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := fromDebugOffsets(b, 13)
		if err == nil && l.check() != nil {
			t.Fatal("taken but fails check")
		}
	})
}

// TestRefused: free-threaded builds (by their _Py_DebugOffsets flag) and
// versions without a known layout are refused with an UnsupportedError,
// and a runtime whose version is not its file's is an error.
func TestRefused(t *testing.T) {
	b := make([]byte, debugOffsetsSize)
	copy(b, debugCookie)
	for _, c := range []struct {
		hex, ft     uint64
		want        int
		unsupported string
	}{
		{0x030d00f0, 1, 13, "3.13t"},
		{0x030e00f0, 1, 14, "3.14t"},
		{0x030f00a1, 0, 15, "3.15"},
		{0x030e00f0, 0, 13, ""},
	} {
		binary.LittleEndian.PutUint64(b[8:], c.hex)
		binary.LittleEndian.PutUint64(b[16:], c.ft)
		_, err := fromDebugOffsets(b, c.want)
		ue, ok := err.(*UnsupportedError)
		switch {
		case c.unsupported == "" && (err == nil || ok):
			t.Errorf("%#x as 3.%d: %v, want a mismatch error", c.hex, c.want, err)
		case c.unsupported != "" && (!ok || ue.Version != c.unsupported):
			t.Errorf("%#x free-threaded %d: %v, want CPython %s unsupported", c.hex, c.ft, err, c.unsupported)
		}
	}
	// A free-threaded interpreter by its file name: refused.
	if m := pyName("libpython3.13t.so.1.0"); m == nil || m[3] != "t" {
		t.Errorf("libpython3.13t.so.1.0: %q", m)
	}
}
