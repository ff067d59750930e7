package elfobj

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

// fuzzSeeds are small ELF files covering the parser's paths.
func fuzzSeeds() map[string][]byte {
	return map[string][]byte{
		"plain":   sampleELF(binary.LittleEndian, 0),
		"zlib":    sampleELF(binary.LittleEndian, elf.COMPRESS_ZLIB),
		"zstd-be": sampleELF(binary.BigEndian, elf.COMPRESS_ZSTD),
		"noshdrs": buildELF(testELF{
			progs: []testProg{
				{typ: elf.PT_LOAD, flags: elf.PF_R | elf.PF_X, sec: ".text", align: 0x1000},
				{typ: elf.PT_GNU_EH_FRAME, flags: elf.PF_R, sec: ".eh_frame_hdr", align: 4},
				{typ: elf.PT_NOTE, flags: elf.PF_R, sec: ".note", align: 4},
			},
			sections: []testSection{
				{name: ".text", typ: elf.SHT_PROGBITS, addr: 0x1000, data: []byte{0x55, 0x48, 0x89, 0xe5, 0xc3}},
				{name: ".eh_frame_hdr", typ: elf.SHT_PROGBITS, addr: 0x1008, data: []byte{1, 0x1b, 3, 0x3b}},
				{name: ".note", typ: elf.SHT_NOTE, addr: 0x1010, data: noteData(binary.LittleEndian, "GNU", 3, []byte{1, 2, 3, 4})},
			},
			noShdrs: true,
		}),
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzNewFile from fuzzSeeds
// when REWIND_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzNewFile")
	for name, data := range fuzzSeeds() {
		write("seed-"+name, data)
	}
}

// FuzzNewFile checks that arbitrary bytes never panic NewFile or any
// accessor, and that every error names the file.
func FuzzNewFile(f *testing.F) {
	for _, data := range fuzzSeeds() {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, r := range []interface {
			ReadAt([]byte, int64) (int, error)
		}{bytes.NewReader(data), onlyReaderAt{bytes.NewReader(data)}} {
			ef, err := NewFile(r, "fuzz")
			if err != nil {
				if !strings.HasPrefix(err.Error(), "elfobj: fuzz: ") {
					t.Fatalf("error does not name the file: %v", err)
				}
				continue
			}
			exercise(ef)
			if err := ef.LoadSymbols(); err != nil && !strings.HasPrefix(err.Error(), "elfobj: fuzz: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
		}
	})
}
