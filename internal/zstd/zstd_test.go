package zstd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const zstdCLI = "/usr/bin/zstd"

// needCLI skips the test when the reference zstd command is missing.
func needCLI(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(zstdCLI); err != nil {
		tb.Skipf("reference compressor unavailable: %v", err)
	}
}

// compress runs the zstd CLI on data with args. fromFile compresses a file
// (so the frame declares its content size) instead of standard input.
func compress(tb testing.TB, data []byte, fromFile bool, args ...string) []byte {
	tb.Helper()
	args = append([]string{"-q", "-c"}, args...)
	var cmd *exec.Cmd
	if fromFile {
		name := filepath.Join(tb.TempDir(), "in")
		if err := os.WriteFile(name, data, 0o644); err != nil {
			tb.Fatal(err)
		}
		cmd = exec.Command(zstdCLI, append(args, name)...)
	} else {
		cmd = exec.Command(zstdCLI, args...)
		cmd.Stdin = bytes.NewReader(data)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("zstd %v: %v: %s", args, err, stderr.Bytes())
	}
	return out
}

// Test inputs.

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func repetitiveText(r *rand.Rand, n int) []byte {
	words := strings.Fields("the quick brown fox jumps over a lazy dog while perf " +
		"records samples of stacks frames symbols and ring buffers compress well")
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(12) == 0 {
			fmt.Fprintf(&b, " %d\n", r.IntN(100000))
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

// perfLike mimics a perf ring buffer: 8 KiB blocks of sample records that
// repeat with small differences (timestamps, addresses).
func perfLike(r *rand.Rand, n int) []byte {
	block := make([]byte, 8192)
	for i := 0; i+48 <= len(block); i += 48 {
		binary.LittleEndian.PutUint32(block[i:], 9) // PERF_RECORD_SAMPLE
		binary.LittleEndian.PutUint64(block[i+8:], 0x7f0000400000+uint64(r.IntN(1<<16)))
		binary.LittleEndian.PutUint64(block[i+16:], uint64(i)*1000)
	}
	var out []byte
	for len(out) < n {
		for k := 0; k < 20; k++ {
			p := r.IntN(len(block) - 8)
			binary.LittleEndian.PutUint64(block[p:], r.Uint64())
		}
		out = append(out, block...)
	}
	return out[:n]
}

// mixedBinary is a slice of the zstd executable, repeated up to n bytes.
func mixedBinary(tb testing.TB, n int) []byte {
	exe, err := os.ReadFile(zstdCLI)
	if err != nil {
		tb.Skipf("reading %s: %v", zstdCLI, err)
	}
	var out []byte
	for len(out) < n {
		out = append(out, exe...)
	}
	return out[:n]
}

// rleLiterals is a random 128 KiB block followed by pieces of it each
// preceded by 'z', so the second block's literals are all 'z'.
func rleLiterals(r *rand.Rand) []byte {
	s := randomBytes(r, 128<<10)
	out := bytes.Clone(s)
	for len(out) < 200<<10 {
		j := r.IntN(len(s) - 100)
		out = append(out, 'z')
		out = append(out, s[j:j+40+r.IntN(40)]...)
	}
	return out
}

// tokens is a stream of random 3-byte words from a small vocabulary: more
// than 32K sequences per block, with equal literal and match lengths.
func tokens(r *rand.Rand, n int) []byte {
	var vocab [2048][3]byte
	for i := range vocab {
		copy(vocab[i][:], randomBytes(r, 3))
	}
	out := make([]byte, 0, n+3)
	for len(out) < n {
		out = append(out, vocab[r.IntN(len(vocab))][:]...)
	}
	return out[:n]
}

// skewed is random bytes from an alphabet of k symbols.
func skewed(r *rand.Rand, n, k int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(k))
	}
	return b
}

// decodeChunked feeds src to a Decoder in random-sized chunks of 1 byte to
// 64 KiB. A nonzero limit caps the output (Decoder.LimitOutput).
func decodeChunked(r *rand.Rand, src []byte, maxWindow int, limit ...uint64) ([]byte, error) {
	d := NewDecoder(maxWindow)
	if len(limit) > 0 {
		d.LimitOutput(limit[0])
	}
	var out []byte
	for len(src) > 0 {
		n := 1 + r.IntN(min(len(src), 64<<10))
		if r.IntN(4) == 0 {
			n = 1 + r.IntN(min(len(src), 16))
		}
		var err error
		out, err = d.Decode(out, src[:n])
		if err != nil {
			return out, err
		}
		src = src[n:]
	}
	return out, d.Close()
}

func TestRoundTripCLI(t *testing.T) {
	needCLI(t)
	r := rand.New(rand.NewPCG(1, 2))
	inputs := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"byte", []byte{'x'}},
		{"zeros", make([]byte, 300000)},
		{"random-100K", randomBytes(r, 100_000)},
		{"text-1M", repetitiveText(r, 1<<20)},
		{"text-small", repetitiveText(r, 3000)},
		{"binary-900K", mixedBinary(t, 900_000)},
		{"perf-3M", perfLike(r, 3<<20)},
		{"rle-literals", rleLiterals(r)},
		{"tokens-300K", tokens(r, 300_000)},
		{"skewed-200", skewed(r, 200, 16)},
		{"skewed-1000", skewed(r, 1000, 4)},
		{"skewed-100K", skewed(r, 100_000, 3)},
	}
	settings := [][]string{
		{"-1"}, {"-3"}, {"-9"}, {"-19"},
		{"-3", "--no-check"}, {"-1", "-C"}, {"-19", "--no-check"},
		{"-3", "--long=24"}, {"-19", "--long=24"},
	}
	for _, in := range inputs {
		for _, args := range settings {
			for _, fromFile := range []bool{false, true} {
				if testing.Short() && len(in.data) > 1<<20 && args[0] == "-19" {
					continue
				}
				// -19 costs seconds per megabyte. On the large inputs it
				// runs from a file, and from a pipe with --long=24 (a
				// frame without content size, whose window is not fitted
				// to the input); --no-check changes only the frame's
				// checksum flag, which the smaller inputs cover.
				if len(in.data) > 300_000 && args[0] == "-19" && len(args) == 1 && !fromFile ||
					len(in.data) > 300_000 && slices.Equal(args, []string{"-19", "--no-check"}) {
					continue
				}
				name := fmt.Sprintf("%s/%s/file=%v", in.name, strings.Join(args, ""), fromFile)
				t.Run(name, func(t *testing.T) {
					comp := compress(t, in.data, fromFile, args...)
					got, err := DecodeAll(nil, comp)
					if err != nil {
						t.Fatalf("DecodeAll: %v", err)
					}
					if !bytes.Equal(got, in.data) {
						t.Fatalf("DecodeAll: output differs (%d bytes, want %d)", len(got), len(in.data))
					}
					for seed := uint64(0); seed < 2; seed++ {
						got, err := decodeChunked(rand.New(rand.NewPCG(seed, 7)), comp, DefaultMaxWindow)
						if err != nil {
							t.Fatalf("chunked: %v", err)
						}
						if !bytes.Equal(got, in.data) {
							t.Fatalf("chunked: output differs (%d bytes, want %d)", len(got), len(in.data))
						}
					}
				})
			}
		}
	}
}

// TestConcatenatedAndSkippable checks that frames follow one another, with
// skippable frames in between ignored, and DecodeAll appends to dst.
// TestSmallInputs covers the forms libzstd picks for small blocks: raw and
// RLE literals, one-stream Huffman literals, blocks without sequences.
func TestSmallInputs(t *testing.T) {
	needCLI(t)
	r := rand.New(rand.NewPCG(21, 22))
	for i := 0; i < 60; i++ {
		n := 1 + r.IntN(3000)
		var data []byte
		switch i % 4 {
		case 0:
			data = skewed(r, n, 1+r.IntN(20))
		case 1:
			data = repetitiveText(r, n)
		case 2:
			data = randomBytes(r, n)
		case 3:
			data = append(skewed(r, n/2, 8), bytes.Repeat([]byte{'q'}, n/2)...)
		}
		level := []string{"-1", "-3", "-19"}[i%3]
		comp := compress(t, data, i%2 == 0, level)
		got, err := DecodeAll(nil, comp)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("input %d (%d bytes, %s): err %v, equal %v", i, n, level, err, bytes.Equal(got, data))
		}
		got, err = decodeChunked(r, comp, DefaultMaxWindow)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("input %d chunked: err %v, equal %v", i, err, bytes.Equal(got, data))
		}
	}
}

func TestConcatenatedAndSkippable(t *testing.T) {
	needCLI(t)
	r := rand.New(rand.NewPCG(3, 4))
	a, b := repetitiveText(r, 50000), perfLike(r, 70000)
	skip := []byte{0x5A, 0x2A, 0x4D, 0x18, 5, 0, 0, 0, 1, 2, 3, 4, 5}
	empty := []byte{0x50, 0x2A, 0x4D, 0x18, 0, 0, 0, 0}
	var stream []byte
	stream = append(stream, skip...)
	stream = append(stream, compress(t, a, false, "-3")...)
	stream = append(stream, empty...)
	stream = append(stream, compress(t, b, true, "-19")...)
	stream = append(stream, skip...)
	want := append(append([]byte("prefix"), a...), b...)
	got, err := DecodeAll([]byte("prefix"), stream)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("DecodeAll: err %v, equal %v", err, bytes.Equal(got, want))
	}
	for seed := uint64(0); seed < 5; seed++ {
		got, err := decodeChunked(rand.New(rand.NewPCG(seed, 1)), stream, DefaultMaxWindow)
		if err != nil || !bytes.Equal(got, want[6:]) {
			t.Fatalf("chunked seed %d: err %v, equal %v", seed, err, bytes.Equal(got, want[6:]))
		}
	}
}

// TestHistoryAcrossCalls checks that matches reach into output an earlier
// Decode call returned, even when the caller overwrites that output, and
// that a frame cut at a block boundary (as perf leaves it) closes cleanly.
func TestHistoryAcrossCalls(t *testing.T) {
	needCLI(t)
	r := rand.New(rand.NewPCG(5, 6))
	data := perfLike(r, 2<<20)
	comp := compress(t, data, false, "-3", "--long=24", "--no-check")
	d := NewDecoder(DefaultMaxWindow)
	var got []byte
	buf := make([]byte, 0, 1<<16)
	for len(comp) > 0 {
		n := min(len(comp), 1000+r.IntN(3000))
		out, err := d.Decode(buf[:0], comp[:n])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out...)
		for i := range out {
			out[i] = 0xAA // the caller reuses its buffer
		}
		buf = out
		comp = comp[n:]
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("output differs")
	}

	// Cut the stream after its first block: the frame never ends.
	comp = compress(t, data, false, "-1", "--no-check")
	h := frameHeaderSize(comp[4])
	bh := int(comp[4+h]) | int(comp[5+h])<<8 | int(comp[6+h])<<16
	if bh&1 != 0 || bh>>1&3 == blockRLE {
		t.Fatal("expected a non-final block with content")
	}
	cut := 4 + h + 3 + bh>>3
	d = NewDecoder(DefaultMaxWindow)
	out, err := d.Decode(nil, comp[:cut])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data[:len(out)]) || len(out) == 0 {
		t.Fatalf("first block: %d bytes, wrong content", len(out))
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close after a block boundary: %v", err)
	}
	if _, err := DecodeAll(nil, comp[:cut]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("DecodeAll of an unended frame: %v, want ErrTruncated", err)
	}
	d = NewDecoder(DefaultMaxWindow)
	if _, err := d.Decode(nil, comp[:cut+2]); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Close inside a block header: %v, want ErrTruncated", err)
	}
}

func TestTruncated(t *testing.T) {
	needCLI(t)
	r := rand.New(rand.NewPCG(7, 8))
	data := repetitiveText(r, 20000)
	for _, args := range [][]string{{"-3"}, {"-19", "--no-check"}} {
		comp := compress(t, data, true, args...)
		for n := 1; n < len(comp); n++ {
			if _, err := DecodeAll(nil, comp[:n]); err == nil {
				t.Fatalf("%v: DecodeAll of %d of %d bytes: no error", args, n, len(comp))
			}
		}
	}
}

func TestCorrupted(t *testing.T) {
	needCLI(t)
	r := rand.New(rand.NewPCG(9, 10))
	data := append(repetitiveText(r, 40000), perfLike(r, 40000)...)
	comp := compress(t, data, false, "-9")
	bad := 0
	for i := 0; i < 3000; i++ {
		c := bytes.Clone(comp)
		for k := 0; k <= r.IntN(3); k++ {
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
		}
		out, err := DecodeAll(nil, c)
		if err == nil && !bytes.Equal(out, data) {
			bad++ // possible only if the checksum collides
		}
		if _, err := decodeChunked(r, c, DefaultMaxWindow); err == nil && !bytes.Equal(out, data) {
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d corrupted streams decoded to wrong data without error", bad)
	}
}

func TestDictionaryRefused(t *testing.T) {
	// Frame header: FHD with a 1-byte Dictionary_ID, window descriptor, ID 7.
	frame := []byte{0x28, 0xB5, 0x2F, 0xFD, 0x01, 0x00, 0x07}
	_, err := DecodeAll(nil, frame)
	if !errors.Is(err, ErrDictionary) {
		t.Fatalf("got %v, want ErrDictionary", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "zstd: dictionaries not supported") || !strings.HasSuffix(msg, "at input offset 6") {
		t.Fatalf("message %q", err)
	}
	// Dictionary_ID 0 means none.
	ok := []byte{0x28, 0xB5, 0x2F, 0xFD, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00}
	if out, err := DecodeAll(nil, ok); err != nil || len(out) != 0 {
		t.Fatalf("dictionary ID 0: %v", err)
	}
}

func TestDictionaryCLI(t *testing.T) {
	needCLI(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(11, 12))
	var samples []string
	for i := 0; i < 200; i++ {
		name := filepath.Join(dir, fmt.Sprintf("s%d", i))
		if err := os.WriteFile(name, repetitiveText(r, 500+r.IntN(500)), 0o644); err != nil {
			t.Fatal(err)
		}
		samples = append(samples, name)
	}
	dict := filepath.Join(dir, "dict")
	cmd := exec.Command(zstdCLI, append([]string{"-q", "--train", "-o", dict}, samples...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("zstd --train failed: %v: %s", err, out)
	}
	comp := compress(t, repetitiveText(r, 800), false, "-D", dict)
	if _, err := DecodeAll(nil, comp); !errors.Is(err, ErrDictionary) {
		t.Fatalf("got %v, want ErrDictionary", err)
	}
}

func TestWindowLimit(t *testing.T) {
	needCLI(t)
	r := rand.New(rand.NewPCG(13, 14))
	data := perfLike(r, 3<<20)
	comp := compress(t, data, false, "-3", "--long=24")
	d := NewDecoder(1 << 20)
	if _, err := d.Decode(nil, comp); !errors.Is(err, ErrWindowTooLarge) {
		t.Fatalf("got %v, want ErrWindowTooLarge", err)
	}
	if _, err := decodeChunked(r, comp, 16<<20); err != nil {
		t.Fatalf("window exactly at the limit: %v", err)
	}
}

func TestOutputLimit(t *testing.T) {
	needCLI(t)
	data := make([]byte, 1<<20)
	comp := compress(t, data, false, "-3")
	d := NewDecoder(DefaultMaxWindow)
	d.LimitOutput(1 << 20)
	if out, err := d.Decode(nil, comp); err != nil || len(out) != len(data) {
		t.Fatalf("at the limit: %d bytes, %v", len(out), err)
	}
	d = NewDecoder(DefaultMaxWindow)
	d.LimitOutput(1<<20 - 1)
	if _, err := d.Decode(nil, comp); !errors.Is(err, ErrOutputLimit) {
		t.Fatalf("got %v, want ErrOutputLimit", err)
	}
}

func TestChecksumMismatch(t *testing.T) {
	needCLI(t)
	comp := compress(t, []byte(strings.Repeat("checksum ", 1000)), true, "-3")
	comp[len(comp)-1] ^= 1
	if _, err := DecodeAll(nil, comp); !errors.Is(err, ErrChecksum) {
		t.Fatalf("got %v, want ErrChecksum", err)
	}
}

func TestXXH64(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{"", 0xEF46DB3751D8E999},
		{"a", 0xD24EC4F1A98C6E5B},
		{"abc", 0x44BC2CF5AD770999},
	} {
		var x xxh64
		x.reset()
		x.write([]byte(c.in))
		if got := x.sum(); got != c.want {
			t.Errorf("XXH64(%q) = %#x, want %#x", c.in, got, c.want)
		}
	}
	// Streaming in pieces must agree with one write.
	r := rand.New(rand.NewPCG(15, 16))
	data := randomBytes(r, 1000)
	var whole, parts xxh64
	whole.reset()
	parts.reset()
	whole.write(data)
	for p := data; len(p) > 0; {
		n := min(len(p), 1+r.IntN(40))
		parts.write(p[:n])
		p = p[n:]
	}
	if whole.sum() != parts.sum() {
		t.Fatal("streamed XXH64 differs")
	}
}
