package jitdump

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// builder writes a dump in one byte order, as the spec lays it out.
type order interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

type builder struct {
	o order
	b bytes.Buffer
}

func (w *builder) u32(v uint32) { w.b.Write(w.o.AppendUint32(nil, v)) }
func (w *builder) u64(v uint64) { w.b.Write(w.o.AppendUint64(nil, v)) }

func newBuilder(o order) *builder {
	w := &builder{o: o}
	w.u32(Magic)
	w.u32(1)
	w.u32(40)
	w.u32(62)
	w.u32(0)
	w.u32(4242)
	w.u64(1)
	w.u64(0)
	return w
}

// record writes a record of type id stamped ts around body.
func (w *builder) record(id uint32, ts uint64, body []byte) {
	w.u32(id)
	w.u32(uint32(16 + len(body)))
	w.u64(ts)
	w.b.Write(body)
}

func (w *builder) load(ts, addr, size, index uint64, name string) {
	var b []byte
	b = w.o.AppendUint32(b, 4242)
	b = w.o.AppendUint32(b, 4242)
	b = w.o.AppendUint64(b, addr)
	b = w.o.AppendUint64(b, addr)
	b = w.o.AppendUint64(b, size)
	b = w.o.AppendUint64(b, index)
	b = append(b, name...)
	b = append(b, 0)
	b = append(b, make([]byte, size)...) // the code
	w.record(CodeLoad, ts, b)
}

func (w *builder) move(ts, old, addr, size, index uint64) {
	var b []byte
	b = w.o.AppendUint32(b, 4242)
	b = w.o.AppendUint32(b, 4242)
	b = w.o.AppendUint64(b, addr)
	b = w.o.AppendUint64(b, old)
	b = w.o.AppendUint64(b, addr)
	b = w.o.AppendUint64(b, size)
	b = w.o.AppendUint64(b, index)
	w.record(CodeMove, ts, b)
}

func (w *builder) debug(ts, addr uint64, lines ...Line) {
	var b []byte
	b = w.o.AppendUint64(b, addr)
	b = w.o.AppendUint64(b, uint64(len(lines)))
	for _, l := range lines {
		b = w.o.AppendUint64(b, l.Addr)
		b = w.o.AppendUint32(b, uint32(l.Line))
		b = w.o.AppendUint32(b, 0)
		b = append(b, l.File...)
		b = append(b, 0)
	}
	w.record(CodeDebugInfo, ts, b)
}

// sample is a dump of every record type: two loads (the first with debug
// info and unwinding info), a move of the first, a load over the
// second's addresses, a record of an unknown type, and the close.
func sample(o order) []byte {
	w := newBuilder(o)
	w.debug(10, 0x1000, Line{0x1000, "/app.js", 2}, Line{0x1010, "\xff", 3}, Line{0x1008, "/lib.js", 7})
	var u []byte
	u = o.AppendUint64(u, 8)
	u = o.AppendUint64(u, 0)
	u = o.AppendUint64(u, 4096)
	u = append(u, "EHFRAME!"...)
	w.record(CodeUnwindingInfo, 10, u)
	w.load(10, 0x1000, 0x20, 1, "JS:*hot /app.js:2:15")
	w.load(20, 0x2000, 0x40, 2, "JS:~cold /app.js:9:1")
	w.record(99, 25, []byte("future"))
	w.move(30, 0x1000, 0x3000, 0x20, 1)
	w.load(40, 0x2010, 0x10, 3, "JS:*inner /app.js:12:3")
	w.record(CodeClose, 50, nil)
	w.b.WriteString("after the close, unread")
	return w.b.Bytes()
}

// TestParse reads every record type in both byte orders and looks code up
// as a profile would, at the samples' times, and as a live dump does, at
// the end.
func TestParse(t *testing.T) {
	for _, o := range []order{binary.LittleEndian, binary.BigEndian} {
		d, err := Parse(bytes.NewReader(sample(o)), 0, "sample")
		if err != nil {
			t.Fatal(err)
		}
		if d.BigEndian != (o == binary.BigEndian) || d.PID != 4242 || d.ElfMach != 62 || d.Skipped != 1 || d.Truncated || !d.Closed || len(d.Codes) != 4 {
			t.Fatalf("%v: header %+v, skipped %d, truncated %v, closed %v, %d codes", o, d.Header, d.Skipped, d.Truncated, d.Closed, len(d.Codes))
		}
		for _, c := range []struct {
			pc, t uint64
			want  string
		}{
			{0x1004, 5, ""}, // before its load
			{0x1004, 10, "JS:*hot /app.js:2:15"},
			{0x1004, 29, "JS:*hot /app.js:2:15"},
			{0x1004, 30, ""}, // moved away
			{0x3004, 30, "JS:*hot /app.js:2:15"},
			{0x2014, 39, "JS:~cold /app.js:9:1"},
			{0x2014, 40, "JS:*inner /app.js:12:3"}, // loaded over it
			{0x2030, 40, "JS:~cold /app.js:9:1"},
			{0x2014, ^uint64(0), "JS:*inner /app.js:12:3"},
			{0x1004, ^uint64(0), ""},
			{0x2040, ^uint64(0), ""},
		} {
			got := ""
			if code, ok := d.At(c.pc, c.t); ok {
				got = code.Name
			}
			if got != c.want {
				t.Errorf("%v: At(%#x, %d) = %q, want %q", o, c.pc, c.t, got, c.want)
			}
		}
		moved, _ := d.At(0x3014, ^uint64(0))
		for _, c := range []struct {
			pc   uint64
			file string
			line int
		}{{0x3000, "/app.js", 2}, {0x3009, "/lib.js", 7}, {0x3010, "/app.js", 3}, {0x301f, "/app.js", 3}} {
			if f, l, ok := moved.LineAt(c.pc); !ok || f != c.file || l != c.line {
				t.Errorf("%v: LineAt(%#x) = %s:%d %v, want %s:%d", o, c.pc, f, l, ok, c.file, c.line)
			}
		}
		if string(moved.EHFrame) != "EHFRAME!" {
			t.Errorf("%v: unwinding info %q", o, moved.EHFrame)
		}
		if name, start, ok := d.LookupJIT(0x3004); !ok || start != 0x3000 || name != "JS:*hot /app.js:2:15" {
			t.Errorf("%v: LookupJIT = %q %#x %v", o, name, start, ok)
		}
		if c, _ := d.At(0x2004, ^uint64(0)); c.Lines != nil || c.EHFrame != nil {
			t.Errorf("%v: the second load took the first's debug or unwinding info", o)
		}
	}
}

// TestBad: what is not a jitdump is an error naming the file and offset;
// a record that does not fit ends the reading, what came before kept; the
// limit cuts the reading.
func TestBad(t *testing.T) {
	good := sample(binary.LittleEndian)
	if _, err := Parse(bytes.NewReader([]byte("ELF\x7f not a dump at all, long enough for a header")), 0, "x.dump"); err == nil || !strings.Contains(err.Error(), "x.dump: offset 0") {
		t.Errorf("bad magic: %v", err)
	}
	if _, err := Parse(bytes.NewReader(good[:20]), 0, "x.dump"); err == nil {
		t.Error("short header: no error")
	}
	// The second load's record claims more than the file has.
	w := newBuilder(binary.LittleEndian)
	w.load(1, 0x1000, 0x10, 1, "a")
	at := w.b.Len()
	w.load(2, 0x2000, 0x10, 2, "b")
	b := w.b.Bytes()
	binary.LittleEndian.PutUint32(b[at+4:], 1<<20)
	d, err := Parse(bytes.NewReader(b), 0, "x.dump")
	if err != nil || !d.Truncated || len(d.Codes) != 1 {
		t.Errorf("record past the end: %v, truncated %v, %d codes", err, d != nil && d.Truncated, len(d.Codes))
	}
	binary.LittleEndian.PutUint32(b[at+4:], 3) // shorter than its header
	if d, err := Parse(bytes.NewReader(b), 0, "x.dump"); err != nil || !d.Truncated || len(d.Codes) != 1 {
		t.Errorf("record of 3 bytes: %v", err)
	}
	d, err = Parse(bytes.NewReader(good), int64(at), "x.dump")
	if err != nil || !d.Truncated || len(d.Codes) > 1 {
		t.Errorf("limit %d: %v, truncated %v, %d codes", at, err, d != nil && d.Truncated, len(d.Codes))
	}
	if d, err := Parse(bytes.NewReader(good), int64(len(good)), "x.dump"); err != nil || d.Truncated {
		t.Errorf("limit of the file's size: %v, truncated %v", err, d.Truncated)
	}
}

// TestOpenRefuses: a dump that is a FIFO is refused without blocking, and
// so is one owned by another user than the process's or root.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "jit-1.dump")
	if err := os.WriteFile(path, sample(binary.LittleEndian), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := Open(path, os.Geteuid()); err != nil || len(d.Codes) != 4 {
		t.Fatalf("own dump: %v", err)
	}
	fifo := filepath.Join(dir, "jit-2.dump")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(fifo, -1); err == nil {
		t.Error("FIFO opened")
	}
	if os.Geteuid() != 0 {
		t.Skip("changing the dump's owner needs root")
	}
	if err := os.Chown(path, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, 12345); err != nil {
		t.Errorf("dump of the process's user: %v", err)
	}
	if _, err := Open(path, 23456); !errors.Is(err, ErrNotOwned) {
		t.Errorf("dump of uid 12345 for a process of uid 23456: %v, want refused", err)
	}
}

// FuzzParse: any bytes parse without a panic, and every code found is
// one that holds the address.
func FuzzParse(f *testing.F) {
	f.Add(sample(binary.LittleEndian))
	f.Add(sample(binary.BigEndian))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse(bytes.NewReader(b), 1<<20, "fuzz")
		if err != nil {
			return
		}
		for _, c := range d.Codes {
			if c.End <= c.Start {
				t.Fatalf("code %+v", c)
			}
			live := c.Until == 0 || c.Until > c.From // (not moved at its load's time)
			for _, pc := range []uint64{c.Start, c.End - 1} {
				if got, ok := d.At(pc, c.From); live && !ok || ok && (pc < got.Start || pc >= got.End) {
					t.Fatalf("At(%#x) = %+v, %v", pc, got, ok)
				}
				d.LookupJITLine(pc)
			}
		}
	})
}
