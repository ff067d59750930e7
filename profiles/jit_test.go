package profiles

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/jitdump"

	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// unusedPID returns a PID no process has, for a recording of a process
// that has exited (its JIT files are read from /tmp, as perf report
// reads them).
func unusedPID(t *testing.T) int {
	for pid := 4194000; pid > 1000; pid-- {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return pid
		}
	}
	t.Fatal("no unused PID")
	return 0
}

// TestPprofJITMapping: a frame in anonymous executable memory named by the
// process's perf map is in a mapping named "[jit]" in pprof, not perf's
// "//anon"; the frames of a file keep their file's mapping.
func TestPprofJITMapping(t *testing.T) {
	pid := unusedPID(t)
	pm := fmt.Sprintf("/tmp/perf-%d.map", pid)
	if err := os.WriteFile(pm, []byte("7f0000001000 40 JS:*hot /app.js:1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(pm)
	c := NewCollector(regs.AMD64)
	c.Add(&perfdata.Record{Type: perfdata.RecordMmap2, Mmap: &perfdata.Mmap{PID: uint32(pid), TID: uint32(pid), Addr: 0x400000, Len: 0x1000, Filename: "/usr/bin/prog", Executable: true}})
	c.Add(&perfdata.Record{Type: perfdata.RecordMmap2, Mmap: &perfdata.Mmap{PID: uint32(pid), TID: uint32(pid), Addr: 0x7f0000000000, Len: 0x10000, Filename: "//anon", Executable: true}})
	s := &perfdata.Sample{SampleIDFields: perfdata.SampleIDFields{PID: uint32(pid), TID: uint32(pid), Time: 100},
		Misc: perfdata.MiscUser, IP: 0x7f0000001010, Period: 1,
		Callchain: []uint64{perfdata.ContextUser, 0x7f0000001010, 0x400100}}
	c.Add(&perfdata.Record{Type: perfdata.RecordSample, ID: s.SampleIDFields, Sample: s})
	pp := Build(c, Options{}).Pprof(1)
	files := map[string]string{}
	for _, l := range pp.Location {
		if l.Mapping != nil && len(l.Line) > 0 {
			files[l.Line[len(l.Line)-1].Function.Name] = l.Mapping.File
		}
	}
	if f := files["JS:*hot /app.js:1:1"]; f != JITMapping {
		t.Errorf("JIT frame's mapping %q, want %q (mappings by function: %v)", f, JITMapping, files)
	}
	if f := files["[unknown] prog"]; f != "/usr/bin/prog" {
		t.Errorf("program frame's mapping %q, want /usr/bin/prog (mappings by function: %v)", f, files)
	}
}

// jitdumpLoads writes a jitdump of code loads (time, address, size, name).
func jitdumpLoads(t *testing.T, path string, pid int, loads ...jitLoad) {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, jitdump.Magic)
	for _, v := range []uint32{1, 40, 62, 0, uint32(pid)} {
		b = le.AppendUint32(b, v)
	}
	b = le.AppendUint64(b, 1)
	b = le.AppendUint64(b, 0)
	for i, l := range loads {
		b = le.AppendUint32(b, jitdump.CodeLoad)
		b = le.AppendUint32(b, uint32(16+40+len(l.name)+1+int(l.size)))
		b = le.AppendUint64(b, l.t)
		b = le.AppendUint32(b, uint32(pid))
		b = le.AppendUint32(b, uint32(pid))
		for _, v := range []uint64{l.addr, l.addr, l.size, uint64(i)} {
			b = le.AppendUint64(b, v)
		}
		b = append(append(b, l.name...), 0)
		b = append(b, make([]byte, l.size)...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

type jitLoad struct {
	t, addr, size uint64
	name          string
}

// TestJITDumpByTime: code loaded at an address another load held is named
// by the samples' times when they are stamped with CLOCK_MONOTONIC (perf
// record -k mono), the jitdump's clock, as perf inject --jit names it;
// with another clock the code last loaded names both; an address before
// any load is unnamed.
func TestJITDumpByTime(t *testing.T) {
	pid := unusedPID(t)
	dump := filepath.Join(t.TempDir(), fmt.Sprintf("jit-%d.dump", pid))
	jitdumpLoads(t, dump, pid, jitLoad{100, 0x7f0000001000, 0x40, "JS:*first"}, jitLoad{200, 0x7f0000001000, 0x40, "JS:*second"})
	for _, mono := range []bool{true, false} {
		attr := &perfdata.Attr{}
		if mono {
			attr.Flags, attr.ClockID = perfdata.FlagUseClockID, clockMonotonic
		}
		c := NewCollector(regs.AMD64)
		c.Add(&perfdata.Record{Type: perfdata.RecordMmap2, Mmap: &perfdata.Mmap{PID: uint32(pid), TID: uint32(pid), Addr: 0x7f0000000000, Len: 0x10000, Filename: "//anon", Executable: true}})
		c.Add(&perfdata.Record{Type: perfdata.RecordMmap2, Mmap: &perfdata.Mmap{PID: uint32(pid), TID: uint32(pid), Addr: 0x7f1000000000, Len: 0x1000, Filename: dump, Executable: true}})
		for _, ts := range []uint64{50, 150, 250} {
			s := &perfdata.Sample{SampleIDFields: perfdata.SampleIDFields{PID: uint32(pid), TID: uint32(pid), Time: ts},
				Attr: attr, Misc: perfdata.MiscUser, IP: 0x7f0000001010, Period: 1,
				Callchain: []uint64{perfdata.ContextUser, 0x7f0000001010}}
			c.Add(&perfdata.Record{Type: perfdata.RecordSample, ID: s.SampleIDFields, Sample: s})
		}
		var got []string
		for _, st := range Build(c, Options{}).Stacks {
			got = append(got, st.Locations[0].Name())
		}
		want := []string{"[unknown] [jit]", "JS:*first", "JS:*second"}
		if !mono {
			want = []string{"JS:*second", "JS:*second", "JS:*second"}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("monotonic clock %v: samples at 50, 150, 250 named %q, want %q", mono, got, want)
		}
	}
}

// TestPerfMapGrows reads a process's perf map, then the map grows (as
// Node's does while it compiles): a lookup that missed names the new code
// once the map is read again, and the version says the names changed.
func TestPerfMapGrows(t *testing.T) {
	pid := unusedPID(t)
	path := fmt.Sprintf("/tmp/perf-%d.map", pid)
	t.Cleanup(func() { os.Remove(path) })
	if err := os.WriteFile(path, []byte("1000 10 JS:*first /a.js:1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &Collector{}
	p := c.openJIT(pid, &target.AddressSpace{})
	if name, _, ok := p.LookupJIT(0x1004); !ok || name != "JS:*first /a.js:1:1" {
		t.Fatalf("first lookup: %q, %v", name, ok)
	}
	if _, _, ok := p.LookupJIT(0x2004); ok {
		t.Fatal("code not in the map yet was named")
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("2000 10 JS:*later /a.js:2:1\n")
	f.Close()
	v := jitVersion(p)
	p.(*perfMapSyms).checked = time.Time{} // (a second later)
	if name, _, ok := p.LookupJIT(0x2004); !ok || name != "JS:*later /a.js:2:1" {
		t.Errorf("after the map grew: %q, %v, want the code appended", name, ok)
	}
	if jitVersion(p) == v {
		t.Error("the version did not change when the map was read again")
	}
	if name, _, ok := p.LookupJIT(0x1004); !ok || name != "JS:*first /a.js:1:1" {
		t.Errorf("after the map grew, the first code: %q, %v", name, ok)
	}
}
