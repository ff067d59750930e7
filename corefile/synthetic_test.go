package corefile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/regs"
)

// writeTemp writes data to a file in a fresh temporary directory.
func writeTemp(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeOpener serves fakeSO for "/lib/fake.so" and counts opens.
func fakeOpener(opens *int) func(string) (io.ReaderAt, error) {
	return func(path string) (io.ReaderAt, error) {
		*opens++
		if path == "/lib/fake.so" {
			return bytes.NewReader(fakeSO), nil
		}
		return nil, os.ErrNotExist
	}
}

func TestSyntheticCore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bo       binary.ByteOrder
		pageSize uint64
	}{
		{"kernel-style", binary.LittleEndian, 4096},
		{"gcore-style", binary.LittleEndian, 1},
		{"big-endian", binary.BigEndian, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTemp(t, "core", sampleCore(tc.bo, tc.pageSize))
			c, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Arch != regs.AMD64 || c.PID != 100 || c.Name != "fake" || c.Args != "./fake --flag" || c.Exe != "/lib/fake.so" {
				t.Errorf("arch %v pid %d name %q args %q exe %q", c.Arch, c.PID, c.Name, c.Args, c.Exe)
			}
			if len(c.Threads) != 2 || c.Threads[0].TID != 100 || c.Threads[0].Signal != 11 || c.Threads[1].TID != 101 {
				t.Fatalf("threads %+v", c.Threads)
			}
			// pr_reg slot i holds base+i: check the DWARF mapping.
			r := &c.Threads[1].Regs
			for _, x := range []struct {
				dwarf int
				slot  uint64
			}{{regs.AMD64RIP, 16}, {regs.AMD64RSP, 19}, {regs.AMD64RBP, 4}, {regs.AMD64RAX, 10},
				{regs.AMD64RDX, 12}, {regs.AMD64RCX, 11}, {regs.AMD64RBX, 5}, {regs.AMD64RSI, 13},
				{regs.AMD64RDI, 14}, {8, 9}, {9, 8}, {12, 3}, {15, 0}} {
				if v, ok := r.Get(x.dwarf); !ok || v != 0x2000+x.slot {
					t.Errorf("reg %s = %#x %v, want %#x", regs.AMD64.RegName(x.dwarf), v, ok, 0x2000+x.slot)
				}
			}
			if c.Auxv[AtEntry] != 0x401000 || c.Auxv[AtSysinfoEhdr] != 0x7000 || len(c.Auxv) != 3 {
				t.Errorf("auxv %v", c.Auxv)
			}
			if len(c.Mappings) != 2 || c.Mappings[1].Offset != 0x2000 || c.Mappings[1].Path != "/lib/fake.so" {
				t.Errorf("mappings %+v", c.Mappings)
			}
			opens := 0
			c.SetFileOpener(fakeOpener(&opens))
			// Spans the dumped first page and the undumped rest of the
			// file-backed segment, then the anonymous segment.
			buf := make([]byte, 0x3010)
			if err := c.ReadMemory(0x400ff0, buf); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:0x2010], fakeSO[0xff0:]) {
				t.Errorf("file-backed bytes differ")
			}
			if !bytes.Equal(buf[0x2010:], bytes.Repeat([]byte{0xaa}, 0x1000)) {
				t.Errorf("anonymous bytes differ")
			}
			// No PT_LOAD at all (as gcore writes for text): NT_FILE only.
			if err := c.ReadMemory(0x500100, buf[:16]); err != nil || !bytes.Equal(buf[:16], fakeSO[0x2100:0x2110]) {
				t.Errorf("gcore-style fallback: %x %v", buf[:16], err)
			}
			if opens != 1 {
				t.Errorf("file opened %d times, want once", opens)
			}
			if err := c.ReadMemory(0x7000, buf[:4]); err != nil || string(buf[:4]) != elf.ELFMAG {
				t.Errorf("vdso: %q %v", buf[:4], err)
			}
			for _, e := range []struct {
				addr uint64
				n    int
				want string
			}{
				{0x600010, 4, "address 0x600010: not dumped in the core and not backed by a mapped file"},
				{0x10, 4, "address 0x10: not in the core"},
				{0x403ffe, 4, "address 0x404000: not in the core"},
				{0x500ffe, 4, "address 0x501000: not in the core"},
			} {
				err := c.ReadMemory(e.addr, make([]byte, e.n))
				if err == nil || !strings.Contains(err.Error(), "corefile: "+path+": "+e.want) {
					t.Errorf("ReadMemory(%#x): %v, want %q", e.addr, err, e.want)
				}
			}
		})
	}
}

func TestMappedFileErrors(t *testing.T) {
	path := writeTemp(t, "core", sampleCore(binary.LittleEndian, 4096))
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetFileOpener(func(string) (io.ReaderAt, error) { return nil, errors.New("no sysroot") })
	err = c.ReadMemory(0x401000, make([]byte, 8))
	if err == nil || !strings.Contains(err.Error(), "address 0x401000: mapped file /lib/fake.so: no sysroot") {
		t.Errorf("err = %v", err)
	}

	// A different file under the same name is refused by its ELF header.
	c2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	other := bytes.Clone(fakeSO)
	other[40] ^= 1
	c2.SetFileOpener(func(string) (io.ReaderAt, error) { return bytes.NewReader(other), nil })
	err = c2.ReadMemory(0x401000, make([]byte, 8))
	if err == nil || !strings.Contains(err.Error(), "ELF header differs") {
		t.Errorf("err = %v", err)
	}

	// A file shorter than the mapping.
	c3, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	c3.SetFileOpener(func(string) (io.ReaderAt, error) { return bytes.NewReader(fakeSO[:0x1800]), nil })
	err = c3.ReadMemory(0x401000, make([]byte, 0x1000))
	if err == nil || !strings.Contains(err.Error(), "offset 0x1000: unexpected EOF") {
		t.Errorf("err = %v", err)
	}
}

func TestARM64Core(t *testing.T) {
	bo := binary.LittleEndian
	reg := make([]uint64, 34)
	for i := range reg {
		reg[i] = uint64(0x100 + i)
	}
	path := writeTemp(t, "core", buildCore(testCore{
		machine: elf.EM_AARCH64,
		notes:   []testNote{{"CORE", ntPrstatus, prstatus64(bo, 7, 6, reg)}},
	}))
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Arch != regs.ARM64 || len(c.Threads) != 1 || c.PID != 7 {
		t.Fatalf("arch %v threads %+v pid %d", c.Arch, c.Threads, c.PID)
	}
	r := &c.Threads[0].Regs
	for i := 0; i < 33; i++ {
		if v, ok := r.Get(i); !ok || v != uint64(0x100+i) {
			t.Errorf("reg %d = %#x %v", i, v, ok)
		}
	}
	if pc, _ := r.PC(); pc != 0x100+32 {
		t.Errorf("pc %#x", pc)
	}
}

// core32 builds a small i386 core.
func core32() []byte {
	bo := binary.LittleEndian
	pr := make([]byte, 144)
	bo.PutUint16(pr[12:], 5)
	bo.PutUint32(pr[24:], 42)
	ps := make([]byte, 124)
	bo.PutUint32(ps[12:], 42)
	copy(ps[28:], "tiny")
	copy(ps[44:], "tiny -x")
	aux := make([]byte, 24)
	bo.PutUint32(aux[0:], AtEntry)
	bo.PutUint32(aux[4:], 0x8048000)
	return buildCore(testCore{
		class: elf.ELFCLASS32, machine: elf.EM_386,
		notes: []testNote{{"CORE", ntPrstatus, pr}, {"CORE", ntPrpsinfo, ps}, {"CORE", ntAuxv, aux}},
		loads: []testLoad{{vaddr: 0x8048000, memsz: 0x1000, data: []byte("hello")}},
	})
}

func TestCore32(t *testing.T) {
	path := writeTemp(t, "core", core32())
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Arch != regs.Unknown || c.PID != 42 || c.Name != "tiny" || c.Args != "tiny -x" || len(c.Threads) != 1 ||
		c.Threads[0].TID != 42 || c.Threads[0].Signal != 5 || c.Auxv[AtEntry] != 0x8048000 || c.Exe != "tiny" {
		t.Errorf("core %+v", c)
	}
	b := make([]byte, 5)
	if err := c.ReadMemory(0x8048000, b); err != nil || string(b) != "hello" {
		t.Errorf("ReadMemory %q %v", b, err)
	}
}

func TestBadCores(t *testing.T) {
	good := sampleCore(binary.LittleEndian, 4096)
	bo := binary.LittleEndian
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not an ELF file"},
		{"not core", mut(func(b []byte) []byte { bo.PutUint16(b[16:], uint16(elf.ET_DYN)); return b }), "not a core file (type ET_DYN)"},
		{"phnum huge", mut(func(b []byte) []byte { bo.PutUint16(b[56:], 0xfff0); return b }), "program headers of 56 bytes do not fit"},
		{"pn_xnum no shdr", mut(func(b []byte) []byte { bo.PutUint16(b[56:], 0xffff); return b }), "PN_XNUM"},
		{"phentsize small", mut(func(b []byte) []byte { bo.PutUint16(b[54:], 8); return b }), "program header size 8"},
		{"note too large", mut(func(b []byte) []byte { bo.PutUint64(b[64+32:], 1<<40); return b }), "PT_NOTE+0x0: file offset 0x"},
		{"note desc overrun", mut(func(b []byte) []byte { bo.PutUint32(b[64+5*56+4:], 1<<30); return b }), "note at file offset 0x"},
		{"truncated", good[:100], "do not fit in the file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeTemp(t, "core", c.data)
			_, err := Open(path)
			if err == nil || !strings.Contains(err.Error(), "corefile: "+path+": ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
	// A PT_NOTE past the end of the file is a core cut short before its
	// notes: it opens, with no thread, and says where the notes were.
	past := writeTemp(t, "core", mut(func(b []byte) []byte { bo.PutUint64(b[64+8:], 1<<40); return b }))
	if c, err := Open(past); err != nil {
		t.Errorf("note past EOF: %v", err)
	} else {
		if at, _, cut := c.NotesCut(); !cut || at != 1<<40 || len(c.Threads) != 0 {
			t.Errorf("note past EOF: NotesCut() = %#x, %v with %d threads", at, cut, len(c.Threads))
		}
		c.Close()
	}
	// A core cut short inside its segment data still opens; the missing
	// bytes are reported as cut off by the truncation (not as "not
	// dumped", which blames the dumper), and Truncated gives both sizes.
	notes := bytes.Index(good, bytes.Repeat([]byte{0xaa}, 16))
	path := writeTemp(t, "core", good[:notes+8])
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 16)
	if err := c.ReadMemory(0x403000, b); err == nil || !strings.Contains(err.Error(), "address 0x403008: cut off: the core is truncated") {
		t.Errorf("truncated segment: %v", err)
	}
	if want, have, bad := c.Truncated(); !bad || have != int64(notes+8) || want != int64(len(good)) {
		t.Errorf("Truncated() = %d, %d, %v; want %d, %d, true", want, have, bad, len(good), notes+8)
	}
}

// TestTruncatedCores opens every prefix of the sample core: none may panic.
func TestTruncatedCores(t *testing.T) {
	good := sampleCore(binary.LittleEndian, 4096)
	dir := t.TempDir()
	path := filepath.Join(dir, "core")
	for n := 0; n < len(good); n += 7 {
		if err := os.WriteFile(path, good[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Open(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "corefile: "+path+": ") {
				t.Fatalf("len %d: %v", n, err)
			}
			continue
		}
		exerciseCore(c)
		c.Close()
	}
}

// exerciseCore reads around every segment and mapping.
func exerciseCore(c *Core) {
	opens := 0
	c.SetFileOpener(fakeOpener(&opens))
	b := make([]byte, 64)
	for _, s := range c.segs {
		c.ReadMemory(s.vaddr, b)
		c.ReadMemory(s.vaddr+s.memsz-32, b)
	}
	for _, m := range c.Mappings {
		c.ReadMemory(m.Start, b)
		c.ReadMemory(m.End-1, b[:1])
	}
	c.ReadMemory(^uint64(0)-10, b[:11])
}

// TestConcurrentReads races ReadMemory's file cache (run with -race).
func TestConcurrentReads(t *testing.T) {
	c, err := Open(writeTemp(t, "core", sampleCore(binary.LittleEndian, 4096)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetFileOpener(func(path string) (io.ReaderAt, error) { return bytes.NewReader(fakeSO), nil })
	errs := make(chan error)
	for i := 0; i < 8; i++ {
		go func(i int) {
			b := make([]byte, 32)
			err := c.ReadMemory(0x401000+uint64(i)*64, b)
			if err == nil && !bytes.Equal(b, fakeSO[0x1000+i*64:][:32]) {
				err = errors.New("wrong bytes")
			}
			errs <- err
		}(i)
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
