package symbolize

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

func TestKallsyms(t *testing.T) {
	k, err := ParseKallsyms(strings.NewReader("ffffffff81000000 T _text\nffffffff81000100 t helper\tfoo_mod\n0000000000000000 A fixed\nffffffff81000200 D data\nzz T bad\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr uint64
		name string
		off  uint64
	}{{0xffffffff81000010, "_text", 0x10}, {0xffffffff81000180, "helper", 0x80}, {0xffffffff81000300, "helper", 0x200}} {
		n, off, ok := k.Lookup(c.addr)
		if !ok || n != c.name || off != c.off {
			t.Errorf("%#x: %s+%#x %v, want %s+%#x", c.addr, n, off, ok, c.name, c.off)
		}
	}
	if _, _, ok := k.Lookup(0x1000); ok {
		t.Error("address below every symbol resolved")
	}
	if _, err := ParseKallsyms(strings.NewReader("0000000000000000 T _text\n")); err == nil {
		t.Error("hidden addresses accepted")
	}
}

// TestKallsymsCached reads this machine's kernel symbols through the
// cache twice and requires the same answers as /proc/kallsyms parsed
// directly, for every symbol but BPF programs' (bpf_prog_*,
// bpf_trampoline_*), which come and go as programs load (other tests may
// load some meanwhile), and the second read to be the first one exactly.
func TestKallsymsCached(t *testing.T) {
	want, err := LoadKallsyms()
	if err != nil {
		t.Skipf("kernel symbols unreadable here: %v", err)
	}
	bpf := func(name string) bool {
		return strings.HasPrefix(name, "bpf_prog_") || strings.HasPrefix(name, "bpf_trampoline_")
	}
	dir := t.TempDir()
	var first *Kallsyms
	for run := 0; run < 2; run++ {
		got, err := LoadKallsymsCached(dir)
		if err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "kallsyms", "*"))
		if len(files) != 1 {
			t.Fatalf("run %d: cache files %v", run, files)
		}
		checked := 0
		for i := 0; i < want.n; i++ {
			a := want.addr(i)
			n1, o1, _ := want.Lookup(a + 1)
			n2, o2, _ := got.Lookup(a + 1)
			if bpf(n1) || bpf(n2) {
				continue
			}
			checked++
			if n1 != n2 || o1 != o2 {
				t.Fatalf("run %d: %#x is %s+%#x, want %s+%#x", run, a+1, n2, o2, n1, o1)
			}
		}
		if checked < want.n/2 {
			t.Fatalf("run %d: only %d of %d symbols compared", run, checked, want.n)
		}
		if first == nil {
			first = got
		} else if got.n != first.n {
			t.Fatalf("run %d: %d symbols from the cache, %d when it was written", run, got.n, first.n)
		}
	}
}

func FuzzKallsyms(f *testing.F) {
	seed := "ffffffff81000000 T _text\nffffffff81000100 t helper\t[foo]\n"
	if _, err := os.Stat("testdata/fuzz/FuzzKallsyms/seed"); err != nil {
		if err := fuzzcorpus.Write("testdata/fuzz/FuzzKallsyms", "seed", seed, uint64(0xffffffff81000105)); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(seed, uint64(0xffffffff81000105))
	// The seed as the cache file stores it: decodeKallsyms' input.
	k, err := ParseKallsyms(strings.NewReader(seed))
	if err != nil {
		f.Fatal(err)
	}
	if _, err := ParseKallsyms(bytes.NewReader(k.file)); err == nil {
		f.Fatal("the cache encoding parses as /proc/kallsyms text: the fuzz function would never decode it")
	}
	if _, err := os.Stat("testdata/fuzz/FuzzKallsyms/cache-file"); err != nil {
		if err := fuzzcorpus.Write("testdata/fuzz/FuzzKallsyms", "cache-file", string(k.file), uint64(0xffffffff81000105)); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(string(k.file), uint64(0xffffffff81000105))
	f.Fuzz(func(t *testing.T, s string, addr uint64) {
		k, err := ParseKallsyms(strings.NewReader(s))
		if err != nil {
			// The same bytes as a cache file: an error or a table, never
			// a panic.
			if k, err := decodeKallsyms([]byte(s)); err == nil {
				k.Lookup(addr)
			}
			return
		}
		name, off, ok := k.Lookup(addr)
		if ok && off > addr {
			t.Fatalf("offset %#x beyond address %#x", off, addr)
		}
		// The cache's encoding gives the same answers.
		k2, err := decodeKallsyms(append([]byte(nil), k.file...))
		if err != nil {
			t.Fatalf("decoding the encoded table: %v", err)
		}
		if n2, off2, ok2 := k2.Lookup(addr); n2 != name || off2 != off || ok2 != ok {
			t.Fatalf("cached table says %q+%#x %v, parsed %q+%#x %v", n2, off2, ok2, name, off, ok)
		}
	})
}
