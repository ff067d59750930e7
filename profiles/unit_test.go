package profiles

import (
	"bytes"
	"github.com/rewindstack/rewind/target"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/fuzzcorpus"
	"github.com/rewindstack/rewind/symbolize"
)

func TestInsertMapping(t *testing.T) {
	var maps []target.Mapping
	maps = insertMapping(maps, target.Mapping{Start: 0x1000, End: 0x5000, Offset: 0, Path: "/a"})
	maps = insertMapping(maps, target.Mapping{Start: 0x2000, End: 0x3000, Path: "/b"})
	want := []target.Mapping{
		{Start: 0x1000, End: 0x2000, Path: "/a"},
		{Start: 0x2000, End: 0x3000, Path: "/b"},
		{Start: 0x3000, End: 0x5000, Offset: 0x2000, Path: "/a"},
	}
	if len(maps) != len(want) {
		t.Fatalf("got %+v", maps)
	}
	for i := range want {
		if maps[i].Start != want[i].Start || maps[i].End != want[i].End || maps[i].Offset != want[i].Offset || maps[i].Path != want[i].Path {
			t.Errorf("mapping %d: %+v, want %+v", i, maps[i], want[i])
		}
	}
}

func testProfile() *Profile {
	m := &Mapping{ID: 1, Start: 0x400000, End: 0x401000, Path: "/bin/prog", BuildID: "abcd"}
	leaf := &Location{ID: 1, Addr: 0x400100, Mapping: m, Lines: []symbolize.Location{
		{Function: "inner;evil\nname", Inlined: true, File: "a.c", Line: 3},
		{Function: "outer", File: "a.c", Line: 10},
	}}
	root := &Location{ID: 2, Addr: 0x400200, Mapping: m, Lines: []symbolize.Location{{Function: "main"}}}
	k := &Location{ID: 3, Addr: 0xffffffff81000000, Kernel: true, Lines: []symbolize.Location{{Function: "do_syscall_64"}}}
	unk := &Location{ID: 4, Addr: 0x400300, Mapping: m, Lines: []symbolize.Location{{}}}
	return &Profile{
		Locations: []*Location{leaf, root, k, unk},
		Mappings:  []*Mapping{m},
		Stacks: []Stack{
			{PID: 1, TID: 1, Comm: "prog", Locations: []*Location{leaf, root}, Value: 10},
			{PID: 1, TID: 1, Comm: "prog", Locations: []*Location{leaf, root}, Value: 10},
			{PID: 1, TID: 2, Comm: "", Locations: []*Location{k, unk, root}, Value: 10},
		},
	}
}

func TestFolded(t *testing.T) {
	var b bytes.Buffer
	if err := testProfile().WriteFolded(&b); err != nil {
		t.Fatal(err)
	}
	want := "[pid 1];main;[unknown] prog;do_syscall_64_[k] 1\nprog;main;outer;inner:evil name 2\n"
	if b.String() != want {
		t.Errorf("folded:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestPprof(t *testing.T) {
	p := testProfile().Pprof(1e6)
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 2 || p.Sample[0].Value[0] != 2 || p.Sample[0].Value[1] != 20 {
		t.Errorf("samples %v", p.Sample)
	}
	l := p.Sample[0].Location[0]
	if len(l.Line) != 2 || l.Line[0].Function.Name != "inner;evil\nname" || l.Line[1].Function.Name != "outer" || l.Line[1].Line != 10 {
		t.Errorf("leaf location lines %+v", l.Line)
	}
	if p.Mapping[0].BuildID != "abcd" {
		t.Errorf("mapping %+v", p.Mapping[0])
	}
	// The kernel's mapping has bounds, and they hold its locations.
	k := p.Sample[1].Location[0]
	if m := k.Mapping; m == nil || m.File != "[kernel.kallsyms]" || m.Start != 0xffffffff81000000 || m.Limit != 0xffffffff81001000 {
		t.Errorf("kernel location %#x in mapping %+v, want [kernel.kallsyms] 0xffffffff81000000-0xffffffff81001000", k.Address, m)
	}
}

func TestKernelSpan(t *testing.T) {
	p := testProfile()
	p.Locations = append(p.Locations, &Location{Addr: 0xffffffffc0a01234, Kernel: true}, &Location{Addr: ^uint64(0), Kernel: true})
	if start, limit := p.KernelSpan(); start != 0xffffffff81000000 || limit != ^uint64(0) {
		t.Errorf("kernel span %#x-%#x", start, limit)
	}
	if start, limit := (&Profile{}).KernelSpan(); start != 0 || limit != 0 {
		t.Errorf("kernel span of no locations %#x-%#x", start, limit)
	}
}

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

// TestPerfComm: threads without a COMM record are named as perf script
// names them, the TID read as a signed pid_t.
func TestPerfComm(t *testing.T) {
	for _, c := range []struct {
		pid, tid int
		want     string
	}{
		{0, 0, "swapper"},
		{123, 124, ":124"},
		{0xffffffff, 0xffffffff, ":-1"},
	} {
		if got := perfComm(c.pid, c.tid); got != c.want {
			t.Errorf("perfComm(%d, %d) = %q, want %q", c.pid, c.tid, got, c.want)
		}
	}
}
