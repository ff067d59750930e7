package profiles

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/symbolize"
)

// switchFormatText is sched_switch's format file of a 6.x kernel.
const switchFormatText = `name: sched_switch
ID: 372
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:int prev_prio;	offset:28;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
	field:int next_prio;	offset:60;	size:4;	signed:1;
`

// switchRecord makes a sched_switch sample of thread prev (pid) switching
// to next at time t.
func switchRecord(pid, prev, next int, state int64, t uint64) *perfdata.Record {
	raw := make([]byte, 68)
	binary.LittleEndian.PutUint32(raw[24:], uint32(prev))
	binary.LittleEndian.PutUint64(raw[32:], uint64(state))
	binary.LittleEndian.PutUint32(raw[56:], uint32(next))
	s := &perfdata.Sample{SampleIDFields: perfdata.SampleIDFields{PID: uint32(pid), TID: uint32(prev), Time: t},
		RawData: raw, RegsABI: perfdata.RegsABI64, Regs: make([]uint64, 17), Stack: make([]byte, 64), Period: 1}
	s.Attr = &perfdata.Attr{SampleRegsUser: regs.PerfUserMask(regs.AMD64)}
	return &perfdata.Record{Type: perfdata.RecordSample, ID: s.SampleIDFields, Sample: s}
}

func TestOffCPUValues(t *testing.T) {
	c := NewCollector(regs.AMD64)
	o := NewOffCPU(c, perfevent.DefaultSwitchFormat, nil)
	o.Add(switchRecord(10, 10, 0, 1, 1000))  // 10 blocks (S)
	o.Add(switchRecord(20, 20, 0, 0, 1500))  // 20 preempted: not blocked
	o.Add(switchRecord(20, 21, 10, 2, 5000)) // 21 blocks (D); 10 runs again
	out := o.Flush(8000)                     // 21 still blocked: 3000 so far
	got := map[int]uint64{}
	for _, s := range out {
		got[s.TID] += s.Period
	}
	if len(out) != 2 || got[10] != 4000 || got[21] != 3000 {
		t.Fatalf("first period: %v (%d samples), want 10: 4000, 21: 3000", got, len(out))
	}
	o.Add(switchRecord(30, 30, 21, 1, 9500)) // 21 runs: 1500 more in this period
	out = o.Flush(12000)                     // 30 blocked since 9500: 2500
	got = map[int]uint64{}
	for _, s := range out {
		got[s.TID] += s.Period
	}
	if got[21] != 1500 || got[30] != 2500 || len(got) != 2 {
		t.Fatalf("second period: %v, want 21: 1500 (the continuation), 30: 2500", got)
	}
	if o.Bad() != 0 {
		t.Errorf("%d bad samples", o.Bad())
	}
}

// FuzzOffCPU feeds sched_switch samples with arbitrary raw data and
// format descriptions: errors or ignored samples, never a panic.
func FuzzOffCPU(f *testing.F) {
	raw := switchRecord(1, 1, 2, 1, 10).Sample.RawData
	if _, err := os.Stat("testdata/fuzz/FuzzOffCPU/seed"); err != nil {
		if err := fuzzcorpus.Write("testdata/fuzz/FuzzOffCPU", "seed", switchFormatText, raw); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(switchFormatText, raw)
	f.Fuzz(func(t *testing.T, format string, raw []byte) {
		sf, err := perfevent.ParseSwitchFormat(format)
		if err != nil {
			sf = perfevent.DefaultSwitchFormat
		}
		o := NewOffCPU(NewCollector(regs.AMD64), sf, nil)
		r := switchRecord(1, 1, 2, 1, 10)
		r.Sample.RawData = raw
		o.Add(r)
		r2 := switchRecord(2, 2, 1, 1, 20)
		r2.Sample.RawData = raw
		o.Add(r2)
		for _, s := range o.Flush(30) {
			if s.Period == 0 || s.Period > 30 {
				t.Fatalf("period %d", s.Period)
			}
		}
	})
}

func TestCollectorPrune(t *testing.T) {
	c := NewCollector(regs.AMD64)
	for _, pid := range []int{10, 20, 30} {
		c.Add(switchRecord(pid, pid, 0, 1, uint64(pid)))
		c.Add(&perfdata.Record{Type: perfdata.RecordComm, Comm: &perfdata.Comm{PID: uint32(pid), TID: uint32(pid), Comm: "p"}})
	}
	c.Samples()
	c.Prune(func(id int) bool { return id == 20 })
	if c.Processes() != 1 || c.Comm(20) != "p" || c.Comm(10) != "" {
		t.Errorf("after pruning all but 20: %d processes, comm(20) %q, comm(10) %q", c.Processes(), c.Comm(20), c.Comm(10))
	}
}

func TestOffCPUTake(t *testing.T) {
	c := NewCollector(regs.AMD64)
	o := NewOffCPU(c, perfevent.DefaultSwitchFormat, nil)
	o.Add(switchRecord(10, 10, 0, 1, 1000))
	if got := o.Take(2000); len(got) != 0 {
		t.Fatalf("took %d samples of a thread still blocked", len(got))
	}
	o.Add(switchRecord(20, 20, 10, 1, 3000)) // 10 runs; 20 blocks
	got := o.Take(4000)
	if len(got) != 1 || got[0].TID != 10 || got[0].Period != 2000 {
		t.Fatalf("took %+v, want thread 10's 2000 ns", got)
	}
	got = o.Flush(5000)
	if len(got) != 1 || got[0].TID != 20 || got[0].Period != 2000 {
		t.Fatalf("flushed %+v, want thread 20's 2000 ns so far", got)
	}
}

// TestOffCPUFolded: an off-CPU profile's folded stacks and flame graph
// weigh stacks by the time blocked, not by their number.
func TestOffCPUFolded(t *testing.T) {
	l := &Location{ID: 1, Lines: []symbolize.Location{{Function: "wait"}}}
	p := &Profile{OffCPU: true, Locations: []*Location{l}, Stacks: []Stack{
		{PID: 1, TID: 1, Locations: []*Location{l}, Value: 1500},
		{PID: 1, TID: 1, Locations: []*Location{l}, Value: 500},
	}}
	var b strings.Builder
	if err := p.WriteFolded(&b); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.HasSuffix(got, "wait 2000\n") {
		t.Errorf("folded %q, want wait 2000", got)
	}
	p.OffCPU = false
	b.Reset()
	p.WriteFolded(&b)
	if got := b.String(); !strings.HasSuffix(got, "wait 2\n") {
		t.Errorf("on-CPU folded %q, want a count of 2", got)
	}
}

// TestOffCPUPreemptedInKernel: a task preempted in the kernel is
// reported "R+" (prev_state TASK_REPORT_MAX, 0x100): runnable, not
// blocked; TASK_IDLE's "I" (0x80) is blocked.
func TestOffCPUPreemptedInKernel(t *testing.T) {
	o := NewOffCPU(NewCollector(regs.AMD64), perfevent.DefaultSwitchFormat, nil)
	o.Add(switchRecord(10, 10, 0, 0x100, 1000))  // 10 preempted in a system call
	o.Add(switchRecord(20, 20, 10, 0x80, 1500))  // 20 idles (I); 10 runs again
	o.Add(switchRecord(30, 30, 20, 0x100, 4000)) // 20 runs again
	got := map[int]uint64{}
	for _, s := range o.Flush(5000) {
		got[s.TID] += s.Period
	}
	if len(got) != 1 || got[20] != 2500 {
		t.Errorf("off CPU %v, want only 20 (idle): 2500", got)
	}
}

// TestOffCPULostRecords: a blocked interval during which the kernel lost
// records is left out (the thread may have run and blocked again unseen),
// not credited as all blocked; intervals that began after the loss count.
func TestOffCPULostRecords(t *testing.T) {
	o := NewOffCPU(NewCollector(regs.AMD64), perfevent.DefaultSwitchFormat, nil)
	o.Add(switchRecord(10, 10, 0, 1, 1000)) // 10 blocks
	o.Add(switchRecord(30, 30, 0, 1, 1500)) // 30 blocks
	o.Add(&perfdata.Record{Type: perfdata.RecordLost})
	o.Add(switchRecord(20, 20, 10, 1, 5000)) // 20 blocks; 10 runs: unknown since 1000
	o.Add(switchRecord(40, 40, 20, 0, 7000)) // 20 runs: 2000
	o.Add(switchRecord(50, 50, 0, 1, 7500))  // 50 blocks, until the period ends
	got := map[int]uint64{}
	for _, s := range o.Flush(9000) { // 30 still blocked since before the loss: unknown
		got[s.TID] += s.Period
	}
	if len(got) != 2 || got[20] != 2000 || got[50] != 1500 {
		t.Errorf("off CPU %v, want 20: 2000 and 50: 1500 only", got)
	}
	if o.Unsure() != 2 {
		t.Errorf("%d intervals left out, want 2 (threads 10 and 30)", o.Unsure())
	}
	// Without a loss, a second switch out with no switch in between (a
	// recording of one thread's events sees only those) ends the first.
	o.Add(switchRecord(60, 60, 0, 1, 10000))
	o.Add(switchRecord(60, 60, 0, 1, 12000))
	got = map[int]uint64{}
	for _, s := range o.Flush(13000) {
		got[s.TID] += s.Period
	}
	if got[60] != 2000+1000 {
		t.Errorf("thread 60: %d, want 3000 (2000, then 1000 until the period ends)", got[60])
	}
}
