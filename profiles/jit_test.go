package profiles

import (
	"fmt"
	"os"
	"testing"

	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/regs"
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
