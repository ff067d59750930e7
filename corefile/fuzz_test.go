package corefile

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/target"
)

// fuzzSeeds are tiny cores covering the parser's paths.
func fuzzSeeds() map[string][]byte {
	le, be := binary.LittleEndian, binary.BigEndian
	small := func(bo binary.ByteOrder, pageSize uint64, machine elf.Machine, nregs int) []byte {
		reg := make([]uint64, nregs)
		for i := range reg {
			reg[i] = uint64(i + 1)
		}
		return buildCore(testCore{
			bo: bo, machine: machine,
			notes: []testNote{
				{"CORE", ntPrstatus, prstatus64(bo, 9, 6, reg)},
				{"CORE", ntPrpsinfo, prpsinfo64(bo, 9, "p", "p a")},
				{"CORE", ntAuxv, auxv64(bo, AtEntry, 0x1010, AtSysinfoEhdr, 0x9000)},
				{"CORE", ntFile, ntFile64(bo, pageSize, []target.Mapping{
					{Start: 0x1000, End: 0x1100, Offset: 0, Path: "/lib/fake.so"},
					{Start: 0x2000, End: 0x2040, Offset: 0x1000, Path: "/x"},
				})},
			},
			loads: []testLoad{
				{vaddr: 0x1000, memsz: 0x100, data: fakeSO[:0x40], flags: elf.PF_R | elf.PF_X},
				{vaddr: 0x3000, memsz: 0x20, data: []byte("anonymous memory"), flags: elf.PF_R | elf.PF_W},
				{vaddr: 0x9000, memsz: 0x10, flags: elf.PF_R},
			},
		})
	}
	return map[string][]byte{
		"amd64-kernel": small(le, 4096, elf.EM_X86_64, 27),
		"amd64-gcore":  small(le, 1, elf.EM_X86_64, 27),
		"arm64-be":     small(be, 4096, elf.EM_AARCH64, 34),
		"i386":         core32(),
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzOpen from fuzzSeeds
// when REWIND_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzOpen")
	for name, data := range fuzzSeeds() {
		write("seed-"+name, data)
	}
}

// FuzzOpen checks that arbitrary core bytes never panic Open or ReadMemory
// and that every error names the file.
func FuzzOpen(f *testing.F) {
	for _, data := range fuzzSeeds() {
		f.Add(data)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		fh, err := os.CreateTemp(dir, "core")
		if err != nil {
			t.Fatal(err)
		}
		path := fh.Name()
		defer os.Remove(path)
		_, err = fh.Write(data)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		c, err := Open(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "corefile: "+path+": ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		defer c.Close()
		exerciseCore(c)
		b := make([]byte, 32)
		for _, th := range c.Threads {
			if sp, ok := th.Regs.SP(); ok {
				if err := c.ReadMemory(sp, b); err != nil && !strings.HasPrefix(err.Error(), "corefile: "+path+": ") {
					t.Fatalf("error does not name the file: %v", err)
				}
			}
		}
	})
}
