package profiles

import (
	"bytes"
	"github.com/rewindstack/rewind/target"
	"testing"

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
