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
		random, text.Bytes(), append(append([]byte(nil), text.Bytes()[:50000]...), random[:50000]...), skewed(r, 100000)}
}

// skewed returns n bytes, byte k drawn about twice as often as byte k+1:
// Huffman codes of up to 15 bits, decoded through subtables.
func skewed(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		k := 0
		for k < 40 && r.Intn(2) == 0 {
			k++
		}
		b[i] = byte(k*7 + r.Intn(2))
	}
	return b
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
	f.Add(zlibOf(f, skewed(rand.New(rand.NewSource(3)), 20000), zlib.HuffmanOnly), uint16(20000))
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

// TestHuffTable checks table lookups, subtables included, against the
// canonical code of random code lengths (up to 15 bits, complete and
// incomplete codes): every code finds its symbol and length, and bits
// that start no code find kindBad.
func TestHuffTable(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for iter := 0; iter < 300; iter++ {
		nsyms := 2 + r.Intn(287)
		lens := make([]uint8, nsyms)
		// Draw lengths, longest first, while the code space allows.
		left := 1 << 15 // code space in units of 2^-15
		for i := range lens {
			l := uint8(1 + r.Intn(15))
			if iter%3 == 0 {
				l = uint8(9 + r.Intn(7)) // mostly long codes: many subtables
			}
			if r.Intn(5) == 0 {
				continue // unused symbol
			}
			if 1<<(15-l) <= left {
				lens[i] = l
				left -= 1 << (15 - l)
			}
		}
		var ht huffTable
		rootBits := uint(litBits)
		if iter%2 == 1 {
			rootBits = dstBits
		}
		if !ht.build(lens, rootBits, plainEntry) {
			t.Fatalf("iter %d: build refused a code that fits", iter)
		}
		// The canonical code, symbol by symbol.
		var count [16]int
		for _, l := range lens {
			count[l]++
		}
		count[0] = 0
		var next [16]int
		code := 0
		for l := 1; l < 16; l++ {
			code = (code + count[l-1]) << 1
			next[l] = code
		}
		covered := 0
		for sym, l := range lens {
			if l == 0 {
				continue
			}
			c := next[l]
			next[l]++
			rev := uint64(0)
			for b := 0; b < int(l); b++ {
				rev |= uint64(c>>b&1) << (int(l) - 1 - b)
			}
			// Any bits may follow the code.
			bits := rev | uint64(r.Int63())<<l
			e := ht.lookup(bits, rootBits)
			if int(e>>16) != sym || uint8(e&15) != l || e&kindMask != kindLiteral {
				t.Fatalf("iter %d: symbol %d (length %d): entry %#x", iter, sym, l, e)
			}
			covered += 1 << (15 - l)
		}
		if covered < 1<<15 {
			// Some 15-bit string starts no code: find one and check it.
			for v := uint64(0); v < 1<<15; v++ {
				if e := ht.lookup(v, rootBits); e&kindMask == kindBad {
					break
				} else if v == 1<<15-1 {
					t.Fatalf("iter %d: incomplete code, but every string decodes", iter)
				}
			}
		}
	}
}
