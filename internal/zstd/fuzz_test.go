package zstd

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/fuzzcorpus"
)

// FuzzDecode checks that no input panics, hangs or grows memory without
// bound, and that whatever DecodeAll accepts the streaming Decoder accepts
// too, in chunks, with the same output. The content checksum in the seeds
// makes a successful decode of them a round trip; TestSeedCorpus compares
// the seeds with the zstd CLI.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// RLE blocks expand 32768 times: cap output so the fuzzer
		// does not spend its time (and memory) on bombs.
		const limit = 8 << 20
		d := NewDecoder(DefaultMaxWindow)
		d.LimitOutput(limit)
		whole, err := d.Decode(nil, data)
		if err == nil {
			err = d.Close()
		}
		if len(data) <= 200 { // at most about 6.5 MB of output
			all, aerr := DecodeAll(nil, data)
			if aerr == nil && (err != nil || !bytes.Equal(all, whole)) {
				t.Fatalf("DecodeAll succeeded, one-shot Decoder: %v", err)
			}
		}
		r := rand.New(rand.NewPCG(uint64(len(data)), 1))
		chunked, cerr := decodeChunked(r, data, DefaultMaxWindow, limit)
		if err != nil {
			return
		}
		if cerr != nil {
			t.Fatalf("one-shot decoding succeeded, chunked decoding failed: %v", cerr)
		}
		if !bytes.Equal(whole, chunked) {
			t.Fatal("chunked output differs from one-shot output")
		}
	})
}

// TestWriteCorpus regenerates testdata/fuzz/FuzzDecode from zstd CLI
// output (REWIND_WRITE_CORPUS=1).
func TestWriteCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzDecode")
	needCLI(t)
	r := rand.New(rand.NewPCG(31, 32))
	text := repetitiveText(r, 600)
	seeds := []struct {
		name string
		data []byte
		args []string
	}{
		{"text-l1", text, []string{"-1"}},
		{"text-l3-nocheck", text, []string{"-3", "--no-check"}},
		{"text-l19", text, []string{"-19"}},
		{"perf-l3", perfLike(r, 20000), []string{"-3"}},
		{"skewed-l9", skewed(r, 400, 5), []string{"-9"}},
		{"tokens-l19", tokens(r, 3000), []string{"-19"}},
		{"zeros-l3", make([]byte, 5000), []string{"-3"}},
		{"empty", nil, []string{"-3"}},
	}
	for i, s := range seeds {
		comp := compress(t, s.data, i%2 == 0, s.args...)
		write(s.name, comp)
		if i < 4 {
			write(s.name+"-trunc", comp[:len(comp)*2/3])
		}
	}
}

// TestSeedCorpus decodes each committed seed with the package and with the
// zstd CLI: both must fail or both succeed with the same output.
func TestSeedCorpus(t *testing.T) {
	needCLI(t)
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed corpus: %v", err)
	}
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: unexpected corpus format", name)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		comp := []byte(s)
		got, err := DecodeAll(nil, comp)
		cmd := exec.Command(zstdCLI, "-q", "-d", "-c")
		cmd.Stdin = bytes.NewReader(comp)
		want, cliErr := cmd.Output()
		switch {
		case cliErr != nil && err == nil:
			t.Errorf("%s: zstd -d failed (%v), DecodeAll succeeded", name, cliErr)
		case cliErr == nil && err != nil:
			t.Errorf("%s: zstd -d succeeded, DecodeAll: %v", name, err)
		case err == nil && !bytes.Equal(got, want):
			t.Errorf("%s: output differs from zstd -d", name)
		}
	}
}
