package profiles

import (
	"strings"
	"testing"

	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/regs"
)

// TestExitingTaskComm: perf record -a samples tasks that are exiting with
// tid -1 (0xffffffff in the record); perf script names them ":-1" with
// TID -1, and so must the profile, not ":4294967295".
func TestExitingTaskComm(t *testing.T) {
	c := NewCollector(regs.AMD64)
	s := &perfdata.Sample{SampleIDFields: perfdata.SampleIDFields{PID: 4242, TID: 0xffffffff, Time: 100},
		Misc: perfdata.MiscKernel, IP: 0xffffffff81000000, Period: 1}
	c.Add(&perfdata.Record{Type: perfdata.RecordSample, ID: s.SampleIDFields, Sample: s})
	p := Build(c, Options{NoSymbols: true})
	if len(p.Stacks) != 1 {
		t.Fatalf("%d stacks, want 1", len(p.Stacks))
	}
	if st := p.Stacks[0]; st.Comm != ":-1" || st.TID != -1 || st.PID != 4242 {
		t.Errorf("comm %q pid %d tid %d, want \":-1\" 4242 -1 as perf script shows", st.Comm, st.PID, st.TID)
	}
}

// TestKernelSamplesSaidApart: a recording without call graphs has no user
// stack for samples taken in the kernel; for a user process (one with
// mappings) the fidelity table says that, not that it was a kernel thread
// (issue 13 item 2). The copy-edge line says what the caller gives.
func TestKernelSamplesSaidApart(t *testing.T) {
	c := NewCollector(regs.AMD64)
	c.Add(&perfdata.Record{Type: perfdata.RecordMmap2, Mmap: &perfdata.Mmap{PID: 10, TID: 10, Addr: 0x400000, Len: 0x1000, Filename: "/usr/bin/prog", Executable: true}})
	add := func(pid uint32, t uint64) {
		s := &perfdata.Sample{SampleIDFields: perfdata.SampleIDFields{PID: pid, TID: pid, Time: t},
			Misc: perfdata.MiscKernel, IP: 0xffffffff81000000, Period: 1}
		c.Add(&perfdata.Record{Type: perfdata.RecordSample, ID: s.SampleIDFields, Sample: s})
	}
	add(10, 100)
	add(10, 200)
	add(2, 300) // kthreadd: no mappings
	p := Build(c, Options{NoSymbols: true})
	p.AtCopyEdge, p.CopyEdgeHint = 1, "hint"
	var b strings.Builder
	p.WriteFidelity(&b)
	for _, want := range []string{"1 samples had no user stack (kernel threads)", "2 samples of user processes were taken in the kernel", "at the stack copy's edge (hint)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("fidelity table lacks %q:\n%s", want, b.String())
		}
	}
}
