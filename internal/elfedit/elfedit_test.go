package elfedit

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

// probe prints, for the main program and for libprobe.so, the size and
// first bytes of their PT_GNU_SFRAME segment as the dynamic loader (or,
// statically linked, libc from AT_PHDR) reports it: proof that the new
// program headers are found at run time and the segment is mapped.
const probeC = `#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <string.h>
int lib(void);
static int cb(struct dl_phdr_info *info, size_t size, void *data) {
	const char *name = info->dlpi_name;
	int main_obj = (*(int *)data)++ == 0;
	if (!main_obj && !strstr(name, "libprobe"))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type != 0x6474e554)
			continue;
		const unsigned char *b = (const unsigned char *)(info->dlpi_addr + p->p_vaddr);
		printf("%s: %zu bytes:", main_obj ? "main" : "lib", (size_t)p->p_memsz);
		for (size_t j = 0; j < p->p_memsz && j < 8; j++)
			printf(" %02x", b[j]);
		printf("\n");
		return 0;
	}
	printf("%s: none\n", main_obj ? "main" : "lib");
	return 0;
}
int main(void) {
	int n = 0;
	dl_iterate_phdr(cb, &n);
	return lib() == 42 ? 0 : 1;
}
`

const libC = `int lib(void) { return 42; }`

// buildProbes compiles the probe program as a PIE, a fixed-address
// executable and a static executable, and the library it uses.
func buildProbes(t *testing.T, dir string) (exes []string, lib string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatalf("gcc is needed to build the test programs: %v", err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gcc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	src, libSrc := write("probe.c", probeC), write("lib.c", libC)
	lib = filepath.Join(dir, "libprobe.so")
	gcc("-O2", "-shared", "-fPIC", "-o", lib, libSrc)
	for _, v := range []struct{ name, flag string }{{"pie", "-pie"}, {"nopie", "-no-pie"}} {
		exe := filepath.Join(dir, "probe-"+v.name)
		gcc("-O2", v.flag, "-o", exe, src, "-L"+dir, "-lprobe", "-Wl,-rpath,$ORIGIN")
		exes = append(exes, exe)
	}
	exe := filepath.Join(dir, "probe-static")
	gcc("-O2", "-static", "-o", exe, src, libSrc)
	exes = append(exes, exe)
	return exes, lib
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(0xa0 + i)
	}
	return b
}

// addTo adds a section of n bytes (contents from payload) to the file at
// path in place.
func addTo(t *testing.T, path string, n int, load bool) *Result {
	t.Helper()
	in, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, res, err := AddSection(in, Section{Name: ".probe", Type: elf.SHT_PROGBITS, Align: 8, Size: uint64(n),
		Contents: func(uint64) ([]byte, error) { return payload(n), nil },
		Load:     load, Segment: elf.ProgType(0x6474e554), SegmentAlign: 8})
	if err != nil {
		t.Fatal(err)
	}
	checkStructure(t, in, out, res, ".probe", n)
	if err := os.WriteFile(path, out, 0o755); err != nil {
		t.Fatal(err)
	}
	return res
}

// checkStructure verifies the output with debug/elf: every original
// section keeps its bytes, the new one holds the payload, and a loaded
// section lies in a PT_LOAD and is covered exactly by the new segment.
func checkStructure(t *testing.T, in, out []byte, res *Result, name string, n int) {
	t.Helper()
	a, err := elf.NewFile(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	b, err := elf.NewFile(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("debug/elf rejects the output: %v", err)
	}
	if len(b.Sections) != len(a.Sections)+1 {
		t.Fatalf("%d sections, want %d", len(b.Sections), len(a.Sections)+1)
	}
	for i, s := range a.Sections {
		x, y := s, b.Sections[i]
		if x.Type == elf.SHT_STRTAB && i == int(a.ByteOrder.Uint16(in[62:])) {
			// The section name table grows by the new name.
			d1, _ := x.Data()
			d2, _ := y.Data()
			if !bytes.HasPrefix(d2, d1) {
				t.Errorf("section name table: old names not kept")
			}
			continue
		}
		if x.Name != y.Name || x.Addr != y.Addr || x.Size != y.Size || x.Flags != y.Flags {
			t.Errorf("section %d changed: %+v -> %+v", i, x.SectionHeader, y.SectionHeader)
		}
		if x.Type != elf.SHT_NOBITS {
			d1, _ := x.Data()
			d2, _ := y.Data()
			if !bytes.Equal(d1, d2) {
				t.Errorf("section %s: contents changed", x.Name)
			}
		}
	}
	s := b.Section(name)
	if s == nil {
		t.Fatalf("no %s section", name)
	}
	if d, _ := s.Data(); !bytes.Equal(d, payload(n)) {
		t.Errorf("%s contents differ", name)
	}
	if s.Offset != res.Offset || s.Addr != res.Addr {
		t.Errorf("new section at offset %#x addr %#x, result says %#x %#x", s.Offset, s.Addr, res.Offset, res.Addr)
	}
	if !res.Loaded {
		if s.Flags&elf.SHF_ALLOC != 0 || s.Addr != 0 {
			t.Errorf("unloaded section has flags %v addr %#x", s.Flags, s.Addr)
		}
		return
	}
	var inLoad, seg bool
	var prevLoad uint64
	for _, p := range b.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			if p.Vaddr < prevLoad {
				t.Errorf("PT_LOAD segments out of address order")
			}
			prevLoad = p.Vaddr
			if p.Vaddr <= s.Addr && s.Addr+s.Size <= p.Vaddr+p.Filesz && p.Off+(s.Addr-p.Vaddr) == s.Offset {
				inLoad = true
			}
			if p.Vaddr%p.Align != p.Off%p.Align {
				t.Errorf("PT_LOAD at %#x: address and offset not congruent modulo %#x", p.Vaddr, p.Align)
			}
		case elf.ProgType(0x6474e554), elf.PT_NOTE:
			seg = seg || p.Vaddr == s.Addr && p.Off == s.Offset && p.Filesz == s.Size && p.Memsz == s.Size
		case elf.PT_PHDR:
			if p.Off != b.ByteOrder.Uint64(out[32:]) || p.Filesz != uint64(len(b.Progs))*phdrSize {
				t.Errorf("PT_PHDR does not describe the program header table")
			}
		}
	}
	if !inLoad || !seg {
		t.Errorf("loaded section: in a PT_LOAD %v, covered by the new segment %v", inLoad, seg)
	}
}

// TestAddSectionRuns adds a loaded section to PIE, non-PIE and static
// executables and to a shared library, runs them, and checks the program
// finds the segment at run time with the right bytes (and that readelf
// reads the result without a warning).
func TestAddSectionRuns(t *testing.T) {
	dir := t.TempDir()
	exes, lib := buildProbes(t, dir)
	run := func(exe string) string {
		t.Helper()
		out, err := exec.Command(exe).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", filepath.Base(exe), err, out)
		}
		return string(out)
	}
	for _, exe := range exes {
		if got := run(exe); !strings.Contains(got, "main: none") {
			t.Fatalf("%s before: %q", filepath.Base(exe), got)
		}
	}
	for i, p := range append([]string{lib}, exes...) {
		n := 100 + 37*i
		res := addTo(t, p, n, true)
		if !res.Loaded {
			t.Fatalf("%s: not loaded: %s", filepath.Base(p), res.Note)
		}
		re := exec.Command("readelf", "-lSW", p)
		var stderr bytes.Buffer
		re.Stderr = &stderr
		if err := re.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("readelf -lSW %s: %v %s", filepath.Base(p), err, stderr.String())
		}
	}
	for i, exe := range exes {
		want := fmt.Sprintf("main: %d bytes: a0 a1 a2 a3 a4 a5 a6 a7\n", 100+37*(i+1))
		if !strings.HasSuffix(exe, "static") {
			want += "lib: 100 bytes: a0 a1 a2 a3 a4 a5 a6 a7\n"
		} else {
			want += "" // a static program has no libprobe.so
		}
		if got := run(exe); got != want {
			t.Errorf("%s after: got\n%swant\n%s", filepath.Base(exe), got, want)
		}
	}
}

// TestAddSectionUnloaded: a relocatable object gets the section without
// a segment, and a note says why; a second section of the same name is
// refused.
func TestAddSectionUnloaded(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "a.c")
	obj := filepath.Join(dir, "a.o")
	os.WriteFile(src, []byte(libC), 0o644)
	if out, err := exec.Command("gcc", "-c", "-o", obj, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	res := addTo(t, obj, 33, true)
	if res.Loaded || !strings.Contains(res.Note, "ET_REL") {
		t.Errorf("relocatable object: loaded %v, note %q", res.Loaded, res.Note)
	}
	in, _ := os.ReadFile(obj)
	_, _, err := AddSection(in, Section{Name: ".probe", Size: 1, Contents: func(uint64) ([]byte, error) { return []byte{1}, nil }})
	if !errors.Is(err, ErrExists) {
		t.Errorf("adding .probe twice: %v", err)
	}
	// Contents of the wrong size are an error, not a corrupt file.
	_, _, err = AddSection(in, Section{Name: ".x", Size: 4, Contents: func(uint64) ([]byte, error) { return []byte{1}, nil }})
	if err == nil {
		t.Error("contents shorter than Size accepted")
	}
}

// TestAddSectionPadding: the new segment must start past a large .bss; a
// gap larger than MaxPadding makes the section unloaded, with a note.
func TestAddSectionPadding(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bss.c")
	os.WriteFile(src, []byte("char big[100<<20]; int main(void) { return big[12345]; }\n"), 0o644)
	exe := filepath.Join(dir, "bss")
	if out, err := exec.Command("gcc", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	res := addTo(t, exe, 16, true)
	if res.Loaded || !strings.Contains(res.Note, "padding") {
		t.Errorf("100 MiB .bss: loaded %v, note %q", res.Loaded, res.Note)
	}
	if out, err := exec.Command(exe).CombinedOutput(); err != nil {
		t.Errorf("the program no longer runs: %v\n%s", err, out)
	}
}

// fuzzSeed is a minimal executable: ELF header, PT_PHDR and PT_LOAD, and
// sections .text and .shstrtab.
func fuzzSeed(order binary.ByteOrder, withPhdrs bool) []byte {
	const phoff, text, nph = 64, 64 + 2*56, 2
	shstr := []byte("\x00.text\x00.shstrtab\x00")
	code := []byte{0x31, 0xc0, 0xc3, 0x90}
	shoff := text + len(code) + len(shstr)
	b := make([]byte, shoff+3*64)
	copy(b, elf.ELFMAG)
	b[4], b[6] = byte(elf.ELFCLASS64), 1
	b[5] = byte(elf.ELFDATA2LSB)
	if order == binary.BigEndian {
		b[5] = byte(elf.ELFDATA2MSB)
	}
	order.PutUint16(b[16:], uint16(elf.ET_EXEC))
	order.PutUint16(b[18:], uint16(elf.EM_X86_64))
	order.PutUint32(b[20:], 1)
	order.PutUint64(b[24:], 0x400000+text)
	if withPhdrs {
		order.PutUint64(b[32:], phoff)
		order.PutUint16(b[54:], 56)
		order.PutUint16(b[56:], nph)
	}
	order.PutUint64(b[40:], uint64(shoff))
	order.PutUint16(b[52:], 64)
	order.PutUint16(b[58:], 64)
	order.PutUint16(b[60:], 3)
	order.PutUint16(b[62:], 2)
	if withPhdrs {
		(&phdr{typ: elf.PT_PHDR, flags: elf.PF_R, off: phoff, vaddr: 0x400000 + phoff, paddr: 0x400000 + phoff,
			filesz: nph * 56, memsz: nph * 56, align: 8}).put(b[phoff:], order)
		end := uint64(text + len(code))
		(&phdr{typ: elf.PT_LOAD, flags: elf.PF_R | elf.PF_X, vaddr: 0x400000, paddr: 0x400000,
			filesz: end, memsz: end, align: 0x1000}).put(b[phoff+56:], order)
	}
	copy(b[text:], code)
	copy(b[text+len(code):], shstr)
	(&shdr{name: 1, typ: uint32(elf.SHT_PROGBITS), flags: uint64(elf.SHF_ALLOC | elf.SHF_EXECINSTR),
		addr: 0x400000 + text, off: text, size: uint64(len(code)), addralign: 1}).put(b[shoff+64:], order)
	(&shdr{name: 7, typ: uint32(elf.SHT_STRTAB), off: uint64(text + len(code)), size: uint64(len(shstr)),
		addralign: 1}).put(b[shoff+128:], order)
	return b
}

func fuzzSeeds() map[string][]byte {
	return map[string][]byte{
		"exec-le": fuzzSeed(binary.LittleEndian, true), "exec-be": fuzzSeed(binary.BigEndian, true),
		"nophdrs": fuzzSeed(binary.LittleEndian, false),
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzAddSection when
// REWIND_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzAddSection")
	for name, data := range fuzzSeeds() {
		write("seed-"+name, data, uint16(40), true)
	}
}

// TestFuzzSeeds: the seeds themselves are valid and take the loaded path.
func TestFuzzSeeds(t *testing.T) {
	for name, data := range fuzzSeeds() {
		out, res, err := AddSection(data, Section{Name: ".new", Size: 40, Align: 8, Load: true, Segment: elf.PT_NOTE,
			Contents: func(uint64) ([]byte, error) { return payload(40), nil }})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name != "nophdrs" && !res.Loaded {
			t.Errorf("%s: not loaded: %s", name, res.Note)
		}
		checkStructure(t, data, out, res, ".new", 40)
	}
}

// FuzzAddSection: arbitrary files never panic AddSection, errors are
// FormatErrors or name the section, and any output debug/elf can read has
// the section with its contents.
func FuzzAddSection(f *testing.F) {
	for _, data := range fuzzSeeds() {
		f.Add(data, uint16(40), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, size uint16, load bool) {
		out, res, err := AddSection(data, Section{Name: ".new", Size: uint64(size), Align: 8, Load: load,
			Segment: elf.PT_NOTE, Contents: func(uint64) ([]byte, error) { return payload(int(size)), nil }})
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) && !strings.HasPrefix(err.Error(), "elfedit: ") {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		if uint64(len(out)) < res.Offset+uint64(size) || !bytes.Equal(out[res.Offset:res.Offset+uint64(size)], payload(int(size))) {
			t.Fatalf("contents not at the offset the result gives")
		}
		if uint64(len(out)) > uint64(len(data))+MaxPadding+uint64(size)+1<<20+uint64(len(data)) {
			t.Fatalf("output of %d bytes from %d", len(out), len(data))
		}
		if e, err := elf.NewFile(bytes.NewReader(out)); err == nil {
			if s := e.Section(".new"); s == nil || s.Offset != res.Offset {
				t.Fatalf("debug/elf does not find the section where it was put")
			}
		}
	})
}
