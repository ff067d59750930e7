package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"github.com/rewindstack/rewind/internal/elfdata"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// corruptCopy copies exe and lets damage rewrite the bytes of one section
// (its file contents as stored, compressed or not).
func corruptCopy(t testing.TB, exe, section string, damage func(b []byte)) string {
	t.Helper()
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	s := ef.Section(section)
	ef.Close()
	if s == nil || s.Type == elf.SHT_NOBITS {
		t.Fatalf("%s has no %s", exe, section)
	}
	damage(data[s.Offset : s.Offset+s.FileSize])
	out := filepath.Join(t.TempDir(), filepath.Base(exe))
	if err := os.WriteFile(out, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// physicalNames symbolizes every instruction of exe's functions and
// returns the physical names; it fails the test if anything panics.
func physicalNames(t *testing.T, exe string, addrs []uint64) []string {
	t.Helper()
	space, bias := loadSpace(t, exe)
	sym := &Symbolizer{Inlines: true, Cache: NewCache(), DebugDirs: []string{}}
	names := make([]string, len(addrs))
	for i, a := range addrs {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s: symbolizing %#x panicked: %v", exe, a, p)
				}
			}()
			locs := testFrameAt(sym, space, testFrame{PC: a + bias, Exact: true})
			names[i] = locs[len(locs)-1].Function
		}()
	}
	return names
}

// TestCorruptDebugInfo damages the DWARF sections of a -O2 -g binary in
// several ways (zeroed, all ones, random bytes, scattered byte flips, a
// section header claiming more than the file holds) and checks that
// symbolizing every instruction neither panics nor loses the symbol
// table's names: DWARF problems fall back to symbols.
func TestCorruptDebugInfo(t *testing.T) {
	exe := buildC(t, "gcc", "inline.c", "-O2", "-g", "-gdwarf-5")
	var addrs []uint64
	for _, in := range disassemble(t, exe, "main", "mid", "leaf") {
		addrs = append(addrs, in.addr)
	}
	want := physicalNames(t, exe, addrs)
	rnd := rand.New(rand.NewSource(1))
	damages := map[string]func([]byte){
		"zero": func(b []byte) { clear(b) },
		"ones": func(b []byte) {
			for i := range b {
				b[i] = 0xff
			}
		},
		"random": func(b []byte) { rnd.Read(b) },
		"flips": func(b []byte) {
			for i := 0; i < 1+len(b)/50; i++ {
				b[rnd.Intn(len(b))] ^= byte(1 + rnd.Intn(255))
			}
		},
		"truncated-unit": func(b []byte) {
			// The first unit claims to be longer than the section.
			if len(b) >= 4 {
				binary.LittleEndian.PutUint32(b, uint32(len(b)*4))
			}
		},
	}
	for _, sec := range []string{".debug_info", ".debug_line", ".debug_abbrev", ".debug_rnglists", ".debug_line_str"} {
		for name, damage := range damages {
			for round := 0; round < 3; round++ {
				bad := corruptCopy(t, exe, sec, damage)
				got := physicalNames(t, bad, addrs)
				for i := range addrs {
					if got[i] != want[i] {
						t.Errorf("%s %s: %#x is %q, was %q", sec, name, addrs[i], got[i], want[i])
						break
					}
				}
			}
		}
	}
	// A section that claims more bytes than the file has.
	data, _ := os.ReadFile(exe)
	ef, _ := elf.Open(exe)
	info := ef.Section(".debug_info")
	shoff := binary.LittleEndian.Uint64(data[0x28:])
	for i, s := range ef.Sections {
		if s == info {
			hdr := shoff + uint64(i)*64
			binary.LittleEndian.PutUint64(data[hdr+32:], uint64(len(data))*2) // sh_size
		}
	}
	ef.Close()
	long := filepath.Join(t.TempDir(), "long")
	os.WriteFile(long, data, 0o755)
	physicalNames(t, long, addrs)
}

// TestCorruptGoTable damages a Go binary's pcln table; lookups must not
// panic (names may be wrong: they come from that table).
func TestCorruptGoTable(t *testing.T) {
	exe := buildGo(t)
	f, err := elfobjOpen(exe)
	if err != nil {
		t.Fatal(err)
	}
	mainAddr, _ := f.SymbolByName("main.main")
	f.Close()
	var addrs []uint64
	for a := mainAddr; a < mainAddr+0x400; a += 3 {
		addrs = append(addrs, a)
	}
	rnd := rand.New(rand.NewSource(2))
	for round := 0; round < 20; round++ {
		bad := corruptCopy(t, exe, ".gopclntab", func(b []byte) {
			skip := 0
			if round%2 == 0 {
				skip = 64 // keep the header valid half the time
			}
			for i := 0; i < 1+len(b)/(100*(round+1)); i++ {
				b[skip+rnd.Intn(len(b)-skip)] = byte(rnd.Intn(256))
			}
		})
		physicalNames(t, bad, addrs)
	}
}

// fuzzSections reads the DWARF sections of a freshly compiled binary.
func fuzzSections(f *testing.F) (map[string][]byte, []uint64) {
	exe := buildC(f, "gcc", "inline.c", "-O2", "-g")
	ef, err := elf.Open(exe)
	if err != nil {
		f.Fatal(err)
	}
	defer ef.Close()
	secs := map[string][]byte{}
	for _, name := range append([]string{"aranges"}, debugSections...) {
		if s := ef.Section(".debug_" + name); s != nil {
			b, err := elfdata.Section(s)
			if err != nil {
				f.Fatal(err)
			}
			secs[name] = b
		}
	}
	var pcs []uint64
	for _, in := range disassemble(f, exe, "main", "mid", "leaf") {
		pcs = append(pcs, in.addr)
	}
	return secs, pcs
}

// FuzzDWARF overwrites bytes of .debug_info, .debug_line, .debug_abbrev
// or .debug_aranges and looks up every instruction: nothing may panic.
func FuzzDWARF(f *testing.F) {
	secs, pcs := fuzzSections(f)
	f.Add(uint8(0), uint32(0), []byte{0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(1), uint32(40), []byte{0x80, 0x80, 0x80, 0x80, 0x80})
	f.Add(uint8(2), uint32(3), []byte{0})
	f.Add(uint8(0), uint32(12), []byte{0x2e, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, which uint8, off uint32, patch []byte) {
		name := []string{"info", "line", "abbrev", "aranges"}[int(which)%4]
		mod := map[string][]byte{}
		for k, v := range secs {
			mod[k] = v
		}
		b := append([]byte(nil), secs[name]...)
		if len(b) == 0 {
			return
		}
		copy(b[int(off)%len(b):], patch)
		mod[name] = b
		ix := newDWARFIndex(sourceOf(mod, binary.LittleEndian), nil)
		for _, pc := range pcs {
			ix.lookup(pc)
		}
	})
}
