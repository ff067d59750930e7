package cpython

import (
	"slices"
	"testing"

	"github.com/rewindstack/rewind/runtimes"
)

// chainN links synth312's frames into one chain of n.
func chainN(n int) func(i int) uint64 {
	return func(i int) uint64 {
		if i == n-1 {
			return 0
		}
		return uint64(0x40000 + (i+1)*0x100)
	}
}

// synthCFrame is where synth312 keeps the current frame pointer.
const synthCFrame = 0x3800

func synthSampler(m fakeMem) *sampler {
	return newSampler(&Runtime{Version: "3.12", Addr: 0x1000, l: layout312}, m, nil)
}

// TestSampleWhole: a sample of thread 42 reads its chain alone, whole,
// as the dump's walk reads it; a thread without a thread state has
// none, and the list of thread states is not read again at each of its
// samples.
func TestSampleWhole(t *testing.T) {
	m := synth312(3, chainN(3))
	s := synthSampler(m)
	st, how := s.Sample(42)
	if how != runtimes.SampleWhole || len(st.Frames) != 3 || st.Entry != EvalFunction {
		t.Fatalf("got %v, %+v; want whole, 3 frames", how, st)
	}
	for i, f := range st.Frames {
		if f.Function != "f" || f.File != "m.py" || f.Line != 11+i || f.Method != "python" {
			t.Errorf("frame %d: %+v, want f (m.py:%d)", i, f, 11+i)
		}
	}
	cm := newCountMem(m)
	s = synthSampler(nil)
	s.mem, s.pages.mem = cm, cm
	if _, how := s.Sample(42); how != runtimes.SampleWhole {
		t.Fatalf("second sampler: %v", how)
	}
	before := cm.at[0x1000+layout312.runtimeInterps]
	for range 10 {
		if _, how := s.Sample(43); how != runtimes.SampleNone {
			t.Fatalf("thread 43: %v, want none", how)
		}
	}
	if n := cm.at[0x1000+layout312.runtimeInterps] - before; n > 1 {
		t.Errorf("the thread list was read %d times for 10 samples of a thread without a state, want at most 1", n)
	}
}

// movingMem moves the current frame pointer between two frames at every
// read of it: a thread that calls and returns under every read.
type movingMem struct {
	fakeMem
	reads int
}

func (m *movingMem) ReadMemory(addr uint64, p []byte) error {
	if addr <= synthCFrame+layout312.cframeCurrent && synthCFrame+layout312.cframeCurrent < addr+uint64(len(p)) {
		m.reads++
		m.u64(synthCFrame+layout312.cframeCurrent, uint64(0x40000+0x100*(m.reads%2)))
	}
	return m.fakeMem.ReadMemory(addr, p)
}

// TestSampleTorn: a chain whose current frame moves under every read is
// read sampleTries times and said torn, with the last read's frames; one
// that breaks off without moving is cut; a thread state that is now
// another thread's gives no frames.
func TestSampleTorn(t *testing.T) {
	mm := &movingMem{fakeMem: synth312(3, chainN(3))}
	s := synthSampler(nil)
	s.mem, s.pages.mem = mm, mm
	st, how := s.Sample(42)
	if how != runtimes.SampleTorn || len(st.Frames) == 0 {
		t.Fatalf("got %v with %d frames, want torn with frames", how, len(st.Frames))
	}
	if mm.reads != 2*sampleTries {
		t.Errorf("current frame read %d times, want %d (before and after each of %d tries)", mm.reads, 2*sampleTries, sampleTries)
	}

	broken := synth312(2, func(i int) uint64 { return []uint64{0x40100, 0xdead0000}[i] })
	st, how = synthSampler(broken).Sample(42)
	if how != runtimes.SampleCut || len(st.Frames) != 2 {
		t.Fatalf("broken chain: %v with %d frames, want cut with 2", how, len(st.Frames))
	}

	m := synth312(3, chainN(3))
	s = synthSampler(m)
	if _, how := s.Sample(42); how != runtimes.SampleWhole {
		t.Fatal(how)
	}
	m.u64(0x3000+layout312.tsNativeTID, 77) // thread 42 exited, its state reused
	if st, how := s.Sample(42); how != runtimes.SampleNone || len(st.Frames) != 0 {
		t.Fatalf("reused thread state: %v, %+v; want none", how, st)
	}
}

// TestSampleCodesKept: the code objects a sample read are taken again at
// the next sample while their identifying fields are the same: the
// location table is read once.
func TestSampleCodesKept(t *testing.T) {
	cm := newCountMem(synth312(3, chainN(3)))
	s := synthSampler(nil)
	s.mem, s.pages.mem = cm, cm
	for range 5 {
		if _, how := s.Sample(42); how != runtimes.SampleWhole {
			t.Fatal(how)
		}
	}
	// (synth312's location table is alone in the page at 0xb000,
	// which the sampler reads whole.)
	if n := cm.at[0xb000]; n != 1 {
		t.Errorf("location table read %d times in 5 samples, want 1", n)
	}
}

// FuzzSample: damage anywhere in a runtime's structures (as FuzzChain)
// never makes a sample's read panic, hang or exceed its bounds.
func FuzzSample(f *testing.F) {
	f.Add([]byte{0, 8, 0xff})
	f.Add([]byte{2, 0x38, 0x11, 4, 0x08, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := synth312(4, chainN(4))
		var pages []uint64
		for p := range m {
			pages = append(pages, p)
		}
		slices.Sort(pages)
		for i := 0; i+2 < len(data) && i < 300; i += 3 {
			m[pages[int(data[i])%len(pages)]][data[i+1]] = data[i+2]
		}
		s := synthSampler(m)
		for _, tid := range []int{42, 43} {
			st, _ := s.Sample(tid)
			if len(st.Frames) > maxSampleFrames {
				t.Fatalf("%d frames", len(st.Frames))
			}
		}
	})
}
