package symbolize

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"io"
	"os"
	"testing"
)

// BenchmarkInflate decodes libc's .debug_info with the inflater and with
// compress/zlib (when libc6-dbg is installed).
func BenchmarkInflate(b *testing.B) {
	_, dbg := libcDebug(&testing.T{})
	file, err := os.Open(dbg)
	if err != nil {
		b.Skip(err)
	}
	defer file.Close()
	ef, err := elf.NewFile(file)
	if err != nil {
		b.Fatal(err)
	}
	s := ef.Section(".debug_info")
	z, ok := zlibSection(file, ef, s)
	if !ok {
		b.Skip("not zlib-compressed")
	}
	out := make([]byte, s.Size)
	b.Run("inflater", func(b *testing.B) {
		b.SetBytes(int64(s.Size))
		for i := 0; i < b.N; i++ {
			f, _ := newInflater(z, out)
			if err := f.run(len(out)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("compress-zlib", func(b *testing.B) {
		b.SetBytes(int64(s.Size))
		for i := 0; i < b.N; i++ {
			r, _ := zlib.NewReader(bytes.NewReader(z))
			if _, err := io.ReadFull(r, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
