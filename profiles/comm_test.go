package profiles

import (
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
