package goassist

import (
	"os"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/regs"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// TestAssistPairsSamples records a Go program that grows its goroutines'
// stacks with the assist attached, and pairs each sample with the
// program's record as a recording does. A record paired with the wrong
// sample would show: the g it copied is the sample's own g register
// (r14). Every record finds its sample, but those of samples lost.
func TestAssistPairsSamples(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF and perf events need root")
	}
	a, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	exe := fixture.BuildGo(t, fixture.GoGrowSource)
	rec, cmd, err := perfevent.StartCommand([]string{exe, "3"}, perfevent.Options{Freq: 999, UserOnly: true, Assist: a.Program()})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	defer cmd.Process.Kill()
	a.Register(cmd.Process.Pid, exe)
	if err := cmd.Release(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	samples, paired := 0, 0
	read := func() {
		err := rec.Read(func(r *perfdata.Record) error {
			if r.Type != perfdata.RecordSample || r.Sample.RegsABI == perfdata.RegsABINone {
				return nil
			}
			s := r.Sample
			samples++
			rg, _ := regs.FromPerf(perfevent.Arch(), s.Attr.SampleRegsUser, s.Regs)
			sp, _ := rg.SP()
			mem := a.SampleMemory(int(s.PID), int(s.TID), s.Time, sp)
			if mem == nil {
				return nil
			}
			paired++
			if g, _ := rg.Get(14); mem[0].Addr != g {
				t.Errorf("sample at %d (r14 %#x) paired with the record of g %#x", s.Time, g, mem[0].Addr)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for done := false; !done; {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("the program: %v", err)
			}
			done = true
		case <-time.After(50 * time.Millisecond):
		}
		read()
	}
	read()
	st := a.Stats()
	t.Logf("%d samples, %d paired; %+v", samples, paired, st)
	if st.Processes != 1 || st.Sent == 0 || paired == 0 || uint64(paired) != st.Paired {
		t.Fatalf("%d samples, %d paired with a record; stats %+v", samples, paired, st)
	}
	// Records that find no sample: those of samples lost, none else.
	if lost := rec.Lost(); st.Sent-st.Paired > lost+st.Sent/100 {
		t.Errorf("%d records sent, %d paired, %d samples lost", st.Sent, st.Paired, lost)
	}
	if paired*10 < samples {
		t.Errorf("%d of %d samples on g0: the program grows stacks all the time", paired, samples)
	}
}
