package symbolize

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"io"
	"math/rand"
	"os"
	"testing"
)

// zlibOf compresses b at level.
func zlibOf(t testing.TB, b []byte, level int) []byte {
	var buf bytes.Buffer
	w, err := zlib.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// inflateSteps decodes z into a buffer of size n, asking for steps bytes
// more each time.
func inflateSteps(z []byte, n, steps int) ([]byte, error) {
	out := make([]byte, n)
	f, err := newInflater(z, out)
	if err != nil {
		return nil, err
	}
	for limit := steps; ; limit += steps {
		if err := f.run(limit); err != nil {
			return nil, err
		}
		if f.done || f.n >= n {
			break
		}
	}
	return out[:f.n], nil
}

// testInputs are data of every kind deflate codes differently: runs,
// text, random bytes (stored blocks), short inputs (fixed codes).
func testInputs() [][]byte {
	r := rand.New(rand.NewSource(1))
	random := make([]byte, 200<<10)
	r.Read(random)
	var text bytes.Buffer
	for text.Len() < 300<<10 {
		text.WriteString([]string{"futex_wait ", "nptl/pthread_cond_wait.c:", "__GI___libc_read", "\x00\x01\x02", "DW_TAG_inlined_subroutine "}[r.Intn(5)])
		text.WriteByte(byte(r.Intn(256)))
	}
	return [][]byte{nil, []byte("a"), []byte("hello, hello, hello"), bytes.Repeat([]byte{7}, 100000),
		random, text.Bytes(), append(append([]byte(nil), text.Bytes()[:50000]...), random[:50000]...)}
}

// TestInflate checks the inflater against compress/zlib at every level,
// whole and in steps (resuming where it stopped).
func TestInflate(t *testing.T) {
	for i, in := range testInputs() {
		for _, level := range []int{zlib.NoCompression, zlib.BestSpeed, 5, zlib.BestCompression, zlib.HuffmanOnly} {
			z := zlibOf(t, in, level)
			for _, steps := range []int{1 << 30, 4096, 777} {
				got, err := inflateSteps(z, len(in), steps)
				if err != nil {
					t.Fatalf("input %d level %d steps %d: %v", i, level, steps, err)
				}
				if !bytes.Equal(got, in) {
					t.Fatalf("input %d level %d steps %d: output differs (%d bytes, want %d)", i, level, steps, len(got), len(in))
				}
			}
			// A prefix stops early.
			if len(in) > 10000 {
				f, _ := newInflater(z, make([]byte, len(in)))
				if err := f.run(5000); err != nil || f.n < 5000 || f.n >= len(in) || !bytes.Equal(f.out[:f.n], in[:f.n]) {
					t.Fatalf("input %d level %d: prefix of 5000: %d bytes, %v", i, level, f.n, err)
				}
			}
			// Truncated input: an error, not a panic or a hang.
			if len(z) > 20 {
				if _, err := inflateSteps(z[:len(z)/2], len(in), 1<<30); err == nil {
					t.Fatalf("input %d level %d: no error for half the stream", i, level)
				}
			}
		}
	}
}

// TestInflateLibc decodes libc's compressed debug sections as debug/elf
// does, when libc6-dbg is installed.
func TestInflateLibc(t *testing.T) {
	_, dbg := libcDebug(t)
	file, err := os.Open(dbg)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	ef, err := elf.NewFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range ef.Sections {
		z, ok := zlibSection(file, ef, s)
		if !ok {
			continue
		}
		want, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		got, err := inflateSteps(z, len(want), 1<<20)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v; want %d bytes", s.Name, len(got), err, len(want))
		}
		n++
	}
	if n == 0 {
		t.Skip("libc's debug file has no zlib-compressed sections")
	}
	t.Logf("%d sections agree", n)
}

// FuzzInflate decodes altered zlib streams: no panic, no hang, and what
// compress/zlib decodes whole, the inflater decodes the same.
func FuzzInflate(f *testing.F) {
	for _, in := range testInputs()[:4] {
		f.Add(zlibOf(f, in, 6), uint16(len(in)))
	}
	f.Add(zlibOf(f, testInputs()[5][:3000], zlib.HuffmanOnly), uint16(3000))
	f.Fuzz(func(t *testing.T, z []byte, size uint16) {
		got, err := inflateSteps(z, int(size), 1000)
		zr, zerr := zlib.NewReader(bytes.NewReader(z))
		if zerr != nil {
			return
		}
		want, zerr := io.ReadAll(io.LimitReader(zr, int64(size)+1))
		if zerr != nil || len(want) != int(size) {
			return // corrupt, or not of this size: ours may stop anywhere
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("inflater: %d bytes, %v; compress/zlib: %d bytes", len(got), err, len(want))
		}
	})
}
